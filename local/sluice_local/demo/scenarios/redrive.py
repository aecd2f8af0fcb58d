"""The DLQ redrive scenarios, in either ``RedriveMode``: work DLQ → redriver (``lambda``) or redrive
state machine (``stepfunctions``) → work queue with backoff, or the poison queue; the circuit breaker
and the velocity bound.

keeps-failing and recovers-after-redrive may share the stack with every other scenario; velocity
(it times every redrive) and breaker-open (it stops every redrive) each need the stack's redrive to
themselves (:func:`exclusive_redrive_scenarios`).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sluice.envelope import Envelope, merge
from sluice.errors import TransientError
from sluice.logevents import EVENT, LogEvent
from sluice.redrive.breaker import Breaker
from sluice_local.app.messages import ORDERS, claim_check, order
from sluice_local.app.observer import SENT_BACK, STAGING, Redrive, Stack, envelope_of, logged_at, origin_ids
from sluice_local.demo.scenarios.runner import Scenario
from sluice_local.emulation.emulated import rate_seconds


@dataclass(frozen=True)
class RedriveParams:
    """The stack parameters the redrive scenarios check against."""

    max_receive_count: int
    max_attempts: int
    base: float
    cap: float
    floor: float
    max_per_second: float
    backstop_seconds: float

    @classmethod
    def of(cls, params: Mapping[str, str]) -> RedriveParams:
        return cls(
            max_receive_count=int(params["MaxReceiveCount"]),
            max_attempts=int(params["RedriveMaxAttempts"]),
            base=float(params["RedriveBaseSeconds"]),
            cap=float(params["RedriveCapSeconds"]),
            floor=float(params["RedriveFloorSeconds"]),
            max_per_second=float(params["RedriveMaxPerSecond"]),
            backstop_seconds=rate_seconds(params["RedriveBackstopRate"]) or 300.0,
        )

    def top(self, attempt: int) -> float:
        """The full-jitter bound of a redrive attempt: min(cap, base · 2^attempt)."""
        return min(self.cap, self.base * 2.0**attempt)

    def allows(self, attempt: int, delay_seconds: int) -> bool:
        """uniform(floor, top) rounded up to whole seconds."""
        return self.floor <= delay_seconds <= math.ceil(max(self.floor, self.top(attempt)))


class _ClaimCheckMissing(Scenario):
    """A message whose claim-check object is not in S3: the consumer fails transiently on it."""

    tenant_attribute = "tenant"

    def start(self, stack: Stack) -> None:
        self.key = f"{stack.outputs['ClaimCheckPrefix']}{self.prefix}payload"
        self.tenant = f"acme-{self.run_id}"
        self.message_id = self.send(
            stack,
            claim_check(stack.outputs["ClaimCheckBucketName"], self.key),
            MessageAttributes={self.tenant_attribute: {"DataType": "String", "StringValue": self.tenant}},
            MessageGroupId=self.tenant,  # its tenant on a fair queue: kept by every hop
        )

    def consumer_failures(self, stack: Stack) -> list[dict[str, Any]]:
        """The consumer's failure lines for this message, in every delivery cycle (they name the key)."""
        return [
            e
            for e in stack.logged(LogEvent.RECORD_RETRIED, LogEvent.RECORD_DEAD_LETTERED)
            if self.key in str(e.get("error", ""))
        ]

    def dead_letters(self, stack: Stack) -> list[dict[str, Any]]:
        return [e for e in self.consumer_failures(stack) if e.get(EVENT) == LogEvent.RECORD_DEAD_LETTERED]

    def decisions(self, stack: Stack) -> list[Redrive]:
        return sorted(
            (d for d in stack.redrive_decisions() if d.origin_id == self.message_id), key=lambda d: d.at
        )

    def poisoned(self, stack: Stack) -> tuple[dict[str, Any], Envelope] | None:
        for message in stack.every_message("PoisonPillQueueUrl"):  # nothing consumes it: all of it
            env = envelope_of(message)
            if env is not None and env.origin_id == self.message_id:
                return message, env
        return None


