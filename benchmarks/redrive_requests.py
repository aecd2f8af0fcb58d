"""SQS requests per re-driven message: sluice's redriver against the reference article's redriver.

Both drain the same dead-letter queue of N messages on in-process moto, in the same run, each with
its own boto3 session whose every API call is counted (a botocore ``provide-client-params`` handler):

- **sluice**: ``sluice.redriver.Redriver.run`` as the redriver Lambda calls it: batches of 10
  (ReceiveMessage), one SendMessageBatch per destination, one DeleteMessageBatch for the accepted
  entries, until a receive comes back empty. The breaker's DynamoDB item is read and updated once per
  batch (counted apart: they are not SQS requests).
- **article**: a faithful Python port of the reference article's Node.js redriver
  ("Advanced SQS DLQ Re-drive Patterns with Exponential Backoff"): one ReceiveMessage of 10 per
  invocation, then SendMessage and DeleteMessage for each message one at a time; invoked again and
  again (as its alarm/schedule would) until an invocation finds the DLQ empty.

The target is ≤ 0.3 SQS requests per message: one receive, one send and one delete per 10 messages.
Both drains end with one empty receive that tells the queue is drained, so the figure is
``(3·⌈N/10⌉ + 1) / N`` at best. Prices: SQS standard requests from the shared price table.

    .venv/bin/python benchmarks/redrive_requests.py                # N = 1,000
    .venv/bin/python benchmarks/redrive_requests.py --messages 5000
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "layers" / "common"), str(ROOT / "local"), str(ROOT / "benchmarks")]

import boto3  # noqa: E402
from aws_lambda_powertools import Logger  # noqa: E402
from bench_env import OFFLINE_ENV, REGION, default_prices, read_price_table  # noqa: E402
from moto import mock_aws  # noqa: E402

from sluice.envelope import Envelope, Seal, merge  # noqa: E402
from sluice.redrive.breaker import Breaker  # noqa: E402
from sluice.redrive.runner import Redriver  # noqa: E402
from sluice.redrive.settings import RedriveSettings  # noqa: E402

BENCH_SEAL = Seal((b"bench-envelope-key-" + b"0" * 32,))
"""The stack's envelope key, as the functions would load it."""

DEFAULT_PRICES = default_prices()  # $SLUICE_REFERENCE_DIR/aws-prices.md, else ../shared/reference
TARGET = 0.3
ACCOUNT = "123456789012"


class Calls:
    """Every API call made through one boto3 session, per ``service:Operation``."""

    def __init__(self, session: boto3.Session) -> None:
        self.ops: Counter[str] = Counter()
        session.events.register("provide-client-params.*.*", self._count)

    def _count(self, model: Any, context: dict[str, Any], **_: Any) -> None:
        self.ops[f"{model.service_model.service_name}:{model.name}"] += 1

    def service(self, name: str) -> int:
        return sum(n for op, n in self.ops.items() if op.startswith(name + ":"))


class NullMetrics:
    def add_metric(self, name: str, unit: str, value: float) -> None:
        pass


def sqs_price_per_request(path: Path) -> float:
    for line in read_price_table(path).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0] == "SQS standard" and cells[1].startswith("request"):
            match = re.match(r"([\d.]+) per million", cells[2])
            if match:
                return float(match.group(1)) / 1_000_000
    raise SystemExit(f"{path}: no 'SQS standard | request | … per million' row")


def fill(sqs: Any, dlq_url: str, work_arn: str, n: int) -> None:
    """N dead-lettered orders, each with a user attribute and a first-hop envelope naming its source."""
    for start in range(0, n, 10):
        entries = []
        for i in range(start, min(n, start + 10)):
            envelope = Envelope(origin_id=f"origin-{i}", source=work_arn)
            user = {"tenant": {"DataType": "String", "StringValue": "acme"}}
            body = json.dumps(
                {"order_id": f"o-{i}", "customer_id": "c", "amount_cents": 100, "currency": "EUR"}
            )
            entries.append(
                {
                    "Id": str(i - start),
                    "MessageBody": body,
                    "MessageAttributes": merge(user, envelope, body=body, seal=BENCH_SEAL),
                }
            )
        sqs.send_message_batch(QueueUrl=dlq_url, Entries=entries)


