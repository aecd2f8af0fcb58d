"""Cost of a 30-day delay: sluice's due-time buckets against one execution per batch and one schedule
per message, from API calls counted on in-process moto and the unit prices of the shared price table.

sluice, counted: N messages are produced with ``sluice.delay.send_delayed``, due 30 days out,
arriving at random (uniform, seeded) over one hour of simulated producer time (an injected clock), so
they fall into 60 buckets of 60 s. They reach ``BatchDelay.handle`` in Lambda SQS events of the
batch size (10, 100), as the event source mapping would deliver them. The clock then runs through
the 30 days: each bucket execution the batch-delay function started is walked through
statemachines/delay.asl.json as Step Functions would (Wait until ``wake_at``, the rehydrator Lambda
task with ``{bucket, prefix}``, the ``more`` Choice, Succeed), counting every state entered; the
sweep schedule (every 15 min, 2,880 invocations in 30 days) runs in between. Every AWS call of each
simulated function is counted with a botocore ``provide-client-params`` handler on its own session.
A second run with N/4 messages in the same 60 buckets separates what grows with messages from what
grows with buckets; "per 1M messages" extrapolates each row linearly through the two runs (1M
messages arriving in the same hour).

Not counted by calls, modelled and labelled so: the event source mapping's ReceiveMessage and
DeleteMessageBatch on the delay queue (at most 10 messages per call), Lambda GB-seconds (an assumed
duration per invocation and per AWS call), and the two alternatives: (a) the reference article's
design, one Step Functions execution per event-source batch, and (b) one EventBridge Scheduler
schedule per message.

    .venv/bin/python benchmarks/delay_cost.py                   # 20,000 messages (and 5,000)
    .venv/bin/python benchmarks/delay_cost.py --messages 40000 --prices path/to/aws-prices.md

moto's SQS spends time proportional to the queue's length on every message it accepts (20,000
messages would take minutes), so SendMessage to the delay queue and SendMessageBatch to the target
queue are answered in-process by a botocore ``before-call`` handler: botocore still validates,
serializes and counts each call exactly as it would send it; only moto's SQS is skipped. S3 and Step
Functions (objects, prefixes, executions and their names) are moto's.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import math
import multiprocessing
import os
import random
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
from aws_lambda_powertools import Logger

# The editable install maps these packages with an import hook that mypy cannot follow; without
# mypy_path = layers/common:local in the mypy config they are unresolved (then typed as Any).
from bench_env import OFFLINE_ENV, REGION, default_prices, unit_prices
from moto import mock_aws

from sluice.delay.parker import BatchDelay
from sluice.delay.rehydrator import Rehydrator
from sluice.delay.schedule import send_delayed
from sluice.delay.settings import DelaySettings
from sluice.envelope import Seal
from sluice.sqs import attribute_bytes
from sluice_local.emulation.lambda_loader import LambdaContext
from sluice_local.emulation.sqs_events import to_lambda_record

BENCH_SEAL = Seal((b"bench-envelope-key-" + b"0" * 32,))
"""The stack's envelope key, as the functions would load it."""

ROOT = Path(__file__).resolve().parents[1]
ASL = ROOT / "statemachines" / "delay.asl.json"
DEFAULT_PRICES = default_prices()  # $SLUICE_REFERENCE_DIR/aws-prices.md, else ../shared/reference

ACCOUNT = "123456789012"
BUCKET = "sluice-delay-bench"
START = datetime(2026, 11, 2, 0, 0, 0, tzinfo=UTC)  # on a minute: one hour of arrivals = 60 buckets
DELAY = timedelta(days=30)
ARRIVAL_SECONDS = 3600
ARRIVAL_SEED = 20261102  # arrivals: uniform over the hour, reproducible
BUCKET_SECONDS = 60
GRACE_SECONDS = 300
SWEEP_EVERY = timedelta(minutes=15)
SWEEPS_PER_30_DAYS = int(timedelta(days=30) / SWEEP_EVERY)  # 2,880
BUCKETS_PER_30_DAYS = int(timedelta(days=30).total_seconds()) // BUCKET_SECONDS  # 43,200
BATCH_SIZES = (10, 100)
TARGET = 0.10  # $ per million messages, orchestration, batch 100
MILLION = 1_000_000
SQS_CHUNK = 64 * 1024  # SQS bills every started 64 KiB of a request's payload as one request
PARAMS = "_bench_params"

# The reference article's state machine (/work/shared/reference/seeds/000_*.txt, "The S3 Batch
# Delay Pattern"): CalculateWaitTime (Lambda task) → WaitForDelay (Wait) → RehydrateMessages (Lambda
# task, End). Its rehydrate Lambda sends the chunks of 10 in a code loop: no Map state, no transition.
ARTICLE_STATES = ("CalculateWaitTime", "WaitForDelay", "RehydrateMessages")

BENCH_ENV = OFFLINE_ENV


# --- prices ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Prices:
    """USD per unit (one request, one transition, one GB-second, one GB-month)."""

    source: Path
    sqs: float
    s3_put: float
    s3_get: float
    s3_gb_month: float
    sfn_transition: float
    scheduler: float
    lambda_request: float
    lambda_gb_s: float

    def of(self, price: str) -> float:
        return 0.0 if price == FREE else float(getattr(self, price))


FREE = "free"
PRICE_ROWS = {  # field: (service column, start of the unit column), as the table spells them
    "sqs": ("SQS standard", "request"),
    "s3_put": ("S3 Standard", "PUT, COPY, POST, LIST"),
    "s3_get": ("S3 Standard", "GET"),
    "s3_gb_month": ("S3 Standard", "storage"),
    "sfn_transition": ("Step Functions Standard", "state transition"),
    "scheduler": ("EventBridge Scheduler", "invocation"),
    "lambda_request": ("Lambda", "request"),
    "lambda_gb_s": ("Lambda arm64", "GB-second"),
}