class KeepsFailing(_ClaimCheckMissing):
    """Dead-lettered with its error, re-driven with growing backoff, then isolated with full forensics."""

    name = "keeps-failing"
    timeout = 90.0
    patience = 30.0  # each failed receive and each redrive is progress (a loaded machine once needed more)

    def __init__(self, params: RedriveParams) -> None:
        super().__init__()
        self.params = params
        bounds = ", ".join(f"≤{params.top(a):g}" for a in range(1, params.max_attempts + 1))
        self.expected = (
            f"payload never appears → dead-lettered with its error after {params.max_receive_count} "
            f"receives → re-driven {params.max_attempts}x, backoff {bounds} s → PoisonPillQueue, "
            f"attempts {params.max_attempts + 1}, envelope complete"
        )
        self.redrives: list[Redrive] = []
        self.actual_delays: list[float] = []
        self.problems: list[str] = []
        self.envelope: Envelope | None = None
        self.attributes: dict[str, Any] = {}
        self.group: str | None = None

    def observe(self, stack: Stack) -> tuple[bool, str]:
        p = self.params
        failures = self.consumer_failures(stack)
        dead = [e for e in failures if e.get(EVENT) == LogEvent.RECORD_DEAD_LETTERED]
        decided = self.decisions(stack)
        self.redrives = [d for d in decided if d.action in SENT_BACK]
        self.progress = (len(failures), len(decided))
        # Actual delay: from the redrive decision to the consumer's next receive of the message.
        failed_at = sorted(at for e in failures if (at := logged_at(e)) is not None)
        self.actual_delays = [
            round((next_at - d.at).total_seconds(), 2)
            for d in self.redrives
            if (next_at := next((at for at in failed_at if at > d.at), None)) is not None
        ]
        found = self.poisoned(stack) if len(dead) > p.max_attempts else None
        shown = (
            f"dead-lettered {len(dead)}x by the consumer; re-driven attempts "
            f"{[d.attempt for d in self.redrives]}, delays {[d.delay_seconds for d in self.redrives]} s "
            f"(bounds {[p.top(d.attempt) for d in self.redrives]}; decision → next receive "
            f"{self.actual_delays} s)"
        )
        if found is None:
            return False, shown + "; not in PoisonPillQueue yet" + self.redrive_broken(stack)
        message, env = found
        self.envelope, self.attributes = env, message.get("MessageAttributes") or {}
        self.group = (message.get("Attributes") or {}).get("MessageGroupId")
        self.problems = self._check(stack, env, dead)
        verdict = "; ".join(self.problems) if self.problems else "envelope complete"
        error = env.last_error
        isolated = (
            f" → PoisonPillQueue: attempts {env.attempts}, last_error "
            f"{error.type if error else '-'} ({error.receives if error else '-'} receives), "
            f"{self.tenant_attribute}={self._tenant()}: {verdict}"
        )
        self.failed = bool(self.problems)
        return not self.problems, shown + isolated

    def _tenant(self) -> str | None:
        return (self.attributes.get(self.tenant_attribute) or {}).get("StringValue")

    def _check(self, stack: Stack, env: Envelope, dead: list[dict[str, Any]]) -> list[str]:
        return self._check_cycles(dead) + self._check_envelope(stack, env)

    def _check_cycles(self, dead: list[dict[str, Any]]) -> list[str]:
        p = self.params
        problems = []
        if len(dead) != p.max_attempts + 1:
            problems.append(f"the consumer dead-lettered it {len(dead)}x, expected {p.max_attempts + 1}x")
        attempts = [d.attempt for d in self.redrives]
        if attempts != list(range(1, p.max_attempts + 1)):
            problems.append(f"redrive attempts {attempts}, expected 1..{p.max_attempts}")
        for d in self.redrives:
            if not p.allows(d.attempt, d.delay_seconds):
                problems.append(
                    f"attempt {d.attempt} delay {d.delay_seconds}s outside "
                    f"[{p.floor:g}, {math.ceil(p.top(d.attempt))}]"
                )
        return problems

    def _check_envelope(self, stack: Stack, env: Envelope) -> list[str]:
        p = self.params
        problems = []
        if env.origin_id != self.message_id:
            problems.append(f"origin_id {env.origin_id} is not the first message id {self.message_id}")
        if env.attempts != p.max_attempts + 1:
            problems.append(f"envelope attempts {env.attempts}, expected {p.max_attempts + 1}")
        if env.first_failure is None:
            problems.append("no first_failure")
        error = env.last_error
        if error is None:
            problems.append("no last_error")
        else:
            if error.type != TransientError.__name__ or self.key not in error.message:
                problems.append(
                    f"last_error {error.type}: {error.message!r} is not the consumer's NoSuchKey error"
                )
            if error.receives != p.max_receive_count:
                problems.append(f"last_error receives {error.receives}, expected {p.max_receive_count}")
            if env.first_failure is not None and env.first_failure > error.at:
                problems.append("first_failure is after last_error.at")
        if env.source != stack.outputs[ORDERS + "QueueArn"]:
            problems.append(
                f"source {env.source}, expected the work queue {stack.outputs[ORDERS + 'QueueArn']}"
            )
        if self.group != self.tenant or env.group != self.tenant:
            problems.append(
                f"MessageGroupId {self.group!r}, envelope group {env.group!r}: sent {self.tenant!r}"
            )
        if self._tenant() != self.tenant:
            problems.append(
                f"user attribute {self.tenant_attribute}={self._tenant()!r}, sent {self.tenant!r}"
            )
        return problems


