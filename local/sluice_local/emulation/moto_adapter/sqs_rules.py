"""SQS refuses what AWS refuses (moto is lenient): one patch of moto's SQS backend."""

from __future__ import annotations

import base64
import binascii
import contextlib
from collections.abc import Mapping
from typing import Any

from sluice_local.emulation.moto_adapter.attributes import SQS_SEND_MESSAGE, Undo, replace, undo_all


def install_sqs_rules() -> Undo:
    """SQS refuses what AWS refuses (moto is lenient), judged by the runtime's own table of SQS's
    documented rules (:mod:`sluice_local.emulation.sqs_rules_table`, read by
    :mod:`sluice_local.emulation.sqs_checker`; never the layer's :mod:`sluice.sqs`, whose reading of
    the same rules this is here to catch): the body's
    characters, the size in bytes including attributes against the queue's ``MaximumMessageSize``,
    at most 10 attributes, each attribute's name, ``DataType`` and value, ``DelaySeconds``, the
    FIFO fields and ``MessageSystemAttributes`` (a well-formed ``AWSTraceHeader`` only). SendMessage
    raises the error SQS raises; SendMessageBatch fails a whole call that breaks a rule of the call
    (1 to 10 entries, distinct ids of up to 80 alphanumerics, hyphens and underscores, all entries
    together within SQS's 1 MiB: ``BatchRequestTooLong`` whatever the queue's own limit) and reports
    every other refused entry (one over the queue's ``MaximumMessageSize`` included) in ``Failed``
    with ``SenderFault``, sending the rest, as SQS does; and each entry keeps its
    ``MessageSystemAttributes`` (the ``AWSTraceHeader``), which moto's batch drops."""
    from moto.sqs.exceptions import SQSException  # noqa: PLC0415

    from sluice_local.emulation.sqs_checker import Violation, check_batch, check_entry  # noqa: PLC0415

    backend_class = SQS_SEND_MESSAGE.owner_class()
    original_send = backend_class.send_message
    original_batch = backend_class.send_message_batch

    def judge(backend: Any, queue_name: str, entry: Mapping[str, Any]) -> Violation | None:
        queue = backend.get_queue(queue_name)
        return check_entry(
            entry.get("MessageBody"),
            wire_attributes(entry.get("MessageAttributes")),
            max_bytes=int(queue.maximum_message_size),
            delay_seconds=entry.get("DelaySeconds"),
            system_attributes=entry.get("MessageSystemAttributes"),
            fifo=bool(queue.fifo_queue),
            content_based_deduplication=queue.attributes.get("ContentBasedDeduplication") == "true",
            group_id=entry.get("MessageGroupId"),
            deduplication_id=entry.get("MessageDeduplicationId"),
        )

    def send_message(  # noqa: PLR0917 - moto's signature
        self: Any,
        queue_name: str,
        message_body: str,
        message_attributes: dict[str, Any] | None = None,
        delay_seconds: int | None = None,
        deduplication_id: str | None = None,
        group_id: str | None = None,
        system_attributes: dict[str, Any] | None = None,
        validate_group_id: bool = True,
    ) -> Any:
        entry = {
            "MessageBody": message_body,
            "MessageAttributes": message_attributes,
            "DelaySeconds": delay_seconds,
            "MessageGroupId": group_id,
            "MessageDeduplicationId": deduplication_id,
            "MessageSystemAttributes": system_attributes,
        }
        violation = judge(self, queue_name, entry)
        if violation is not None:
            raise SQSException(violation.code, violation.message)
        return original_send(
            self,
            queue_name,
            message_body,
            message_attributes,
            delay_seconds,
            deduplication_id,
            group_id,
            system_attributes,
            validate_group_id,
        )

    def send_message_batch(self: Any, queue_name: str, entries: dict[str, dict[str, Any]]) -> Any:
        call = [
            {**e, "MessageAttributes": wire_attributes(e.get("MessageAttributes"))} for e in entries.values()
        ]
        violation = check_batch(call)  # rules of the whole call first: SQS judges no entry then
        if violation is not None:
            raise SQSException(violation.code, violation.message)
        failed: list[dict[str, Any]] = []
        accepted: dict[str, dict[str, Any]] = {}
        for key, entry in entries.items():
            violation = judge(self, queue_name, entry)
            if violation is None:
                accepted[key] = entry
            else:
                failed.append(
                    {
                        "Id": entry["Id"],
                        "SenderFault": True,
                        "Code": violation.code,
                        "Message": violation.message,
                    }
                )
        if not accepted:
            return [], failed
        sent, also_failed = original_batch(self, queue_name, accepted)
        by_id = {str(e["Id"]): e for e in accepted.values()}
        for message in sent:  # moto drops an entry's MessageSystemAttributes (AWSTraceHeader); SQS keeps them
            system = by_id.get(str(getattr(message, "user_id", "")), {}).get("MessageSystemAttributes")
            if system:
                message.system_attributes = dict(system)
        return sent, failed + list(also_failed)

    return undo_all(
        [
            replace(backend_class, "send_message", send_message),
            replace(backend_class, "send_message_batch", send_message_batch),
        ]
    )


def wire_attributes(attributes: Mapping[str, Any] | None) -> dict[str, Any]:
    """Message attributes as moto's SQS backend holds them (JSON protocol: binary values in base64)
    → the SendMessage shape with binary values as bytes (what SQS measures and checks)."""
    out: dict[str, Any] = {}
    for name, value in (attributes or {}).items():
        out[name] = value
        if isinstance(value, dict) and isinstance(value.get("BinaryValue"), str):
            # left as text when it is not base64: the check refuses a Binary value that is not bytes
            with contextlib.suppress(binascii.Error):
                out[name] = {**value, "BinaryValue": base64.b64decode(value["BinaryValue"], validate=True)}
    return out