def load_prices(path: Path) -> Prices:
    found = unit_prices(path, PRICE_ROWS)
    return Prices(source=path.resolve(), **found)


# --- counting ----------------------------------------------------------------------------------


def payload_bytes(message: dict[str, Any]) -> int:
    return len(message["MessageBody"].encode()) + attribute_bytes(message.get("MessageAttributes") or {})


def sqs_requests(size: int) -> int:
    return max(1, math.ceil(size / SQS_CHUNK))


class Calls:
    """Every AWS call made by the clients of one boto3 session (one simulated function), per
    ``service:Operation``; SQS sends also in billed requests (every started 64 KiB of payload), and
    the bytes written by S3 PutObject."""

    def __init__(self, session: boto3.Session) -> None:
        self.ops: Counter[str] = Counter()
        self.billed: Counter[str] = Counter()
        self.put_bytes = 0
        self.payloads: list[int] = []  # payload bytes of each message sent
        session.events.register("provide-client-params.*.*", self._count)

    def _count(self, params: dict[str, Any], model: Any, context: dict[str, Any], **_: Any) -> None:
        op = f"{model.service_model.service_id.hyphenize()}:{model.name}"
        self.ops[op] += 1
        context[PARAMS] = params
        if op == "sqs:SendMessage":
            size = payload_bytes(params)
            self.payloads.append(size)
            self.billed[op] += sqs_requests(size)
        elif op == "sqs:SendMessageBatch":
            sizes = [payload_bytes(e) for e in params["Entries"]]
            self.payloads.extend(sizes)
            self.billed[op] += sqs_requests(sum(sizes))
        elif op == "s3:PutObject":
            self.put_bytes += len(params["Body"])

    def total(self) -> int:
        return sum(self.ops.values())


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


@dataclass
class _Ok:
    status_code: int = 200
    headers: dict[str, str] = field(default_factory=dict)


class Queues:
    """Answers SendMessage to the delay queue and SendMessageBatch to the target queue in-process
    (see the module docstring); anything else (the poison queue) goes to moto. The delay queue's
    messages wait here, in the ReceiveMessage shape, for the simulated event source mapping."""

    def __init__(self, delay_url: str, target_url: str, clock: Clock) -> None:
        self.delay_url, self.target_url, self.clock = delay_url, target_url, clock
        self.waiting: list[dict[str, Any]] = []
        self.delivered: Counter[str] = Counter()  # body → times delivered to the target
        self.residuals: list[int] = []  # DelaySeconds of each delivery

    def attach(self, client: Any) -> None:
        client.meta.events.register("before-call.sqs.SendMessage", self._send)
        client.meta.events.register("before-call.sqs.SendMessageBatch", self._send_batch)

    def _send(self, context: dict[str, Any], **_: Any) -> tuple[_Ok, dict[str, Any]] | None:
        params = context[PARAMS]
        if params["QueueUrl"] != self.delay_url:
            return None
        message_id = str(uuid.uuid4())
        sent = str(int(self.clock().timestamp() * 1000))
        self.waiting.append(
            {
                "MessageId": message_id,
                "ReceiptHandle": base64.b64encode(uuid.uuid4().bytes * 8).decode(),
                "MD5OfBody": _md5(params["MessageBody"]),
                "Body": params["MessageBody"],
                "Attributes": {
                    "ApproximateReceiveCount": "1",
                    "SentTimestamp": sent,
                    "SenderId": "AIDAIENQZJOLO23YVJ4VO",
                    "ApproximateFirstReceiveTimestamp": sent,
                },
                "MessageAttributes": params.get("MessageAttributes") or {},
            }
        )
        return _Ok(), {"MessageId": message_id, "MD5OfMessageBody": _md5(params["MessageBody"])}

    def _send_batch(self, context: dict[str, Any], **_: Any) -> tuple[_Ok, dict[str, Any]] | None:
        params = context[PARAMS]
        if params["QueueUrl"] != self.target_url:
            return None
        successful = []
        for entry in params["Entries"]:
            self.delivered[entry["MessageBody"]] += 1
            self.residuals.append(int(entry.get("DelaySeconds", 0)))
            successful.append(
                {
                    "Id": entry["Id"],
                    "MessageId": str(uuid.uuid4()),
                    "MD5OfMessageBody": _md5(entry["MessageBody"]),
                }
            )
        return _Ok(), {"Successful": successful, "Failed": []}


def _md5(text: str) -> str:
    return hashlib.md5(text.encode(), usedforsecurity=False).hexdigest()


class NullMetrics:
    def add_metric(self, name: str, unit: str, value: float) -> None:
        return None


# --- the delay state machine, walked from its ASL ---------------------------------------------


def path_get(data: dict[str, Any], path: str) -> Any:
    if not path.startswith("$."):
        raise ValueError(f"unsupported path {path!r}")
    value: Any = data
    for part in path[2:].split("."):
        value = value[part]
    return value


def select(template: dict[str, Any], data: dict[str, Any]) -> dict[str, Any]:
    """ASL Parameters / ResultSelector: ``key.$`` takes a path's value, other keys are literal."""
    return {k.removesuffix(".$"): path_get(data, v) if k.endswith(".$") else v for k, v in template.items()}


