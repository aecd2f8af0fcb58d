"""Message groups as SQS treats them and moto 5.2.5 does not: FIFO deduplication and fair queues.

- **The 5-minute deduplication window** (FIFO queues). SQS accepts a message whose deduplication id
  (given, or the body's SHA-256 with content-based deduplication) it saw in the 5 minutes since the
  first send with that id, and does not deliver it, *whether or not the first was deleted since*.
  moto only compares with the messages still in the queue: a repeat sent after the first was
  deleted is delivered again. :func:`install_message_groups` keeps every id seen per queue (per queue
  and group with ``DeduplicationScope=messageGroup``) for :data:`DEDUPLICATION_WINDOW_SECONDS` after
  its first send, on an injectable clock. A message a redrive policy moves to a dead-letter queue is
  not a send and is never deduplicated (it has been received: its receive count is not 0).
- **Fair queues** (standard queues whose messages carry a ``MessageGroupId``: the tenant). SQS
  flags a tenant *noisy* when it holds a disproportionate share of the consumers (its in-flight
  share, or its share of recent processing time, above 10%, with at least 30 of its own in flight)
  and, while it is noisy, delivers the quiet tenants' messages first whenever there are any; noisy
  tenants' messages follow, the one with the fewest in flight first. The emulation, before each
  ReceiveMessage on a standard queue: a tenant is noisy when, in the last
  :data:`NOISY_WINDOW_SECONDS`, it got more than :data:`NOISY_SHARE` of the queue's deliveries and
  at least :data:`NOISY_MIN_DELIVERIES` of them (recent deliveries stand in for both of SQS's
  measures); the visible messages are then ordered quiet tenants first (a message without a group is
  its own tenant, never noisy), then the noisy tenants' by their in-flight count. Nothing is dropped
  or delayed, only the order changes, and only while some tenant is noisy.

What is not emulated (docs/local.md): SQS's processing-time measure itself, its exact thresholds
(approximate in SQS too), the fair-queue CloudWatch metrics (``ApproximateNumberOfNoisyGroups``, ...),
and a noisy tenant's 5 minutes of silence clearing it other than through the window.
"""

from __future__ import annotations

import functools
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from typing import Any

from sluice_local.emulation.moto_adapter.attributes import (
    SQS_ADD_MESSAGE,
    SQS_RECEIVE_MESSAGE,
    Undo,
    replace,
    undo_all,
)

__all__ = [
    "DEDUPLICATION_WINDOW_SECONDS",
    "NOISY_MIN_DELIVERIES",
    "NOISY_SHARE",
    "NOISY_WINDOW_SECONDS",
    "MessageGroups",
    "install_message_groups",
]

DEDUPLICATION_WINDOW_SECONDS = 300.0
"""SQS's deduplication interval: 5 minutes from a deduplication id's first send."""
NOISY_SHARE = 0.10
"""A tenant with more than this share of a queue's recent deliveries may be noisy."""
NOISY_MIN_DELIVERIES = 30
"""... and only with at least this many of them (SQS: at least 30 of its own in flight)."""
NOISY_WINDOW_SECONDS = 300.0
"""How far back deliveries count (SQS clears a tenant silent for 5 minutes)."""


class MessageGroups:
    """The state both emulations keep, per queue (by its ARN), read on ``clock`` (epoch seconds)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._seen: dict[str, dict[tuple[str | None, str], float]] = {}
        self._deliveries: dict[str, deque[tuple[float, str | None]]] = {}

    def duplicate(self, queue: Any, message: Any) -> bool:
        """Whether SQS would accept ``message`` without delivering it (and, when not, remember its id)."""
        dedup_id = getattr(message, "deduplication_id", None)
        if not queue.fifo_queue or not dedup_id or message.approximate_receive_count:
            return False
        by_group = queue.attributes.get("DeduplicationScope") == "messageGroup"
        key = (message.group_id if by_group else None, str(dedup_id))
        now = self.clock()
        with self._lock:
            seen = self._seen.setdefault(queue.queue_arn, {})
            for old in [k for k, at in seen.items() if now - at >= DEDUPLICATION_WINDOW_SECONDS]:
                del seen[old]
            if key in seen:
                return True
            seen[key] = now
            return False

    def noisy(self, queue_arn: str) -> set[str]:
        """The tenants of a standard queue flagged noisy now (see the module's docstring)."""
        now = self.clock()
        with self._lock:
            recent = self._deliveries.get(queue_arn)
            if not recent:
                return set()
            while recent and now - recent[0][0] >= NOISY_WINDOW_SECONDS:
                recent.popleft()
            counts = Counter(group for _, group in recent if group is not None)
            total = len(recent)
        return {g for g, n in counts.items() if n >= NOISY_MIN_DELIVERIES and n > NOISY_SHARE * total}

    def delivered(self, queue_arn: str, groups: list[str | None]) -> None:
        now = self.clock()
        with self._lock:
            recent = self._deliveries.setdefault(queue_arn, deque())
            recent.extend((now, group) for group in groups)

    def order(self, queue: Any) -> None:
        """Quiet tenants' messages first in the queue's list, noisy ones after, the noisy tenant with the
        fewest in flight first (stable: otherwise as moto keeps them). Under the queue's lock."""
        noisy = self.noisy(queue.queue_arn)
        if not noisy:
            return
        in_flight = Counter(m.group_id for m in queue.pending_messages if m.group_id in noisy)
        rank = {g: 1 + i for i, g in enumerate(sorted(noisy, key=lambda g: (in_flight[g], g)))}
        queue._messages.sort(key=lambda m: rank.get(m.group_id, 0))


def install_message_groups(state: MessageGroups | None = None) -> tuple[MessageGroups, Undo]:
    """Patch moto's SQS with the deduplication window and the fair-queue order; returns the state (its
    ``clock`` may be replaced by a test) and the undo."""
    groups = state or MessageGroups()
    queue_class = SQS_ADD_MESSAGE.owner_class()
    backend_class = SQS_RECEIVE_MESSAGE.owner_class()
    original_add = queue_class.add_message
    original_receive = backend_class.receive_message

    def add_message(self: Any, message: Any) -> None:
        if groups.duplicate(self, message):
            return  # accepted, never delivered: as SQS inside the deduplication interval
        original_add(self, message)

    @functools.wraps(original_receive)  # moto's signature, whatever wraps it already
    def receive_message(self: Any, queue_name: str, *args: Any, **kwargs: Any) -> Any:
        queue = self.get_queue(queue_name)
        if queue.fifo_queue:
            return original_receive(self, queue_name, *args, **kwargs)
        with queue._messages_lock:
            groups.order(queue)
            result = original_receive(self, queue_name, *args, **kwargs)
        groups.delivered(queue.queue_arn, [m.group_id for m in result])
        return result

    undo = undo_all(
        [
            replace(queue_class, "add_message", add_message),
            replace(backend_class, "receive_message", receive_message),
        ]
    )
    return groups, undo
