"""SQS refuses what AWS refuses (moto is lenient): one patch of moto's SQS backend."""

from __future__ import annotations

import base64
import binascii
import contextlib
from collections.abc import Mapping
from typing import Any

from sluice_local.emulation.moto_adapter.attributes import SQS_SEND_MESSAGE, Undo, replace, undo_all


def install_sqs_rules() -> Undo:
    """SQS refuses what AWS refuses (moto is lenient): the body's characters, the size in bytes
    including attributes against the queue's ``MaximumMessageSize``, at most 10 attributes, and each
    attribute's name, ``DataType`` and value (:func:`sluice.sqs.check_message`, written from the SQS
    documentation). SendMessage raises the error SQS raises; SendMessageBatch fails a whole call whose
    entries together exceed SQS's 1 MiB (``BatchRequestTooLong``, whatever the queue's own limit) and
    reports every other refused entry (one over the queue's ``MaximumMessageSize`` included) in
    ``Failed`` with ``SenderFault``, sending the rest, as SQS does; and each entry keeps its
    ``MessageSystemAttributes`` (the ``AWSTraceHeader``), which moto's batch drops."""
    from moto.sqs.exceptions import BatchRequestTooLong, SQSException  # noqa: PLC0415

    from sluice.limits import MAX_MESSAGE_BYTES  # noqa: PLC0415
    from sluice.sqs import check_message, message_bytes  # noqa: PLC0415

    backend_class = SQS_SEND_MESSAGE.owner_class()
    original_send = backend_class.send_message
    original_batch = backend_class.send_message_batch

    def limit(backend: Any, queue_name: str) -> int:
        return int(backend.get_queue(queue_name).maximum_message_size)

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
        refusal = check_message(
            message_body, wire_attributes(message_attributes), max_bytes=limit(self, queue_name)
        )
        if refusal is not None:
            raise SQSException(refusal.code, refusal.message)
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
        total = sum(
            message_bytes(str(e.get("MessageBody", "")), wire_attributes(e.get("MessageAttributes")))
            for e in entries.values()
        )
        if total > MAX_MESSAGE_BYTES:  # SQS's fixed batch limit; each entry meets its queue's own below
            raise BatchRequestTooLong(total)
        failed: list[dict[str, Any]] = []
        accepted: dict[str, dict[str, Any]] = {}
        for key, entry in entries.items():
            refusal = check_message(
                entry.get("MessageBody"),
                wire_attributes(entry.get("MessageAttributes")),
                max_bytes=limit(self, queue_name),
            )
            if refusal is None:
                accepted[key] = entry
            else:
                failed.append(
                    {"Id": entry["Id"], "SenderFault": True, "Code": refusal.code, "Message": refusal.message}
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
