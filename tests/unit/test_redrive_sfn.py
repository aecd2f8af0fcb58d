"""The redrive state machine's Lambda steps (sluice.redrive_sfn), Given / When / Then.

Messages are in the shape Step Functions' ``aws-sdk:sqs:receiveMessage`` hands each Map iteration:
ReceiveMessage's ``Messages[i]`` with PascalCase fields and binary attribute values as base64 text,
wrapped as the PlanBatch Map's ItemSelector wraps it: ``{"message": ..., "probeAt": ...}``.
"""

from __future__ import annotations

import base64
import io
import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from aws_lambda_powertools import Logger

from sluice.envelope import ATTRIBUTE, Envelope, ErrorInfo
from sluice.errors import ConfigurationError, InvalidEventError, PermanentError
from sluice.limits import MAX_DELAY_SECONDS, MAX_VISIBILITY_SECONDS
from sluice.logevents import EVENT, LogEvent
from sluice.redrive import steps as redrive_sfn
from sluice.redrive.breaker import BreakerPolicy
from sluice.redrive.plan import HOLD_MARGIN_SECONDS, MAX_HOLD_WAIT, REFUSED
from sluice.redrive.settings import RedriveSettings
from sluice.redrive.steps import (
    FETCH_VISIBILITY_SECONDS,
    MAX_HOLD_SECONDS,
    plan_step,
    refusal_reason,
    refusal_step,
)
from tests.conftest import ENVELOPE_KEY_ARN
from tests.doubles import RecordingMetrics, envelope_of

NOW = datetime(2026, 11, 28, 8, 0, tzinfo=UTC)
ACCOUNT = "123456789012"
WORK_ARN = f"arn:aws:sqs:us-east-1:{ACCOUNT}:sluice-dev-work"
WORK_URL = f"https://sqs.us-east-1.amazonaws.com/{ACCOUNT}/sluice-dev-work"
POISON_URL = f"https://sqs.us-east-1.amazonaws.com/{ACCOUNT}/sluice-dev-poison"
DLQ_URL = f"https://sqs.us-east-1.amazonaws.com/{ACCOUNT}/sluice-dev-work-dlq"


class FakeBreaker:
    def __init__(self, policy: BreakerPolicy | None = None, fail: Exception | None = None) -> None:
        self.policy = policy or BreakerPolicy(cooldown_seconds=300)
        self.observed: list[tuple[int, int]] = []
        self.fresh: list[int] = []
        self.latest_due: list[float | None] = []
        self._fail = fail

    def observe(self, *, seen: int, bouncing: int, fresh: int = 0, latest_due: float | None = None) -> None:
        if self._fail is not None:
            raise self._fail
        self.observed.append((seen, bouncing))
        self.fresh.append(fresh)
        self.latest_due.append(latest_due)


def settings(**overrides: str) -> RedriveSettings:
    env = {
        "SLUICE_BREAKER_TABLE": "sluice-dev-breaker",
        "SLUICE_BREAKER_COOLDOWN_SECONDS": "300",
        "SLUICE_DEAD_LETTER_QUEUE_URL": DLQ_URL,
        "SLUICE_POISON_QUEUE_URL": POISON_URL,
        "SLUICE_ENVELOPE_KEY_SECRET": ENVELOPE_KEY_ARN,
        "SLUICE_SOURCE_QUEUE_ARN": WORK_ARN,
        "SLUICE_REDRIVE_MAX_ATTEMPTS": "5",
        "SLUICE_REDRIVE_BASE_SECONDS": "60",
        "SLUICE_REDRIVE_CAP_SECONDS": "3600",
        "SLUICE_REDRIVE_FLOOR_SECONDS": "1",
    }
    env.update({f"SLUICE_{k.upper()}": v for k, v in overrides.items()})
    return RedriveSettings.from_env(env)


def url_of(arn: str) -> str:
    name = arn.rsplit(":", 1)[-1]
    return f"https://sqs.us-east-1.amazonaws.com/{ACCOUNT}/{name}"


def highest(a: float, b: float) -> float:
    return b


