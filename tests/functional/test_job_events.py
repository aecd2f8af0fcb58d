"""Every file in events/job_consumer, events/job_reaper and events/job_sweeper runs through its real
handler (a fresh cold start, as `sam local invoke` would run it) against in-process AWS (moto) and a
real PostgreSQL (a schema of its own per test). The rows the events name are created first.

Skipped, with the reason printed, when no PostgreSQL answers.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import boto3
import psycopg
import pytest
from moto import mock_aws
from psycopg import sql

from sluice.jobs import Connector, JobStore
from sluice_local.emulation.lambda_loader import LambdaContext, load_handler
from tests.conftest import create_ledger_table, envelope_key_secret

from .test_events import emf_metrics

ROOT = Path(__file__).resolve().parents[2]
EVENTS = ROOT / "events"
CHARGE = uuid.UUID("6a0f2c1e-1b7d-4c55-9a59-000000000001")
THUMB = uuid.UUID("6a0f2c1e-1b7d-4c55-9a59-000000000002")
FLAKY = uuid.UUID("6a0f2c1e-1b7d-4c55-9a59-000000000003")
INVALID = uuid.UUID("6a0f2c1e-1b7d-4c55-9a59-000000000004")

# file → (failed item ids, metric values that must be seen, job id → status after)
EXPECTED: dict[str, tuple[set[str], dict[str, int], dict[uuid.UUID, str]]] = {
    "job_consumer/charge.json": (set(), {"JobsCompleted": 1}, {CHARGE: "completed"}),
    "job_consumer/duplicate.json": (
        set(),
        {"JobsCompleted": 1, "JobsAlreadyHandled": 1},
        {CHARGE: "completed"},
    ),
    "job_consumer/mixed-batch.json": (
        set(),
        {
            "JobsCompleted": 2,  # the charge, the thumbnail
            "JobsFailed": 1,  # the flaky charge: error, retried by the sweeper
            "JobsDead": 1,  # the invalid amount: PermanentError
            "JobMessagesRejected": 3,  # an unknown job, a job_id that is no UUID, not JSON
            "JobStoreUnavailable": 0,
        },
        {CHARGE: "completed", THUMB: "completed", FLAKY: "error", INVALID: "dead"},
    ),
    "job_reaper/schedule.json": (set(), {"JobsReaped": 1, "JobsDead": 0}, {CHARGE: "pending"}),
    "job_sweeper/schedule.json": (
        set(),
        {"JobsRetried": 1, "JobsReenqueued": 1},
        {FLAKY: "pending", THUMB: "pending"},
    ),
}


def _age(url: str, schema: str, column: str, job_id: uuid.UUID) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            sql.SQL("UPDATE {} SET {} = now() - interval '1 hour' WHERE id = %s").format(
                sql.Identifier(schema, "jobs"), sql.Identifier(column)
            ),
            (job_id,),
        )


@pytest.fixture
def job_stack(monkeypatch, pg_url, jobs_schema):
    with mock_aws():
        sqs = boto3.client("sqs", region_name="us-east-1")
        ddb = boto3.client("dynamodb", region_name="us-east-1")
        jobs = sqs.create_queue(QueueName="sluice-dev-jobs")["QueueUrl"]
        poison = sqs.create_queue(QueueName="sluice-dev-poison")["QueueUrl"]
        create_ledger_table(ddb, "sluice-dev-ledger")  # the example job kinds' side effects
        secret = boto3.client("secretsmanager", region_name="us-east-1").create_secret(
            Name="sluice-dev-database", SecretString=pg_url
        )["ARN"]
        for name, value in {
            "SLUICE_DATABASE_SECRET_ARN": secret,
            "SLUICE_JOBS_SCHEMA": jobs_schema,
            "SLUICE_POISON_QUEUE_URL": poison,
            "SLUICE_JOB_QUEUE_URL": jobs,
            "SLUICE_JOB_LEASE_SECONDS": "900",
            "SLUICE_JOB_ORPHAN_SECONDS": "900",
            "SLUICE_ENVELOPE_KEY_SECRET": envelope_key_secret(),
            "LEDGER_TABLE_NAME": "sluice-dev-ledger",
        }.items():
            monkeypatch.setenv(name, value)
        store = JobStore(Connector(lambda _r: pg_url), schema=jobs_schema, worker="test")
        yield sqs, jobs, poison, store, pg_url, jobs_schema


def _given_rows(event_file: str, store: JobStore, url: str, schema: str) -> None:
    store.create("charge", {"order_id": "ord-1", "amount_cents": 1250}, job_id=CHARGE)
    store.create("thumbnail", {"image": "s3://photos/1.jpg"}, job_id=THUMB)
    store.create("charge", {"order_id": "ord-3", "amount_cents": 990, "fail_attempts": 1}, job_id=FLAKY)
    store.create("charge", {"order_id": "ord-4", "amount_cents": 0}, job_id=INVALID)
    if event_file == "job_reaper/schedule.json":  # a worker claimed the charge an hour ago and died
        store.claim(CHARGE)
        _age(url, schema, "claimed_at", CHARGE)
    if event_file == "job_sweeper/schedule.json":  # the flaky charge failed; the thumbnail's message was lost
        store.fail(store.claim(FLAKY), "provider down", retry_in=0)
        _age(url, schema, "updated_at", THUMB)


@pytest.mark.parametrize("event_file", sorted(EXPECTED))
def test_event_runs_through_its_handler(job_stack, capsys, event_file):
    sqs, jobs, poison, store, url, schema = job_stack
    _given_rows(event_file, store, url, schema)
    function = event_file.split("/")[0]
    handler = load_handler(ROOT / "functions" / function, "app.lambda_handler")
    event = json.loads((EVENTS / event_file).read_text())
    capsys.readouterr()

    response = handler(event, LambdaContext(function_name=f"sluice-dev-{function}", timeout_seconds=30))

    failed, metric_expectations, statuses = EXPECTED[event_file]
    if "Records" in event:
        assert {f["itemIdentifier"] for f in response["batchItemFailures"]} == failed
    seen = emf_metrics(capsys.readouterr().out)
    for name, value in metric_expectations.items():
        assert seen.get(name, 0) == value, (
            f"{name}: expected {value}, saw {seen.get(name, 0)} in {event_file}"
        )
    for job_id, status in statuses.items():
        job = store.get(job_id)
        assert job is not None
        assert job.status == status, f"{job_id}: {job.status}, expected {status}"
    rejected = metric_expectations.get("JobMessagesRejected", 0)
    poisoned = sqs.receive_message(QueueUrl=poison, MaxNumberOfMessages=10, MessageAttributeNames=["All"])
    assert len(poisoned.get("Messages", [])) == rejected
    enqueued = sum(metric_expectations.get(m, 0) for m in ("JobsReaped", "JobsRetried", "JobsReenqueued"))
    sent = sqs.receive_message(QueueUrl=jobs, MaxNumberOfMessages=10).get("Messages", [])
    assert len(sent) == enqueued
    assert {json.loads(m["Body"])["job_id"] for m in sent} == {
        str(j) for j, s in statuses.items() if s == "pending"
    }


def test_the_consumer_refuses_a_lease_shorter_than_its_invocation(job_stack, monkeypatch):
    from sluice.errors import ConfigurationError  # noqa: PLC0415

    monkeypatch.setenv("SLUICE_JOB_LEASE_SECONDS", "10")
    handler = load_handler(ROOT / "functions" / "job_consumer", "app.lambda_handler")
    event = json.loads((EVENTS / "job_consumer/charge.json").read_text())
    with pytest.raises(ConfigurationError, match="must exceed the job consumer's timeout"):
        handler(event, LambdaContext(function_name="sluice-dev-job-consumer", timeout_seconds=30))


def test_an_unreachable_database_sends_every_record_back_after_one_try(
    job_stack, monkeypatch, capsys, caplog
):
    _sqs, *_ = job_stack
    secret = boto3.client("secretsmanager", region_name="us-east-1").create_secret(
        Name="sluice-dev-database-down", SecretString="postgresql://postgres@127.0.0.1:1/test"
    )["ARN"]
    monkeypatch.setenv("SLUICE_DATABASE_SECRET_ARN", secret)
    handler = load_handler(ROOT / "functions" / "job_consumer", "app.lambda_handler")
    event = json.loads((EVENTS / "job_consumer/mixed-batch.json").read_text())
    capsys.readouterr()
    response = handler(event, LambdaContext(function_name="sluice-dev-job-consumer", timeout_seconds=30))
    # Every record that names a job goes back to SQS (none lost, none poisoned for the database's fault);
    # the two malformed ones, which no database could make runnable, go to the poison queue
    naming = [r["messageId"] for r in event["Records"] if _names_a_job(r["body"])]
    assert len(naming) == len(event["Records"]) - 2
    assert {f["itemIdentifier"] for f in response["batchItemFailures"]} == set(naming)
    out = capsys.readouterr().out
    assert emf_metrics(out)["JobStoreUnavailable"] == len(naming)
    assert emf_metrics(out)["JobMessagesRetried"] == len(naming)
    assert emf_metrics(out)["JobMessagesRejected"] == 2
    # ... after one connection attempt, not one per record
    down = [
        r
        for r in caplog.records
        if r.getMessage() == "job store unreachable; the batch's jobs go back to SQS"
    ]
    assert len(down) == 1


def test_an_unexpected_failure_goes_back_to_sqs_alone_with_a_log_line_and_a_metric(job_stack, caplog):

    from sluice.jobs import Outcome  # noqa: PLC0415
    from tests.doubles import RecordingMetrics, RunsEachJob  # noqa: PLC0415

    sqs, _jobs, poison, *_ = job_stack

    class Worker(RunsEachJob):
        def run(self, job_id, *, deadline=None, trace=None):
            if job_id == FLAKY:
                raise RuntimeError("a bug nobody expected")
            return Outcome.COMPLETED

    metrics = RecordingMetrics()
    consumer = _consumer_with(Worker(), sqs, poison, metrics)
    event = json.loads((EVENTS / "job_consumer/mixed-batch.json").read_text())
    context: Any = LambdaContext(function_name="sluice-dev-job-consumer", timeout_seconds=30)
    response = consumer.handle(event, context)
    flaky = [r["messageId"] for r in event["Records"] if str(FLAKY) in r["body"]]
    assert [f["itemIdentifier"] for f in response["batchItemFailures"]] == flaky
    assert [r for r in caplog.records if r.getMessage().startswith("job message failed unexpectedly")]
    assert metrics.values["JobMessagesRetried"] == 1


def test_one_job_the_database_did_not_answer_in_time_goes_back_alone(job_stack, caplog):

    from sluice.errors import JobStoreUnavailable  # noqa: PLC0415
    from sluice.jobs import Outcome  # noqa: PLC0415
    from tests.doubles import RecordingMetrics, RunsEachJob  # noqa: PLC0415

    sqs, _jobs, poison, *_ = job_stack
    tried: list[uuid.UUID] = []

    class Worker(RunsEachJob):
        def run(self, job_id, *, deadline=None, trace=None):
            tried.append(job_id)
            if job_id == CHARGE:  # a lock timeout on one hot row: the database itself is fine
                raise JobStoreUnavailable("commit: canceling statement due to lock timeout")
            return Outcome.COMPLETED

    metrics = RecordingMetrics()
    consumer = _consumer_with(Worker(), sqs, poison, metrics)
    event = json.loads((EVENTS / "job_consumer/mixed-batch.json").read_text())
    context: Any = LambdaContext(function_name="sluice-dev-job-consumer", timeout_seconds=30)
    response = consumer.handle(event, context)
    hot = [r["messageId"] for r in event["Records"] if str(CHARGE) in r["body"]]
    assert [f["itemIdentifier"] for f in response["batchItemFailures"]] == hot
    assert THUMB in tried  # the records after it were still tried
    assert FLAKY in tried
    assert metrics.values["JobStoreUnavailable"] == 1


def test_records_left_when_the_invocation_is_about_to_end_go_back_untouched(job_stack):

    from sluice.jobs import Outcome  # noqa: PLC0415
    from tests.doubles import RecordingMetrics, RunsEachJob  # noqa: PLC0415

    sqs, _jobs, poison, *_ = job_stack
    tried: list[uuid.UUID] = []

    class Worker(RunsEachJob):
        def run(self, job_id, *, deadline=None, trace=None):
            tried.append(job_id)
            return Outcome.COMPLETED

    consumer = _consumer_with(Worker(), sqs, poison, RecordingMetrics())
    event = json.loads((EVENTS / "job_consumer/mixed-batch.json").read_text())
    # 1 s left of the invocation: less than the reserve a run's last transition needs
    context: Any = LambdaContext(function_name="sluice-dev-job-consumer", timeout_seconds=1)
    response = consumer.handle(event, context)
    assert tried == []
    assert len(response["batchItemFailures"]) == len(event["Records"])


def _names_a_job(body: str) -> bool:
    from sluice.errors import PermanentError  # noqa: PLC0415
    from sluice.jobs import parse_job_message  # noqa: PLC0415

    try:
        parse_job_message(body)
    except PermanentError:
        return False
    return True


def _consumer_with(worker: Any, sqs: Any, poison: str, metrics: Any) -> Any:
    """A job consumer around a stand-in worker (what the record loop does with each outcome)."""
    from aws_lambda_powertools import Logger  # noqa: PLC0415

    from sluice.jobs import JobConsumer  # noqa: PLC0415

    return JobConsumer(
        worker, sqs=sqs, poison_queue_url=poison, logger=Logger(service="sluice-test"), metrics_sink=metrics
    )