def depth(sqs: Any, url: str) -> int:
    """Messages on the queue, visible or still delayed, once nothing sends to it or receives from it.

    Each count is taken at its own instant (moto counts the visible ones first, then the delayed ones,
    even within one call) while delays run out, moving messages from delayed to visible: a message
    whose delay ends in between is counted in neither (a loaded machine's full-size run found 999 of
    1,000). So: visible, delayed, visible again, until the visible count held across the delayed one.
    """

    def count(name: str) -> int:
        return int(sqs.get_queue_attributes(QueueUrl=url, AttributeNames=[name])["Attributes"][name])

    visible = count("ApproximateNumberOfMessages")
    while True:
        delayed = count("ApproximateNumberOfMessagesDelayed")
        again = count("ApproximateNumberOfMessages")
        if again == visible:
            return visible + delayed
        visible = again


def article_invocation(sqs: Any, dlq_url: str, source_url: str, poison_url: str) -> bool:
    """One invocation of the article's redriver; False when it found the DLQ empty."""
    response = sqs.receive_message(
        QueueUrl=dlq_url, MaxNumberOfMessages=10, MessageAttributeNames=["All"], WaitTimeSeconds=1
    )
    messages = response.get("Messages", [])
    if not messages:
        return False
    for message in messages:
        attributes = dict(message.get("MessageAttributes") or {})
        attempt = int(attributes.get("x-redrive-attempt", {}).get("StringValue", "0")) + 1
        if attempt > 5:
            sqs.send_message(QueueUrl=poison_url, MessageBody=message["Body"], MessageAttributes=attributes)
        else:
            attributes["x-redrive-attempt"] = {"DataType": "Number", "StringValue": str(attempt)}
            if attempt == 1:
                attributes["x-original-first-receive-timestamp"] = {
                    "DataType": "String",
                    "StringValue": datetime.now(UTC).isoformat(),
                }
            sqs.send_message(
                QueueUrl=source_url,
                MessageBody=message["Body"],
                MessageAttributes=attributes,
                DelaySeconds=min(60 * 2 ** (attempt - 1), 900),
            )
        sqs.delete_message(QueueUrl=dlq_url, ReceiptHandle=message["ReceiptHandle"])
    return True


def main() -> int:
    # Set here, not at import: the tests import this module for depth() (a process-wide LOG_LEVEL=WARNING
    # there silenced every later Powertools logger's INFO lines in that pytest worker).
    os.environ.update(OFFLINE_ENV)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--prices", type=Path, default=DEFAULT_PRICES)
    parser.add_argument(
        "--json", type=Path, help="also write the requests per message here (cost.py reads it)"
    )
    args = parser.parse_args()
    n = args.messages
    price = sqs_price_per_request(args.prices)
    results: dict[str, dict[str, Any]] = {}
    with mock_aws():
        admin = boto3.client("sqs", region_name=REGION)
        dynamodb = boto3.client("dynamodb", region_name=REGION)
        dynamodb.create_table(
            TableName="breaker",
            BillingMode="PAY_PER_REQUEST",
            AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
            KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        )
        urls = {name: admin.create_queue(QueueName=name)["QueueUrl"] for name in ("dlq", "poison", "delay")}
        for kind in ("sluice", "article"):  # each re-drives to its own work queue
            urls["work"] = admin.create_queue(QueueName=f"work-{kind}")["QueueUrl"]
            work_arn = f"arn:aws:sqs:{REGION}:{ACCOUNT}:work-{kind}"
            fill(admin, urls["dlq"], work_arn, n)
            session = boto3.Session(region_name=REGION)
            calls = Calls(session)
            sqs = session.client("sqs")
            started = time.perf_counter()
            if kind == "sluice":
                settings = RedriveSettings(
                    dead_letter_queue_url=urls["dlq"],
                    poison_queue_url=urls["poison"],
                    source_queue_arn=work_arn,
                    delay_queue_url=urls["delay"],
                    breaker_table="breaker",
                    redrive_base_seconds=60,
                    redrive_cap_seconds=900,
                    redrive_max_per_second=3000,
                    receive_wait_seconds=1,
                    envelope_key_secret="bench-envelope-key",  # noqa: S106 - a secret's name; the redriver gets BENCH_SEAL
                )
                redriver = Redriver(
                    settings=settings,
                    sqs=sqs,
                    breaker=Breaker.from_settings(settings, session.client("dynamodb")),
                    logger=Logger(service="bench", level="WARNING"),
                    metrics_sink=NullMetrics(),
                    seal=BENCH_SEAL,
                )
                report = redriver.run()
                invocations = 1
                moved = report.redriven + report.delayed + report.isolated
            else:
                invocations = 1
                while article_invocation(sqs, urls["dlq"], urls["work"], urls["poison"]):
                    invocations += 1
                moved = n - depth(admin, urls["dlq"])
            seconds = time.perf_counter() - started
            arrived = depth(admin, urls["work"])
            results[kind] = {
                "moved": moved,
                "arrived": arrived,
                "sqs": calls.service("sqs"),
                "dynamodb": calls.service("dynamodb"),
                "ops": dict(sorted(calls.ops.items())),
                "invocations": invocations,
                "seconds": seconds,
            }
            if depth(admin, urls["dlq"]) or moved != n or arrived != n:
                raise SystemExit(f"{kind}: drained {moved}/{n}, {arrived} arrived on the work queue")
    print_table(results, n, price)
    if args.json is not None:
        write_json(args.json, args.prices, n, results)
    return 0


