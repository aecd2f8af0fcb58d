"""One trace id follows a message end to end, through the deployed template (both RedriveModes).

A producer sends with an X-Ray header (as the X-Ray SDK does from a traced producer). Across consumer →
DLQ → redriver → poison queue, across delay queue → S3 → delay state machine → rehydrator →
consumer, and across job queue → job consumer → poison queue (when a PostgreSQL answers), every hop
sends the message on with the same ``AWSTraceHeader`` and logs it with the same ``correlation_id``
(the W3C trace id of that header), and the envelope carries both forms.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from sluice.envelope import Envelope, merge, utcnow
from sluice.jobs.worker import job_message
from sluice.logevents import EVENT, LogEvent
from sluice_local.app import messages
from sluice_local.app.messages import ORDERS
from sluice_local.app.observer import Stack, envelope_of
from sluice_local.app.principals import PRODUCER

DEADLINE_SECONDS = 240.0  # generous for a loaded machine: only reached when the trace is broken


def traced() -> tuple[str, str]:
    """A fresh X-Ray header and its W3C trace id."""
    epoch, rest = f"{int(time.time()):08x}", uuid.uuid4().hex[:24]
    return f"Root=1-{epoch}-{rest};Parent={uuid.uuid4().hex[:16]};Sampled=1", epoch + rest


def system(header: str) -> dict[str, Any]:
    return {"AWSTraceHeader": {"DataType": "String", "StringValue": header}}


def wait_for(what: str, found: Callable[[], Any]) -> Any:
    deadline = time.monotonic() + DEADLINE_SECONDS
    while time.monotonic() < deadline:
        if (value := found()) is not None:
            return value
        time.sleep(0.5)  # polling the condition below, not standing in for it
    raise AssertionError(f"{what} not seen within {DEADLINE_SECONDS:.0f} s")


def test_given_a_traced_message_that_fails_for_good_then_one_trace_id_follows_it_to_the_poison_queue(
    stack: Stack,
) -> None:
    header, trace_id = traced()
    key = f"{stack.outputs['ClaimCheckPrefix']}trace-{uuid.uuid4().hex}/payload"  # never uploaded
    sqs = stack.client("sqs")
    origin = sqs.send_message(
        QueueUrl=stack.outputs[ORDERS + "QueueUrl"],
        MessageBody=messages.claim_check(stack.outputs["ClaimCheckBucketName"], key),
        MessageSystemAttributes=system(header),
    )["MessageId"]

    def poisoned() -> tuple[dict[str, Any], Envelope] | None:
        for message in stack.every_message("PoisonPillQueueUrl"):
            env = envelope_of(message)
            if env is not None and env.origin_id == origin:
                return message, env
        return None

    message, envelope = wait_for("the message in the poison queue", poisoned)

    assert message["Attributes"].get("AWSTraceHeader") == header  # sent on with it at every hop
    assert envelope.trace == header
    assert envelope.traceparent is not None
    assert envelope.traceparent.split("-")[1] == trace_id
    lines = [e for e in stack.logs() if e.get("correlation_id") == trace_id]
    consumer = {e.get(EVENT) for e in lines if key in str(e.get("error", ""))}
    redriver = {e.get(EVENT) for e in lines if e.get("origin_id") == origin}
    assert {LogEvent.RECORD_RETRIED, LogEvent.RECORD_DEAD_LETTERED} <= consumer, consumer
    assert {LogEvent.MESSAGE_REDRIVEN, LogEvent.MESSAGE_ISOLATED} <= redriver, redriver


def test_given_a_traced_message_when_the_redrive_state_machine_sends_it_back_then_it_stays_on_its_trace(
    sfn_stack: Stack,
) -> None:
    """RedriveMode=stepfunctions. The Redrive task's optimized sqs:sendMessage integration takes no
    MessageSystemAttributes (AWS refuses the field; the local runtime does too), so that hop carries the
    trace in the envelope, which the consumer reads first: its log lines after each redrive, the Plan
    step's and the isolator's all carry the same correlation_id, and the poison message its header."""
    header, trace_id = traced()
    key = f"{sfn_stack.outputs['ClaimCheckPrefix']}trace-{uuid.uuid4().hex}/payload"  # never uploaded
    origin = sfn_stack.client("sqs").send_message(
        QueueUrl=sfn_stack.outputs[ORDERS + "QueueUrl"],
        MessageBody=messages.claim_check(sfn_stack.outputs["ClaimCheckBucketName"], key),
        MessageSystemAttributes=system(header),
    )["MessageId"]

    def poisoned() -> dict[str, Any] | None:
        for message in sfn_stack.every_message("PoisonPillQueueUrl"):
            env = envelope_of(message)
            if env is not None and env.origin_id == origin:
                return message
        return None

    message = wait_for("the message in the poison queue", poisoned)

    assert message["Attributes"].get("AWSTraceHeader") == header
    lines = [e for e in sfn_stack.logs() if e.get("correlation_id") == trace_id]
    dead_lettered = [
        e for e in lines if e.get(EVENT) == LogEvent.RECORD_DEAD_LETTERED and key in str(e.get("error"))
    ]
    planned = [e for e in lines if e.get(EVENT) == LogEvent.REDRIVE_PLANNED and e.get("origin_id") == origin]
    assert len(dead_lettered) >= 2, dead_lettered  # the first receive, and again after a redrive
    assert {e["action"] for e in planned} == {"redrive", "poison"}, planned
    assert any(e.get(EVENT) == LogEvent.PLAN_ISOLATED for e in lines)


def test_given_a_traced_delayed_message_then_the_rehydrated_delivery_carries_its_trace_id(
    stack: Stack,
) -> None:
    header, trace_id = traced()
    order = f"trace-{uuid.uuid4().hex[:12]}"
    body = json.dumps(messages.order(order))
    due = utcnow() + timedelta(seconds=12)  # beyond the direct-send threshold: parked in S3
    envelope = Envelope(deliver_at=due, target=stack.outputs[ORDERS + "QueueUrl"])
    stack.client("sqs", PRODUCER).send_message(  # what send_delayed sends, from a traced producer
        QueueUrl=stack.outputs["DelayQueueUrl"],
        MessageBody=body,
        MessageAttributes=merge({}, envelope, body=body, seal=None),
        MessageSystemAttributes=system(header),
    )

    charged = wait_for(
        "the rehydrated order's charge",
        lambda: next((e for e in stack.logs() if e.get("order_id") == order and "amount_cents" in e), None),
    )

    # parked in S3 and rehydrated by the state machine with its envelope: the consumer logs its trace id
    assert charged.get("correlation_id") == trace_id, charged


def test_given_a_traced_job_message_naming_no_job_then_it_is_poisoned_on_its_trace(job_stack: Stack) -> None:
    """The job path: the job consumer reads its records as every hop does, so a job message it rejects
    goes to the poison queue with the header it arrived with, and its log lines carry the trace id."""
    header, trace_id = traced()
    origin = job_stack.client("sqs").send_message(
        QueueUrl=job_stack.outputs["JobQueueUrl"],
        MessageBody=job_message(uuid.uuid4()),  # a job this database does not have
        MessageSystemAttributes=system(header),
    )["MessageId"]

    def poisoned() -> tuple[dict[str, Any], Envelope] | None:
        for message in job_stack.every_message("PoisonPillQueueUrl"):
            env = envelope_of(message)
            if env is not None and env.origin_id == origin:
                return message, env
        return None

    message, envelope = wait_for("the job message in the poison queue", poisoned)

    assert message["Attributes"].get("AWSTraceHeader") == header
    assert envelope.trace == header
    assert envelope.traceparent is not None
    assert envelope.traceparent.split("-")[1] == trace_id
    assert envelope.last_error is not None
    assert envelope.last_error.type == "JobNotFound"
    assert envelope.source == job_stack.outputs["JobQueueArn"]
    rejected = wait_for(
        "the job consumer's line about it",
        lambda: next(
            (
                e
                for e in job_stack.logs()
                if e.get("message_id") == origin and e.get(EVENT) == LogEvent.JOB_MESSAGE_REJECTED
            ),
            None,
        ),
    )
    assert rejected.get("correlation_id") == trace_id, rejected


def test_given_a_traced_job_message_then_the_job_workers_log_lines_carry_its_trace_id(
    job_stack: Stack,
) -> None:
    header, trace_id = traced()
    job = job_stack.job_store().create(
        "charge", {"order_id": f"trace-{uuid.uuid4().hex[:12]}", "amount_cents": 0}
    )
    job_stack.client("sqs").send_message(  # an invalid charge: dead at once, logged by the worker
        QueueUrl=job_stack.outputs["JobQueueUrl"],
        MessageBody=job_message(job.id),
        MessageSystemAttributes=system(header),
    )

    dead = wait_for(
        "the worker's line about the dead job",
        lambda: next(
            (
                e
                for e in job_stack.logs()
                if e.get(EVENT) == LogEvent.JOB_DEAD and e.get("job_id") == str(job.id)
            ),
            None,
        ),
    )

    assert dead.get("correlation_id") == trace_id, dead