def run_execution(
    definition: dict[str, Any],
    execution_input: dict[str, Any],
    task: Callable[[dict[str, Any]], Any],
    clock: Clock,
) -> tuple[int, int]:
    """The happy path of one execution as Step Functions runs it; returns (states entered, task
    calls). Supports what delay.asl.json uses (Wait on TimestampPath, Task, Choice on BooleanEquals,
    Succeed); an error is raised, not retried: the benchmark expects none."""
    data = dict(execution_input)
    name, entered, calls = definition["StartAt"], 0, 0
    while True:
        state = definition["States"][name]
        entered += 1
        kind = state["Type"]
        if kind == "Wait":
            wake = datetime.fromisoformat(path_get(data, state["TimestampPath"]).replace("Z", "+00:00"))
            clock.now = max(clock.now, wake)
            name = state["Next"]
        elif kind == "Task":
            result = task(select(state["Parameters"]["Payload"], data))
            calls += 1
            selected = select(state.get("ResultSelector", {}), {"Payload": result})
            data[state["ResultPath"].removeprefix("$.")] = selected
            name = state["Next"]
        elif kind == "Choice":
            name = state["Default"]
            for rule in state["Choices"]:
                if set(rule) != {"Variable", "BooleanEquals", "Next"}:
                    raise ValueError(f"unsupported Choice rule {rule}")
                if path_get(data, rule["Variable"]) is rule["BooleanEquals"]:
                    name = rule["Next"]
                    break
        elif kind == "Succeed":
            return entered, calls
        else:
            raise RuntimeError(f"execution reached {name} ({kind})")


def machine_definition() -> tuple[str, dict[str, Any]]:
    text = ASL.read_text(encoding="utf-8")
    deployed = text.replace(
        "${RehydratorFunctionArn}", f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:rehydrator"
    )
    deployed = deployed.replace("${MetricsNamespace}", "Sluice")
    return deployed, json.loads(deployed)


# --- one simulated 30-day delay ----------------------------------------------------------------


@dataclass
class Run:
    messages: int
    batch: int
    calls: dict[str, Calls]  # "producer", "batch-delay", "rehydrator", "sweep"
    invocations: Counter[str]
    esm_receives: int = 0  # model: ⌈records/10⌉ ReceiveMessage per invocation
    esm_deletes: int = 0  # model: ⌈records/10⌉ DeleteMessageBatch per invocation
    executions: int = 0
    transitions: int = 0
    extra_loops: int = 0
    sweeps: int = 0
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)
    residuals: tuple[int, int] = (0, 0)
    mean_payload: float = 0.0


FUNCTIONS = ("producer", "batch-delay", "rehydrator", "sweep")
USER_ATTRIBUTES = {"tenant": {"DataType": "String", "StringValue": "acme"}}


def message_body(i: int) -> str:
    return json.dumps(
        {
            "order_id": f"o-{i:08d}",
            "customer_id": "c-1",
            "amount_cents": 1200,
            "currency": "EUR",
            "remind": "due",
        }
    )


@dataclass(frozen=True)
class DelayResources:
    delay_url: str
    target_url: str
    poison_url: str
    machine: str
    definition: dict[str, Any]


def delay_resources(harness: boto3.Session) -> DelayResources:
    """The delay path's resources in moto: the delay, work and poison queues, the bucket and the delay state
    machine (its definition as deployed, and as parsed for walking it)."""
    sqs = harness.client("sqs")
    urls = [sqs.create_queue(QueueName=name)["QueueUrl"] for name in ("delay", "work", "poison")]
    harness.client("s3").create_bucket(Bucket=BUCKET)
    role = harness.client("iam").create_role(RoleName="delay-sfn", AssumeRolePolicyDocument="{}")
    deployed, definition = machine_definition()
    machine = harness.client("stepfunctions").create_state_machine(
        name="delay", definition=deployed, roleArn=role["Role"]["Arn"]
    )["stateMachineArn"]
    return DelayResources(urls[0], urls[1], urls[2], machine, definition)