def message(
    envelope: Envelope | None = None,
    *,
    source: str | None = WORK_ARN,
    extra_attributes: dict[str, Any] | None = None,
    raw_envelope: str | None = None,
) -> dict[str, Any]:
    attributes: dict[str, Any] = {"tenant": {"StringValue": "acme", "DataType": "String"}}
    if envelope is not None:
        attributes[ATTRIBUTE] = {"StringValue": envelope.to_json(), "DataType": "String"}
    if raw_envelope is not None:
        attributes[ATTRIBUTE] = {"StringValue": raw_envelope, "DataType": "String"}
    attributes.update(extra_attributes or {})
    system = {
        "ApproximateReceiveCount": "1",
        "SentTimestamp": "1795860000000",
        "ApproximateFirstReceiveTimestamp": "1795860000100",
        "SenderId": "AROAEXAMPLE:sluice",
    }
    if source:
        system["DeadLetterQueueSourceArn"] = source
    return {
        "MessageId": "9b1f6c1e-0000-4000-8000-000000000001",
        "ReceiptHandle": "AQEB-dlq-receipt-1",
        "MD5OfBody": "0f1e2d3c4b5a69788796a5b4c3d2e1f0",
        "Body": json.dumps({"order_id": "ord-1001", "amount_cents": 1250}),
        "Attributes": system,
        "MessageAttributes": attributes,
    }


def item(event: dict[str, Any], probe_at: float | None = None) -> dict[str, Any]:
    """A message as the PlanBatch Map's ItemSelector passes it to the Plan step."""
    return {"message": event, "probeAt": probe_at}


def run(
    event: dict[str, Any],
    *,
    breaker: FakeBreaker | None = None,
    config: RedriveSettings | None = None,
    uniform: Any = highest,
    metrics: RecordingMetrics | None = None,
    log: io.StringIO | None = None,
) -> dict[str, Any]:
    state = plan_step(
        event,
        settings=config or settings(),
        breaker=breaker or FakeBreaker(),  # type: ignore[arg-type]
        url_of=url_of,
        now=NOW,
        logger=Logger(service=f"sluice-test-{uuid.uuid4().hex}", stream=log or io.StringIO()),
        metrics_sink=metrics or RecordingMetrics(unit="Count"),
        uniform=uniform,
        seal=None,
    )
    return dict(state)


def log_lines(log: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.getvalue().splitlines() if line.startswith("{")]


# --- redrive --------------------------------------------------------------------------------------


def test_given_a_traced_dead_letter_when_planned_then_its_envelope_and_log_line_carry_the_trace():
    # Given a message that arrived in the DLQ with an X-Ray header (and no envelope yet)
    header = "Root=1-67a9b2c3-0123456789abcdef01234567;Parent=53995c3f42cd8ad8;Sampled=1"
    event = message()
    event["Attributes"]["AWSTraceHeader"] = header
    # When the Plan step runs
    log = io.StringIO()
    plan = run(item(event), log=log)
    # Then the envelope the Redrive task sends it back with keeps it (the optimized sqs:sendMessage
    # integration takes no MessageSystemAttributes: the consumer reads the trace from the envelope)
    assert plan["action"] == "redrive"
    assert envelope_of(plan).trace == header
    # ... and its log line carries the trace's id, as the consumer's and the redriver's do
    [planned] = [
        line
        for line in map(json.loads, log.getvalue().splitlines())
        if line.get(EVENT) == LogEvent.REDRIVE_PLANNED
    ]
    assert planned["correlation_id"] == "67a9b2c30123456789abcdef01234567"


