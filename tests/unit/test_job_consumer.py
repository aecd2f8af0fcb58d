"""The job consumer reads each record through Arrival: the poison hop keeps the message's trace, every log
line about a record carries its correlation_id, a forged envelope is logged and counted (no database:
a recording worker stands in for JobWorker, a recording SQS client for the poison queue)."""

from __future__ import annotations

import io
import json
import threading
import uuid
from datetime import UTC, datetime
from typing import Any

from aws_lambda_powertools import Logger

from sluice import metrics
from sluice.envelope import Envelope, ErrorInfo, Seal, merge
from sluice.jobs import JobConsumer, Outcome, job_message
from sluice.logevents import EVENT, LogEvent
from sluice_local.testing import sqs_record
from tests.doubles import FakeSqs, RecordingMetrics, RunsEachJob, envelope_of

SEAL = Seal((b"k" * 32,))
FORGER = Seal((b"f" * 32,))
QUEUE = "arn:aws:sqs:us-east-1:123456789012:jobs"
POISON = "https://sqs.us-east-1.amazonaws.com/123456789012/poison"
HEADER = "Root=1-674a2f00-0123456789abcdef01234567;Parent=89abcdef01234567;Sampled=1"
TRACE_ID = "674a2f000123456789abcdef01234567"


class Worker(RunsEachJob):
    """Records the job ids it is asked to run; every run completes."""

    def __init__(self) -> None:
        self.ran: list[uuid.UUID] = []
        self.traces: list[str | None] = []

    def run(self, job_id: uuid.UUID, *, deadline: float | None = None, trace: str | None = None) -> Outcome:
        self.ran.append(job_id)
        self.traces.append(trace)
        return Outcome.COMPLETED