class World:
    """The resources in moto, the four simulated functions (each with its own counted session) and
    the injected clock. Build it inside ``mock_aws()``."""

    def __init__(self, run: Run) -> None:
        self.run = run
        harness = boto3.Session(region_name=REGION)  # setup and inspection: not counted
        self.sqs, self.s3, self.sfn = (
            harness.client("sqs"),
            harness.client("s3"),
            harness.client("stepfunctions"),
        )
        made = delay_resources(harness)
        self.delay_url, self.target_url, self.poison_url = made.delay_url, made.target_url, made.poison_url
        self.machine, self.definition = made.machine, made.definition
        settings = DelaySettings.from_env(
            {
                "SLUICE_DELAY_BUCKET": BUCKET,
                "SLUICE_DELAY_PREFIX": "delayed/",
                "SLUICE_DELAY_STATE_MACHINE_ARN": self.machine,
                "SLUICE_DELAY_TARGETS": self.target_url,
                "SLUICE_DIRECT_SEND_THRESHOLD_SECONDS": "900",
                "SLUICE_DELAY_BUCKET_SECONDS": str(BUCKET_SECONDS),
                "SLUICE_PAST_GRACE_SECONDS": str(GRACE_SECONDS),
                "SLUICE_POISON_QUEUE_URL": self.poison_url,
                "SLUICE_ENVELOPE_KEY_SECRET": "bench-envelope-key",  # the functions get BENCH_SEAL
            }
        )
        self.clock = Clock(START)
        self.queues = Queues(self.delay_url, self.target_url, self.clock)
        sessions = {name: boto3.Session(region_name=REGION) for name in FUNCTIONS}
        run.calls = {name: Calls(session) for name, session in sessions.items()}  # before any client
        sqs = {name: session.client("sqs") for name, session in sessions.items()}
        for client in sqs.values():
            self.queues.attach(client)
        self.producer = sqs["producer"]
        logger = Logger(service="sluice-bench", level="WARNING")
        self.delayer = BatchDelay(
            settings=settings, sqs=sqs["batch-delay"], s3=sessions["batch-delay"].client("s3"),
            sfn=sessions["batch-delay"].client("stepfunctions"), logger=logger, metrics_sink=NullMetrics(),
            seal=BENCH_SEAL, clock=self.clock,
        )  # fmt: skip
        self.rehydrators = {
            name: Rehydrator(
                settings=settings,
                sqs=sqs[name],
                s3=sessions[name].client("s3"),
                logger=logger,
                metrics_sink=NullMetrics(),
                seal=BENCH_SEAL,
                clock=self.clock,
            )
            for name in ("rehydrator", "sweep")
        }

    def produce_and_park(self) -> None:
        """The hour of arrivals; every ``batch`` messages the event source mapping invokes batch-delay."""
        run = self.run
        rng = random.Random(ARRIVAL_SEED)
        arrivals = sorted(rng.uniform(0, ARRIVAL_SECONDS) for _ in range(run.messages))
        for i, second in enumerate(arrivals):
            self.clock.now = START + timedelta(seconds=second)
            send_delayed(
                self.producer, delay_queue_url=self.delay_url, target=self.target_url, body=message_body(i),
                delay_seconds=DELAY.total_seconds(), attributes=USER_ATTRIBUTES, now=self.clock,
            )  # fmt: skip
            if len(self.queues.waiting) == run.batch:
                self.batch_delay()
        if self.queues.waiting:
            self.batch_delay()

    def batch_delay(self) -> None:
        arn = f"arn:aws:sqs:{REGION}:{ACCOUNT}:delay"
        records = [to_lambda_record(m, arn, REGION) for m in self.queues.waiting]
        self.queues.waiting.clear()
        response = self.delayer.handle(
            {"Records": records}, LambdaContext(function_name="batch-delay", timeout_seconds=60)
        )
        self.run.invocations["batch-delay"] += 1
        self.run.esm_receives += math.ceil(len(records) / 10)
        self.run.esm_deletes += math.ceil(len(records) / 10)
        if response["batchItemFailures"]:
            self.run.problems.append(f"batch-delay reported failures: {response['batchItemFailures'][:3]}")

    def deliver(self, *, sweeps: int) -> None:
        """30 days later: every bucket execution wakes; the last ``sweeps`` runs of the sweep (every 15
        minutes; 2,880 are the whole 30 days) run in between."""
        timeline: list[tuple[datetime, int, dict[str, Any]]] = []
        for page in self.sfn.get_paginator("list_executions").paginate(stateMachineArn=self.machine):
            for execution in page["executions"]:
                described = self.sfn.describe_execution(executionArn=execution["executionArn"])
                execution_input = json.loads(described["input"])
                wake = datetime.fromisoformat(execution_input["wake_at"].replace("Z", "+00:00"))
                timeline.append((wake, 0, execution_input))
        # the sweeps of the 30 days that end 15 min after the hour of deliveries, the last ones first
        end = START + DELAY + timedelta(seconds=ARRIVAL_SECONDS) + SWEEP_EVERY
        timeline.extend((end - k * SWEEP_EVERY, 1, {"sweep": True}) for k in range(sweeps))
        timeline.sort(key=lambda item: (item[0], item[1]))
        for when, _, event in timeline:
            self.clock.now = max(self.clock.now, when)
            if event.get("sweep"):
                self.sweep(event)
                continue
            entered, calls = run_execution(self.definition, event, self.rehydrate, self.clock)
            self.run.executions += 1
            self.run.transitions += entered
            self.run.extra_loops += calls - 1

    def rehydrate(self, payload: dict[str, Any]) -> dict[str, Any]:
        self.run.invocations["rehydrator"] += 1
        context = LambdaContext(function_name="rehydrator", timeout_seconds=300)
        return dict(self.rehydrators["rehydrator"].handle(payload, context))

    def sweep(self, event: dict[str, Any]) -> None:
        context = LambdaContext(function_name="rehydrator", timeout_seconds=300)
        result = self.rehydrators["sweep"].handle(event, context)
        self.run.invocations["sweep"] += 1
        self.run.sweeps += 1
        if result["sent"]:
            self.run.problems.append(f"the sweep delivered {result['sent']} message(s) at {self.clock.now}")

    def check(self) -> None:
        """Every message delivered exactly once, with a residual delay within the bucket's width."""
        run, queues = self.run, self.queues
        left = self.s3.list_objects_v2(Bucket=BUCKET).get("KeyCount", 0)
        attributes = self.sqs.get_queue_attributes(QueueUrl=self.poison_url, AttributeNames=["All"])
        poisoned = int(attributes["Attributes"]["ApproximateNumberOfMessages"])
        if left or poisoned:
            run.problems.append(f"{left} object(s) left in S3, {poisoned} message(s) on the poison queue")
        times = Counter(queues.delivered.values())
        if len(queues.delivered) != run.messages or set(times) != {1}:
            run.problems.append(
                f"delivered {len(queues.delivered)} of {run.messages} messages; times each: {dict(times)}"
            )
        run.residuals = (min(queues.residuals, default=0), max(queues.residuals, default=0))
        payloads = run.calls["rehydrator"].payloads
        run.mean_payload = sum(payloads) / max(1, len(payloads))


def simulate(messages: int, batch: int, *, sweeps: int = 0) -> Run:
    started = time.perf_counter()
    run = Run(messages, batch, {}, Counter())
    with mock_aws():
        world = World(run)
        world.produce_and_park()
        world.deliver(sweeps=sweeps)
        world.check()
    run.seconds = time.perf_counter() - started
    return run


# --- rows: calls → dollars ---------------------------------------------------------------------


@dataclass(frozen=True)
class Durations:
    """Assumed Lambda duration: a fixed part per invocation plus a part per AWS call it makes (moto
    runs in-process, so the measured times say nothing about Lambda's)."""

    base_ms: float
    per_call_ms: float
    memory_mb: int

    def gb_seconds(self, *, invocations: float = 0, calls: float = 0) -> float:
        return self.memory_mb / 1024 * (invocations * self.base_ms + calls * self.per_call_ms) / 1000

    def describe(self) -> str:
        return (
            f"{self.base_ms:g} ms per invocation + {self.per_call_ms:g} ms per AWS call it makes, "
            f"{self.memory_mb} MB, arm64"
        )