def test_given_a_first_time_dead_letter_when_planned_then_it_is_sent_at_once_with_its_backoff_as_delay():
    # Given a message dead-lettered on its first hop: no envelope, SQS names its source queue
    breaker = FakeBreaker()
    metrics = RecordingMetrics(unit="Count")
    # When the Plan step runs (largest draw: base 60 · 2^1 = 120 s)
    plan = run(item(message()), breaker=breaker, metrics=metrics)
    # Then it is redriven to the source's URL, sent at once with the whole backoff as DelaySeconds:
    # nothing to wait, so nothing to hold
    assert plan["action"] == "redrive"
    assert plan["attempt"] == 1
    assert plan["queueUrl"] == WORK_URL
    assert plan["delaySeconds"] == 120
    assert plan["sendDelaySeconds"] == 120
    assert plan["waitSeconds"] == 0
    assert plan["messageId"] == "9b1f6c1e-0000-4000-8000-000000000001"
    assert plan["receiptHandle"] == "AQEB-dlq-receipt-1"
    # ... with the original body, the user attribute untouched and an envelope that starts here
    assert json.loads(plan["body"]) == {"order_id": "ord-1001", "amount_cents": 1250}
    assert plan["messageAttributes"]["tenant"] == {"DataType": "String", "StringValue": "acme"}
    envelope = envelope_of(plan)
    assert envelope.origin_id == plan["messageId"]
    assert envelope.attempts == 1
    assert envelope.redriven_at == NOW + timedelta(seconds=plan["delaySeconds"])  # due again then
    assert envelope.source == WORK_ARN
    assert envelope.last_error is not None
    assert envelope.last_error.type == "MaxReceiveCountExceeded"
    # ... and it is counted for the breaker (not bouncing, no probe out: not fresh), due in 120 s
    assert breaker.observed == [(1, 0)]
    assert breaker.fresh == [0]
    assert breaker.latest_due == [(NOW + timedelta(seconds=120)).timestamp()]
    assert metrics.values == {"BouncingRedrives": 0, "EnvelopesCorrupt": 0}
    assert plan["bouncing"] is False


def test_given_a_backoff_beyond_900_seconds_when_planned_then_only_the_rest_is_waited_with_the_message_held():
    # Given a message at its fifth redrive (largest draw: min(3600, 60 · 2^5) = 1920 s)
    envelope = Envelope(origin_id="orig-4", attempts=4, source=WORK_ARN)
    # When the Plan step runs
    plan = run(item(message(envelope)))
    # Then SQS delays it the most it can (900 s) and the execution waits the rest, holding the message
    # in the DLQ for that wait plus the margin
    assert plan["action"] == "redrive"
    assert plan["delaySeconds"] == 1920
    assert plan["sendDelaySeconds"] == MAX_DELAY_SECONDS == 900
    assert plan["waitSeconds"] == 1920 - 900
    assert plan["holdSeconds"] == 1920 - 900 + HOLD_MARGIN_SECONDS
    assert envelope_of(plan).redriven_at == NOW + timedelta(seconds=1920)


@pytest.mark.parametrize(
    "event",
    [message(), {"message": "not a message"}, {"message": message(), "probeAt": "soon"}, ["a", "list"]],
    ids=["bare message", "message not an object", "probe time not a number", "not an object"],
)
def test_given_an_item_of_another_shape_when_planned_then_it_names_the_shape_expected(event):
    # Given a Map item that is not {"message": <message>, "probeAt": <number or null>}
    breaker = FakeBreaker()
    # When the Plan step runs on it, Then it says what it expected and counts nothing for the breaker
    with pytest.raises(InvalidEventError, match=r'expects \{"message": <one ReceiveMessage message>'):
        run(event, breaker=breaker)
    assert breaker.observed == []