class RecoversAfterRedrive(_ClaimCheckMissing):
    """Downstream recovers while the message sits in the DLQ: the redrive delivers it, once."""

    name = "recovers-after-redrive"
    timeout = 60.0
    patience = 30.0

    def __init__(self, params: RedriveParams) -> None:
        super().__init__()
        self.params = params
        self.expected = (
            f"payload appears only once it is dead-lettered ({params.max_receive_count} receives) → "
            "re-driven → charged exactly once, never in PoisonPillQueue"
        )
        self.uploaded = False

    def observe(self, stack: Stack) -> tuple[bool, str]:
        dead = self.dead_letters(stack)
        if dead and not self.uploaded:  # downstream recovers while the message waits in the DLQ
            stack.client("s3").put_object(
                Bucket=stack.outputs["ClaimCheckBucketName"],
                Key=self.key,
                Body=json.dumps(order(f"{self.prefix}late")).encode(),
            )
            self.uploaded = True
        redrives = [d for d in self.decisions(stack) if d.action in SENT_BACK]
        charged = sum(stack.charges(self.prefix).values())
        self.progress = (len(self.consumer_failures(stack)), len(redrives), charged)
        isolated = self.poisoned(stack) is not None if charged or len(dead) > 1 else False
        shown = (
            f"dead-lettered {len(dead)}x, re-driven {len(redrives)}x "
            f"(attempts {[d.attempt for d in redrives]}, delays {[d.delay_seconds for d in redrives]} s), "
            f"charged {charged}x, {'in' if isolated else 'not in'} PoisonPillQueue"
        )
        self.failed = isolated or charged > 1
        ok = bool(dead) and bool(redrives) and charged == 1 and not isolated
        return ok, shown if ok else shown + self.redrive_broken(stack)