@dataclass
class Row:
    section: str  # SQS, S3, Step Functions, Lambda
    label: str
    price: str  # a Prices field, or FREE
    how: str  # counted | model | assumed
    values: dict[int, float]  # messages in the run → units (requests, transitions, GB-s)

    def fit(self, big: int, small: int) -> tuple[float, float]:
        """(a, b) of units = a * messages + b through the two runs: a is the part that follows the
        messages, b the part that follows the buckets (both runs have the same buckets)."""
        high, low = self.values.get(big, 0.0), self.values.get(small, 0.0)
        a = (high - low) / (big - small)
        b = high - a * big
        if abs(b) < 1e-9 * max(1.0, abs(high)):
            b = 0.0
        return a, b

    def follows(self, big: int, small: int) -> str:
        a, b = self.fit(big, small)
        return "buckets" if a == 0 else "messages" if b == 0 else "both"

    def per_million(self, big: int, small: int) -> float:
        """Units for 1M messages arriving in the same buckets."""
        a, b = self.fit(big, small)
        return a * MILLION + b


OPERATION_PRICE = {
    "s3:PutObject": "s3_put",
    "s3:CopyObject": "s3_put",
    "s3:ListObjectsV2": "s3_put",
    "s3:GetObject": "s3_get",
    "s3:HeadObject": "s3_get",
    "s3:DeleteObject": FREE,  # not in the price table: S3 does not charge DELETE requests
    "s3:DeleteObjects": FREE,
}
LABELS = {
    ("producer", "sqs:SendMessage"): "SendMessage, producer → delay queue",
    ("rehydrator", "sqs:SendMessageBatch"): "SendMessageBatch, rehydrator → target",
    ("batch-delay", "sqs:SendMessageBatch"): "SendMessageBatch, direct sends",
    ("batch-delay", "s3:PutObject"): "PUT, 1 object per batch and bucket",
    ("rehydrator", "s3:PutObject"): "PUT, rewrite of a partly sent object",
    ("rehydrator", "s3:ListObjectsV2"): "LIST, the bucket's prefix",
    ("rehydrator", "s3:GetObject"): "GET, parked objects",
    ("rehydrator", "s3:DeleteObject"): "DELETE, parked objects",
    ("batch-delay", "sfn:DescribeExecution"): "DescribeExecution (API call)",
    ("batch-delay", "sfn:StartExecution"): "StartExecution (API call)",
}
SECTIONS = ("SQS", "S3", "Step Functions", "Lambda", "other")
ORCHESTRATION = ("S3", "Step Functions", "Lambda")


def sluice_rows(runs: list[Run], durations: Durations) -> list[Row]:
    """One row per cost component with its units in each run (the sweep is kept apart)."""
    rows: dict[tuple[str, str], Row] = {}

    def add(run: Run, row: Row) -> None:
        kept = rows.setdefault((row.section, row.label), Row(row.section, row.label, row.price, row.how, {}))
        kept.values[run.messages] = kept.values.get(run.messages, 0.0) + row.values[0]

    for run in runs:
        for function in ("producer", "esm", "batch-delay", "rehydrator"):
            if function == "esm":
                for label, value in (
                    ("ReceiveMessage, event source mapping", run.esm_receives),
                    ("DeleteMessageBatch, event source mapping", run.esm_deletes),
                ):
                    add(run, Row("SQS", label, "sqs", "model", {0: value}))
                continue
            calls = run.calls[function]
            for op, count in calls.ops.items():
                service = op.split(":")[0]
                label = LABELS.get((function, op), f"{op.split(':')[1]} ({function})")
                if service == "sqs":
                    add(run, Row("SQS", label, "sqs", "counted", {0: calls.billed.get(op, count)}))
                elif service == "s3":
                    add(run, Row("S3", label, OPERATION_PRICE.get(op, "s3_put"), "counted", {0: count}))
                elif service == "sfn":
                    add(run, Row("Step Functions", label, FREE, "counted", {0: count}))
                else:
                    add(run, Row("other", f"{op} ({function})", FREE, "counted", {0: count}))
        add(
            run, Row("Step Functions", "state transitions", "sfn_transition", "counted", {0: run.transitions})
        )
        for function in ("batch-delay", "rehydrator"):
            invocations = float(run.invocations[function])
            for label, price, how, units_ in (
                (f"requests, {function}", "lambda_request", "counted", invocations),
                (f"GB-s, {function}, per invocation", "lambda_gb_s", "assumed",
                 durations.gb_seconds(invocations=invocations)),
                (f"GB-s, {function}, per AWS call", "lambda_gb_s", "assumed",
                 durations.gb_seconds(calls=run.calls[function].total())),
            ):  # fmt: skip
                add(run, Row("Lambda", label, price, how, {0: units_}))
    return sorted(rows.values(), key=lambda r: SECTIONS.index(r.section))


@dataclass
class Totals:
    per_million: dict[str, float]  # section → $ per 1M messages (1M messages in the same buckets)
    at_run: dict[str, float]  # section → $ per 1M at the N run's own volume
    per_message: float  # $ per 1M: the orchestration rows that follow the messages
    per_bucket: float  # $ per bucket: the orchestration rows that follow the buckets
    gb_s: float  # $ per 1M: the Lambda GB-s part of the orchestration

    def orchestration(self, *, at_run: bool = False) -> float:
        which = self.at_run if at_run else self.per_million
        return sum(which.get(s, 0.0) for s in ORCHESTRATION)

    def sqs(self, *, at_run: bool = False) -> float:
        return (self.at_run if at_run else self.per_million).get("SQS", 0.0)


