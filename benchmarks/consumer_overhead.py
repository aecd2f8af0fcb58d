"""Per-record overhead of the sluice consumer against a bare Powertools anchor, on in-process moto.

(a) anchor: Powertools ``BatchProcessor(EventType.SQS)`` + ``process_partial_response``; the record
    handler calls a no-op wrapped in ``idempotent_function`` (DynamoDBPersistenceLayer,
    ``IdempotencyConfig(event_key_jmespath="message_id")``).
(b) sluice: ``Consumer.from_env(noop, ...)`` (no model, no key expression: key = message id), the
    same no-op processor, the same moto table.

Both get the same kind of synthetic Lambda SQS events (10 new records per batch, unique message
ids, JSON bodies, ApproximateReceiveCount "1", the moto work queue's ARN). Batches alternate a/b.
DynamoDB requests are counted per client with a botocore ``provide-client-params`` handler, first
for new records, then for the same events sent again (duplicates).

    .venv/bin/python benchmarks/consumer_overhead.py --batches 30

Absolute times are dominated by moto running in-process (every DynamoDB call is parsed, routed and
executed in Python); the ratio and the request counts are the figures to read.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
from aws_lambda_powertools import Logger
from aws_lambda_powertools.utilities.batch import (
    BatchProcessor,
    EventType,
    process_partial_response,
)
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent_function,
)

# The editable install maps these packages with an import hook that mypy cannot follow; without
# mypy_path = layers/common:local in the mypy config they are unresolved (then typed as Any).
from bench_env import OFFLINE_ENV, REGION
from invoke_child import make_event as new_orders_event
from moto import mock_aws

from sluice.consumer.batch import Consumer
from sluice.consumer.record import SluiceRecord
from sluice_local.emulation.lambda_loader import LambdaContext

TABLE = "idempotency"
BUCKET = "sluice-claims"
BATCH_SIZE = 10
TARGET_RATIO = 1.05  # issue 28: per new record, sluice within 5 % of the Powertools-only handler
DDB_OPERATIONS = ("PutItem", "UpdateItem", "GetItem", "DeleteItem", "Query", "TransactWriteItems")

BENCH_ENV = {**OFFLINE_ENV, "AWS_LAMBDA_FUNCTION_NAME": "sluice-bench-consumer"}

Event = dict[str, Any]
Handle = Callable[[Event, Any], dict[str, Any]]  # (event, Lambda context) -> batch response


class ApiCounter:
    """Counts every API call made by the clients of one boto3 session, per service and operation,
    and the time spent inside those calls (botocore + in-process moto), from the call's first event
    (``provide-client-params``) to its last (``after-call``, emitted for error responses too)."""

    def __init__(self, session: boto3.Session) -> None:
        self.calls: Counter[tuple[str, str]] = Counter()
        self.seconds: Counter[str] = Counter()
        session.events.register("provide-client-params.*.*", self._start)
        session.events.register("after-call.*.*", self._end)

    def _start(self, model: Any, context: dict[str, Any], **_: Any) -> None:
        self.calls[(model.service_model.service_id.hyphenize(), model.name)] += 1
        context["_bench_started"] = time.perf_counter()

    def _end(self, model: Any, context: dict[str, Any], **_: Any) -> None:
        started = context.get("_bench_started")
        if started is not None:
            self.seconds[model.service_model.service_id.hyphenize()] += time.perf_counter() - started

    def dynamodb(self) -> Counter[str]:
        return Counter({op: n for (service, op), n in self.calls.items() if service == "dynamodb"})

    def other(self) -> Counter[str]:
        return Counter({f"{s}:{op}": n for (s, op), n in self.calls.items() if s != "dynamodb"})

    def reset(self) -> None:
        self.calls.clear()
        self.seconds.clear()


class NullMetrics:
    def __init__(self) -> None:
        self.values: Counter[str] = Counter()

    def add_metric(self, name: str, unit: str, value: float) -> None:
        self.values[name] += int(value)


@dataclass
class Moto:
    work_arn: str
    poison_url: str
    envelope_key: str


def make_resources() -> Moto:
    sqs = boto3.client("sqs", region_name=REGION)
    work_url = sqs.create_queue(QueueName="work", Attributes={"VisibilityTimeout": "180"})["QueueUrl"]
    work_arn = sqs.get_queue_attributes(QueueUrl=work_url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    poison_url = sqs.create_queue(QueueName="poison")["QueueUrl"]
    boto3.client("dynamodb", region_name=REGION).create_table(
        TableName=TABLE,
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        BillingMode="PAY_PER_REQUEST",
    )
    boto3.client("s3", region_name=REGION).create_bucket(Bucket=BUCKET)
    key = boto3.client("secretsmanager", region_name=REGION).create_secret(
        Name="sluice-envelope-key", SecretString="bench-envelope-key-" + "0" * 32
    )["ARN"]
    return Moto(work_arn=work_arn, poison_url=poison_url, envelope_key=key)


def make_event(queue_arn: str, size: int = BATCH_SIZE) -> Event:
    """A Lambda SQS event of ``size`` new records (the whole-cold-invocation child's, so both
    benchmarks feed the consumer the same shape)."""
    return new_orders_event(queue_arn, size)


def build_anchor(session: boto3.Session) -> Handle:
    """Plain Powertools: batch processor + idempotent no-op keyed by the message id."""
    persistence = DynamoDBPersistenceLayer(table_name=TABLE, boto3_client=session.client("dynamodb"))
    # The body is validated against the key's first payload, as sluice does for every record (a key
    # reused with a different payload is refused): the same guarantee, so the same DynamoDB items.
    config = IdempotencyConfig(event_key_jmespath="message_id", payload_validation_jmespath="payload")

    def _noop_task(task: dict[str, Any]) -> None:
        return None

    noop_task = idempotent_function(
        data_keyword_argument="task", persistence_store=persistence, config=config
    )(_noop_task)
    processor = BatchProcessor(event_type=EventType.SQS)

    def record_handler(record: SQSRecord) -> None:
        noop_task(task={"message_id": record.message_id, "payload": record.json_body})

    def handle(event: Event, context: Any) -> dict[str, Any]:
        config.register_lambda_context(context)  # as Powertools documents for idempotent_function
        return dict(
            process_partial_response(
                event=event, record_handler=record_handler, processor=processor, context=context
            )
        )

    return handle


def noop(record: SluiceRecord) -> None:
    return None


def build_sluice(session: boto3.Session, moto: Moto) -> Handle:
    environ = {
        "SLUICE_IDEMPOTENCY_TABLE": TABLE,
        "SLUICE_POISON_QUEUE_URL": moto.poison_url,
        "SLUICE_CLAIM_CHECK_BUCKETS": BUCKET,
        "SLUICE_IDEMPOTENCY_KEY_JMESPATH": "",
        "AWS_LAMBDA_FUNCTION_NAME": "sluice-bench-consumer",
        "SLUICE_ENVELOPE_KEY_SECRET": moto.envelope_key,  # read at cold start, as in the stack
    }
    consumer = Consumer.from_env(
        noop,
        logger=Logger(service="sluice-bench", level="WARNING"),
        metrics_sink=NullMetrics(),
        environ=environ,
        session=session,
    )
    handle: Handle = consumer.handle
    return handle


def run_batch(handle: Handle, event: Event) -> tuple[float, float]:
    """(wall, CPU) seconds of one batch; CPU is the process's (every thread's: sluice's heartbeat too)."""
    context = LambdaContext(function_name="sluice-bench-consumer", timeout_seconds=30)
    started, cpu_started = time.perf_counter(), time.process_time()
    response = handle(event, context)
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    if response.get("batchItemFailures"):
        raise SystemExit(f"unexpected batch item failures: {response['batchItemFailures']}")
    return elapsed, cpu


