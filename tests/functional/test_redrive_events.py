"""Every file in events/redriver, events/circuit_breaker and events/poison_isolator runs through its
real handler (a fresh cold start, as `sam local invoke` would run it) against in-process AWS (moto).

Outcomes are read from the handler's answer, the queues and the EMF metrics it prints. A message moto's
redrive policy moved carries ``DeadLetterQueueSourceArn`` (the local runtime's adapter adds it, as SQS
does: tests/conftest.py), so the redriver sends it back to the work queue it came from.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from sluice.envelope import ATTRIBUTE, Envelope, ErrorInfo, split
from sluice.errors import ConfigurationError, PermanentError
from sluice.redrive.lease import HeldLease, RunLease
from sluice_local.emulation.lambda_loader import LambdaContext, load_handler
from sluice_local.emulation.sqs_events import drain
from tests.conftest import TEST_SEAL, envelope_key_secret
from tests.doubles import seal_envelopes, sealed

from .test_events import emf_metrics

ROOT = Path(__file__).resolve().parents[2]
EVENTS = ROOT / "events"
FOLDERS = ("redriver", "circuit_breaker", "poison_isolator")
ACCOUNT = "123456789012"
TRACE = "Root=1-6740f000-0123456789abcdef01234567;Parent=53995c3f42cd8ad8;Sampled=1"
REDRIVEN = 3  # dead-lettered for real (moto's redrive policy)
POISON = 1  # at the maximum attempts

REDRIVE_METRICS = {
    "SuccessfulRedrives": REDRIVEN,
    "PoisonPillsIsolated": POISON,
    "RedriveFailures": 0,
    "BouncingRedrives": 0,
    "BreakerOpen": 0,
}

# file → metric values that must be seen in the EMF output
EXPECTED: dict[str, dict[str, int]] = {
    "redriver/alarm-eventbridge.json": REDRIVE_METRICS,
    "redriver/schedule.json": REDRIVE_METRICS,
    "circuit_breaker/check.json": {"BreakerOpen": 0},
    "poison_isolator/plan-poison.json": {"PoisonPillsIsolated": 1},
    "poison_isolator/bare-message.json": {"PoisonPillsIsolated": 1},
}


@dataclass
class RedriveStack:
    sqs: Any
    ddb: Any
    work_url: str
    work_arn: str
    dlq_url: str
    delay_url: str
    poison_url: str

    def breaker(
        self, state: str, *, opened_by: str, since: datetime, reason: str = "set by the test"
    ) -> None:
        self.ddb.put_item(
            TableName="sluice-dev-breaker",
            Item={
                "id": {"S": "redrive"},
                "state": {"S": state},
                "reason": {"S": reason},
                "opened_by": {"S": opened_by},
                "since": {"N": str(since.timestamp())},
                "seen": {"N": "0"},
                "bouncing": {"N": "0"},
                "version": {"N": "4"},
            },
        )

    def counts(self, url: str) -> int:
        names = [
            "ApproximateNumberOfMessages",
            "ApproximateNumberOfMessagesNotVisible",
            "ApproximateNumberOfMessagesDelayed",
        ]
        attributes = self.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=names)["Attributes"]
        return sum(int(attributes[n]) for n in names)


def queue_arn(sqs: Any, url: str) -> str:
    return sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]


@pytest.fixture
def redrive_stack(monkeypatch) -> Iterator[RedriveStack]:
    with mock_aws():
        sqs = boto3.client("sqs", region_name="us-east-1")
        ddb = boto3.client("dynamodb", region_name="us-east-1")
        dlq = sqs.create_queue(QueueName="sluice-dev-work-dlq")["QueueUrl"]
        work = sqs.create_queue(
            QueueName="sluice-dev-work",
            Attributes={
                "RedrivePolicy": json.dumps(
                    {"deadLetterTargetArn": queue_arn(sqs, dlq), "maxReceiveCount": 2}
                )
            },
        )["QueueUrl"]
        delay = sqs.create_queue(QueueName="sluice-dev-delay")["QueueUrl"]
        poison = sqs.create_queue(QueueName="sluice-dev-poison")["QueueUrl"]
        ddb.create_table(
            TableName="sluice-dev-breaker",
            AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
            KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
            BillingMode="PAY_PER_REQUEST",
        )
        stack = RedriveStack(sqs, ddb, work, queue_arn(sqs, work), dlq, delay, poison)
        for name, value in {
            "SLUICE_DEAD_LETTER_QUEUE_URL": dlq,
            "SLUICE_POISON_QUEUE_URL": poison,
            "SLUICE_ENVELOPE_KEY_SECRET": envelope_key_secret(),
            "SLUICE_SOURCE_QUEUE_ARN": stack.work_arn,
            "SLUICE_REDRIVE_SOURCES": stack.work_arn,
            "SLUICE_DELAY_QUEUE_URL": delay,
            "SLUICE_REDRIVE_MAX_ATTEMPTS": "5",
            "SLUICE_REDRIVE_BASE_SECONDS": "60",
            "SLUICE_REDRIVE_CAP_SECONDS": "3600",
            "SLUICE_REDRIVE_FLOOR_SECONDS": "1",
            "SLUICE_DIRECT_SEND_THRESHOLD_SECONDS": "900",
            "SLUICE_REDRIVE_MAX_PER_SECOND": "1000",  # no pacing sleeps in a test
            "SLUICE_RECEIVE_WAIT_SECONDS": "0",  # moto really waits on an empty long poll
            "SLUICE_BREAKER_TABLE": "sluice-dev-breaker",
            "SLUICE_BREAKER_COOLDOWN_SECONDS": "300",
            "SLUICE_BREAKER_BOUNCE_PERCENT": "50",
            "SLUICE_BREAKER_MIN_SAMPLE": "10",
        }.items():
            monkeypatch.setenv(name, value)
        yield stack


def seed_dead_letter_queue(stack: RedriveStack) -> None:
    """REDRIVEN first-hop messages moved by the redrive policy, and POISON at the maximum attempts."""
    for i in range(REDRIVEN):
        stack.sqs.send_message(
            QueueUrl=stack.work_url,
            MessageBody=json.dumps({"order_id": f"ord-{i}"}),
            MessageAttributes={"tenant": {"DataType": "String", "StringValue": "acme"}},
            MessageSystemAttributes={"AWSTraceHeader": {"DataType": "String", "StringValue": TRACE}},
        )
    while stack.sqs.receive_message(QueueUrl=stack.work_url, MaxNumberOfMessages=10, VisibilityTimeout=0).get(
        "Messages"
    ):
        pass
    worn = Envelope(
        origin_id="origin-worn",
        attempts=5,
        first_failure=datetime.now(UTC) - timedelta(days=1),
        redriven_at=datetime.now(UTC) - timedelta(hours=1),
        source=stack.work_arn,
        trace=TRACE,
    )
    stack.sqs.send_message(
        QueueUrl=stack.dlq_url,
        MessageBody=json.dumps({"order_id": "ord-worn"}),
        MessageAttributes={
            ATTRIBUTE: {
                "DataType": "String",
                "StringValue": sealed(worn, json.dumps({"order_id": "ord-worn"})),
            }
        },
    )
    assert stack.counts(stack.dlq_url) == REDRIVEN + POISON


def poisoned_envelopes(stack: RedriveStack) -> list[tuple[dict[str, Any], Envelope]]:
    out = []
    for message in drain(stack.sqs, stack.poison_url):
        user, envelope, problem = split(
            {k: dict(v) for k, v in message["MessageAttributes"].items()},
            body=message["Body"],
            seal=TEST_SEAL,
        )
        assert problem is None
        assert envelope is not None
        out.append(({"body": message["Body"], **user}, envelope))
    return out


# --- per-function outcomes ---------------------------------------------------------------------


def redriver_outcome(stack: RedriveStack, answer: dict[str, Any], event_file: str) -> None:
    assert answer["received"] == REDRIVEN + POISON
    assert answer["redriven"] == REDRIVEN
    assert answer["isolated"] == POISON
    assert answer["failed"] == 0
    assert answer["stopped"] == "drained"
    assert answer["breaker"]["isOpen"] is False
    assert stack.counts(stack.dlq_url) == 0
    assert stack.counts(stack.work_url) == REDRIVEN  # each with its backoff as DelaySeconds
    [(message, envelope)] = poisoned_envelopes(stack)
    assert message["body"] == json.dumps({"order_id": "ord-worn"})
    assert envelope.attempts == 6
    assert envelope.origin_id == "origin-worn"
    assert envelope.last_error is not None
    assert envelope.last_error.type == "MaxReceiveCountExceeded"


def breaker_outcome(stack: RedriveStack, answer: dict[str, Any], event_file: str) -> None:
    # seeded: opened automatically 400 s ago, cooldown 300 s: the check half-opens it
    assert set(answer) == {"isOpen", "state", "reason", "openedBy", "since", "seen", "bouncing", "probeAt"}
    assert answer["isOpen"] is False
    assert answer["state"] == "half_open"
    assert answer["openedBy"] == "auto"
    assert "probe" in answer["reason"]
    assert datetime.fromisoformat(answer["since"]) > datetime.now(UTC) - timedelta(seconds=60)
    assert (answer["seen"], answer["bouncing"]) == (0, 0)
    item = stack.ddb.get_item(TableName="sluice-dev-breaker", Key={"id": {"S": "redrive"}})["Item"]
    assert item["state"] == {"S": "half_open"}


def isolator_outcome(stack: RedriveStack, answer: dict[str, Any], event_file: str) -> None:
    event = seal_envelopes(json.loads((EVENTS / event_file).read_text()))  # as sluice wrote them
    [(message, envelope)] = poisoned_envelopes(stack)
    assert answer["poisonMessageId"]
    assert answer["attempts"] == envelope.attempts
    assert message["body"] == event["body"]
    assert envelope.last_error is not None
    if event_file.endswith("plan-poison.json"):  # the plan's forensic envelope, unchanged
        planned = Envelope.model_validate_json(event["messageAttributes"][ATTRIBUTE]["StringValue"])
        assert envelope == planned.model_copy(update={"sig": None})  # the seal is a wire format
        assert envelope.attempts == 6
        assert envelope.last_error.type == "TransientError"
        assert message["tenant"] == {"DataType": "String", "StringValue": "acme"}
        assert message["signature"]["BinaryValue"] == b"\x8f\x1d\x00\x42hmac-sha256"
    else:  # no envelope: one is made that records the reason
        assert envelope.origin_id == event["messageId"]
        assert envelope.attempts == 1
        assert envelope.last_error.type == "PermanentError"
        assert envelope.last_error.message == event["reason"]
        assert envelope.first_failure == envelope.last_error.at
        for name, value in event["messageAttributes"].items():
            assert message[name] == value


OUTCOMES: dict[str, Callable[[RedriveStack, dict[str, Any], str], None]] = {
    "redriver": redriver_outcome,
    "circuit_breaker": breaker_outcome,
    "poison_isolator": isolator_outcome,
}


def test_every_redrive_event_file_has_an_expectation():
    files = sorted(str(p.relative_to(EVENTS)) for folder in FOLDERS for p in (EVENTS / folder).glob("*.json"))
    assert sorted(EXPECTED) == files


@pytest.mark.parametrize("event_file", sorted(EXPECTED))
def test_redrive_event_runs_through_its_handler(redrive_stack, capsys, event_file):
    function = event_file.split("/")[0]
    if function == "redriver":
        seed_dead_letter_queue(redrive_stack)
    elif function == "circuit_breaker":
        redrive_stack.breaker("open", opened_by="auto", since=datetime.now(UTC) - timedelta(seconds=400))
    handler = load_handler(ROOT / "functions" / function, "app.lambda_handler")
    event = seal_envelopes(json.loads((EVENTS / event_file).read_text()))  # as sluice wrote them
    capsys.readouterr()

    answer = handler(event, LambdaContext(function_name=f"sluice-dev-{function}", timeout_seconds=300))

    assert json.loads(json.dumps(answer)) == answer  # a Lambda answer must be JSON
    seen = emf_metrics(capsys.readouterr().out)
    for name, value in EXPECTED[event_file].items():
        assert name in seen, f"{name} not emitted by {event_file}"
        assert seen[name] == value, f"{name}: expected {value}, saw {seen[name]} in {event_file}"
    OUTCOMES[function](redrive_stack, answer, event_file)


def test_given_an_open_breaker_when_the_alarm_arrives_then_the_redriver_moves_nothing(redrive_stack, capsys):
    seed_dead_letter_queue(redrive_stack)
    redrive_stack.breaker("open", opened_by="operator", since=datetime.now(UTC), reason="INC-7")
    handler = load_handler(ROOT / "functions" / "redriver", "app.lambda_handler")
    capsys.readouterr()
    event = json.loads((EVENTS / "redriver/alarm-eventbridge.json").read_text())
    answer = handler(event, LambdaContext(timeout_seconds=300))
    assert answer["stopped"] == "breaker_open"
    assert answer["breaker"]["reason"] == "INC-7"
    assert redrive_stack.counts(redrive_stack.dlq_url) == REDRIVEN + POISON
    seen = emf_metrics(capsys.readouterr().out)
    assert seen["BreakerOpen"] == 1
    assert seen["SuccessfulRedrives"] == 0


def test_given_a_run_in_progress_when_the_alarm_arrives_then_the_redriver_ends_at_once(redrive_stack, capsys):
    # Given the DLQ's messages and a backstop run of the redriver holding the workload's lease
    seed_dead_letter_queue(redrive_stack)
    running = RunLease(redrive_stack.ddb, "sluice-dev-breaker").acquire("redriver (schedule, request 1)")
    assert isinstance(running, HeldLease)
    handler = load_handler(ROOT / "functions" / "redriver", "app.lambda_handler")
    capsys.readouterr()
    # When the DLQ alarm's rule starts a second run
    event = json.loads((EVENTS / "redriver/alarm-eventbridge.json").read_text())
    answer = handler(event, LambdaContext(timeout_seconds=300))
    # Then it ends without touching a message, says who holds the lease, and counts itself skipped
    assert answer["stopped"] == "another_run"
    assert answer["other_run"]["holder"] == "redriver (schedule, request 1)"
    assert answer["received"] == 0
    assert redrive_stack.counts(redrive_stack.dlq_url) == REDRIVEN + POISON
    assert emf_metrics(capsys.readouterr().out) == {"RedriveRunsSkipped": 1}
    # And once that run released it, the next trigger drains the DLQ (and releases the lease in turn)
    running.release()
    assert handler(event, LambdaContext(timeout_seconds=300))["stopped"] == "drained"
    assert isinstance(RunLease(redrive_stack.ddb, "sluice-dev-breaker").acquire(), HeldLease)


def test_given_an_unreadable_breaker_when_checked_then_the_answer_is_open(redrive_stack, capsys):
    redrive_stack.breaker("sideways", opened_by="auto", since=datetime.now(UTC))
    handler = load_handler(ROOT / "functions" / "circuit_breaker", "app.lambda_handler")
    capsys.readouterr()
    answer = handler({}, LambdaContext())
    assert answer["isOpen"] is True
    assert "unreadable" in answer["reason"]
    assert emf_metrics(capsys.readouterr().out)["BreakerOpen"] == 1


@pytest.mark.filterwarnings("ignore:No application metrics to publish")
def test_given_a_request_without_a_body_when_isolated_then_the_invocation_fails_and_nothing_is_sent(
    redrive_stack,
):
    handler = load_handler(ROOT / "functions" / "poison_isolator", "app.lambda_handler")
    with pytest.raises(PermanentError, match="no string 'body'"):
        handler({"messageId": "m-1", "reason": "x"}, LambdaContext())
    assert drain(redrive_stack.sqs, redrive_stack.poison_url) == []


@pytest.mark.parametrize(
    ("function", "variable", "value", "also"),
    [
        ("redriver", "SLUICE_REDRIVE_FLOOR_SECONDS", "700", {"SLUICE_REDRIVE_CAP_SECONDS": "600"}),
        ("redriver", "SLUICE_SOURCE_QUEUE_ARN", "arn:aws:sns:us-east-1:123456789012:nope", {}),
        ("redriver", "SLUICE_DELAY_QUEUE_URL", "", {}),  # cap 3600 > threshold 900 needs it
        ("redriver", "SLUICE_BREAKER_MIN_SAMPLE", "0", {}),
        ("circuit_breaker", "SLUICE_BREAKER_BOUNCE_PERCENT", "101", {}),
        ("circuit_breaker", "SLUICE_BREAKER_TABLE", None, {}),
        ("poison_isolator", "SLUICE_POISON_QUEUE_URL", "sluice-dev-poison", {}),
    ],
)
def test_given_a_bad_setting_when_the_function_cold_starts_then_it_fails_naming_the_variable(
    redrive_stack, monkeypatch, function, variable, value, also
):
    if value is None:
        monkeypatch.delenv(variable)
    else:
        monkeypatch.setenv(variable, value)
    for name, other in also.items():
        monkeypatch.setenv(name, other)
    with pytest.raises(ConfigurationError, match=variable):
        load_handler(ROOT / "functions" / function, "app.lambda_handler")


def test_given_a_plan_from_decide_when_isolated_then_the_error_it_carries_is_kept(redrive_stack):
    recorded = ErrorInfo(type="PermanentError", message="currency JPY not supported", at=datetime.now(UTC))
    envelope = Envelope(origin_id="o-1", attempts=2, last_error=recorded, first_failure=recorded.at)
    handler = load_handler(ROOT / "functions" / "poison_isolator", "app.lambda_handler")
    answer = handler(
        {
            "messageId": "m-1",
            "body": "{}",
            "messageAttributes": {ATTRIBUTE: {"DataType": "String", "StringValue": sealed(envelope, "{}")}},
            "reason": "ignored: the envelope already says why",
        },
        LambdaContext(),
    )
    assert answer["attempts"] == 2
    [(_, poisoned)] = poisoned_envelopes(redrive_stack)
    assert poisoned == envelope


def test_given_a_numeric_message_id_when_isolated_then_it_becomes_the_origin_as_text(redrive_stack):
    handler = load_handler(ROOT / "functions" / "poison_isolator", "app.lambda_handler")
    handler({"messageId": 42, "body": "x", "reason": "hand-made request"}, LambdaContext())
    [(_, poisoned)] = poisoned_envelopes(redrive_stack)
    assert poisoned.origin_id == "42"


@pytest.mark.parametrize(
    ("service", "counted_under"),
    [
        ("sluice-dev/Orders", "sluice-dev/Orders"),
        ("bad service\n", "sluice-dev"),
        (7, "sluice-dev"),
        (None, "sluice-dev"),
    ],
)
def test_given_a_plan_naming_its_workload_when_isolated_then_the_pill_is_counted_under_it(
    redrive_stack, monkeypatch, capsys, service, counted_under
):
    # Given the stack's isolator (its own service: the stack's) and a workload's plan naming its service
    monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", "sluice-dev")
    handler = load_handler(ROOT / "functions" / "poison_isolator", "app.lambda_handler")
    request: dict[str, object] = {"messageId": "m-1", "body": "{}", "reason": "still failing"}
    if service is not None:
        request["service"] = service
    capsys.readouterr()
    handler(request, LambdaContext())
    # Then PoisonPillsIsolated is written under the workload's service (what its dashboard and alarms
    # read); a missing or malformed one leaves the isolator's own
    documents = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"_aws"' in line]
    (emf,) = [doc for doc in documents if "PoisonPillsIsolated" in doc]
    assert emf["service"] == counted_under