def test_given_a_probe_time_when_a_message_failed_after_it_then_it_counts_as_fresh_for_the_breaker():
    # Given a half-open breaker whose probe went out an hour ago, and two messages: one whose consumer
    # failed again after the probe, one that failed before it (old backlog)
    probe = NOW - timedelta(hours=1)
    after = Envelope(
        origin_id="orig-a",
        attempts=1,
        source=WORK_ARN,
        last_error=ErrorInfo(type="TransientError", message="gateway timeout", at=NOW - timedelta(minutes=5)),
    )
    before = Envelope(
        origin_id="orig-b",
        attempts=1,
        source=WORK_ARN,
        last_error=ErrorInfo(type="TransientError", message="gateway timeout", at=NOW - timedelta(hours=3)),
    )
    breaker = FakeBreaker()
    log = io.StringIO()
    # When the Plan step runs on each with the breaker's probeAt
    run(item(message(after), probe.timestamp()), breaker=breaker, log=log)
    run(item(message(before), probe.timestamp()), breaker=breaker)
    # ... and on the first again without a probe
    run(item(message(after), None), breaker=breaker)
    # Then only the failure after the probe counts as fresh
    assert breaker.fresh == [1, 0, 0]
    assert breaker.observed == [(1, 0), (1, 0), (1, 0)]
    [line] = [entry for entry in log_lines(log) if entry.get(EVENT) == LogEvent.REDRIVE_PLANNED]
    assert line["fresh"] is True
    assert line["probe_at"] == probe.timestamp()


def test_given_a_message_redriven_within_the_cooldown_when_planned_then_it_counts_as_bouncing():
    # Given a message sluice re-drove two minutes ago (cooldown 300 s) that is back in the DLQ
    envelope = Envelope(
        origin_id="orig-1", attempts=2, redriven_at=NOW - timedelta(minutes=2), source=WORK_ARN
    )
    breaker = FakeBreaker()
    metrics = RecordingMetrics(unit="Count")
    # When the Plan step runs
    plan = run(item(message(envelope)), breaker=breaker, metrics=metrics)
    # Then it is still redriven (attempt 3), but reported as bouncing to the breaker and in metrics
    assert plan["action"] == "redrive"
    assert plan["attempt"] == 3
    assert plan["bouncing"] is True
    assert breaker.observed == [(1, 1)]
    assert metrics.values["BouncingRedrives"] == 1


def test_given_the_longest_backoff_when_planned_then_the_hold_fits_sqs_12_hours_from_the_receive():
    # Given a cap far beyond 12 hours and the largest draw
    config = settings(redrive_base_seconds="100000", redrive_cap_seconds="200000")
    # When the Plan step runs
    plan = run(item(message()), config=config)
    # Then the backoff is capped at 12 h less the margin, 900 s of it sent as DelaySeconds, and the
    # hold fits within 12 h of FetchBatch's receive (at most FETCH_VISIBILITY_SECONDS ago) yet still
    # outlasts the wait by the margin
    assert plan["action"] == "redrive"
    assert plan["delaySeconds"] == MAX_HOLD_WAIT
    assert plan["sendDelaySeconds"] == 900
    assert plan["waitSeconds"] == MAX_HOLD_WAIT - 900
    assert plan["holdSeconds"] == plan["waitSeconds"] + HOLD_MARGIN_SECONDS
    assert plan["holdSeconds"] <= MAX_HOLD_SECONDS == MAX_VISIBILITY_SECONDS - FETCH_VISIBILITY_SECONDS


def test_given_a_binary_attribute_as_step_functions_passes_it_when_planned_then_it_is_sent_back_unchanged():
    # Given a binary user attribute as base64 text, and the empty list fields SDKs may add
    raw = bytes(range(256))
    text = base64.b64encode(raw).decode()
    extra = {
        "signature": {
            "BinaryValue": text,
            "DataType": "Binary",
            "StringListValues": [],
            "BinaryListValues": [],
        }
    }
    # When the Plan step runs
    plan = run(item(message(extra_attributes=extra)))
    # Then the plan carries the same base64 text, ready for sqs:sendMessage
    assert plan["messageAttributes"]["signature"] == {"DataType": "Binary", "BinaryValue": text}
    assert plan["messageAttributes"]["tenant"] == {"DataType": "String", "StringValue": "acme"}


# --- poison ---------------------------------------------------------------------------------------


