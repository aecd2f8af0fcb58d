"""The redrive circuit breaker: one small durable DynamoDB item that says whether re-driving may run.

Why a DynamoDB item (not an SSM parameter): every transition is a conditional write on a version
number, so two redrive runs and an operator can never overwrite each other's decision; reads are
strongly consistent; bounce counters are atomic ``ADD`` updates; Step Functions can read it with a
direct integration; and on-demand pricing makes a few requests per redrive batch cost nothing. SSM
``PutParameter`` has no condition, no atomic counter, and a standard-tier throughput of 40 TPS
shared with everything else in the account.

States (``closed`` → ``open`` → ``half_open`` → ``closed``):

- ``closed``: re-driving runs. Every run reports how many DLQ messages it saw and how many of them
  it had itself re-driven and that are back within the cooldown window: those are bouncing.
  When a window holds at least ``min_sample`` messages and the bouncing share exceeds
  ``bounce_threshold``, the breaker opens itself (``opened_by = "auto"``).
- ``open``: nothing moves. Opened by an operator it stays open until an operator closes it; opened
  automatically it half-opens once ``cooldown_seconds`` have passed.
- ``half_open``: one probe batch goes through, then nothing moves for another cooldown while the
  probe's messages have time to fail and come back; the next batch seen decides: more than the
  threshold of it bouncing (the probe came back) → ``open`` again, else → ``closed``.

A message is bouncing when it is back in the DLQ less than ``cooldown_seconds`` after it was due on
its source again (``Envelope.redriven_at`` = re-driven at + its backoff).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Literal

from sluice import metrics
from sluice.envelope import Envelope
from sluice.redrive.contracts import BreakerAnswer

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

    from sluice.metrics import MetricSink
    from sluice.redrive.settings import BreakerSettings

DEFAULT_NAME = "redrive"
MAX_REASON = 512
UNREADABLE_VERSION = -1
"""The version of an item whose version attribute is not a number: a write may repair it."""


class BreakerState(StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


_STATE_NAMES: dict[BreakerState, Literal["closed", "open", "half_open"]] = {
    BreakerState.CLOSED: "closed",
    BreakerState.OPEN: "open",
    BreakerState.HALF_OPEN: "half_open",
}
"""A state as the check's answer spells it (:class:`~sluice.redrive.contracts.BreakerAnswer`)."""


@dataclass(frozen=True)
class BreakerPolicy:
    cooldown_seconds: int = 300
    bounce_threshold: float = 0.5
    """Share of bouncing messages (0..1) above which the breaker opens."""
    min_sample: int = 10
    """Messages a window must hold before its share can open the breaker."""

    def __post_init__(self) -> None:
        if self.cooldown_seconds < 1:
            raise ValueError(f"cooldown_seconds must be at least 1, got {self.cooldown_seconds}")
        if not 0 <= self.bounce_threshold <= 1:
            raise ValueError(f"bounce_threshold must be within 0..1, got {self.bounce_threshold}")
        if self.min_sample < 1:
            raise ValueError(f"min_sample must be at least 1, got {self.min_sample}")

    def is_bouncing(self, envelope: Envelope | None, now: datetime) -> bool:
        """True when sluice re-drove this message within the cooldown window and it is back."""
        if envelope is None or envelope.redriven_at is None:
            return False
        return (as_utc(now) - as_utc(envelope.redriven_at)).total_seconds() < self.cooldown_seconds


@dataclass(frozen=True)
class BreakerStatus:
    state: BreakerState
    reason: str
    opened_by: str | None = None
    """``operator`` or ``auto`` while open or half-open."""
    since: float | None = None
    """Epoch seconds of the last transition."""
    seen: int = 0
    bouncing: int = 0
    version: int = 0
    window_start: float | None = None
    """Epoch seconds of the first observation of the current window (None: nothing observed yet)."""
    probe_at: float | None = None
    """Half-open: when the probe batch was re-driven (None: the probe has not gone out yet)."""
    probe_due: float | None = None
    """Half-open: when the probe's last message is due on its source again."""
    fresh: int = 0
    """Messages seen in this window whose last failure happened after ``probe_at``."""
    latest_due: float | None = None
    """Latest due time of the messages re-driven in this window (epoch seconds)."""
    holding: bool = False
    """Half-open with the probe out: nothing moves until its messages have had time to come back."""

    @property
    def is_open(self) -> bool:
        return self.state is BreakerState.OPEN or self.holding

    def to_dict(self) -> BreakerAnswer:
        """The check's answer: ``{"isOpen", "state", "reason", ...}`` (JSON-ready)."""
        return {
            "isOpen": self.is_open,
            "state": _STATE_NAMES[self.state],
            "reason": self.reason,
            "openedBy": self.opened_by,
            "since": None if self.since is None else datetime.fromtimestamp(self.since, UTC).isoformat(),
            "seen": self.seen,
            "bouncing": self.bouncing,
            "probeAt": self.probe_at,
        }


