"""SQS's ``DeadLetterQueueSourceArn`` (moto 5.2.5 leaves it out): three patches of moto's SQS.

A message a queue's redrive policy moves to its dead-letter queue carries, in AWS, the system attribute
``DeadLetterQueueSourceArn`` naming the queue it was moved from; ReceiveMessage returns it with
``MessageSystemAttributeNames`` (or ``AttributeNames``) ``All`` or naming it. The redriver re-drives a
message to that queue and to no other (a message with neither it nor a recorded source is refused), so
without it every message moto moves would be refused locally where AWS re-drives it.
"""

from __future__ import annotations

import threading
from typing import Any, cast

from sluice_local.emulation.moto_adapter.attributes import (
    SQS_ADD_MESSAGE,
    SQS_RECEIVE_MESSAGE,
    SQS_RECEIVE_RESPONSE,
    Undo,
    replace,
    undo_all,
)

DEAD_LETTER_SOURCE = "DeadLetterQueueSourceArn"

_CALL = threading.local()
"""Per thread: ``moving_from`` (the queue a receive is running on: what its DLQ move takes messages
from) and ``sources`` (message id → source ARN of the messages the last receive returned)."""


def install_dead_letter_sources() -> Undo:
    """Every message moto's redrive policy moves carries ``DeadLetterQueueSourceArn`` (the queue it was
    moved from), and ReceiveMessage returns it when asked for, as SQS does.

    moto moves a message while it receives from its source queue (``SQSBackend.receive_message``
    calls the dead-letter queue's ``add_message``); the attribute is set then, in that same call, so no
    receive from the dead-letter queue ever sees the message without it."""
    queue_class = SQS_ADD_MESSAGE.owner_class()
    backend_class = SQS_RECEIVE_MESSAGE.owner_class()
    response_class = SQS_RECEIVE_RESPONSE.owner_class()
    original_add = queue_class.add_message
    original_receive = backend_class.receive_message
    original_response = response_class.receive_message

    def add_message(self: Any, message: Any) -> None:
        source = getattr(_CALL, "moving_from", None)
        if source is not None and source.dead_letter_queue is self:  # the move, within its receive
            message.system_attributes = {
                **(message.system_attributes or {}),
                DEAD_LETTER_SOURCE: {"DataType": "String", "StringValue": source.queue_arn},
            }
        original_add(self, message)

    def receive_message(  # noqa: PLR0917 - moto's signature
        self: Any,
        queue_name: str,
        count: int,
        wait_seconds_timeout: int,
        visibility_timeout: int,
        message_attribute_names: list[str] | None = None,
    ) -> Any:
        _CALL.moving_from = self.get_queue(queue_name)
        try:
            received = original_receive(
                self, queue_name, count, wait_seconds_timeout, visibility_timeout, message_attribute_names
            )
        finally:
            _CALL.moving_from = None
        _CALL.sources = {
            m.id: m.system_attributes[DEAD_LETTER_SOURCE]["StringValue"]
            for m in received
            if DEAD_LETTER_SOURCE in (m.system_attributes or {})
        }
        return received

    def receive_response(self: Any) -> Any:
        _CALL.sources = {}
        result = original_response(self)
        sources: dict[str, str] = getattr(_CALL, "sources", {})
        names = {*self._get_param("AttributeNames", []), *self._get_param("MessageSystemAttributeNames", [])}
        if sources and ("All" in names or DEAD_LETTER_SOURCE in names):
            for message in cast("dict[str, Any]", result.result).get("Messages", []):
                source = sources.get(message["MessageId"])
                if source is not None:
                    message.setdefault("Attributes", {})[DEAD_LETTER_SOURCE] = source
        return result

    return undo_all(
        [
            replace(queue_class, "add_message", add_message),
            replace(backend_class, "receive_message", receive_message),
            replace(response_class, "receive_message", receive_response),
        ]
    )
