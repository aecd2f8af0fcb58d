"""What the user's processor receives: :class:`SluiceRecord`, one message with sluice's bookkeeping
around it (its idempotent side effects, ``record.once``; a follow-up later, ``record.later``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from sluice.envelope import Envelope, SendAttributes
from sluice.errors import ConfigurationError

__all__ = ["Effects", "Later", "SluiceRecord", "business_key", "identity_key"]


class KeyExpression(Protocol):
    """A compiled JMESPath expression (``jmespath.compile``)."""

    def search(self, value: Any) -> Any: ...


def business_key(payload: Any, expression: KeyExpression) -> str | None:
    """The record's idempotency key from its body: what ``expression`` (the workload's ``KeyPath``)
    finds, JSON-typed (the order id 42 and the string "42" are different keys); None when it finds
    nothing (no value, null, "", [] or {})."""
    value = expression.search(payload) if isinstance(payload, dict | list) else None
    if value in (None, "", [], {}):
        return None
    return "body:" + json.dumps(value, sort_keys=True, separators=(",", ":"))


def identity_key(message_id: str) -> str:
    """The record's idempotency key from its identity (its first hop's message id, ``origin_id``)."""
    return "msg:" + message_id


class Effects(Protocol):
    """Runs a record's named side effect at most once (the consumer's :class:`~sluice.consumer.idempotency.
    Idempotency`; ``sluice_local.testing.EffectLog`` in a processor's unit test)."""

    def once(self, key: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any: ...


class Later(Protocol):
    """Sends a body to the record's own queue later, through the long-delay pipeline (the consumer's)."""

    def __call__(
        self,
        body: str,
        *,
        delay_seconds: float | None,
        deliver_at: datetime | None,
        attributes: SendAttributes | None,
    ) -> str: ...


@dataclass(frozen=True)
class SluiceRecord:
    """What the user's processor receives."""

    message_id: str
    body: str
    """The payload text (claim checks already resolved)."""
    data: Any
    """The parsed JSON body, or an instance of the consumer's pydantic model."""
    attributes: SendAttributes
    """The user's own message attributes, untouched (sluice's envelope removed)."""
    envelope: Envelope
    receive_count: int
    idempotency_key: str
    _idempotency: Effects = field(repr=False)
    _later: Later | None = field(default=None, repr=False)

    def once(self, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run side effect ``name`` of this record at most once, even across retries and redrives."""
        # JSON pair: a '#' inside a key or a name cannot make two effects collide
        return self._idempotency.once(json.dumps([self.idempotency_key, name]), fn, *args, **kwargs)

    def later(
        self,
        body: str,
        *,
        delay_seconds: float | None = None,
        deliver_at: datetime | None = None,
        attributes: SendAttributes | None = None,
    ) -> str:
        """Have ``body`` delivered to the queue this record came from after ``delay_seconds`` (or at
        ``deliver_at``), up to 365 days, through the long-delay pipeline (docs/delays.md); its message id
        on the delay queue. A new message with its own identity, on this record's trace. Call it inside
        ``record.once`` when a retry of the record must not ask twice. Needs the consumer's
        ``SLUICE_DELAY_QUEUE_URL`` (a workload's consumer has it)."""
        if self._later is None:
            raise ConfigurationError("record.later needs SLUICE_DELAY_QUEUE_URL (the delay queue's URL)")
        return self._later(body, delay_seconds=delay_seconds, deliver_at=deliver_at, attributes=attributes)


Processor = Callable[[SluiceRecord], object]