class Breaker:
    """Read, evaluate and change the breaker item ``{"id": name}`` in ``table``."""

    def __init__(
        self,
        dynamodb: DynamoDBClient,
        table: str,
        *,
        policy: BreakerPolicy | None = None,
        name: str = DEFAULT_NAME,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._db = dynamodb
        self._table = table
        self._policy = policy or BreakerPolicy()
        self._name = name
        self._clock = clock

    @classmethod
    def from_settings(cls, settings: BreakerSettings, dynamodb: DynamoDBClient) -> Breaker:
        return cls(dynamodb, settings.breaker_table, name=settings.breaker_name, policy=settings.policy())

    @property
    def policy(self) -> BreakerPolicy:
        return self._policy

    # --- reading -------------------------------------------------------------------------------

    def status(self) -> BreakerStatus:
        """The stored state, without evaluating or changing anything (for operators)."""
        item = self._db.get_item(TableName=self._table, Key=self._key(), ConsistentRead=True).get("Item")
        return _decode(item)

    def check(self) -> BreakerStatus:
        """Evaluate and apply due transitions, then answer whether re-driving may run now.

        - open (auto) past its cooldown → half_open with fresh counters;
        - half_open: probe → hold for a cooldown (answers open) → judged by the next batch:
          closed, or open again when it bounced;
        - closed with a tripped window → open (auto); an expired window → fresh counters.
        """
        current = self.status()
        if current.state is BreakerState.OPEN:
            return self._after_open(current)
        if current.state is BreakerState.HALF_OPEN:
            return self._after_probe(current)
        return self._while_closed(current)

    def _after_open(self, current: BreakerStatus) -> BreakerStatus:
        p = self._policy
        since = current.since if current.since is not None else self._clock()
        if current.opened_by == "auto" and self._clock() - since >= p.cooldown_seconds:
            return self._write(
                current,
                BreakerState.HALF_OPEN,
                f"cooldown of {p.cooldown_seconds}s over; letting one probe batch through",
                opened_by="auto",
            )
        return current

    def _after_probe(self, current: BreakerStatus) -> BreakerStatus:
        """Half-open in three steps. (1) One probe batch goes through. (2) Nothing moves until the
        probe's last message is due on its source and a cooldown more has passed, so the probe can
        fail again and come back. (3) The next batch seen is judged by its *fresh* failures (failed
        after the probe went out): more than the threshold → open again, else → closed. Old
        backlog, which failed before the breaker opened, says nothing about the downstream now."""
        p = self._policy
        now = self._clock()
        if current.probe_at is None:
            if current.seen == 0:  # the probe has not gone out: let it through
                return current
            due = max(current.latest_due or now, now)
            written = self._write(
                current,
                BreakerState.HALF_OPEN,
                f"probe of {current.seen} messages re-driven; nothing moves until "
                f"{datetime.fromtimestamp(due + p.cooldown_seconds, UTC).isoformat(timespec='seconds')} "
                "(the probe due, plus the cooldown), then fresh failures decide",
                opened_by="auto",
                probe_at=now,
                probe_due=due,
            )
            holding = written.state is BreakerState.HALF_OPEN and written.probe_at is not None
            return replace(written, holding=holding)
        due = current.probe_due if current.probe_due is not None else current.probe_at
        if now - due < p.cooldown_seconds:
            return replace(current, holding=True)
        if current.seen == 0:  # the judging batch has not been seen yet: let it through
            return current
        if current.fresh > p.bounce_threshold * current.seen:
            return self._write(
                current,
                BreakerState.OPEN,
                f"the probe did not pass: {current.fresh} of {current.seen} dead-lettered messages "
                "failed after it went out",
                opened_by="auto",
            )
        return self._write(
            current,
            BreakerState.CLOSED,
            f"probe passed: {current.fresh} of {current.seen} messages failed after it went out",
        )

    def _while_closed(self, current: BreakerStatus) -> BreakerStatus:
        p = self._policy
        if self._tripped(current, minimum=p.min_sample):
            return self._write(
                current,
                BreakerState.OPEN,
                f"{current.bouncing} of {current.seen} dead-lettered messages were re-driven within the last "
                f"{p.cooldown_seconds}s and are back: downstream still fails",
                opened_by="auto",
            )
        # The window starts with its first observation (not at the last transition, which may be
        # long past: counts observed after a quiet spell must not be thrown away unevaluated).
        start = current.window_start if current.window_start is not None else current.since
        if current.seen and start is not None and self._clock() - start >= p.cooldown_seconds:
            # a fresh window, which is no transition: "closed since" keeps telling when it closed
            return self._write(current, BreakerState.CLOSED, current.reason, since=current.since)
        return current

    # --- changing ------------------------------------------------------------------------------

    def observe(self, *, seen: int, bouncing: int, fresh: int = 0, latest_due: float | None = None) -> None:
        """Add one run's (or batch's) counts to the current window (atomic, no condition).

        ``fresh``: messages whose last failure happened after a half-open probe went out;
        ``latest_due``: the latest time (epoch seconds) a message re-driven now is due again.
        It bumps the version too, so a transition decided on a read taken before these counts
        arrived loses its conditional write instead of wiping them.
        """
        if seen < 0 or not 0 <= bouncing <= seen or not 0 <= fresh <= seen:
            raise ValueError(f"need 0 <= bouncing, fresh <= seen, got {seen=} {bouncing=} {fresh=}")
        if seen == 0:
            return
        self._db.update_item(
            TableName=self._table,
            Key=self._key(),
            UpdateExpression=(
                "ADD seen :seen, bouncing :bouncing, fresh :fresh, version :one "
                "SET #state = if_not_exists(#state, :closed), since = if_not_exists(since, :now), "
                "window_start = if_not_exists(window_start, :now), reason = if_not_exists(reason, :reason)"
            ),
            ExpressionAttributeNames={"#state": "state"},
            ExpressionAttributeValues={
                ":seen": {"N": str(seen)},
                ":bouncing": {"N": str(bouncing)},
                ":fresh": {"N": str(fresh)},
                ":closed": {"S": BreakerState.CLOSED.value},
                ":now": {"N": _num(self._clock())},
                ":reason": {"S": "never opened"},
                ":one": {"N": "1"},
            },
        )
        if latest_due is not None:  # a running maximum: only ever moves later
            # a later due time already recorded fails the condition: nothing to do
            with contextlib.suppress(self._db.exceptions.ConditionalCheckFailedException):
                self._db.update_item(
                    TableName=self._table,
                    Key=self._key(),
                    UpdateExpression="SET latest_due = :due",
                    ConditionExpression="attribute_not_exists(latest_due) OR latest_due < :due",
                    ExpressionAttributeValues={":due": {"N": _num(latest_due)}},
                )

    def open(self, reason: str, *, by: str = "operator") -> BreakerStatus:
        """Open the breaker (an operator's open stays until :meth:`close`)."""
        if not reason.strip():
            raise ValueError("opening the breaker needs a reason")
        return self._force(BreakerState.OPEN, reason, opened_by=by)

    def close(self, reason: str = "closed by an operator") -> BreakerStatus:
        return self._force(BreakerState.CLOSED, reason)

    # --- internals -----------------------------------------------------------------------------

    def _tripped(self, status: BreakerStatus, *, minimum: int) -> bool:
        return status.seen >= minimum and status.bouncing > self._policy.bounce_threshold * status.seen

    def _force(self, state: BreakerState, reason: str, *, opened_by: str | None = None) -> BreakerStatus:
        for _ in range(5):
            current = self.status()
            written = self._write(current, state, reason, opened_by=opened_by)
            if written.state is state and written.reason == reason[:MAX_REASON]:
                return written
        raise RuntimeError(f"breaker {self._name!r} kept changing under us; try again")

    def _write(
        self,
        current: BreakerStatus,
        state: BreakerState,
        reason: str,
        *,
        opened_by: str | None = None,
        since: float | None = None,
        probe_at: float | None = None,
        probe_due: float | None = None,
    ) -> BreakerStatus:
        """Conditional write on the version read; on a lost race, the winner's state is returned."""
        new = BreakerStatus(
            state=state,
            reason=reason[:MAX_REASON],
            opened_by=opened_by if state is not BreakerState.CLOSED else None,
            since=self._clock() if since is None else since,
            seen=0,
            bouncing=0,
            version=max(current.version, 0) + 1,
            probe_at=probe_at,
            probe_due=probe_due,
        )
        if current.version == UNREADABLE_VERSION:  # repair: only while it is still no number
            condition, values = "NOT attribute_type(version, :n)", {":n": {"S": "N"}}
        else:
            condition, values = (
                "attribute_not_exists(version) OR version = :v",
                {":v": {"N": str(current.version)}},
            )
        item: dict[str, Any] = {
            **self._key(),
            "state": {"S": new.state.value},
            "reason": {"S": new.reason},
            "since": {"N": _num(new.since or 0.0)},
            "seen": {"N": "0"},
            "bouncing": {"N": "0"},
            "version": {"N": str(new.version)},
        }
        if new.opened_by:
            item["opened_by"] = {"S": new.opened_by}
        if new.probe_at is not None:
            item["probe_at"] = {"N": _num(new.probe_at)}
        if new.probe_due is not None:
            item["probe_due"] = {"N": _num(new.probe_due)}
        try:
            self._db.put_item(
                TableName=self._table,
                Item=item,
                ConditionExpression=condition,
                ExpressionAttributeValues=values,
            )
        except self._db.exceptions.ConditionalCheckFailedException:
            return self.status()
        return new

    def _key(self) -> dict[str, Any]:
        return {"id": {"S": self._name}}


def report(status: BreakerStatus, sink: MetricSink) -> None:
    """``BreakerOpen`` = 1 while open, else 0 (a gauge the BreakerOpen alarm watches)."""
    sink.add_metric(name=metrics.BREAKER_OPEN, unit="Count", value=1 if status.is_open else 0)


def _decode(item: Mapping[str, Any] | None) -> BreakerStatus:
    if not item:
        return BreakerStatus(state=BreakerState.CLOSED, reason="never opened")

    def text(name: str) -> str | None:
        value = item.get(name)
        if value is None:
            return None
        if not isinstance(value, Mapping) or not isinstance(value.get("S"), str):
            raise TypeError(f"{name} is not a string")
        return str(value["S"])

    def number(name: str) -> float | None:
        value = item.get(name)
        if value is None:
            return None
        if not isinstance(value, Mapping) or "N" not in value:
            raise TypeError(f"{name} is not a number")
        return float(value["N"])

    try:
        version = int(number("version") or 0)
    except (TypeError, ValueError):
        version = UNREADABLE_VERSION
    try:
        state = BreakerState(text("state") or BreakerState.CLOSED.value)
        return BreakerStatus(
            state=state,
            reason=text("reason") or "",
            opened_by=text("opened_by"),
            since=number("since"),
            seen=int(number("seen") or 0),
            bouncing=int(number("bouncing") or 0),
            version=version,
            window_start=number("window_start"),
            probe_at=number("probe_at"),
            probe_due=number("probe_due"),
            fresh=int(number("fresh") or 0),
            latest_due=number("latest_due"),
        )
    except (TypeError, ValueError) as exc:  # written by hand or by a newer sluice: fail safe, nothing moves
        return BreakerStatus(
            state=BreakerState.OPEN,
            reason=f"unreadable breaker item ({exc}); close it with the operator CLI",
            opened_by="operator",
            version=version,
        )


def as_utc(moment: datetime) -> datetime:
    """``moment`` as an aware UTC datetime (a naive one, as a hand-written envelope may hold, is UTC)."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _num(value: float) -> str:
    return f"{value:.3f}"