def run_pass(
    handlers: dict[str, Handle], events: dict[str, list[Event]]
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Runs every event of each handler, alternating the order a/b, b/a between batches; returns the
    wall and the CPU seconds of each batch."""
    names = list(handlers)
    times: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, list[float]] = {name: [] for name in names}
    for i in range(len(events[names[0]])):
        for name in names if i % 2 == 0 else names[::-1]:
            wall, used = run_batch(handlers[name], events[name][i])
            times[name].append(wall)
            cpu[name].append(used)
    return times, cpu


def ms_per_record(batch_seconds: list[float]) -> tuple[float, float]:
    """(median, mean) milliseconds per record."""
    per_record = [s * 1000 / BATCH_SIZE for s in batch_seconds]
    return statistics.median(per_record), statistics.fmean(per_record)


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def per_record(counts: Counter[str], records: int) -> dict[str, float]:
    return {op: counts.get(op, 0) / records for op in sorted(set(DDB_OPERATIONS) | set(counts))}


def print_requests(title: str, rows: dict[str, dict[str, float]]) -> None:
    ops = sorted({op for row in rows.values() for op, v in row.items() if v} | {"PutItem", "UpdateItem"})
    print(f"\nDynamoDB requests per record, {title}:")
    print("  " + f"{'':8}" + "".join(f"{op:>12}" for op in ops) + f"{'total':>10}")
    for name, row in rows.items():
        print(
            "  "
            + f"{name:8}"
            + "".join(f"{row.get(op, 0.0):12.2f}" for op in ops)
            + f"{sum(row.values()):10.2f}"
        )


@dataclass
class PassResult:
    """One pass (new records, or duplicates) of both consumers."""

    times: dict[str, list[float]]  # seconds per batch
    cpu: dict[str, list[float]]  # CPU seconds per batch (the process's)
    ddb: dict[str, Counter[str]]  # DynamoDB requests per operation
    ddb_seconds: dict[str, float]  # time inside DynamoDB client calls
    other: dict[str, Counter[str]]  # any other AWS call


def measure(batches: int, warmup: int) -> tuple[PassResult, PassResult]:
    with mock_aws():
        moto = make_resources()
        sessions = {"anchor": boto3.Session(region_name=REGION), "sluice": boto3.Session(region_name=REGION)}
        counters = {name: ApiCounter(session) for name, session in sessions.items()}
        handlers: dict[str, Handle] = {
            "anchor": build_anchor(sessions["anchor"]),
            "sluice": build_sluice(sessions["sluice"], moto),
        }

        def one_pass(events: dict[str, list[Event]]) -> PassResult:
            for counter in counters.values():
                counter.reset()
            times, cpu = run_pass(handlers, events)
            return PassResult(
                times=times,
                cpu=cpu,
                ddb={name: counters[name].dynamodb() for name in handlers},
                ddb_seconds={name: sum(counters[name].seconds.values()) for name in handlers},
                other={name: counters[name].other() for name in handlers},
            )

        one_pass({name: [make_event(moto.work_arn) for _ in range(warmup)] for name in handlers})
        events = {name: [make_event(moto.work_arn) for _ in range(batches)] for name in handlers}
        new = one_pass(events)
        duplicates = one_pass(events)  # the same events again: every record is a duplicate
    return new, duplicates


def report_times(new: PassResult, duplicates: PassResult, records: int) -> tuple[float, float]:
    """Prints ms per record; returns the b/a ratios of the median per-batch wall and CPU times of new
    records."""
    print(f"\n{'ms per record':24}{'median':>10}{'mean':>10}{'in DDB calls':>14}{'outside':>10}")
    medians: dict[str, float] = {}
    outside: dict[str, float] = {}
    for title, result in (("new", new), ("duplicate", duplicates)):
        for name, times in result.times.items():
            median, mean = ms_per_record(times)
            in_ddb = result.ddb_seconds[name] * 1000 / records
            if title == "new":
                medians[name], outside[name] = median, mean - in_ddb
            label = f"({'a' if name == 'anchor' else 'b'}) {name}, {title}"
            print(f"  {label:22}{median:10.3f}{mean:10.3f}{in_ddb:14.3f}{mean - in_ddb:10.3f}")
    print(
        "  in DDB calls = mean time inside DynamoDB client calls (botocore + in-process moto, which\n"
        "  stands in for the network round trip); outside = everything else (batch processing,\n"
        "  idempotency bookkeeping, hashing, JSON, logging, threads)"
    )
    ratio = medians["sluice"] / medians["anchor"]
    mean_ratio = ms_per_record(new.times["sluice"])[1] / ms_per_record(new.times["anchor"])[1]
    dup_ratio = ms_per_record(duplicates.times["sluice"])[0] / ms_per_record(duplicates.times["anchor"])[0]
    print(
        f"\nratio b/a (new records, median per batch) = {ratio:.3f}  (target <= {TARGET_RATIO})  "
        f"{verdict(ratio <= TARGET_RATIO)}"
    )
    print(
        f"  informational: mean-based ratio {mean_ratio:.3f}; duplicates median ratio {dup_ratio:.3f};\n"
        f"  outside-DDB-calls ratio {outside['sluice'] / outside['anchor']:.3f} "
        f"(sluice adds {outside['sluice'] - outside['anchor']:+.3f} ms/record of its own work)"
    )
    cpu = {name: ms_per_record(new.cpu[name])[0] for name in new.cpu}
    cpu_ratio = cpu["sluice"] / cpu["anchor"]
    print(
        f"ratio b/a, CPU time (new records, median per batch) = {cpu_ratio:.3f}  (target <= {TARGET_RATIO})"
        f"  {verdict(cpu_ratio <= TARGET_RATIO)}\n"
        f"  CPU ms per record, median: anchor {cpu['anchor']:.3f}, sluice {cpu['sluice']:.3f}\n"
        "  (the process's CPU time, every thread: what the batch costs whatever else the machine runs)"
    )
    return ratio, cpu_ratio


def report_requests(new: PassResult, duplicates: PassResult, records: int) -> list[tuple[str, bool]]:
    """Prints DynamoDB requests per record; returns the request-count criteria."""
    new_rows = {name: per_record(counts, records) for name, counts in new.ddb.items()}
    dup_rows = {name: per_record(counts, records) for name, counts in duplicates.ddb.items()}
    print_requests("new records", new_rows)
    print_requests("duplicates", dup_rows)
    for name in new.other:
        calls = dict(new.other[name] + duplicates.other[name])
        print(f"  other AWS calls by {name} (both passes): {calls or 'none'}")
    s_new, a_new, s_dup, a_dup = (
        new_rows["sluice"],
        new_rows["anchor"],
        dup_rows["sluice"],
        dup_rows["anchor"],
    )
    return [
        ("new: sluice PutItem/record <= anchor's and <= 1", s_new["PutItem"] <= min(a_new["PutItem"], 1.0)),
        (
            "new: sluice UpdateItem/record <= anchor's and <= 1",
            s_new["UpdateItem"] <= min(a_new["UpdateItem"], 1.0),
        ),
        (
            "new: sluice total DynamoDB requests/record <= anchor's",
            sum(s_new.values()) <= sum(a_new.values()),
        ),
        (
            "duplicate: sluice PutItem/record <= anchor's and <= 1",
            s_dup["PutItem"] <= min(a_dup["PutItem"], 1.0),
        ),
        (
            "duplicate: sluice total DynamoDB requests/record <= anchor's and <= 1",
            sum(s_dup.values()) <= min(sum(a_dup.values()), 1.0),
        ),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batches", "--runs", type=int, default=60, help="measured batches per consumer")
    parser.add_argument("--warmup", type=int, default=3, help="unmeasured batches per consumer first")
    parser.add_argument("--json", type=Path, help="also write the figures there (cost.py reads them)")
    args = parser.parse_args()
    if args.batches < 1 or args.warmup < 0:
        parser.error("--batches must be >= 1 and --warmup >= 0")

    os.environ.update(BENCH_ENV)
    for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL"):
        os.environ.pop(name, None)

    new, duplicates = measure(args.batches, args.warmup)
    records = args.batches * BATCH_SIZE
    print(
        f"{args.batches} batches x {BATCH_SIZE} records per consumer ({args.warmup} warm-up batches each), "
        f"alternating a/b; in-process moto; Python {sys.version.split()[0]}"
    )
    ratio, cpu_ratio = report_times(new, duplicates, records)
    checks = report_requests(new, duplicates, records)
    checks.append((f"time: ratio b/a <= {TARGET_RATIO} (new records)", ratio <= TARGET_RATIO))
    checks.append((f"CPU: ratio b/a <= {TARGET_RATIO} (new records)", cpu_ratio <= TARGET_RATIO))
    print("\ncriteria:")
    for text, ok in checks:
        print(f"  {verdict(ok):4}  {text}")
    if args.json is not None:
        write_json(args.json, new, duplicates, records)
    return 0


def write_json(path: Path, new: PassResult, duplicates: PassResult, records: int) -> None:
    """Per consumer: median wall and CPU ms per new record, and DynamoDB requests per record (new and
    duplicate), as counted above."""
    figures = {
        name: {
            "ms_per_record": ms_per_record(new.times[name])[0],
            "cpu_ms_per_record": ms_per_record(new.cpu[name])[0],
            "ddb_requests_per_record": per_record(new.ddb[name], records),
            "ddb_requests_per_duplicate": per_record(duplicates.ddb[name], records),
            "other_requests": sum((new.other[name] + duplicates.other[name]).values()),
        }
        for name in new.times
    }
    payload = {"batch_size": BATCH_SIZE, "records": records, "consumers": figures}
    path.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    print(f"figures written to {path}")


if __name__ == "__main__":
    sys.exit(main())