def record(
    body: str,
    *,
    message_id: str = "job-msg-1",
    attributes: dict[str, dict[str, Any]] | None = None,
    system: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A Lambda SQS event record (camelCase attributes), a second receive."""
    sent = datetime.fromtimestamp(1795860000, UTC)
    return sqs_record(
        body, message_id=message_id, attributes=attributes, receive_count=2, sent_at=sent, queue_arn=QUEUE,
        system=system,
    )  # fmt: skip


def consume(*records: dict[str, Any]) -> tuple[dict[str, Any], FakeSqs, Worker, RecordingMetrics, list[dict]]:
    """Run one batch; (response, the SQS client, the worker, the metrics, the JSON log lines)."""
    sqs, worker, sink, log = FakeSqs(), Worker(), RecordingMetrics(unit="Count"), io.StringIO()
    consumer = JobConsumer(
        worker,  # type: ignore[arg-type]
        sqs=sqs,  # type: ignore[arg-type]
        poison_queue_url=POISON,
        logger=Logger(service=f"sluice-test-{uuid.uuid4().hex}", stream=log),
        metrics_sink=sink,
        seal=SEAL,
    )
    response = consumer.handle({"Records": list(records)}, None)
    lines = [json.loads(line) for line in log.getvalue().splitlines() if line.startswith("{")]
    return response, sqs, worker, sink, lines


def test_given_a_traced_message_that_names_no_job_when_consumed_then_its_poison_message_keeps_the_trace():
    # Given a message that is no job message, arriving with an X-Ray header and no envelope
    response, sqs, worker, sink, _ = consume(record("charge it", system={"AWSTraceHeader": HEADER}))

    # Then it is rejected to the poison queue, handled (not retried), and no job ran
    assert response == {"batchItemFailures": []}
    assert worker.ran == []
    assert sink.values[metrics.JOB_MESSAGES_REJECTED] == 1
    [sent] = sqs.sent
    assert sent["QueueUrl"] == POISON
    assert sent["MessageBody"] == "charge it"
    # on its trace: the X-Ray header sent on with it (SQS → Lambda linking) and kept in its envelope
    assert sent["MessageSystemAttributes"] == {
        "AWSTraceHeader": {"DataType": "String", "StringValue": HEADER}
    }
    envelope = envelope_of(sent)
    assert envelope.trace == HEADER
    assert envelope.traceparent is not None
    assert envelope.traceparent.split("-")[1] == TRACE_ID
    # the first hop's identity and SQS's receive count, read once by Arrival
    assert (envelope.origin_id, envelope.source) == ("job-msg-1", QUEUE)
    assert envelope.last_error is not None
    assert envelope.last_error.receives == 2


def test_given_a_rejected_message_when_consumed_then_its_log_lines_carry_its_correlation_id():
    # Given a malformed job message on a trace
    _, _, _, _, lines = consume(record('{"job_id": 42}', system={"AWSTraceHeader": HEADER}))

    # Then the rejection line names the message and its trace id
    [rejected] = [line for line in lines if line.get(EVENT) == LogEvent.JOB_MESSAGE_REJECTED]
    assert rejected["message_id"] == "job-msg-1"
    assert rejected["correlation_id"] == TRACE_ID
    assert "no string job_id" in rejected["reason"]
    # and the batch's own line carries no record's ids (the keys are removed after each record)
    [done] = [line for line in lines if line.get(EVENT) == LogEvent.JOB_BATCH_DONE]
    assert "correlation_id" not in done
    assert "message_id" not in done


def test_given_two_records_when_consumed_then_each_line_carries_its_own_correlation_id():
    # Given two malformed messages on different traces
    other = "Root=1-674a2f01-fedcba9876543210fedcba98;Sampled=1"
    _, _, _, _, lines = consume(
        record("x", message_id="a", system={"AWSTraceHeader": HEADER}),
        record("y", message_id="b", system={"AWSTraceHeader": other}),
    )
    # Then each rejection line carries the trace id of its own record
    rejected = {
        line["message_id"]: line["correlation_id"]
        for line in lines
        if line.get(EVENT) == LogEvent.JOB_MESSAGE_REJECTED
    }
    assert rejected == {"a": TRACE_ID, "b": "674a2f01fedcba9876543210fedcba98"}


class EnvironmentStartingMidRecord(FakeSqs):
    """The poison send, during which another execution environment of the same function starts an
    invocation on its own thread: the local runtime runs environments as threads of one process, where
    every environment's Powertools logger shares its formatter (``clear_state`` and global keys)."""

    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def send_message(self, **kwargs: Any) -> dict[str, str]:
        def other_invocation() -> None:
            other = Logger(service=self.service)
            # what inject_lambda_context(clear_state=True) does at the start of an invocation
            other.structure_logs(append=False, cold_start=False)
            other.append_keys(message_id="someone-elses", correlation_id="someone-elses-trace")

        thread = threading.Thread(target=other_invocation)
        thread.start()
        thread.join()
        return super().send_message(**kwargs)


def test_given_another_environment_starting_mid_record_then_the_rejection_line_keeps_its_own_ids():
    # Given a malformed job message on a trace, rejected while another environment starts an invocation
    service, log = f"sluice-test-{uuid.uuid4().hex}", io.StringIO()
    consumer = JobConsumer(
        Worker(),  # type: ignore[arg-type]
        sqs=EnvironmentStartingMidRecord(service),  # type: ignore[arg-type]
        poison_queue_url=POISON,
        logger=Logger(service=service, stream=log),
        metrics_sink=RecordingMetrics(unit="Count"),
        seal=SEAL,
    )
    # When consumed
    consumer.handle({"Records": [record('{"job_id": 42}', system={"AWSTraceHeader": HEADER})]}, None)

    # Then the rejection line names its own message and trace, not the other invocation's
    lines = [json.loads(line) for line in log.getvalue().splitlines() if line.startswith("{")]
    [rejected] = [line for line in lines if line.get(EVENT) == LogEvent.JOB_MESSAGE_REJECTED]
    assert (rejected["message_id"], rejected["correlation_id"]) == ("job-msg-1", TRACE_ID)


def forged_job(job_id: uuid.UUID) -> dict[str, Any]:
    """A job message whose envelope claims another message's history, sealed with a key not the stack's."""
    body = job_message(job_id)
    history = Envelope(
        origin_id="someone-else",
        attempts=7,
        last_error=ErrorInfo.of("Forged", "not ours", at=datetime(2026, 1, 1, tzinfo=UTC), receives=9),
        trace=HEADER,
    )
    return record(body, attributes=merge({}, history, body=body, seal=FORGER))


def test_given_a_forged_envelope_on_a_job_message_when_consumed_then_it_is_logged_and_counted():
    # Given a job message carrying a forged envelope
    job_id = uuid.uuid4()
    response, sqs, worker, sink, lines = consume(forged_job(job_id))

    # Then the job still runs (a forged envelope blocks nothing) ...
    assert response == {"batchItemFailures": []}
    assert worker.ran == [job_id]
    assert sqs.sent == []
    # ... and the forgery is logged with the message's ids and counted
    [warning] = [line for line in lines if line.get(EVENT) == LogEvent.ENVELOPE_CORRUPT]
    assert warning["level"] == "WARNING"
    assert warning["message_id"] == "job-msg-1"
    assert warning["correlation_id"] == TRACE_ID  # the unsealed trace context survives the seal check
    assert sink.values[metrics.ENVELOPES_CORRUPT] == 1
    assert sink.values[metrics.JOBS_COMPLETED] == 1


def test_given_a_forged_envelope_on_a_message_that_names_no_job_then_its_poison_copy_has_its_own_identity():
    # Given a forged envelope on a message that is no job message
    body = "not a job"
    forged = Envelope(origin_id="someone-else", attempts=7, trace=HEADER)
    response, sqs, _, sink, _ = consume(record(body, attributes=merge({}, forged, body=body, seal=FORGER)))

    # Then the poison copy carries this delivery's identity, not the forged history, and both are counted
    assert response == {"batchItemFailures": []}
    envelope = envelope_of(sqs.sent[0])
    assert (envelope.origin_id, envelope.attempts) == ("job-msg-1", 1)  # this failure, not the forged 7
    assert envelope.trace == HEADER
    assert sink.values[metrics.ENVELOPES_CORRUPT] == 1
    assert sink.values[metrics.JOB_MESSAGES_REJECTED] == 1


def test_given_honest_envelopes_when_consumed_then_no_envelope_is_counted_corrupt():
    # Given a job message sealed with the stack's key (and one with no envelope at all)
    job_id = uuid.uuid4()
    body = job_message(job_id)
    sealed = merge({}, Envelope(origin_id="first", trace=HEADER), body=body, seal=SEAL)
    _, _, worker, sink, lines = consume(
        record(body, attributes=sealed), record(job_message(job_id), message_id="b")
    )

    # Then both run, and the corrupt-envelope counter is emitted as 0
    assert len(worker.ran) == 2
    assert metrics.ENVELOPES_CORRUPT in sink.values
    assert sink.values[metrics.ENVELOPES_CORRUPT] == 0
    assert not [line for line in lines if line["level"] == "WARNING"]


def test_given_a_traced_job_message_when_consumed_then_the_worker_runs_the_job_on_that_trace():
    # Given a job message that arrived on a trace
    job_id = uuid.uuid4()
    body = json.dumps({"job_id": str(job_id)})
    # When it is consumed
    response, _, worker, _, _ = consume(record(body, system={"AWSTraceHeader": HEADER}))
    # Then the worker runs the job with that X-Ray header (kept on the job for its later attempts)
    assert response == {"batchItemFailures": []}
    assert worker.ran == [job_id]
    assert worker.traces == [HEADER]
