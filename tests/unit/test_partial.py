"""The partial-batch loop (sluice.partial): which records are reported, in which order, on which threads."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from typing import Any

import pytest

from sluice.partial import SqsRecord, each_record

ARN = "arn:aws:sqs:us-east-1:123456789012:work"


def _event(count: int) -> dict[str, Any]:
    return {
        "Records": [
            {"messageId": f"m{i}", "receiptHandle": f"rh-{i}", "eventSourceARN": ARN, "body": f"body {i}"}
            for i in range(count)
        ]
    }


@pytest.mark.parametrize("workers", [1, 4])
def test_given_some_handlers_raise_then_exactly_those_records_are_reported_in_the_events_order(
    workers: int,
) -> None:
    seen: list[str] = []
    lock = threading.Lock()

    def handler(record: SqsRecord) -> None:
        with lock:
            seen.append(record.message_id)
        if record.message_id in {"m1", "m4", "m5"}:
            raise RuntimeError(f"fails {record.message_id}")

    response = each_record(_event(7), handler, context=None, workers=workers)

    assert response == {"batchItemFailures": [{"itemIdentifier": m} for m in ("m1", "m4", "m5")]}
    assert sorted(seen) == [f"m{i}" for i in range(7)]  # every record ran, whatever the others did


def test_given_every_handler_raises_then_every_record_is_reported_and_nothing_raises() -> None:
    def handler(record: SqsRecord) -> None:
        raise ValueError(record.body)

    response = each_record(_event(3), handler, context=None)

    assert [f["itemIdentifier"] for f in response["batchItemFailures"]] == ["m0", "m1", "m2"]


def test_given_workers_then_records_run_on_at_most_that_many_threads_at_once() -> None:
    # Given 4 workers and 8 records whose handlers wait until 4 of them are running together
    running = threading.Barrier(4, timeout=10)
    threads: set[int] = set()

    def handler(record: SqsRecord) -> None:
        threads.add(threading.get_ident())
        running.wait()

    # When the batch runs, Then it completes (4 ran at once) on 4 threads, none failed
    assert each_record(_event(8), handler, context=None, workers=4) == {"batchItemFailures": []}
    assert len(threads) == 4


def test_given_an_empty_batch_then_nothing_is_reported() -> None:
    assert each_record({"Records": []}, lambda r: None, context=None) == {"batchItemFailures": []}


def test_given_an_event_without_records_then_it_is_refused() -> None:
    with pytest.raises(ValueError, match="not an SQS event"):
        each_record({"detail": {}}, lambda r: None, context=None)


def test_a_record_reads_the_fields_sluice_reads_and_is_the_mapping_lambda_sent() -> None:
    raw = _event(1)["Records"][0]
    record = SqsRecord(raw)

    assert (record.message_id, record.receipt_handle, record.event_source_arn, record.body) == (
        "m0",
        "rh-0",
        ARN,
        "body 0",
    )
    assert record.raw_event is raw
    assert dict(record) == raw


@pytest.mark.subprocess
def test_the_consumer_and_the_job_worker_do_not_import_powertools_batch_processing() -> None:
    # Given a fresh interpreter, When the consumer and the job worker are imported
    code = (
        "import json, sys\nimport sluice.consumer.batch, sluice.jobs.worker\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('aws_lambda_powertools.utilities'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    # Then neither Powertools' batch utility nor its pydantic event models were (their import is ~100 ms)
    assert not [
        m
        for m in loaded
        if m.startswith(("aws_lambda_powertools.utilities.batch", "aws_lambda_powertools.utilities.parser"))
    ]
