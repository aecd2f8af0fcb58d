"""Cost per density for benchmarks/delay_cost.py: the state-machine path, the Scheduler path
(``DelayOrchestrator=Scheduler``) and the anchor (one EventBridge Scheduler schedule per message), at
1, 10, 100 and 1,000 messages per 60-s due-time bucket and for 1M messages spread evenly over 30 days.

Each row runs the real functions on in-process moto (``BatchDelay`` with its S3, Step Functions and
Scheduler clients; the rehydrator) and counts every call of each simulated function (botocore hooks,
:class:`delay_cost.Calls`); the delay queue and the target queue are answered in-process as in the rest
of delay_cost.py. Then every bucket is delivered: each execution walked through delay.asl.json
(:func:`delay_cost.run_execution`, transitions counted), or each schedule fired as the Scheduler fires
it (an SQS universal target: 1 Scheduler invocation + its one SQS call; the rehydrator target: 1
Scheduler invocation + 1 Lambda request + what the rehydrator does, counted; an SQS target carries one
message: ``sluice.delay.scheduler`` says why). Every message must be
delivered exactly once, S3 left empty, or the row reports the problem (and the script exits 1).

Rows ``N per bucket``: requests sent together, due 30 days out in consecutive buckets, N per bucket,
reaching batch-delay in event-source batches of 100 (the template's ``DelayBatchSize``). Rows ``1M over
30 days``: arrivals at 1M / 30 days (0.386 a second, seeded), due 30 days after each was sent, in
event-source batches of what arrives within the batching window; the fixed sweep (2,880 invocations per
30 days) is included there, since those rows are a whole 30 days' volume.
"""

from __future__ import annotations

import json
import math
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import boto3
from aws_lambda_powertools import Logger
from bench_env import REGION
from delay_cost import (
    ACCOUNT,
    BENCH_SEAL,
    BUCKET,
    MILLION,
    OPERATION_PRICE,
    USER_ATTRIBUTES,
    Calls,
    Clock,
    Durations,
    NullMetrics,
    Prices,
    Queues,
    delay_resources,
    message_body,
    run_execution,
    sqs_requests,
)
from moto import mock_aws

from sluice.delay.parker import BatchDelay
from sluice.delay.rehydrator import Rehydrator
from sluice.delay.schedule import send_delayed
from sluice.delay.scheduler import SQS_SEND_TARGET
from sluice.delay.settings import DelaySettings
from sluice_local.emulation.lambda_loader import LambdaContext
from sluice_local.emulation.sqs_events import to_lambda_record

Path = Literal["state-machine", "scheduler", "anchor"]
PATHS: tuple[Path, ...] = ("state-machine", "scheduler", "anchor")
START = datetime(2026, 11, 2, 0, 0, 0, tzinfo=UTC)
DELAY = timedelta(days=30)
BUCKET_SECONDS = 60
ESM_BATCH = 100  # the template's DelayBatchSize default
DENSITIES = (1, 10, 100, 1000)
SPREAD_RATE = MILLION / DELAY.total_seconds()  # 1M messages spread evenly over 30 days, per second
SPREAD_PER_BUCKET = SPREAD_RATE * BUCKET_SECONDS
SPREAD_WINDOWS = (1, 20)  # DelayBatchingWindowInSeconds: the template's default, and 20 s
SWEEPS_PER_30_DAYS = 2880
GROUP = "sluice-delays"
TARGET_EVERY_ROW = 1.00  # $ per million, orchestration, every density
TARGET_AT_100 = 0.05  # $ per million, orchestration, 100 per bucket
FUNCTIONS = ("producer", "batch-delay", "rehydrator", "scheduler-target")


@dataclass
class Density:
    """One row's traffic: (sent, due) seconds after START per message, and the event-source batching."""

    label: str
    per_bucket: float
    arrivals: list[tuple[float, float]]
    window: float  # seconds the event source mapping gathers after a batch's first message
    spread: bool = False


@dataclass
class Counts:
    messages: int
    calls: dict[str, Calls] = field(default_factory=dict)
    invocations: Counter[str] = field(default_factory=Counter)
    esm_calls: int = 0  # ReceiveMessage + DeleteMessageBatch of the event source mapping (model: 10 a call)
    transitions: int = 0
    executions: int = 0
    scheduler_invocations: int = 0
    schedule_sqs_requests: int = 0  # the SQS calls of schedules with an SQS universal target
    schedules_by_kind: Counter[str] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0


