"""moto's SQS loses and resurrects messages under concurrent calls: two patches.

``Queue.delete_message`` (moto 5.2.5) rebuilds the queue's message list without the deleted message and
assigns it back, and a receive moves a message its redrive policy sends to the dead-letter queue out
of the list, both without the lock ``add_message`` takes. Two calls at once — two deletes, a delete and
a send, a delete and a receive's move — each work from the same list, and the later one undoes the
other: a deleted message comes back (received again after its visibility timeout: a duplicate
delivery, a redrive run left with messages in flight), a message just sent vanishes (lost), or a moved
one is both in the dead-letter queue and back in its source. SQS does none of these. The local
runtime's pollers, its moto server's request threads and a Step Functions Map's iterations all call at
once; a redrive state machine test once found two deleted messages back in its DLQ.

:func:`install_sqs_locks` runs each delete, and each receive, under the queue's own message lock
(reentrant; a long poll's wait releases it, so sends and deletes go on meanwhile). A receive's move
also takes the dead-letter queue's lock inside it: a redrive policy that loops back (A's DLQ is B,
B's is A) with receives on both at once could deadlock: sluice's templates never loop.
"""

from __future__ import annotations

import functools
from typing import Any

from sluice_local.emulation.moto_adapter.attributes import (
    SQS_DELETE_MESSAGE,
    SQS_RECEIVE_MESSAGE,
    Undo,
    replace,
    undo_all,
)

__all__ = ["install_sqs_locks"]


def install_sqs_locks() -> Undo:
    """Each ``Queue.delete_message`` and ``SQSBackend.receive_message`` holds the queue's lock, the one
    ``Queue.add_message`` holds."""
    queue_class = SQS_DELETE_MESSAGE.owner_class()
    backend_class = SQS_RECEIVE_MESSAGE.owner_class()
    original_delete = queue_class.delete_message
    original_receive = backend_class.receive_message

    def delete_message(self: Any, receipt_handle: str) -> None:
        with self._messages_lock:
            original_delete(self, receipt_handle)

    @functools.wraps(original_receive)  # moto's signature, whatever wraps it already
    def receive_message(self: Any, queue_name: str, *args: Any, **kwargs: Any) -> Any:
        with self.get_queue(queue_name)._messages_lock:
            return original_receive(self, queue_name, *args, **kwargs)

    return undo_all(
        [
            replace(queue_class, "delete_message", delete_message),
            replace(backend_class, "receive_message", receive_message),
        ]
    )