def print_table(results: dict[str, dict[str, Any]], n: int, price: float) -> None:
    """The table: SQS requests, per message and in dollars, per redriver; sluice against the floor."""
    floor = (3 * -(-n // 10) + 1) / n
    print(
        f"redrive of {n:,} dead-lettered messages (in-process moto; SQS ${price * 1e6:.2f} per 1M requests)"
    )
    header = ("", "SQS requests", "per message", "$ per 1M msgs", "DynamoDB", "invocations")
    print("{:10} {:>13} {:>12} {:>14} {:>9} {:>12}".format(*header))
    for kind, r in results.items():
        per = r["sqs"] / n
        row = (
            kind,
            f"{r['sqs']:,}",
            f"{per:.4f}",
            f"{per * price * 1e6:.4f}",
            r["dynamodb"],
            r["invocations"],
        )
        print("{:10} {:>13} {:>12} {:>14} {:>9} {:>12}".format(*row))
        print(f"{'':10} {r['ops']}  ({r['seconds']:.1f} s)")
    per = results["sluice"]["sqs"] / n
    ratio = results["article"]["sqs"] / results["sluice"]["sqs"]
    verdict = "PASS" if per <= floor + 1e-9 else "ABOVE THE FLOOR"
    print(
        f"sluice: {per:.4f} SQS requests per message; batching floor {floor:.4f} = 3 per 10 messages "
        f"+ 1 drain-confirming empty receive ({TARGET} + {1 / n:.4f}): {verdict}"
    )
    print(f"article: {results['article']['sqs'] / n:.4f} per message, {ratio:.1f}x sluice's SQS requests")


def write_json(path: Path, prices: Path, n: int, results: dict[str, dict[str, Any]]) -> None:
    """Per redriver: SQS and DynamoDB requests per message (DynamoDB's per operation) and invocations."""
    per_message = {
        kind: {
            "sqs_requests_per_message": r["sqs"] / n,
            "dynamodb_requests_per_message": r["dynamodb"] / n,
            "dynamodb_operations": {
                op.split(":", 1)[1]: count for op, count in r["ops"].items() if op.startswith("dynamodb:")
            },
            "invocations": r["invocations"],
        }
        for kind, r in results.items()
    }
    document = {"messages": n, "prices_file": str(prices), "redrivers": per_message}
    path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    print(f"figures written to {path}")


if __name__ == "__main__":
    raise SystemExit(main())