class BreakerHolds(Scenario):
    """An open circuit breaker stops every redrive: nothing moves until it is closed."""

    name = "breaker-open"
    count = 5
    cycles = 3

    def __init__(self, params: RedriveParams) -> None:
        super().__init__()
        self.params = params
        self.hold_seconds = self.cycles * params.backstop_seconds
        self.timeout = self.hold_seconds + 60.0
        self.expected = (
            f"breaker opened (reason e2e), {self.count} orders put in the DLQ → ≥{self.cycles} redrive runs "
            f"blocked over ≥{self.hold_seconds:g} s, nothing moves → closed → each charged once"
        )
        self.phase = "opening"
        self.blocked = 0
        self.held_for = 0.0
        self.depth: tuple[int, int] = (0, 0)

    def start(self, stack: Stack) -> None:
        self.breaker = Breaker(stack.client("dynamodb"), stack.outputs["BreakerTableName"], name=ORDERS)
        self.breaker.open("e2e")
        self.opened_at = datetime.now(UTC)

    def observe(self, stack: Stack) -> tuple[bool, str]:
        if self.phase == "opening":
            return self._opening(stack)
        if self.phase == "holding":
            return self._holding(stack)
        return self._closed(stack)

    def _opening(self, stack: Stack) -> tuple[bool, str]:
        # A run that checked the breaker before it opened may still be receiving: wait until a run
        # has been blocked, and (stepfunctions) no execution started before the open still runs.
        blocked = any(blocked and at > self.opened_at for at, blocked in stack.redrive_runs())
        earlier = stack.redrive_mode == "stepfunctions" and any(
            e["status"] == "RUNNING" and e["startDate"] < self.opened_at for e in stack.executions()
        )
        if blocked and not earlier:
            self.origin_ids = [f"{self.prefix}{i}" for i in range(self.count)]
            send_to_dead_letter_queue(stack, [(o, order(o)) for o in self.origin_ids])
            self.sent_at = datetime.now(UTC)
            self.depth = stack.queue_depths(ORDERS + "DeadLetterQueueUrl")
            self.phase = "holding"
        ended = sum(1 for at, _ in stack.redrive_runs() if at > self.opened_at)
        waited = (datetime.now(UTC) - self.opened_at).total_seconds()
        if ended == 0 and waited > self.cycles * self.params.backstop_seconds + 5:
            self.failed = True  # the backstop alone should have ended a run by now
        return False, (
            "breaker opened; waiting for a redrive run to be blocked before filling the DLQ "
            f"({ended} redrive runs ended in the {waited:.0f} s since, none blocked)"
            + self.redrive_broken(stack)
        )

    def _holding(self, stack: Stack) -> tuple[bool, str]:
        moved = [d for d in stack.redrive_decisions() if d.origin_id in self.origin_ids]
        self.blocked = sum(1 for at, blocked in stack.redrive_runs() if blocked and at > self.sent_at)
        self.held_for = (datetime.now(UTC) - self.sent_at).total_seconds()
        shown = (
            f"{self.count} in the DLQ held {self.held_for:.1f} s: {self.blocked} redrive runs blocked, "
            f"{len(moved)} re-driven"
        )
        if moved:
            self.failed = True
            return False, shown + " while the breaker was open"
        if self.held_for < self.hold_seconds or self.blocked < self.cycles:
            return False, shown
        present = origin_ids(stack.peek(ORDERS + "DeadLetterQueueUrl"))
        missing = [o for o in self.origin_ids if o not in present]
        depth = stack.queue_depths(ORDERS + "DeadLetterQueueUrl")
        if missing or depth[0] < self.depth[0]:
            self.failed = True
            return False, shown + f"; {len(missing)} gone from the DLQ, depth {self.depth[0]} → {depth[0]}"
        self.breaker.close()
        self.closed_at = time.monotonic()
        self.held = shown + f", DLQ depth {self.depth[0]} → {depth[0]}"
        self.phase = "closed"
        return False, self.held

    def _closed(self, stack: Stack) -> tuple[bool, str]:
        charges = stack.charges(self.prefix)
        after = time.monotonic() - self.closed_at
        self.failed = any(n > 1 for n in charges.values())
        ok = len(charges) == self.count and set(charges.values()) == {1}
        broken = "" if ok else self.redrive_broken(stack)
        return (
            ok,
            f"{self.held} → closed → {len(charges)} charged "
            f"(max {max(charges.values(), default=0)}x) in {after:.1f} s{broken}",
        )

    def finish(self, stack: Stack) -> None:
        if self.phase != "closed" and hasattr(self, "breaker"):
            self.breaker.close("closed by the breaker-open scenario at its end")


@dataclass(frozen=True)
class VelocityFigures:
    count: int
    seconds: float
    """From the first send to the last."""
    excess: float
    """max over sends of (sent so far - bound(t)); ≤ 0 is within the bound."""
    tightest: tuple[int, float, float]
    """(sent by then, t, bound(t)) where the bound was closest (or exceeded)."""
    window_burst: float
    """max over any interval [t_i, t_j] of (sends - R·(t_j - t_i)): the worst burst seen anywhere."""


def velocity(times: list[datetime], rate: float, burst: int = 10, slack: float = 0.0) -> VelocityFigures:
    """How close the sends come to at most ``rate·(t + slack) + burst`` by any time t after the first."""
    if not times:
        return VelocityFigures(0, 0.0, 0.0, (0, 0.0, float(burst)), 0.0)
    ordered = sorted(times)
    t = [(at - ordered[0]).total_seconds() for at in ordered]
    worst: tuple[float, tuple[int, float, float]] = (-math.inf, (0, 0.0, 0.0))
    for i, ti in enumerate(t):
        if i + 1 < len(t) and t[i + 1] == ti:
            continue  # the count by time ti includes every send at ti
        bound = rate * (ti + slack) + burst
        if i + 1 - bound > worst[0]:
            worst = (i + 1 - bound, (i + 1, round(ti, 2), round(bound, 1)))
    window = max(j - i + 1 - rate * (t[j] - t[i]) for i in range(len(t)) for j in range(i, len(t)))
    return VelocityFigures(len(t), round(t[-1], 2), round(worst[0], 1), worst[1], round(window, 1))