def money(value: float) -> str:
    return f"${value:,.4f}"


def units(value: float) -> str:
    return f"{value:,.1f}" if value != round(value) else f"{value:,.0f}"


def ratio(value: float) -> str:
    return f"{value:,.1f}x" if value < 10 else f"{value:,.0f}x"


def print_sluice(rows: list[Row], prices: Prices, big: Run, small: Run) -> Totals:
    n, m = big.messages, small.messages
    print(
        f"  {'sluice':<43}{'how':>8}{f'N={n:,}':>10}{f'N={m:,}':>9}{'follows':>9}"
        f"{'per 1M msgs':>12}{'$ per 1M':>10}"
    )
    per_million: dict[str, float] = dict.fromkeys(SECTIONS, 0.0)
    at_run: dict[str, float] = dict.fromkeys(SECTIONS, 0.0)
    per_message = per_bucket = gb_s = 0.0
    section = ""
    for row in rows:
        if row.section != section:
            section = row.section
            print(f"  {section}")
        price = prices.of(row.price)
        a, b = row.fit(n, m)
        scaled = row.per_million(n, m)
        dollars = scaled * price
        per_million[row.section] += dollars
        at_run[row.section] += row.values.get(n, 0.0) * price * MILLION / n
        if row.section in ORCHESTRATION:
            per_message += a * MILLION * price
            per_bucket += b * price / max(1, big.executions)
            if row.price == "lambda_gb_s":
                gb_s += dollars
        cost = "free" if row.price == FREE else f"{dollars:.4f}"
        print(
            f"    {row.label:<41}{row.how:>8}{units(row.values.get(n, 0.0)):>10}"
            f"{units(row.values.get(m, 0.0)):>9}{row.follows(n, m):>9}{units(scaled):>12}{cost:>10}"
        )
    return Totals(per_million, at_run, per_message, per_bucket, gb_s)


@dataclass
class Alternative:
    name: str
    orchestration: float  # $ per 1M messages
    sqs: float
    detail: list[str]

    @property
    def total(self) -> float:
        return self.orchestration + self.sqs


def article(batch: int, prices: Prices, durations: Durations, *, start_counts: bool = False) -> Alternative:
    """The reference article's design per event-source batch of ``batch`` messages: 1 S3 PUT, 1
    execution (CalculateWaitTime → WaitForDelay → RehydrateMessages), 3 Lambda invocations."""
    batches = MILLION / batch
    tens = math.ceil(batch / 10)
    transitions = len(ARTICLE_STATES) + (1 if start_counts else 0)
    handler_calls = 1 + 1 + tens  # PutObject, StartExecution, its own DeleteMessageBatch per 10
    rehydrate_calls = 1 + tens + 1 + 1  # GetObject, SendMessageBatch per 10, DeleteObject, PutMetricData
    gb_s = durations.gb_seconds(invocations=3 * batches, calls=batches * (handler_calls + rehydrate_calls))
    orchestration = (
        batches * prices.s3_put  # the batch's object
        + batches * prices.s3_get  # read back once
        + batches * transitions * prices.sfn_transition
        + 3 * batches * prices.lambda_request  # batchDelayHandler, calculateWaitTime, rehydrateMessages
        + gb_s * prices.lambda_gb_s
    )
    # producer SendMessage; ESM receive and delete; the handler's own delete; rehydration SendMessageBatch
    sqs = (MILLION + 4 * tens * batches) * prices.sqs
    return Alternative(
        "(a) article: 1 execution per event-source batch",
        orchestration,
        sqs,
        [
            f"per batch of {batch}: 1 S3 PUT + 1 GET (+ DELETE), 1 execution of {transitions} transitions",
            f"({' → '.join(ARTICLE_STATES)}), 3 Lambda invocations",
            f"(GB-s as assumed above); SQS per batch: the producer's sends, {tens} ReceiveMessage and {tens}",
            f"DeleteMessageBatch of the event source mapping, {tens} DeleteMessageBatch of its handler's own",
            f"deleteMessagesFromQueue, {tens} SendMessageBatch; its rehydrate Lambda's CloudWatch",
            "PutMetricData is not in the price table: not priced",
        ],
    )


def scheduler(prices: Prices) -> Alternative:
    return Alternative(
        "(b) EventBridge Scheduler: 1 schedule per message",
        MILLION * prices.scheduler,
        MILLION * prices.sqs,
        [
            "1 invocation per message at the Scheduler price; creating a schedule (and deleting it once it",
            "has fired) is free; SQS: the Scheduler's SendMessage to the target (no delay queue, no ESM)",
        ],
    )


def verdict(value: float) -> str:
    return "PASS" if value <= TARGET else "ABOVE TARGET"


def sweep_cost(run: Run, prices: Prices, durations: Durations) -> float:
    """The sweep's cost per 30 days: counted over the sweeps simulated, scaled to the 2,880 of 30 days
    when fewer ran (``--sweeps``)."""
    calls = run.calls["sweep"]
    invocations = run.invocations["sweep"]
    counted = (
        sum(count * prices.of(OPERATION_PRICE.get(op, "sqs")) for op, count in calls.ops.items())
        + invocations * prices.lambda_request
        + durations.gb_seconds(invocations=invocations, calls=calls.total()) * prices.lambda_gb_s
    )
    return counted * SWEEPS_PER_30_DAYS / run.sweeps


def line(label: str, value: float, note: str = "") -> None:
    print(f"    {label:<58}{money(value):>10}  {note}".rstrip())