def densities(messages: int) -> list[Density]:
    """The rows, each of ``messages`` messages (a whole bucket at least)."""
    out: list[Density] = []
    due0 = DELAY.total_seconds()
    for d in DENSITIES:
        n = max(messages, d)
        arrivals = [(0.0, due0 + (i // d) * BUCKET_SECONDS + (i % d) * BUCKET_SECONDS / d) for i in range(n)]
        out.append(Density(f"{d:,} per bucket", float(d), arrivals, 0.0))
    rng = random.Random(20261128)
    sent, spread = 0.0, []
    for _ in range(messages):
        sent += rng.expovariate(SPREAD_RATE)
        spread.append((sent, sent + due0))
    for window in SPREAD_WINDOWS:
        label = f"1M over 30 days, window {window} s"
        out.append(Density(label, SPREAD_PER_BUCKET, spread, float(window), spread=True))
    # The sparsest stream: one request a minute, each alone in its batch-delay invocation and its bucket
    # (the rows above send each bucket's requests together).
    sparse = [(float(i * BUCKET_SECONDS), i * BUCKET_SECONDS + due0) for i in range(max(2, messages // 10))]
    out.append(Density("1 per bucket, sent 1 a minute", 1.0, sparse, 1.0))
    return out


def batches(density: Density) -> list[list[int]]:
    """Message indexes per batch-delay invocation: up to ESM_BATCH, what arrived within the window."""
    out: list[list[int]] = []
    first = 0.0
    for i, (sent, _) in enumerate(density.arrivals):
        if out and len(out[-1]) < ESM_BATCH and sent - first <= density.window:
            out[-1].append(i)
        else:
            out.append([i])
            first = sent
    return out


class DensityWorld:
    """moto's S3, Step Functions and Scheduler, the in-process queues and the counted functions."""

    def __init__(self, path: Path, counts: Counts) -> None:
        self.path, self.counts = path, counts
        harness = boto3.Session(region_name=REGION)
        self.sqs, self.s3 = harness.client("sqs"), harness.client("s3")
        self.sfn, self.scheduler = harness.client("stepfunctions"), harness.client("scheduler")
        made = delay_resources(harness)
        self.delay_url, self.target_url, poison = made.delay_url, made.target_url, made.poison_url
        self.machine, self.definition = made.machine, made.definition
        self.scheduler.create_schedule_group(Name=GROUP)
        env = {
            "SLUICE_DELAY_BUCKET": BUCKET,
            "SLUICE_DELAY_STATE_MACHINE_ARN": self.machine,
            "SLUICE_DELAY_TARGETS": self.target_url,
            "SLUICE_DELAY_BUCKET_SECONDS": str(BUCKET_SECONDS),
            "SLUICE_POISON_QUEUE_URL": poison,
            "SLUICE_ENVELOPE_KEY_SECRET": "bench-envelope-key",
        }
        if path == "scheduler":
            env |= {
                "SLUICE_DELAY_ORCHESTRATOR": "scheduler",
                "SLUICE_DELAY_SCHEDULE_GROUP": GROUP,
                "SLUICE_DELAY_SCHEDULER_ROLE_ARN": f"arn:aws:iam::{ACCOUNT}:role/delay-scheduler",
                "SLUICE_DELAY_REHYDRATOR_ARN": f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:rehydrator",
                "SLUICE_DELAY_SCHEDULE_DLQ_ARN": f"arn:aws:sqs:{REGION}:{ACCOUNT}:delay-schedule-dlq",
            }
        settings = DelaySettings.from_env(env)
        self.clock = Clock(START)
        self.queues = Queues(self.delay_url, self.target_url, self.clock)
        sessions = {name: boto3.Session(region_name=REGION) for name in FUNCTIONS}
        counts.calls = {name: Calls(session) for name, session in sessions.items()}
        sqs = {name: session.client("sqs") for name, session in sessions.items()}
        for client in sqs.values():
            self.queues.attach(client)
        self.producer = sqs["producer"]
        logger = Logger(service="sluice-bench", level="WARNING")
        batch_delay = sessions["batch-delay"]
        self.delayer = BatchDelay(
            settings=settings, sqs=sqs["batch-delay"], s3=batch_delay.client("s3"),
            sfn=batch_delay.client("stepfunctions"), logger=logger, metrics_sink=NullMetrics(),
            seal=BENCH_SEAL, clock=self.clock,
            scheduler=batch_delay.client("scheduler") if path == "scheduler" else None,
        )  # fmt: skip
        self.rehydrator = Rehydrator(
            settings=settings, sqs=sqs["rehydrator"], s3=sessions["rehydrator"].client("s3"), logger=logger,
            metrics_sink=NullMetrics(), seal=BENCH_SEAL, clock=self.clock,
        )  # fmt: skip

    def park(self, density: Density) -> None:
        arn = f"arn:aws:sqs:{REGION}:{ACCOUNT}:delay"
        for indexes in batches(density):
            for i in indexes:
                sent, due = density.arrivals[i]
                self.clock.now = START + timedelta(seconds=sent)
                send_delayed(
                    self.producer, delay_queue_url=self.delay_url, target=self.target_url,
                    body=message_body(i), deliver_at=START + timedelta(seconds=due),
                    attributes=USER_ATTRIBUTES, now=self.clock,
                )  # fmt: skip
            records = [to_lambda_record(m, arn, REGION) for m in self.queues.waiting]
            self.queues.waiting.clear()
            response = self.delayer.handle(
                {"Records": records}, LambdaContext(function_name="batch-delay", timeout_seconds=60)
            )
            self.counts.invocations["batch-delay"] += 1
            self.counts.esm_calls += 2 * math.ceil(len(records) / 10)
            if response["batchItemFailures"]:
                self.counts.problems.append(f"batch-delay failures: {response['batchItemFailures'][:3]}")

    def deliver(self) -> None:
        timeline: list[tuple[datetime, str, dict[str, Any]]] = []
        for page in self.sfn.get_paginator("list_executions").paginate(stateMachineArn=self.machine):
            for execution in page["executions"]:
                described = self.sfn.describe_execution(executionArn=execution["executionArn"])
                payload = json.loads(described["input"])
                wake = datetime.fromisoformat(payload["wake_at"].replace("Z", "+00:00"))
                timeline.append((wake, "execution", payload))
        for listing in self.scheduler.get_paginator("list_schedules").paginate(GroupName=GROUP):
            for listed in listing["Schedules"]:
                schedule = self.scheduler.get_schedule(GroupName=GROUP, Name=listed["Name"])
                at = datetime.fromisoformat(schedule["ScheduleExpression"][3:-1]).replace(tzinfo=UTC)
                timeline.append((at, "schedule", dict(schedule["Target"])))
        timeline.sort(key=lambda item: (item[0], item[1]))
        for when, kind, payload in timeline:
            self.clock.now = max(self.clock.now, when)
            if kind == "execution":
                entered, _ = run_execution(self.definition, payload, self._rehydrate, self.clock)
                self.counts.executions += 1
                self.counts.transitions += entered
            else:
                self._fire(payload)

    def _rehydrate(self, payload: dict[str, Any]) -> dict[str, Any]:
        self.counts.invocations["rehydrator"] += 1
        context = LambdaContext(function_name="rehydrator", timeout_seconds=300)
        return dict(self.rehydrator.handle(payload, context))

    def _fire(self, target: dict[str, Any]) -> None:
        """What the Scheduler does when a schedule fires (1 invocation): its target's one call."""
        self.counts.scheduler_invocations += 1
        payload = json.loads(target["Input"])
        if target["Arn"] == SQS_SEND_TARGET:
            self.counts.schedules_by_kind["sqs"] += 1
            self.counts.schedule_sqs_requests += sqs_requests(len(target["Input"].encode()))
            self.queues.delivered[payload["MessageBody"]] += 1
            self.queues.residuals.append(int(payload.get("DelaySeconds", 0)))
            return
        self.counts.schedules_by_kind["lambda"] += 1
        self._rehydrate(payload)

    def check(self) -> None:
        left = self.s3.list_objects_v2(Bucket=BUCKET).get("KeyCount", 0)
        times = Counter(self.queues.delivered.values())
        if left or len(self.queues.delivered) != self.counts.messages or set(times) != {1}:
            self.counts.problems.append(
                f"delivered {len(self.queues.delivered)} of {self.counts.messages} (times each: "
                f"{dict(times)}), {left} object(s) left in S3"
            )


def simulate(path: Path, density: Density) -> Counts:
    started = time.perf_counter()
    counts = Counts(len(density.arrivals))
    with mock_aws():
        world = DensityWorld(path, counts)
        world.park(density)
        world.deliver()
        world.check()
    counts.seconds = time.perf_counter() - started
    return counts


@dataclass(frozen=True)
class Priced:
    label: str
    per_bucket: float
    path: Path
    orchestration: float  # $ per 1M messages
    total: float  # incl. SQS
    detail: str


def price(
    path: Path, density: Density, counts: Counts | None, prices: Prices, durations: Durations
) -> Priced:
    scale = MILLION / len(density.arrivals)
    if counts is None:  # the anchor: 1 schedule per message, created by the producer (API calls: free)
        orchestration = MILLION * prices.scheduler
        total = orchestration + MILLION * prices.sqs
        how = "1 Scheduler invocation + 1 SendMessage a message"
        return Priced(density.label, density.per_bucket, path, orchestration, total, how)
    s3 = sum(
        n * prices.of(OPERATION_PRICE.get(op, "s3_put"))
        for calls in counts.calls.values()
        for op, n in calls.ops.items()
        if op.startswith("s3:")
    )
    lambda_invocations = counts.invocations["batch-delay"] + counts.invocations["rehydrator"]
    aws_calls = counts.calls["batch-delay"].total() + counts.calls["rehydrator"].total()
    gb_s = durations.gb_seconds(invocations=lambda_invocations, calls=aws_calls)
    orchestration = (
        s3
        + counts.transitions * prices.sfn_transition
        + counts.scheduler_invocations * prices.scheduler
        + lambda_invocations * prices.lambda_request
        + gb_s * prices.lambda_gb_s
    ) * scale
    if density.spread:  # the whole 30 days' volume: the fixed sweep belongs to it
        sweep = (
            prices.lambda_request
            + prices.s3_put
            + durations.gb_seconds(invocations=1, calls=1) * (prices.lambda_gb_s)
        )
        orchestration += SWEEPS_PER_30_DAYS * sweep
    sends = sum(calls.billed[op] for calls in counts.calls.values() for op in calls.billed)
    sqs = (sends + counts.esm_calls + counts.schedule_sqs_requests) * prices.sqs * scale
    s3_calls = sum(n for c in counts.calls.values() for op, n in c.ops.items() if op.startswith("s3:"))
    kinds = ", ".join(f"{n} {k}" for k, n in sorted(counts.schedules_by_kind.items()))
    detail = (
        f"N={counts.messages:,}: {counts.invocations['batch-delay']} batch-delay, "
        f"{counts.invocations['rehydrator']} rehydrator invocations; "
        + (f"{counts.executions} executions, {counts.transitions} transitions" if path == "state-machine"
           else f"{counts.scheduler_invocations} schedules ({kinds})")
        + f"; S3 {s3_calls} calls"
    )  # fmt: skip
    return Priced(density.label, density.per_bucket, path, orchestration, orchestration + sqs, detail)


def verdicts(row: Priced) -> str:
    if row.path == "anchor":
        return ""
    out = "PASS" if row.orchestration <= TARGET_EVERY_ROW else "ABOVE"
    if row.per_bucket == 100:  # the second target
        out += f", {'PASS' if row.orchestration <= TARGET_AT_100 else 'ABOVE'} <= ${TARGET_AT_100:.2f}"
    return out


def run_all(messages: int, prices: Prices, durations: Durations) -> tuple[list[Priced], list[str]]:
    """Every row priced, and the problems found (empty when every message was delivered once)."""
    rows: list[Priced] = []
    problems: list[str] = []
    for density in densities(messages):
        for path in PATHS:
            counts = None if path == "anchor" else simulate(path, density)
            if counts is not None:
                problems.extend(f"{density.label}, {path}: {p}" for p in counts.problems)
            rows.append(price(path, density, counts, prices, durations))
    return rows, problems


def report(rows: list[Priced]) -> None:
    print(
        f"\n=== per density: $ per 1M messages delayed 30 days, orchestration (S3, Step Functions, "
        f"Scheduler, Lambda\n    requests and GB-s of batch-delay and the rehydrator) and incl. SQS; "
        f"targets: <= ${TARGET_EVERY_ROW:.2f} every row,\n    <= ${TARGET_AT_100:.2f} at 100 per bucket"
    )
    print(f"  {'row':<32}{'path':<15}{'orchestration':>14}{'incl. SQS':>11}  verdict")
    for row in rows:
        print(
            f"  {row.label:<32}{row.path:<15}{'$' + format(row.orchestration, '.4f'):>14}"
            f"{'$' + format(row.total, '.4f'):>11}  {verdicts(row)}".rstrip()
        )
        print(f"      {row.detail}")
    for path in ("state-machine", "scheduler"):
        mine = [r for r in rows if r.path == path]
        above = [r for r in mine if r.orchestration > TARGET_EVERY_ROW]
        at_100 = [r.orchestration for r in mine if r.per_bucket == 100]  # the second target
        shown = "; ".join(f"{r.label} ${r.orchestration:.4f}" for r in above)
        print(
            f"  {path}: <= ${TARGET_EVERY_ROW:.2f} in {len(mine) - len(above)} of {len(mine)} rows"
            + (f" (ABOVE: {shown})" if above else "")
            + "".join(f"; <= ${TARGET_AT_100:.2f} at 100 per bucket: "
                      f"{'PASS' if v <= TARGET_AT_100 else 'ABOVE'} (${v:.4f})" for v in at_100)
        )  # fmt: skip


def to_json(rows: list[Priced], prices: Prices) -> dict[str, Any]:
    return {
        "prices_file": str(prices.source),
        "rows": [
            {
                "label": r.label,
                "messages_per_bucket": r.per_bucket,
                "path": r.path,
                "orchestration_usd_per_million": r.orchestration,
                "total_usd_per_million": r.total,
            }
            for r in rows
        ],
    }