def test_given_a_message_at_max_attempts_when_planned_then_it_is_isolated_to_the_poison_queue():
    # Given a message that failed again after its fifth redrive
    last = ErrorInfo(type="TransientError", message="gateway timeout", at=NOW - timedelta(hours=1))
    envelope = Envelope(
        origin_id="orig-5", attempts=5, last_error=last, redriven_at=NOW - timedelta(hours=2), source=WORK_ARN
    )
    breaker = FakeBreaker()
    # When the Plan step runs
    plan = run(item(message(envelope)), breaker=breaker)
    # Then it goes to the poison queue at once, with the reason and the consumer's last error
    assert plan["action"] == "poison"
    assert plan["attempt"] == 6
    assert plan["queueUrl"] == POISON_URL
    assert plan["delaySeconds"] == plan["sendDelaySeconds"] == plan["waitSeconds"] == 0
    assert "still failing after 5 redrives" in plan["reason"]
    isolated = envelope_of(plan)
    assert isolated.attempts == 6
    assert isolated.origin_id == "orig-5"
    assert isolated.last_error == last
    assert breaker.observed == [(1, 0)]
    assert breaker.latest_due == [None]  # nothing of it is due on the source


def test_given_a_permanent_error_while_deciding_when_planned_then_the_message_is_isolated_not_lost(
    monkeypatch: pytest.MonkeyPatch,
):
    # Given a decision that cannot be made (the decider refuses the message permanently)
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise PermanentError("backoff needs the delay pipeline, which is not configured")

    monkeypatch.setattr(redrive_sfn, "decide", refuse)
    envelope = Envelope(
        origin_id="orig-2", attempts=2, redriven_at=NOW - timedelta(minutes=1), source=WORK_ARN
    )
    breaker = FakeBreaker()
    # When the Plan step runs
    plan = run(item(message(envelope)), breaker=breaker)
    # Then the plan isolates it with the reason recorded in its envelope, body and attributes intact
    assert plan["action"] == "poison"
    assert plan["queueUrl"] == POISON_URL
    assert plan["attempt"] == 3
    assert plan["reason"] == "cannot be redriven: backoff needs the delay pipeline, which is not configured"
    assert json.loads(plan["body"]) == {"order_id": "ord-1001", "amount_cents": 1250}
    assert plan["messageAttributes"]["tenant"] == {"DataType": "String", "StringValue": "acme"}
    isolated = envelope_of(plan)
    assert isolated.origin_id == "orig-2"
    assert isolated.attempts == 3
    assert isolated.last_error is not None
    assert isolated.last_error.type == "PermanentError"
    assert isolated.last_error.at == NOW
    # ... and it still counts for the breaker (it was re-driven a minute ago: bouncing)
    assert breaker.observed == [(1, 1)]


def test_given_a_permanent_error_for_a_first_hop_message_when_planned_then_it_gets_an_envelope(
    monkeypatch: pytest.MonkeyPatch,
):
    # Given a first-hop message (no envelope) the decider refuses
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise PermanentError("refused")

    monkeypatch.setattr(redrive_sfn, "decide", refuse)
    event = message()
    # When the Plan step runs
    plan = run(item(event))
    # Then its new envelope names the message, its source queue and the reason
    isolated = envelope_of(plan)
    assert isolated.origin_id == event["MessageId"]
    assert isolated.source == WORK_ARN
    assert isolated.attempts == 1
    assert isolated.first_failure == NOW
    assert isolated.last_error is not None
    assert isolated.last_error.message == "refused"


def test_given_a_source_outside_the_allowlist_when_planned_then_it_is_isolated_as_refused():
    # Given a message whose DLQ was fed by a queue sluice may not write to
    event = message(source=f"arn:aws:sqs:us-east-1:{ACCOUNT}:someone-elses-queue")
    # When the Plan step runs
    plan = run(item(event))
    # Then it is isolated, never sent to that queue
    assert plan["action"] == "poison"
    assert plan["queueUrl"] == POISON_URL
    assert envelope_of(plan).last_error.type == "RedriveRefused"  # type: ignore[union-attr]


# --- envelope problems, failures, logs --------------------------------------------------------------