def report(batch: int, runs: tuple[Run, Run, Run], prices: Prices, durations: Durations) -> None:
    big, small, sweep = runs
    n, m, buckets = big.messages, small.messages, big.executions
    invocations = f"{big.invocations['batch-delay']:,} and {small.invocations['batch-delay']:,}"
    print(
        f"\n=== event-source batch size {batch}: {n:,} and {m:,} messages in {buckets} buckets "
        f"({invocations} batch-delay invocations)"
    )
    totals = print_sluice(sluice_rows([big, small], durations), prices, big, small)
    orchestration, sqs = totals.orchestration(), totals.sqs()
    fixed = sweep_cost(sweep, prices, durations)
    print(f"  per 1M messages (1M messages arriving in the same {buckets} buckets):")
    line("orchestration (S3 + Step Functions + Lambda)", orchestration)
    line("  without Lambda GB-s (the assumed durations)", orchestration - totals.gb_s)
    line("  with the fixed sweep (1M messages being 30 days' volume)", orchestration + fixed)
    line("SQS", sqs)
    line("total incl. SQS", orchestration + sqs)
    print(
        f"  orchestration = {money(totals.per_message)} per 1M messages + ${totals.per_bucket:.6f} per bucket"
    )
    at_run = totals.orchestration(at_run=True)
    print(
        f"  at the simulated volume ({n:,} messages, {n // max(1, buckets):,} per bucket): orchestration "
        f"{money(at_run)}, incl. SQS {money(at_run + totals.sqs(at_run=True))} per 1M"
    )
    print(
        f"  Step Functions transitions: N={n:,} → {big.transitions:,}, N={m:,} → {small.transitions:,} "
        f"({big.executions} and {small.executions} executions; {big.extra_loops} and {small.extra_loops} "
        "extra more-loops)"
    )
    lists = sweep.calls["sweep"].ops.get("s3:ListObjectsV2", 0)
    counted = f"{lists:,} LIST (counted)"
    if sweep.sweeps != SWEEPS_PER_30_DAYS:
        counted = f"{lists:,} LIST counted in the last {sweep.sweeps:,}, scaled"
    print(
        f"  apart, fixed: the sweep, {SWEEPS_PER_30_DAYS:,} invocations per 30 days, {counted}: "
        f"{money(fixed)} per 30 days\n    whatever the volume (= {money(fixed)} per 1M at 1M messages per "
        f"30 days; {money(fixed / n * MILLION)} at {n:,})"
    )
    stored = big.calls["batch-delay"].put_bytes / n
    storage = stored * MILLION / 2**30 * prices.s3_gb_month
    print(
        f"  apart, S3 storage: {stored:,.0f} bytes parked per message for 30 days: {money(storage)} per 1M\n"
        "    (GB = 2^30 bytes, 1 month = 30 days)"
    )
    header = f"{'orchestration':>27}{'ratio':>8}{'incl. SQS':>12}{'ratio':>7}"
    print(f"  compared, per 1M messages delayed 30 days{header}")
    print(f"    {'sluice (1M messages in the same buckets)':<52}{money(orchestration):>14}{'1x':>8}"
          f"{money(orchestration + sqs):>12}{'1x':>7}")  # fmt: skip
    for alternative in (article(batch, prices, durations), scheduler(prices)):
        print(
            f"    {alternative.name:<52}{money(alternative.orchestration):>14}"
            f"{ratio(alternative.orchestration / orchestration):>8}{money(alternative.total):>12}"
            f"{ratio(alternative.total / (orchestration + sqs)):>7}"
        )
        for text in alternative.detail:
            print(f"        {text}")
    counted_start = article(batch, prices, durations, start_counts=True).orchestration
    sluice_start = orchestration + buckets * prices.sfn_transition
    print(
        f"    were an execution's start billed as a transition too: sluice {money(sluice_start)}, "
        f"(a) {money(counted_start)} ({ratio(counted_start / sluice_start)})"
    )
    if batch == max(BATCH_SIZES):
        print_target(totals, fixed, messages=n, buckets=buckets, sqs=sqs, prices=prices)


def print_target(
    totals: Totals, fixed: float, *, messages: int, buckets: int, sqs: float, prices: Prices
) -> None:
    orchestration, at_run = totals.orchestration(), totals.orchestration(at_run=True)
    print(f"  target: sluice orchestration <= ${TARGET:.2f} per 1M messages at batch {max(BATCH_SIZES)}")
    line("1M messages in the same buckets", orchestration, verdict(orchestration))
    line("the same incl. the fixed sweep (1M messages per 30 days)", orchestration + fixed,
         verdict(orchestration + fixed))  # fmt: skip
    line(f"at the simulated volume ({messages:,} messages in {buckets} buckets)", at_run, verdict(at_run))
    cap = totals.per_bucket * BUCKETS_PER_30_DAYS
    if totals.per_message < TARGET:
        needed = totals.per_bucket * MILLION / (TARGET - totals.per_message)
        print(f"    it holds from {needed:,.0f} messages per {BUCKET_SECONDS}-s bucket on average;", end=" ")
    else:
        print("    the per-message part alone is above it;", end=" ")
    print(
        f"a steady stream opens up to {BUCKETS_PER_30_DAYS:,}\n    buckets per 30 days, whose part alone is "
        f"up to {money(cap)} per 30 days whatever the volume\n    (e.g. >= {money(cap)} per 1M for 1M "
        f"messages spread evenly over 30 days, against (b)'s {money(MILLION * prices.scheduler)})"
    )
    print(
        f"    total incl. SQS: {money(orchestration + sqs)} per 1M (no target: the producer's own "
        f"SendMessage alone is {money(MILLION * prices.sqs)})"
    )


def _simulate(job: tuple[int, int, int]) -> Run:
    os.environ.update(BENCH_ENV)
    for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL"):
        os.environ.pop(name, None)
    messages, batch, sweeps = job
    return simulate(messages, batch, sweeps=sweeps)


