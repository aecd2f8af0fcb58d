"""moto's SQS loses and resurrects messages under concurrent calls: one patch.

``Queue.delete_message`` (moto 5.2.5) rebuilds the queue's message list without the deleted message and
assigns it back, without the lock ``add_message`` takes. Two calls at once — two deletes, or a delete
and a send — each build from the same list, and the second assignment undoes the first: a deleted
message comes back (received again after its visibility timeout: a duplicate delivery, a redrive run
left with messages in flight) or a message just sent vanishes (lost). SQS does neither. The local
runtime's pollers, its moto server's request threads and a Step Functions Map's iterations all call
at once; a redrive state machine test once found two deleted messages back in its DLQ.
:func:`install_sqs_delete_lock` runs each delete under the queue's own message lock.
"""

from __future__ import annotations

from typing import Any

from sluice_local.emulation.moto_adapter.attributes import SQS_DELETE_MESSAGE, Undo, replace

__all__ = ["install_sqs_delete_lock"]


def install_sqs_delete_lock() -> Undo:
    """Each ``Queue.delete_message`` holds the lock ``Queue.add_message`` holds (reentrant)."""
    queue_class = SQS_DELETE_MESSAGE.owner_class()
    original = queue_class.delete_message

    def delete_message(self: Any, receipt_handle: str) -> None:
        with self._messages_lock:  # moto's own lock, the one add_message holds
            original(self, receipt_handle)

    return replace(queue_class, "delete_message", delete_message)