def test_given_an_unreadable_envelope_when_planned_then_it_is_counted_and_redriven_as_a_first_hop():
    # Given a message whose sluice attribute is not an envelope
    metrics = RecordingMetrics(unit="Count")
    log = io.StringIO()
    # When the Plan step runs
    plan = run(item(message(raw_envelope="{not json")), metrics=metrics, log=log)
    # Then it is planned as if it had no envelope, and the problem is counted and logged
    assert plan["action"] == "redrive"
    assert plan["attempt"] == 1
    assert envelope_of(plan).origin_id == plan["messageId"]
    assert metrics.values["EnvelopesCorrupt"] == 1
    [warning] = [line for line in log_lines(log) if line.get(EVENT) == LogEvent.ENVELOPE_CORRUPT]
    assert warning["level"] == "WARNING"
    assert "unreadable sluice envelope" in warning["message"]  # the reason, for people
    assert warning["message_id"] == plan["messageId"]


def test_given_a_planned_message_when_logged_then_the_line_names_the_message_and_its_attempt():
    # Given a message at its second redrive
    envelope = Envelope(origin_id="orig-3", attempts=1, source=WORK_ARN)
    log = io.StringIO()
    # When the Plan step runs
    plan = run(item(message(envelope)), log=log)
    # Then one INFO line tells which message, which attempt and what was decided
    [line] = [entry for entry in log_lines(log) if entry.get(EVENT) == LogEvent.REDRIVE_PLANNED]
    assert line["message_id"] == plan["messageId"]
    assert line["origin_id"] == "orig-3"
    assert line["attempt"] == 2
    assert line["action"] == "redrive"
    assert line["delay_seconds"] == plan["delaySeconds"]


def test_given_the_breaker_cannot_record_when_planned_then_the_step_fails_so_the_state_machine_retries():
    # Given a breaker table that refuses the write (throttled)
    breaker = FakeBreaker(fail=RuntimeError("ProvisionedThroughputExceededException"))
    # When the Plan step runs
    # Then it fails (no plan): the state machine retries it, and the message stays in the DLQ meanwhile
    with pytest.raises(RuntimeError, match="ProvisionedThroughput"):
        run(item(message()), breaker=breaker)


def test_given_a_message_without_a_receipt_handle_when_planned_then_the_step_fails():
    # Given something that is not a ReceiveMessage message
    event = {"MessageId": "m-1", "Body": "{}"}
    # When the Plan step runs
    # Then it fails: without a receipt handle the message can be neither held nor deleted
    with pytest.raises(KeyError, match="ReceiptHandle"):
        run(item(event))


# --- a send the source refused ----------------------------------------------------------------------

AWS_REFUSAL = {
    # what Step Functions' optimized sqs:sendMessage integration reports (the cause names the code)
    "Error": "SQS.AmazonSQSException",
    "Cause": "Invalid binary character '#x1B' was found in the message body, the set of allowed characters "
    "is #x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF (Service: AmazonSQS; "
    "Status Code: 400; Error Code: InvalidMessageContents; Request ID: 3c2b1a09-8f7e-5d6c-b4a3-921807f6e5d4; "
    "Proxy: null)",
}


def refused(plan: dict[str, Any], error: dict[str, Any] | None = None, log: io.StringIO | None = None) -> Any:
    return refusal_step(
        {"plan": plan, "error": error or AWS_REFUSAL},
        settings=settings(),
        now=NOW,
        logger=Logger(service=f"sluice-test-{uuid.uuid4().hex}", stream=log or io.StringIO()),
        seal=None,
    )