def print_method(prices: Prices, durations: Durations, results: list[Run], seconds: float, jobs: int) -> None:
    print(f"prices: {prices.source}")
    print(
        f"  SQS {prices.sqs * MILLION:g}/1M requests; S3 PUT/LIST {prices.s3_put * 1000:g}/1k, GET "
        f"{prices.s3_get * 1000:g}/1k, storage {prices.s3_gb_month:g}/GB-month; Step Functions "
        f"{prices.sfn_transition * 1000:g}/1k transitions;\n  Scheduler {prices.scheduler * MILLION:g}/1M "
        f"invocations; Lambda {prices.lambda_request * MILLION:g}/1M requests, arm64 "
        f"{prices.lambda_gb_s:g}/GB-s; S3 DELETE and Step Functions API calls: free"
    )
    print(
        f"simulated: messages due {DELAY.days} days out, arriving at random (uniform) over "
        f"{ARRIVAL_SECONDS // 60} min ({BUCKET_SECONDS}-s buckets);\n  in-process moto; {len(results)} runs "
        f"in {seconds:.0f} s ({jobs} at a time); Python {sys.version.split()[0]}"
    )
    print(
        "counted: every AWS call of the producer, batch-delay and rehydrator (botocore hooks); Step\n"
        "  Functions: 1 transition per state entered (Wait, each Task attempt, Choice, Succeed), walking\n"
        f"  {ASL.relative_to(ROOT)}; an execution's start is not counted (see 'were ...' below)"
    )
    print(
        "model: the event source mapping's ReceiveMessage and DeleteMessageBatch, <= 10 messages per call\n"
        "  (also at batch 100, which needs MaximumBatchingWindowInSeconds >= 1); its idle long polling\n"
        "  (a fixed cost per queue, the same in (a)) is not included"
    )
    print(f"assumed Lambda duration: {durations.describe()}")
    payload = max(r.mean_payload for r in results)
    print(
        f"SQS payloads are small ({payload:,.0f} bytes per message incl. attributes): each send is 1 billed "
        "request\n  (computed per call: 1 per started 64 KiB of its payload)"
    )
    print(
        "per 1M msgs: each row fitted as a * messages + b through the two runs (same buckets), taken at\n"
        "  1M messages arriving in the same hour; 'follows': a (messages), b (buckets) or both non-zero.\n"
        "  A fit, not a count: how many batches straddle a bucket boundary varies by a few between runs"
    )
    for r in results:
        check = "; ".join(r.problems) or (
            f"all {r.messages:,} delivered once, residual DelaySeconds {r.residuals[0]}..{r.residuals[1]} s, "
            "S3 empty"
        )
        sweeps = f" + {r.sweeps:,} sweeps" if r.sweeps else ""
        print(f"  run N={r.messages:,} batch {r.batch}{sweeps}: {r.seconds:.0f} s; {check}")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=20_000, help="N (a second run uses N/4)")
    parser.add_argument("--prices", type=Path, default=DEFAULT_PRICES, help="the price table (markdown)")
    parser.add_argument("--base-ms", type=float, default=50.0, help="assumed Lambda ms per invocation")
    parser.add_argument("--per-call-ms", type=float, default=20.0, help="assumed Lambda ms per AWS call")
    parser.add_argument("--memory-mb", type=int, default=256, help="Lambda memory (the template's: 256)")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="runs at a time")
    parser.add_argument(
        "--sweeps",
        type=int,
        default=SWEEPS_PER_30_DAYS,
        help=f"sweep invocations simulated, the last of the 30 days (default {SWEEPS_PER_30_DAYS:,}, all;"
        " fewer, e.g. for a smoke run: the sweep's cost is scaled to 30 days)",
    )
    parser.add_argument(
        "--density-messages",
        type=int,
        default=2000,
        help="messages simulated per density row and path (benchmarks/delay_density.py; default 2,000)",
    )
    parser.add_argument("--json", type=Path, help="also write the density rows here (JSON)")
    args = parser.parse_args()
    if args.density_messages < 100:
        parser.error("--density-messages must be at least 100")
    if args.messages < 400 or args.jobs < 1 or not 1 <= args.sweeps <= SWEEPS_PER_30_DAYS:
        parser.error(
            f"--messages must be at least 400, --jobs at least 1 and --sweeps 1..{SWEEPS_PER_30_DAYS:,}"
        )
    prices = load_prices(args.prices)
    durations = Durations(args.base_ms, args.per_call_ms, args.memory_mb)
    big, small = args.messages, args.messages // 4
    # The sweep depends neither on the batch size nor on N: it runs once, in the cheapest run.
    jobs = [(big, 10, 0), (small, 100, args.sweeps), (big, 100, 0), (small, 10, 0)]
    started = time.perf_counter()
    if args.jobs > 1:
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(args.jobs, mp_context=context) as pool:
            results = list(pool.map(_simulate, jobs))
    else:
        results = [_simulate(job) for job in jobs]
    runs = {(r.messages, r.batch): r for r in results}
    sweep = next(r for r in results if r.sweeps)
    print_method(prices, durations, results, time.perf_counter() - started, args.jobs)
    for batch in BATCH_SIZES:
        report(batch, (runs[(big, batch)], runs[(small, batch)], sweep), prices, durations)
    # Per density, the three paths side by side (issue 28): benchmarks/delay_density.py
    import delay_density  # noqa: PLC0415 - it imports this module's pieces

    started = time.perf_counter()
    rows, problems = delay_density.run_all(args.density_messages, prices, durations)
    delay_density.report(rows)
    print(f"  {len(rows)} rows in {time.perf_counter() - started:.0f} s; " + ("; ".join(problems) or
          "every message delivered once, S3 empty, in every simulated row"))  # fmt: skip
    if args.json:
        document = delay_density.to_json(rows, prices)
        args.json.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
        print(f"  written: {args.json}")
    return 1 if any(r.problems for r in results) or problems else 0


if __name__ == "__main__":
    sys.exit(main())