class Velocity(Scenario):
    """A full DLQ drains at most RedriveMaxPerSecond messages per second, plus one batch.

    The DLQ fills while a redrive run is already waiting on it — the common case, since the backstop
    starts a run every period whether or not anything waits (started here through the Lambda Invoke or
    StartExecution API, as the schedule does, so the timing is the same on every run). Sends are read
    from outside (see :meth:`Stack.redrive_sends`); by any time t after the first, at most
    ``R·(t + SLACK) + 10`` may have been sent: the redrive paces its receives. With the Lambda redriver
    each send's line carries its batch's receive time, which is what is timed (a send follows it by the
    batch's handling time, which a loaded machine stretches past any fixed slack); with the state
    machine, the Redrive task's send (SLACK covers the handling, a few tens of ms locally).
    """

    name = "velocity"
    count = 40
    burst = 10
    slack = 0.1
    primed_after = 1.0
    """Seconds between starting the redrive run and filling the DLQ (the run waits in its receive)."""
    timeout = 90.0
    patience = 30.0
    """Each new re-drive or charge grants this long again: a loaded machine re-drives slower."""

    def __init__(self, params: RedriveParams) -> None:
        super().__init__()
        self.rate = params.max_per_second
        self.expected = (
            f"a redrive run waits on the empty DLQ; {self.count} orders put straight into it → re-driven "
            f"at most {self.rate:g}/s (≤ R·t + {self.burst} by any time t) → each charged once"
        )
        self.figures = velocity([], self.rate, self.burst, self.slack)
        self.origin_ids: list[str] = []

    def start(self, stack: Stack) -> None:
        stack.start_redrive()
        self.primed = time.monotonic()

    def observe(self, stack: Stack) -> tuple[bool, str]:
        if not self.origin_ids:
            if time.monotonic() - self.primed < self.primed_after:
                return False, "a redrive run is started on the empty DLQ"
            self.origin_ids = [f"{self.prefix}{i}" for i in range(self.count)]
            send_to_dead_letter_queue(stack, [(o, order(o)) for o in self.origin_ids])
        wanted = set(self.origin_ids)
        first: dict[str, datetime] = {}
        for send in stack.redrive_sends():
            paced = send.received or send.at  # what the limit paces: the receive (lambda mode), else the send
            if send.origin_id in wanted and (send.origin_id not in first or paced < first[send.origin_id]):
                first[send.origin_id] = paced
        self.figures = f = velocity(list(first.values()), self.rate, self.burst, self.slack)
        charges = stack.charges(self.prefix)
        self.progress = (f.count, sum(charges.values()))
        n, at, bound = f.tightest
        shown = (
            f"{f.count} re-driven in {f.seconds:.1f} s; closest to the bound: {n} by t={at:.2f} s "
            f"(bound {bound:g}); worst burst in any window {f.window_burst:g}; "
            f"{len(charges)} charged (max {max(charges.values(), default=0)}x)"
        )
        complete = f.count == self.count and len(charges) == self.count and set(charges.values()) == {1}
        self.failed = (complete and f.excess > 0) or any(c > 1 for c in charges.values())
        if f.excess > 0:
            shown += f" — {f.excess:g} over the bound"
        return complete and f.excess <= 0, shown if complete else shown + self.redrive_broken(stack)


def send_to_dead_letter_queue(stack: Stack, orders: list[tuple[str, dict[str, Any]]]) -> None:
    """Put orders straight into the work DLQ, each with an envelope naming the work queue as source, as
    SQS's redrive policy moves them there (the DLQ's policy lets nobody send: staging stands in for SQS)."""
    sqs = stack.client("sqs", STAGING)
    seal = stack.seal()  # as sluice's consumer would have written them
    for start in range(0, len(orders), 10):
        entries = [
            {
                "Id": str(i),
                "MessageBody": json.dumps(body),
                "MessageAttributes": merge(
                    {},
                    Envelope(origin_id=origin_id, source=stack.outputs[ORDERS + "QueueArn"]),
                    body=json.dumps(body),
                    seal=seal,
                ),
            }
            for i, (origin_id, body) in enumerate(orders[start : start + 10])
        ]
        failed = sqs.send_message_batch(
            QueueUrl=stack.outputs[ORDERS + "DeadLetterQueueUrl"], Entries=entries
        ).get("Failed")
        if failed:
            raise RuntimeError(f"the DLQ refused {failed}")


def redrive_scenarios(params: Mapping[str, str]) -> list[Scenario]:
    """The redrive scenarios that may share a stack, with each other and the others, concurrently."""
    settings = RedriveParams.of(params)
    return [KeepsFailing(settings), RecoversAfterRedrive(settings)]


def exclusive_redrive_scenarios(params: Mapping[str, str]) -> list[list[Scenario]]:
    """Redrive scenarios that must each have the stack's redrive to themselves (one after another):
    Velocity times every send (another scenario's messages would share the pace), BreakerHolds stops
    every redrive of the stack."""
    settings = RedriveParams.of(params)
    return [[Velocity(settings)], [BreakerHolds(settings)]]