def test_given_a_send_the_source_refused_when_replanned_then_it_is_isolated_with_the_refusal_recorded():
    # Given the plan of a message at its third redrive, with a binary user attribute, whose send the
    # source queue refused as malformed
    last = ErrorInfo(type="TransientError", message="gateway timeout", at=NOW - timedelta(minutes=30))
    envelope = Envelope(origin_id="orig-r", attempts=2, source=WORK_ARN, last_error=last)
    text = base64.b64encode(b"\x00\xff signed").decode()
    extra = {"signature": {"BinaryValue": text, "DataType": "Binary"}}
    plan = run(item(message(envelope, extra_attributes=extra)))
    first_failure = envelope_of(plan).first_failure
    log = io.StringIO()
    # When the refusal is re-planned (the state machine's Refuse step)
    poison = refused(plan, log=log)
    # Then the message goes to the poison queue, same message and receipt, same attempt, nothing to wait
    assert poison["action"] == "poison"
    assert poison["queueUrl"] == POISON_URL
    assert poison["messageId"] == plan["messageId"]
    assert poison["receiptHandle"] == plan["receiptHandle"]
    assert poison["attempt"] == plan["attempt"] == 3
    assert poison["delaySeconds"] == poison["sendDelaySeconds"] == poison["waitSeconds"] == 0
    # ... the body and the user's attributes (binary included) unchanged
    assert poison["body"] == plan["body"]
    assert poison["messageAttributes"]["tenant"] == {"DataType": "String", "StringValue": "acme"}
    assert poison["messageAttributes"]["signature"] == {"DataType": "Binary", "BinaryValue": text}
    # ... and an envelope that keeps the history and tells who refused it and why
    isolated = envelope_of(poison)
    assert isolated.origin_id == "orig-r"
    assert isolated.attempts == 3
    assert isolated.first_failure == first_failure
    assert isolated.redriven_at is None  # it was never delivered
    assert isolated.last_error is not None
    assert isolated.last_error.type == REFUSED
    assert isolated.last_error.message.startswith(f"{WORK_URL} refused the message: InvalidMessageContents: ")
    assert "Invalid binary character" in isolated.last_error.message
    assert "Request ID" not in isolated.last_error.message
    assert poison["reason"].startswith("the source queue refused the message: InvalidMessageContents: ")
    # ... logged as an error naming the message
    [line] = [entry for entry in log_lines(log) if entry.get(EVENT) == LogEvent.SEND_REFUSED]
    assert line["level"] == "ERROR"
    assert line["message_id"] == plan["messageId"]
    assert line["error"] == "SQS.AmazonSQSException"


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (AWS_REFUSAL, "InvalidMessageContents: Invalid binary character '#x1B' was found"),
        (
            # the aws-sdk integration's naming
            {
                "Error": "Sqs.InvalidParameterValueException",
                "Cause": "One or more parameters are invalid. Reason: Message must be shorter than 262144 "
                "bytes. (Service: Sqs, Status Code: 400, Request ID: 0f9e8d7c)",
            },
            "InvalidParameterValue: One or more parameters are invalid. Reason: Message must be shorter",
        ),
        ({"Error": "States.TaskFailed", "Cause": ""}, "TaskFailed"),
        ({}, "unknown"),
    ],
)
def test_given_a_catch_output_when_read_then_the_reason_names_the_sqs_code_and_message(error, expected):
    # Given a Catch output of a failed send
    # When the refusal reason is read
    reason = refusal_reason(error)
    # Then it starts with the SQS error code, then SQS's message without the request metadata
    assert reason.startswith(expected)
    assert "Request ID" not in reason


def test_given_a_poison_plan_when_refused_then_the_step_fails_rather_than_isolate_twice():
    # Given a plan that is not a redrive (the definition only refuses redrives)
    envelope = Envelope(origin_id="orig-5", attempts=5, source=WORK_ARN)
    plan = run(item(message(envelope)))
    assert plan["action"] == "poison"
    # When it is passed to the refusal step
    # Then the step fails: the state machine leaves the message in the DLQ
    with pytest.raises(PermanentError, match="only a refused redrive"):
        refused(plan)


def test_given_a_fifo_workload_s_dlq_when_planned_then_the_step_fails_and_the_message_stays():
    # Given the Plan step of a FIFO workload's redrive state machine (its DLQ ends in .fifo)
    fifo = settings(dead_letter_queue_url=DLQ_URL + ".fifo")
    # When a message is planned, Then the step fails (the state machine leaves the message in the DLQ):
    # no plan sends it with DelaySeconds a FIFO queue refuses, and none isolates it as malformed
    with pytest.raises(ConfigurationError, match="not re-driven yet"):
        run(item(message()), config=fifo)
