"""One redrive run at a time per workload: a lease item beside the workload's breaker item.

The velocity limit (``RedriveMaxPerSecond``) is per run: two runs at once would each pace at it. The
redriver is started by the DLQ alarm's rule, the backstop schedule and the operator CLI, and Lambda
runs a second trigger beside the first unless the function has a reserved concurrency of 1 (which an
account without concurrency to spare cannot give). So every run takes this lease first, and a run
that finds it held by another live run ends at once (``stopped: "another_run"``).

The item is ``{"id": "<breaker name>#lease"}`` in the breaker table (a workload name is alphanumeric,
so it never collides with a breaker's item): ``owner``, a random token per run; ``expires``, epoch
seconds by the holder's clock; ``holder``, who (for people); ``acquired_at``, ``renewed_at``. Every
change is one conditional ``UpdateItem``, which DynamoDB applies atomically:

- **take** when there is no owner, or the stored expiry is older than the taker's now minus
  :data:`SKEW_MARGIN_SECONDS` (the holder crashed or timed out), or it is later than the taker's now
  plus :data:`MAX_AHEAD_SECONDS` (no holder whose clock is within the margin of the taker's can have
  written it: a clock far ahead wrote it), or the owner is this run already (a retried request whose
  first attempt took effect);
- **renew** while the owner is this run: before each batch, when less than half a
  :data:`LEASE_SECONDS` would be left after the stretch ahead (the pacing wait and the long poll), the
  expiry moves to now + that stretch + :data:`LEASE_SECONDS`. A stretch is at most
  :data:`MAX_STRETCH_SECONDS` (the long poll, at most 20 s, and a piece of the pacing wait: the runner
  sleeps a longer wait in pieces, keeping the lease before each). So a batch starts with at least 15 s
  of lease left for its sends and deletes, a run lives as long as Lambda lets it (its Timeout) by
  renewing, and no holder writes an expiry more than :data:`MAX_STRETCH_SECONDS` +
  :data:`LEASE_SECONDS` past its own now. A crashed run blocks the next one for at most its last
  stretch + :data:`LEASE_SECONDS` + :data:`SKEW_MARGIN_SECONDS` after its last renewal (42 s at the
  defaults' 2 s long poll and a sub-second pacing wait; 70 s at most), and a crashed holder whose
  clock ran ahead for at most :data:`MAX_AHEAD_SECONDS` + :data:`SKEW_MARGIN_SECONDS` (80 s)
  however far ahead it ran (the DLQ messages it held come back after the receive's 60 s visibility
  anyway);
- **release** at the run's end, while the owner is this run (a run that lost its lease leaves it).

Clocks. DynamoDB has no clock of its own in a condition, so the expiry is the holder's clock and the
comparison the taker's: a taker whose clock runs δ ahead of the holder's sees the lease expire δ
early. The taker therefore requires the expiry to be :data:`SKEW_MARGIN_SECONDS` in its past: as long
as two runs' clocks differ by less than the margin, a lease is taken over only after it expired by its
holder's own clock too, and a holder renews long before that. Lambda's clocks follow the Amazon Time
Sync Service (well under a second apart); the margin is for an operator's machine running
``sluice dlq redrive``. (A lock that needs no clocks, as AWS's DynamoDB lock client does, makes the
taker watch the item for a whole lease before taking it: a second run would wait instead of ending
at once.)

What the lease does not cover: a holder stalled within one batch for longer than its lease (a hung
request), or clocks further apart than the margin, lets another run take over. The run that lost it
fails its next renewal (the owner is no longer it) and stops (``stopped: "lease_lost"``). Until then
the two overlap: a stalled run only finishes the batch it holds (at most 10 messages; it receives no
more), so that overlap lasts as long as the rest of the stalled batch, which nothing but the function's
Timeout bounds; a mis-clocked run that still believes its lease live goes on until its next renewal's
write, at most ``LEASE_SECONDS / 2`` + :data:`MAX_STRETCH_SECONDS` (45 s) after its previous one, plus
the batch in flight.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sluice.redrive.breaker import DEFAULT_NAME

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

    from sluice.redrive.settings import BreakerSettings

__all__ = [
    "LEASE_SECONDS",
    "MAX_AHEAD_SECONDS",
    "MAX_STRETCH_SECONDS",
    "SKEW_MARGIN_SECONDS",
    "HeldLease",
    "Refusal",
    "RunLease",
    "lease_key",
]

LEASE_SECONDS = 30.0
"""How long a lease lasts beyond the stretch a renewal covers; renewed when less than half is left."""
SKEW_MARGIN_SECONDS = 10.0
"""How far past its expiry (by the taker's clock) a lease must be before another run takes it over."""
MAX_STRETCH_SECONDS = 30.0
"""The longest stretch a take or renewal covers beyond its now (the long poll, at most 20 s, and a piece
of the pacing wait): ``acquire`` and ``keep`` refuse a longer one."""
MAX_AHEAD_SECONDS = MAX_STRETCH_SECONDS + LEASE_SECONDS + SKEW_MARGIN_SECONDS
"""A stored expiry later than the taker's now plus this was written by a clock far ahead: taken over."""
KEY_SUFFIX = "#lease"
MAX_HOLDER = 200

_NAMES = {"#owner": "owner", "#expires": "expires", "#holder": "holder"}


def lease_key(name: str) -> str:
    """The lease item's ``id`` for the breaker item ``name`` (the workload's name in the template)."""
    return name + KEY_SUFFIX


@dataclass(frozen=True)
class Refusal:
    """The lease is held by another run that is live: who, and until when (epoch seconds)."""

    holder: str
    expires: float | None


class RunLease:
    """Takes the lease ``{"id": "<name>#lease"}`` in ``table`` for one run at a time."""

    def __init__(
        self,
        dynamodb: DynamoDBClient,
        table: str,
        *,
        name: str = DEFAULT_NAME,
        duration: float = LEASE_SECONDS,
        margin: float = SKEW_MARGIN_SECONDS,
        max_stretch: float = MAX_STRETCH_SECONDS,
        clock: Callable[[], float] = time.time,
        token: Callable[[], str] = lambda: uuid.uuid4().hex,
    ) -> None:
        if duration <= 0 or margin < 0 or max_stretch < 0:
            raise ValueError(
                "need duration > 0, margin >= 0 and max_stretch >= 0, "
                f"got {duration=} {margin=} {max_stretch=}"
            )
        self._db = dynamodb
        self._table = table
        self._key = {"id": {"S": lease_key(name)}}
        self.duration = duration
        self.margin = margin
        self.max_stretch = max_stretch
        self._clock = clock
        self._token = token

    @classmethod
    def from_settings(cls, settings: BreakerSettings, dynamodb: DynamoDBClient) -> RunLease:
        return cls(dynamodb, settings.breaker_table, name=settings.breaker_name)

    def acquire(self, holder: str = "", *, seconds: float = 0.0) -> HeldLease | Refusal:
        """Take the lease for a new run, to last ``seconds`` + the lease's duration; or say who holds it."""
        self._check_stretch(seconds)
        token = self._token()
        now = self._clock()
        expires = now + seconds + self.duration
        try:
            self._db.update_item(
                TableName=self._table,
                Key=self._key,
                UpdateExpression="SET #owner = :me, #holder = :holder, #expires = :expires, "
                "acquired_at = :now, renewed_at = :now",
                ConditionExpression="attribute_not_exists(#owner) OR #owner = :me "
                "OR attribute_not_exists(#expires) OR NOT attribute_type(#expires, :n) "
                "OR #expires < :stale OR #expires > :implausible",
                ExpressionAttributeNames=_NAMES,
                ExpressionAttributeValues={
                    ":me": {"S": token},
                    ":holder": {"S": (holder or "unnamed run")[:MAX_HOLDER]},
                    ":expires": {"N": _num(expires)},
                    ":now": {"N": _num(now)},
                    ":stale": {"N": _num(now - self.margin)},
                    ":implausible": {"N": _num(now + self.max_ahead)},
                    ":n": {"S": "N"},
                },
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except self._db.exceptions.ConditionalCheckFailedException as exc:
            item = exc.response.get("Item")
            return _refusal(item if isinstance(item, Mapping) else None)
        return HeldLease(self, token, expires)

    @property
    def max_ahead(self) -> float:
        """The latest plausible expiry, in seconds past a taker's now: the latest any holder writes past
        its own now (the longest stretch + the duration), plus the margin its clock may be ahead."""
        return self.max_stretch + self.duration + self.margin

    def now(self) -> float:
        return self._clock()

    def _check_stretch(self, seconds: float) -> None:
        # a longer stretch would write an expiry a taker takes for a clock far ahead, and take over
        if not 0 <= seconds <= self.max_stretch:
            raise ValueError(f"a lease covers a stretch of 0 to {self.max_stretch:g} s, got {seconds:g}")

    # --- the holder's writes (HeldLease) ---------------------------------------------------------

    def _renew(self, token: str, expires: float, now: float) -> bool:
        try:
            self._db.update_item(
                TableName=self._table,
                Key=self._key,
                UpdateExpression="SET #expires = :expires, renewed_at = :now",
                ConditionExpression="#owner = :me",
                ExpressionAttributeNames={"#owner": "owner", "#expires": "expires"},
                ExpressionAttributeValues={
                    ":me": {"S": token},
                    ":expires": {"N": _num(expires)},
                    ":now": {"N": _num(now)},
                },
            )
        except self._db.exceptions.ConditionalCheckFailedException:
            return False
        return True

    def _release(self, token: str) -> None:
        # a failed condition: taken over after this run lost it (or a retried release): not its to release
        with contextlib.suppress(self._db.exceptions.ConditionalCheckFailedException):
            self._db.update_item(
                TableName=self._table,
                Key=self._key,
                UpdateExpression="REMOVE #owner, #expires, #holder SET released_at = :now",
                ConditionExpression="#owner = :me",
                ExpressionAttributeNames=_NAMES,
                ExpressionAttributeValues={":me": {"S": token}, ":now": {"N": _num(self.now())}},
            )


class HeldLease:
    """One run's hold on the lease: :meth:`keep` before each stretch of work, :meth:`release` at the end."""

    def __init__(self, lease: RunLease, token: str, expires: float) -> None:
        self._lease = lease
        self.token = token
        self.expires: float | None = expires
        """Epoch seconds by this run's clock; None once lost or released."""

    @property
    def max_stretch(self) -> float:
        """The longest stretch :meth:`keep` covers."""
        return self._lease.max_stretch

    @property
    def held(self) -> bool:
        return self.expires is not None

    def keep(self, seconds: float = 0.0) -> bool:
        """Make sure the lease outlasts the next ``seconds`` (at most its ``max_stretch``) by at least half
        its duration (renewing it to ``seconds`` + its duration when not); False when another run has
        taken it over."""
        lease = self._lease
        lease._check_stretch(seconds)
        if self.expires is None:
            return False
        now = lease.now()
        if self.expires - now >= seconds + lease.duration / 2:
            return True
        expires = now + seconds + lease.duration
        if lease._renew(self.token, expires, now):
            self.expires = expires
            return True
        self.expires = None
        return False

    def release(self) -> None:
        """Let the next run take the lease at once (nothing when lost or released already)."""
        if self.expires is None:
            return
        self.expires = None
        self._lease._release(self.token)


def _refusal(item: Mapping[str, Any] | None) -> Refusal:
    item = item or {}
    holder = item.get("holder", {}).get("S") or "an unnamed run"
    try:
        expires: float | None = float(item["expires"]["N"])
    except (KeyError, TypeError, ValueError):
        expires = None
    return Refusal(holder=holder, expires=expires)


def _num(value: float) -> str:
    return f"{value:.3f}"
