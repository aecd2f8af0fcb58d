"""Scenarios that drive a deployed sluice stack and check what really happened.

Each scenario sends its messages (ids unique per run, so scenarios can share one stack and run
concurrently), then is checked until it settles: observations come only from the outside — queues,
and the functions' structured logs (the example processor logs one ``charged`` line per real charge).
``make demo`` and the e2e tests run the same scenarios.

The redrive scenarios read what the redrive did from the outside too, in either ``RedriveMode``: the
redriver's log lines (``lambda``), or the plan function's log lines and the redrive state machine's
execution history (``stepfunctions``) — see :meth:`Stack.redrive_decisions` and
:meth:`Stack.redrive_sends`.
"""

from __future__ import annotations

import json
import math
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sluice import claimcheck
from sluice.delay.schedule import Parked, encode_object, send_delayed
from sluice.envelope import ATTRIBUTE, Envelope, merge
from sluice.redrive.breaker import Breaker
from sluice_local.emulation import rate_seconds


@dataclass
class Stack:
    """A deployed stack seen from outside: endpoint, outputs and the functions' log file."""

    endpoint: str
    outputs: dict[str, str]
    log_path: Path
    region: str = "us-east-1"
    _clients: dict[str, Any] = field(default_factory=dict)
    _log_entries: list[dict[str, Any]] = field(default_factory=list)
    _log_offset: int = 0
    _log_partial: bytes = b""
    _finished_sends: dict[str, list[Redrive]] = field(default_factory=dict)
    _failures: dict[str, tuple[str, str]] = field(default_factory=dict)

    def client(self, service: str) -> Any:
        if service not in self._clients:
            from sluice_local.cloud import endpoint_client  # noqa: PLC0415 - cloud imports moto lazily

            self._clients[service] = endpoint_client(service, self.endpoint, self.region)
        return self._clients[service]

    def logs(self) -> list[dict[str, Any]]:
        """Every JSON log line so far (read incrementally: only what was appended since the last call)."""
        try:
            size = self.log_path.stat().st_size
        except FileNotFoundError:
            return self._log_entries
        if size < self._log_offset:  # a new file: start over
            self._log_entries, self._log_offset, self._log_partial = [], 0, b""
        with self.log_path.open("rb") as f:
            f.seek(self._log_offset)
            chunk = f.read()
        self._log_offset += len(chunk)
        *lines, self._log_partial = (self._log_partial + chunk).split(b"\n")
        for raw in lines:
            line = raw.decode("utf-8", errors="replace")
            if line.startswith("{"):
                try:
                    self._log_entries.append(json.loads(line))
                except ValueError:
                    continue
        return self._log_entries

    def charges(self, prefix: str) -> Counter[str]:
        return Counter(
            str(e.get("order_id"))
            for e in self.logs()
            if e.get("message") == "charged" and str(e.get("order_id", "")).startswith(prefix)
        )

    def peek(self, output: str) -> list[dict[str, Any]]:
        """Messages on a queue, looked at without taking them (visibility 0)."""
        sqs = self.client("sqs")
        seen: dict[str, dict[str, Any]] = {}
        for _ in range(3):
            for m in sqs.receive_message(
                QueueUrl=self.outputs[output],
                MaxNumberOfMessages=10,
                VisibilityTimeout=0,
                MessageAttributeNames=["All"],
                MessageSystemAttributeNames=["All"],
            ).get("Messages", []):
                seen[m["MessageId"]] = m
        return list(seen.values())

    @property
    def redrive_mode(self) -> str:
        return self.outputs.get("RedriveMode", "lambda")

    def redrive_decisions(self) -> list[Redrive]:
        """What the redrive decided per dead-lettered message, from its logs (``at`` = when decided).

        lambda mode: the redriver's "message re-driven" / "message isolated to the poison queue";
        stepfunctions mode: the Plan function's "redrive planned".
        """
        names = (
            {"redrive planned"}
            if self.redrive_mode == "stepfunctions"
            else {"message re-driven", "message isolated to the poison queue"}
        )
        out = []
        for e in self.logs():
            if e.get("message") in names and e.get("origin_id") and e.get("attempt") is not None:
                at = _logged_at(e)
                if at is not None:
                    out.append(
                        Redrive(
                            str(e["origin_id"]),
                            int(e["attempt"]),
                            str(e.get("action")),
                            int(e.get("delay_seconds") or 0),
                            at,
                        )
                    )
        return out

    def redrive_sends(self) -> list[Redrive]:
        """Messages sent back to their source queue, with the time of the send.

        lambda mode: the redriver logs "message re-driven" right after its SendMessageBatch;
        stepfunctions mode: the Redrive task (``sqs:sendMessage``) of the redrive state machine's
        executions, from their history (the Plan step's log is earlier by the whole backoff).
        """
        if self.redrive_mode != "stepfunctions":
            return [d for d in self.redrive_decisions() if d.action in {"redrive", "delay"}]
        out: list[Redrive] = []
        for execution in self.executions():
            arn = execution["executionArn"]
            if arn in self._finished_sends:
                out += self._finished_sends[arn]
                continue
            sends = _sends_in(self._history(arn))
            if execution["status"] != "RUNNING":
                self._finished_sends[arn] = sends
            out += sends
        return out

    def redrive_runs(self) -> list[tuple[datetime, bool]]:
        """(when, stopped by the open circuit breaker) for every redrive run that has ended.

        lambda mode: the redriver's "redrive run finished" (stopped = breaker_open); stepfunctions
        mode: every finished execution, blocked when it FAILED with ``CircuitBreakerOpen``.
        """
        if self.redrive_mode != "stepfunctions":
            return [
                (at, e.get("stopped") == "breaker_open")
                for e in self.logs()
                if e.get("message") == "redrive run finished" and (at := _logged_at(e)) is not None
            ]
        return [
            (execution["stopDate"], self._failure(execution)[0] == "CircuitBreakerOpen")
            for execution in self.executions()
            if execution["status"] != "RUNNING"
        ]

    def redrive_failures(self, since: datetime) -> list[str]:
        """stepfunctions mode: why executions started since ``since`` failed, other than by the breaker
        (a healthy redrive has none); lambda mode: always empty."""
        if self.redrive_mode != "stepfunctions":
            return []
        return [
            f"{execution['executionArn'].rsplit(':', 1)[-1]}: {error}: {cause[:240]}"
            for execution in self.executions()
            if execution["startDate"] >= since and execution["status"] == "FAILED"
            for error, cause in [self._failure(execution)]
            if error != "CircuitBreakerOpen"
        ]

    def _failure(self, execution: dict[str, Any]) -> tuple[str, str]:
        """(error, cause) of a finished execution; ("", "") unless it FAILED."""
        arn = execution["executionArn"]
        if arn not in self._failures:
            if execution["status"] != "FAILED":
                return "", ""
            answer = self.client("stepfunctions").describe_execution(executionArn=arn)
            self._failures[arn] = (str(answer.get("error") or ""), str(answer.get("cause") or ""))
        return self._failures[arn]

    def start_redrive(self) -> None:
        """Start a redrive run now, as the backstop schedule does (Lambda Invoke / StartExecution API)."""
        if self.redrive_mode == "stepfunctions":
            self.client("stepfunctions").start_execution(
                stateMachineArn=self.outputs["RedriveStateMachineArn"],
                name=f"manual-{uuid.uuid4()}",
                input='{"manual": true}',
            )
        else:
            self.client("lambda").invoke(
                FunctionName=self.outputs["RedriverFunctionName"],
                InvocationType="Event",
                Payload=b'{"manual": true}',
            )

    def executions(self) -> list[dict[str, Any]]:
        """The redrive state machine's executions (stepfunctions mode), oldest first."""
        sfn = self.client("stepfunctions")
        out: list[dict[str, Any]] = []
        kwargs: dict[str, Any] = {
            "stateMachineArn": self.outputs["RedriveStateMachineArn"],
            "maxResults": 1000,
        }
        while True:
            page = sfn.list_executions(**kwargs)
            out += page.get("executions", [])
            if not page.get("nextToken"):
                break
            kwargs["nextToken"] = page["nextToken"]
        return sorted(out, key=lambda e: e["startDate"])

    def _history(self, execution_arn: str) -> list[dict[str, Any]]:
        sfn = self.client("stepfunctions")
        events: list[dict[str, Any]] = []
        kwargs: dict[str, Any] = {"executionArn": execution_arn, "maxResults": 1000}
        while True:
            page = sfn.get_execution_history(**kwargs)
            events += page.get("events", [])
            if not page.get("nextToken"):
                return events
            kwargs["nextToken"] = page["nextToken"]

    def queue_depths(self, output: str) -> tuple[int, int]:
        attrs = self.client("sqs").get_queue_attributes(
            QueueUrl=self.outputs[output],
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        return int(attrs["ApproximateNumberOfMessages"]), int(attrs["ApproximateNumberOfMessagesNotVisible"])


@dataclass
class Outcome:
    name: str
    expected: str
    observed: str
    ok: bool
    seconds: float = 0.0


@dataclass(frozen=True)
class Redrive:
    """One redrive decision or send, seen from outside."""

    origin_id: str
    attempt: int
    action: str
    """redrive (to the source, DelaySeconds or after a wait), delay (long-delay pipeline) or poison."""
    delay_seconds: int
    at: datetime


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


def order(order_id: str, **extra: Any) -> dict[str, Any]:
    return {
        "order_id": order_id,
        "customer_id": "cust-demo",
        "amount_cents": 1999,
        "currency": "EUR",
        **extra,
    }


class Scenario:
    name = "scenario"
    expected = ""
    timeout = 60.0

    def __init__(self) -> None:
        self.run_id = uuid.uuid4().hex[:8]
        self.prefix = f"{self.name}-{self.run_id}-"
        self.started = 0.0
        self.started_at = datetime.now(UTC)
        self.failed = False
        """Set by ``observe`` when the outcome can no longer be as expected: stop waiting."""

    def start(self, stack: Stack) -> None:
        raise NotImplementedError

    def observe(self, stack: Stack) -> tuple[bool, str]:
        """(settled and as expected, what is seen now)."""
        raise NotImplementedError

    def finish(self, stack: Stack) -> None:
        """Called once the scenario has settled or timed out (undo what must not outlive it)."""

    def redrive_broken(self, stack: Stack) -> str:
        """Failed redrive executions since this scenario started (stepfunctions mode), as text; marks the
        scenario failed, since its messages may never move."""
        failures = stack.redrive_failures(self.started_at)
        if not failures:
            return ""
        self.failed = True
        more = f" (+{len(failures) - 1} more)" if len(failures) > 1 else ""
        return f"; redrive execution FAILED: {failures[0]}{more}"

    def send(self, stack: Stack, body: Any, **kwargs: Any) -> str:
        text = body if isinstance(body, str) else json.dumps(body)
        response = stack.client("sqs").send_message(
            QueueUrl=stack.outputs["WorkQueueUrl"], MessageBody=text, **kwargs
        )
        return str(response["MessageId"])


class Normal(Scenario):
    name = "normal"
    count = 10
    expected = f"{count} orders each charged exactly once"

    def start(self, stack: Stack) -> None:
        for i in range(self.count):
            self.send(stack, order(f"{self.prefix}{i}"))

    def observe(self, stack: Stack) -> tuple[bool, str]:
        charges = stack.charges(self.prefix)
        ok = len(charges) == self.count and set(charges.values()) == {1}
        return ok, f"{len(charges)} orders charged, max {max(charges.values(), default=0)} time(s) each"


class Duplicates(Scenario):
    name = "duplicates"
    count = 5
    expected = f"{count} orders sent twice each → charged once each, {count} duplicates skipped"

    def start(self, stack: Stack) -> None:
        self.sent: set[str] = set()
        for _ in range(2):
            for i in range(self.count):
                self.sent.add(self.send(stack, order(f"{self.prefix}{i}")))

    def observe(self, stack: Stack) -> tuple[bool, str]:
        charges = stack.charges(self.prefix)
        skipped = sum(
            1
            for e in stack.logs()
            if e.get("message") == "duplicate skipped" and e.get("message_id") in self.sent
        )
        ok = len(charges) == self.count and set(charges.values()) == {1} and skipped == self.count
        return (
            ok,
            f"{len(charges)} orders charged (max {max(charges.values(), default=0)}x), "
            f"{skipped} duplicates skipped",
        )


class Poison(Scenario):
    name = "poison"
    expected = "bad JSON and an over-limit order → PoisonPillQueue with reasons, never charged"

    def start(self, stack: Stack) -> None:
        self.bad_json = self.send(stack, '{"order_id": "' + self.prefix + 'bad", "amount_cents": 12')
        self.over_limit = self.send(stack, order(f"{self.prefix}big", amount_cents=50_000_000))

    def observe(self, stack: Stack) -> tuple[bool, str]:
        mine = {}
        for m in stack.peek("PoisonPillQueueUrl"):
            env = _envelope(m)
            if env is not None and env.origin_id in {self.bad_json, self.over_limit}:
                mine[env.origin_id] = env
        charged = stack.charges(self.prefix)
        reasons = sorted((e.last_error.type if e.last_error else "?") for e in mine.values())
        ok = len(mine) == 2 and not charged and all(e.last_error and e.attempts == 1 for e in mine.values())
        where = "" if mine else _elsewhere(stack, {self.bad_json, self.over_limit})
        return (
            ok,
            f"{len(mine)} in PoisonPillQueue ({', '.join(reasons) or '-'}), {len(charged)} charged{where}",
        )


class TransientThenSuccess(Scenario):
    name = "transient"
    expected = "payload not in S3 yet (NoSuchKey) → retried with backoff → charged once after it appears"

    def start(self, stack: Stack) -> None:
        self.key = f"{stack.outputs.get('ClaimCheckPrefix', 'claim-check/')}{self.prefix}late"
        bucket = stack.outputs["ClaimCheckBucketName"]
        self.message_id = self.send(
            stack, json.dumps({"__type": "CLAIM_CHECK", "s3_bucket": bucket, "s3_key": self.key})
        )
        self.uploaded = False

    def observe(self, stack: Stack) -> tuple[bool, str]:
        retries = [
            e
            for e in stack.logs()
            if e.get("message") == "record failed; will be retried" and e.get("message_id") == self.message_id
        ]
        if retries and not self.uploaded:  # the object appears only after the consumer has failed once
            body = json.dumps(order(f"{self.prefix}late")).encode()
            stack.client("s3").put_object(
                Bucket=stack.outputs["ClaimCheckBucketName"], Key=self.key, Body=body
            )
            self.uploaded = True
        charges = stack.charges(self.prefix)
        delays = [e.get("retry_in_seconds") for e in retries]
        ok = self.uploaded and sum(charges.values()) == 1 and len(retries) >= 1
        return (
            ok,
            f"{len(retries)} transient failure(s) (backoff {delays} s), charged {sum(charges.values())}x",
        )


class LargePayload(Scenario):
    name = "claim-check"
    size = 300_000
    expected = f"{size // 1000} KB order offloaded to S3 by the producer → resolved and charged once"

    def start(self, stack: Stack) -> None:
        body = json.dumps(order(f"{self.prefix}large", note="x" * self.size))
        claimcheck.send(
            stack.client("sqs"),
            stack.client("s3"),
            queue_url=stack.outputs["WorkQueueUrl"],
            body=body,
            bucket=stack.outputs["ClaimCheckBucketName"],
            prefix=stack.outputs.get("ClaimCheckPrefix", "claim-check/"),
            threshold=int(stack.outputs.get("ClaimCheckThresholdBytes", claimcheck.DEFAULT_THRESHOLD)),
        )

    def observe(self, stack: Stack) -> tuple[bool, str]:
        charges = stack.charges(self.prefix)
        return sum(charges.values()) == 1, f"charged {sum(charges.values())}x"


# Delivery lag accepted around the due time (seconds early, seconds late). Typical locally: ±0.5 s
# (residual DelaySeconds rounded to the nearest second, 0.2 s polling); the late side allows for a
# loaded 2-core machine. The measured lags are printed either way.
LAG_TOLERANCE = (1.0, 2.0)


def _logged_at(entry: dict[str, Any]) -> datetime | None:
    try:
        return datetime.strptime(str(entry.get("timestamp")), "%Y-%m-%d %H:%M:%S,%f%z")
    except ValueError:
        return None


class Delayed(Scenario):
    """Orders delayed through the delay queue arrive at the work queue (and are charged) on time."""

    timeout = 60.0

    def __init__(self, name: str, seconds: float, count: int = 3, *, route: str) -> None:
        self.name = name
        super().__init__()
        self.seconds = seconds
        self.count = count
        self.expected = (
            f"{count} orders due in {seconds:g} s ({route}) → each charged once, within ~1 s of due"
        )

    def start(self, stack: Stack) -> None:
        self.due: dict[str, datetime] = {}
        for i in range(self.count):
            order_id = f"{self.prefix}{i}"
            due = datetime.now(UTC) + timedelta(seconds=self.seconds)
            self.due[order_id] = due
            send_delayed(
                stack.client("sqs"),
                delay_queue_url=stack.outputs["DelayQueueUrl"],
                target=stack.outputs["WorkQueueUrl"],
                body=json.dumps(order(order_id)),
                deliver_at=due,
            )

    def observe(self, stack: Stack) -> tuple[bool, str]:
        charged = [
            e
            for e in stack.logs()
            if e.get("message") == "charged" and str(e.get("order_id", "")) in self.due
        ]
        counts = Counter(str(e["order_id"]) for e in charged)
        lags = []
        for entry in charged:
            at = _logged_at(entry)
            if at is not None:
                lags.append((at - self.due[str(entry["order_id"])]).total_seconds())
        self.lags = lags
        ok = (
            len(counts) == self.count
            and set(counts.values()) == {1}
            and all(-LAG_TOLERANCE[0] <= lag <= LAG_TOLERANCE[1] for lag in lags)
        )
        shown = ", ".join(f"{lag:+.2f}" for lag in sorted(lags)) or "-"
        return ok, f"{len(counts)} charged (max {max(counts.values(), default=0)}x), lag vs due (s): {shown}"


class SweptBucket(Scenario):
    """A bucket whose execution never ran (failed, or never started) is delivered by the sweep."""

    name = "delay-sweep"
    expected = "an object parked in a past bucket with no execution → delivered by the scheduled sweep"
    timeout = 60.0

    def start(self, stack: Stack) -> None:
        now = datetime.now(UTC)
        bucket = int(now.timestamp()) - 600
        bucket -= bucket % 2
        self.order_id = f"{self.prefix}stranded"
        body = json.dumps(order(self.order_id))
        envelope = Envelope(origin_id=self.order_id, deliver_at=now, target=stack.outputs["WorkQueueUrl"])
        parked = Parked(self.order_id, stack.outputs["WorkQueueUrl"], now, body, merge({}, envelope))
        stack.client("s3").put_object(
            Bucket=stack.outputs["DelayBucketName"],
            Key=f"delayed/{bucket}/stranded.json",
            Body=encode_object(bucket, [parked]),
        )

    def observe(self, stack: Stack) -> tuple[bool, str]:
        charged = stack.charges(self.order_id)
        swept = sum(int(e.get("swept", 0)) for e in stack.logs() if e.get("message") == "rehydration done")
        return sum(
            charged.values()
        ) == 1, f"charged {sum(charged.values())}x after the sweep (swept objects: {swept})"


# --- DLQ redrive ---------------------------------------------------------------------------------

DEAD_LETTERED = "record dead-lettered with its last error"
CONSUMER_FAILURES = {"record failed; will be retried", DEAD_LETTERED}


class _ClaimCheckMissing(Scenario):
    """A message whose claim-check object is not in S3: the consumer fails transiently on it."""

    tenant_attribute = "tenant"

    def start(self, stack: Stack) -> None:
        self.key = f"{stack.outputs.get('ClaimCheckPrefix', 'claim-check/')}{self.prefix}payload"
        self.tenant = f"acme-{self.run_id}"
        pointer = {
            "__type": "CLAIM_CHECK",
            "s3_bucket": stack.outputs["ClaimCheckBucketName"],
            "s3_key": self.key,
        }
        self.message_id = self.send(
            stack,
            json.dumps(pointer),
            MessageAttributes={self.tenant_attribute: {"DataType": "String", "StringValue": self.tenant}},
        )

    def consumer_failures(self, stack: Stack) -> list[dict[str, Any]]:
        """The consumer's failure lines for this message, in every delivery cycle (they name the key)."""
        return [
            e
            for e in stack.logs()
            if e.get("message") in CONSUMER_FAILURES and self.key in str(e.get("error", ""))
        ]

    def dead_letters(self, stack: Stack) -> list[dict[str, Any]]:
        return [e for e in self.consumer_failures(stack) if e.get("message") == DEAD_LETTERED]

    def decisions(self, stack: Stack) -> list[Redrive]:
        return sorted(
            (d for d in stack.redrive_decisions() if d.origin_id == self.message_id), key=lambda d: d.at
        )

    def poisoned(self, stack: Stack) -> tuple[dict[str, Any], Envelope] | None:
        for message in stack.peek("PoisonPillQueueUrl"):
            env = _envelope(message)
            if env is not None and env.origin_id == self.message_id:
                return message, env
        return None


class KeepsFailing(_ClaimCheckMissing):
    """Dead-lettered with its error, re-driven with growing backoff, then isolated with full forensics."""

    name = "keeps-failing"
    timeout = 90.0

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

    def observe(self, stack: Stack) -> tuple[bool, str]:
        p = self.params
        failures = self.consumer_failures(stack)
        dead = [e for e in failures if e.get("message") == DEAD_LETTERED]
        decided = self.decisions(stack)
        self.redrives = [d for d in decided if d.action in {"redrive", "delay"}]
        # Actual delay: from the redrive decision to the consumer's next receive of the message.
        failed_at = sorted(at for e in failures if (at := _logged_at(e)) is not None)
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
            if error.type != "TransientError" or self.key not in error.message:
                problems.append(
                    f"last_error {error.type}: {error.message!r} is not the consumer's NoSuchKey error"
                )
            if error.receives != p.max_receive_count:
                problems.append(f"last_error receives {error.receives}, expected {p.max_receive_count}")
            if env.first_failure is not None and env.first_failure > error.at:
                problems.append("first_failure is after last_error.at")
        if env.source != stack.outputs["WorkQueueArn"]:
            problems.append(f"source {env.source}, expected the work queue {stack.outputs['WorkQueueArn']}")
        if self._tenant() != self.tenant:
            problems.append(
                f"user attribute {self.tenant_attribute}={self._tenant()!r}, sent {self.tenant!r}"
            )
        return problems


class RecoversAfterRedrive(_ClaimCheckMissing):
    """Downstream recovers while the message sits in the DLQ: the redrive delivers it, once."""

    name = "recovers-after-redrive"
    timeout = 60.0

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
        redrives = [d for d in self.decisions(stack) if d.action in {"redrive", "delay"}]
        charged = sum(stack.charges(self.prefix).values())
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
        self.breaker = Breaker(stack.client("dynamodb"), stack.outputs["BreakerTableName"])
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
            self.depth = stack.queue_depths("WorkDeadLetterQueueUrl")
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
        present = {(_envelope(m) or Envelope()).origin_id for m in stack.peek("WorkDeadLetterQueueUrl")}
        missing = [o for o in self.origin_ids if o not in present]
        depth = stack.queue_depths("WorkDeadLetterQueueUrl")
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
    ``R·(t + SLACK) + 10`` may have been sent: the redrive paces its receives, and a send is logged a
    batch's handling time after its receive (SLACK covers that, a few tens of ms locally).
    """

    name = "velocity"
    count = 40
    burst = 10
    slack = 0.1
    primed_after = 1.0
    """Seconds between starting the redrive run and filling the DLQ (the run waits in its receive)."""
    timeout = 90.0

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
            if send.origin_id in wanted and (send.origin_id not in first or send.at < first[send.origin_id]):
                first[send.origin_id] = send.at
        self.figures = f = velocity(list(first.values()), self.rate, self.burst, self.slack)
        charges = stack.charges(self.prefix)
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
    """Put orders straight into the work DLQ, each with an envelope naming the work queue as source."""
    sqs = stack.client("sqs")
    for start in range(0, len(orders), 10):
        entries = [
            {
                "Id": str(i),
                "MessageBody": json.dumps(body),
                "MessageAttributes": merge(
                    {}, Envelope(origin_id=origin_id, source=stack.outputs["WorkQueueArn"])
                ),
            }
            for i, (origin_id, body) in enumerate(orders[start : start + 10])
        ]
        failed = sqs.send_message_batch(
            QueueUrl=stack.outputs["WorkDeadLetterQueueUrl"], Entries=entries
        ).get("Failed")
        if failed:
            raise RuntimeError(f"the DLQ refused {failed}")


def _sends_in(events: list[dict[str, Any]]) -> list[Redrive]:
    """The Redrive task's ``sqs:sendMessage`` calls in one execution history: envelope and time."""
    by_id = {e["id"]: e for e in events}
    out = []
    for e in events:
        if e["type"] != "TaskSucceeded" or e["taskSucceededEventDetails"].get("resource") != "sendMessage":
            continue
        started = by_id.get(e.get("previousEventId"))
        scheduled = by_id.get(started.get("previousEventId")) if started else None
        if not scheduled or scheduled["type"] != "TaskScheduled":
            continue
        params = json.loads(scheduled["taskScheduledEventDetails"].get("parameters") or "{}")
        raw = (params.get("MessageAttributes") or {}).get(ATTRIBUTE, {}).get("StringValue")
        entered = by_id.get(scheduled.get("previousEventId"))
        state = json.loads((entered or {}).get("stateEnteredEventDetails", {}).get("input") or "{}")
        try:
            env = Envelope.model_validate_json(raw) if raw else None
        except ValueError:
            env = None
        if env is None or env.origin_id is None:
            continue
        delay = int((state.get("plan") or {}).get("delaySeconds") or 0)
        out.append(Redrive(env.origin_id, env.attempts, "redrive", delay, e["timestamp"]))
    return out


def delay_scenarios(threshold: float) -> list[Scenario]:
    return [
        Delayed("delay-direct", max(1.0, threshold / 2), route="within the direct-send threshold"),
        Delayed("delay-parked", threshold * 2 + 2, route="parked in S3, woken by the state machine"),
        SweptBucket(),
    ]


def consumer_scenarios() -> list[Scenario]:
    return [
        Normal(),
        Duplicates(),
        Poison(),
        TransientThenSuccess(),
        LargePayload(),
    ]


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


def run(
    stack: Stack,
    scenarios: Iterable[Scenario],
    *,
    on_tick: Callable[[list[Outcome | None]], None] | None = None,
    poll: float = 0.5,
) -> list[Outcome]:
    """Start every scenario, then observe until each settles as expected or times out."""
    todo = list(scenarios)
    results: list[Outcome | None] = [None] * len(todo)
    last: list[str] = [""] * len(todo)
    for scenario in todo:
        scenario.started = time.monotonic()
        scenario.started_at = datetime.now(UTC)
        scenario.start(stack)
    while any(r is None for r in results):
        for i, scenario in enumerate(todo):
            if results[i] is not None:
                continue
            ok, seen = scenario.observe(stack)
            last[i] = seen
            elapsed = time.monotonic() - scenario.started
            if ok or scenario.failed or elapsed > scenario.timeout:
                results[i] = Outcome(scenario.name, scenario.expected, seen, ok, round(elapsed, 1))
                scenario.finish(stack)
        if on_tick:
            on_tick(results)
        if any(r is None for r in results):
            time.sleep(poll)
    return [r for r in results if r is not None]


def _envelope(message: dict[str, Any]) -> Envelope | None:
    raw = (message.get("MessageAttributes") or {}).get(ATTRIBUTE, {}).get("StringValue")
    if not raw:
        return None
    try:
        return Envelope.model_validate_json(raw)
    except ValueError:
        return None


def _elsewhere(stack: Stack, origin_ids: set[str]) -> str:
    """Where poison messages went instead (a wiring error shows up here)."""
    found = []
    # Never peek the work queue: a receive there would count against the messages' maxReceiveCount.
    for output in ("WorkDeadLetterQueueUrl",):
        if output in stack.outputs and any(
            (_envelope(m) or Envelope()).origin_id in origin_ids for m in stack.peek(output)
        ):
            found.append(output.removesuffix("Url"))
    return f"; found instead in {', '.join(found)}" if found else ""
