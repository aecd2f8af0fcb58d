"""Scenarios that drive a deployed sluice stack and check what really happened.

Each scenario sends its messages (ids unique per run, so scenarios can share one stack and run
concurrently), then is checked until it settles: observations come only from the outside — queues,
and the functions' structured logs (the example processor logs one ``charged`` line per real charge).
``make demo`` and the e2e tests run the same scenarios.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sluice import claimcheck
from sluice.delay import Parked, encode_object, send_delayed
from sluice.envelope import ATTRIBUTE, Envelope, merge


@dataclass
class Stack:
    """A deployed stack seen from outside: endpoint, outputs and the functions' log file."""

    endpoint: str
    outputs: dict[str, str]
    log_path: Path
    region: str = "us-east-1"
    _clients: dict[str, Any] = field(default_factory=dict)

    def client(self, service: str) -> Any:
        if service not in self._clients:
            from sluice_local.cloud import endpoint_client  # noqa: PLC0415 - cloud imports moto lazily

            self._clients[service] = endpoint_client(service, self.endpoint, self.region)
        return self._clients[service]

    def logs(self) -> list[dict[str, Any]]:
        if not self.log_path.exists():
            return []
        out = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except ValueError:
                    continue
        return out

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

    def start(self, stack: Stack) -> None:
        raise NotImplementedError

    def observe(self, stack: Stack) -> tuple[bool, str]:
        """(settled and as expected, what is seen now)."""
        raise NotImplementedError

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


class KeepsFailing(Scenario):
    name = "dead-letter"
    timeout = 90.0

    def __init__(self, max_receive_count: int) -> None:
        super().__init__()
        self.max_receive_count = max_receive_count
        self.expected = f"payload never appears → WorkDeadLetterQueue after {max_receive_count} receives"

    def start(self, stack: Stack) -> None:
        bucket = stack.outputs["ClaimCheckBucketName"]
        key = f"{stack.outputs.get('ClaimCheckPrefix', 'claim-check/')}{self.prefix}lost"
        self.message_id = self.send(
            stack, json.dumps({"__type": "CLAIM_CHECK", "s3_bucket": bucket, "s3_key": key})
        )

    def observe(self, stack: Stack) -> tuple[bool, str]:
        dead = [m for m in stack.peek("WorkDeadLetterQueueUrl") if m["MessageId"] == self.message_id]
        receives = int(dead[0]["Attributes"].get("ApproximateReceiveCount", 0)) if dead else 0
        failures = sum(
            1
            for e in stack.logs()
            if e.get("message") == "record failed; will be retried" and e.get("message_id") == self.message_id
        )
        ok = bool(dead) and failures == self.max_receive_count
        where = "in WorkDeadLetterQueue" if dead else "not in WorkDeadLetterQueue yet"
        return ok, f"{failures} failed receives, {where}" + (f" (receive count {receives})" if dead else "")


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


def delay_scenarios(threshold: float) -> list[Scenario]:
    return [
        Delayed("delay-direct", max(1.0, threshold / 2), route="within the direct-send threshold"),
        Delayed("delay-parked", threshold * 2 + 2, route="parked in S3, woken by the state machine"),
        SweptBucket(),
    ]


def consumer_scenarios(max_receive_count: int) -> list[Scenario]:
    return [
        Normal(),
        Duplicates(),
        Poison(),
        TransientThenSuccess(),
        KeepsFailing(max_receive_count),
        LargePayload(),
    ]


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
        scenario.start(stack)
    while any(r is None for r in results):
        for i, scenario in enumerate(todo):
            if results[i] is not None:
                continue
            ok, seen = scenario.observe(stack)
            last[i] = seen
            elapsed = time.monotonic() - scenario.started
            if ok or elapsed > scenario.timeout:
                results[i] = Outcome(scenario.name, scenario.expected, seen, ok, round(elapsed, 1))
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
