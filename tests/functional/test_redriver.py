"""The redriver (Lambda mode) against in-process SQS and DynamoDB (moto), Given / When / Then.

Messages reach the DLQ for real: they are sent to the work queue and received ``maxReceiveCount``
times, so moto's redrive policy moves them, with SQS's ``DeadLetterQueueSourceArn`` (moto 5.2.5 leaves
it out; the local runtime's adapter adds it, for every test: tests/conftest.py). Messages the consumer
forwards itself (SendMessage to the DLQ) carry no such attribute, here as in AWS.

Time is injected: the run's monotonic clock advances only by the redriver's own sleeps, so pacing is
measured exactly and nothing really sleeps.
"""

from __future__ import annotations

import io
import itertools
import json
import logging
import threading
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, cast

import boto3
import pytest
from aws_lambda_powertools import Logger
from moto import mock_aws

from sluice import claimcheck
from sluice.envelope import ATTRIBUTE, Envelope, ErrorInfo
from sluice.errors import ConfigurationError
from sluice.limits import MAX_MESSAGE_BYTES
from sluice.logevents import EVENT, LogEvent
from sluice.redrive.breaker import Breaker
from sluice.redrive.runner import Redriver
from sluice.redrive.settings import RedriveSettings
from sluice.sqs import message_bytes
from sluice_local.emulation import faults
from sluice_local.emulation.sqs_events import drain
from tests.conftest import TEST_SEAL, envelope_key_secret
from tests.doubles import RecordingMetrics, envelope_of, sealed

from .conftest import ApiCalls

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

REGION = "us-east-1"
MAX_RECEIVE_COUNT = 2
TRACE = "Root=1-6740f000-0123456789abcdef01234567;Parent=53995c3f42cd8ad8;Sampled=1"
OTHER_TRACE = "Root=1-6740f001-fedcba9876543210fedcba98;Sampled=1"  # a later delivery's (well-formed)
SQS_OPERATIONS = {"ReceiveMessage", "SendMessageBatch", "DeleteMessageBatch", "SendMessage", "DeleteMessage"}


class FakeTime:
    """A monotonic clock that only the redriver's sleeps move."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


class Sqs:
    """The redriver's SQS client: moto underneath, plus refusals on demand."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.refuse: dict[tuple[str, str], tuple[str, bool]] = {}
        """(queue URL, body) → (error code, sender fault): SendMessageBatch fails those entries."""
        self.refuse_delete: set[str] = set()
        """Bodies whose DeleteMessageBatch entry fails."""
        self.before_receive: list[Callable[[], None]] = []
        self.received: list[dict[str, Any]] = []
        self.refusals = 0
        """Entries SendMessageBatch refused so far (one per attempt at a refused body)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def receive_message(self, **kwargs: Any) -> Any:
        for hook in self.before_receive:
            hook()
        response = self._client.receive_message(**kwargs)
        self.received.extend(response.get("Messages", []))
        return response

    def send_message_batch(self, QueueUrl: str, Entries: list[dict[str, Any]]) -> Any:  # noqa: N803
        refused = [e for e in Entries if (QueueUrl, e["MessageBody"]) in self.refuse]
        self.refusals += len(refused)
        ok = [e for e in Entries if e not in refused]
        response = self._client.send_message_batch(QueueUrl=QueueUrl, Entries=ok) if ok else {}
        failed = [
            {
                "Id": e["Id"],
                "Code": self.refuse[QueueUrl, e["MessageBody"]][0],
                "Message": "refused by the test",
                "SenderFault": self.refuse[QueueUrl, e["MessageBody"]][1],
            }
            for e in refused
        ]
        return {"Successful": response.get("Successful", []), "Failed": failed}

    def delete_message_batch(self, QueueUrl: str, Entries: list[dict[str, Any]]) -> Any:  # noqa: N803
        bodies = {m["ReceiptHandle"]: m["Body"] for m in self.received}
        refused = [e for e in Entries if bodies.get(e["ReceiptHandle"]) in self.refuse_delete]
        ok = [e for e in Entries if e not in refused]
        response = self._client.delete_message_batch(QueueUrl=QueueUrl, Entries=ok) if ok else {}
        failed = [
            {"Id": e["Id"], "Code": "ReceiptHandleIsInvalid", "Message": "refused", "SenderFault": True}
            for e in refused
        ]
        return {"Successful": response.get("Successful", []), "Failed": failed}


class Stack:
    def __init__(self) -> None:
        self.session = boto3.Session(region_name=REGION)
        self.calls = ApiCalls(self.session)
        self.raw = boto3.client("sqs", region_name=REGION)  # setup and inspection: not counted
        self.ddb = self.session.client("dynamodb")
        self.dlq_url = self.raw.create_queue(QueueName="work-dlq")["QueueUrl"]
        self.work_url = self.raw.create_queue(
            QueueName="work",
            Attributes={
                "RedrivePolicy": json.dumps(
                    {"deadLetterTargetArn": self.arn(self.dlq_url), "maxReceiveCount": MAX_RECEIVE_COUNT}
                )
            },
        )["QueueUrl"]
        self.work_arn = self.arn(self.work_url)
        self.delay_url = self.raw.create_queue(QueueName="delay")["QueueUrl"]
        self.poison_url = self.raw.create_queue(QueueName="poison")["QueueUrl"]
        self.s3 = boto3.client("s3", region_name=REGION)
        self.s3.create_bucket(Bucket="claims")
        self.ddb.create_table(
            TableName="breaker",
            AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
            KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
            BillingMode="PAY_PER_REQUEST",
        )
        self.sqs = Sqs(self.session.client("sqs"))
        self.metrics = RecordingMetrics()
        self.time = FakeTime()
        self.log = io.StringIO()
        # a logger of its own per test: Powertools configures a service's logger once per process
        self.logger = Logger(
            service=f"sluice-test-{uuid.uuid4().hex}", logger_handler=logging.StreamHandler(self.log)
        )

    def arn(self, url: str) -> str:
        return self.raw.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
            "QueueArn"
        ]

    def env(self, **overrides: object) -> dict[str, str]:
        env = {
            "SLUICE_DEAD_LETTER_QUEUE_URL": self.dlq_url,
            "SLUICE_POISON_QUEUE_URL": self.poison_url,
            "SLUICE_ENVELOPE_KEY_SECRET": envelope_key_secret(),
            "SLUICE_SOURCE_QUEUE_ARN": self.work_arn,
            "SLUICE_REDRIVE_SOURCES": self.work_arn,
            "SLUICE_DELAY_QUEUE_URL": self.delay_url,
            "SLUICE_REDRIVE_MAX_ATTEMPTS": "5",
            "SLUICE_REDRIVE_BASE_SECONDS": "60",
            "SLUICE_REDRIVE_CAP_SECONDS": "3600",
            "SLUICE_REDRIVE_FLOOR_SECONDS": "1",
            "SLUICE_RECEIVE_WAIT_SECONDS": "0",  # moto really waits on an empty long poll
            "SLUICE_BREAKER_TABLE": "breaker",
            "SLUICE_BREAKER_COOLDOWN_SECONDS": "300",
            "SLUICE_BREAKER_BOUNCE_PERCENT": "50",
            "SLUICE_BREAKER_MIN_SAMPLE": "10",
            "SLUICE_CLAIM_CHECK_BUCKETS": "claims",
        }
        env.update({f"SLUICE_{k.upper()}": str(v) for k, v in overrides.items()})
        return {k: v for k, v in env.items() if v != ""}

    def redriver(
        self, *, clock: Callable[[], datetime] | None = None, uniform: Any = None, **overrides: object
    ):
        settings = RedriveSettings.from_env(self.env(**overrides))
        extra: dict[str, Any] = {}
        if clock is not None:
            extra["clock"] = clock
        if uniform is not None:
            extra["uniform"] = uniform
        return Redriver(
            settings=settings,
            sqs=cast("SQSClient", self.sqs),
            breaker=Breaker.from_settings(settings, self.ddb),
            logger=self.logger,
            metrics_sink=self.metrics,
            seal=TEST_SEAL,
            offload=settings.offloader(lambda: self.s3),
            monotonic=self.time.monotonic,
            sleep=self.time.sleep,
            **extra,
        )

    # --- getting messages into the DLQ ---------------------------------------------------------

    def dead_letter(
        self,
        count: int,
        *,
        prefix: str = "ord",
        attributes: dict[str, dict[str, Any]] | None = None,
        envelope: Envelope | None = None,
        trace: str | None = None,
        group: str | None = None,
    ) -> list[str]:
        """Send ``count`` messages to the work queue and fail them until moto moves them to the DLQ."""
        before = self.depth(self.dlq_url)
        ids = []
        for i in range(count):
            kwargs: dict[str, Any] = {}
            attrs = dict(attributes or {})
            body = json.dumps({"order_id": f"{prefix}-{i}"})
            if envelope is not None:
                attrs[ATTRIBUTE] = {"DataType": "String", "StringValue": sealed(envelope, body)}
            if attrs:
                kwargs["MessageAttributes"] = attrs
            if group:
                kwargs["MessageGroupId"] = group  # a fair queue's tenant
            if trace:
                kwargs["MessageSystemAttributes"] = {
                    "AWSTraceHeader": {"DataType": "String", "StringValue": trace}
                }
            ids.append(self.raw.send_message(QueueUrl=self.work_url, MessageBody=body, **kwargs)["MessageId"])
        while self.raw.receive_message(
            QueueUrl=self.work_url, MaxNumberOfMessages=10, VisibilityTimeout=0
        ).get("Messages"):
            pass  # every receive counts; past maxReceiveCount moto moves the message to the DLQ
        assert self.depth(self.dlq_url) == before + count
        return ids

    def forwarded(self, body: str, envelope: Envelope, attributes: dict[str, Any] | None = None) -> str:
        """A message the consumer sent to the DLQ itself (no DeadLetterQueueSourceArn)."""
        attrs = {
            **(attributes or {}),
            ATTRIBUTE: {"DataType": "String", "StringValue": sealed(envelope, body)},
        }
        return self.raw.send_message(QueueUrl=self.dlq_url, MessageBody=body, MessageAttributes=attrs)[
            "MessageId"
        ]

    # --- inspecting ----------------------------------------------------------------------------

    def counts(self, url: str) -> dict[str, int]:
        names: list[Any] = [
            "ApproximateNumberOfMessages",
            "ApproximateNumberOfMessagesNotVisible",
            "ApproximateNumberOfMessagesDelayed",
        ]
        attributes = self.raw.get_queue_attributes(QueueUrl=url, AttributeNames=names)["Attributes"]
        return {
            name.removeprefix("ApproximateNumberOfMessages") or "visible": int(attributes[name])
            for name in names
        }

    def depth(self, url: str) -> int:
        return sum(self.counts(url).values())

    def sent_entries(self, url: str) -> list[dict[str, Any]]:
        return [
            e for p in self.calls.params("SendMessageBatch") if p["QueueUrl"] == url for e in p["Entries"]
        ]

    def sqs_requests(self) -> list[str]:
        return [name for name, _ in self.calls.calls if name in SQS_OPERATIONS]

    def breaker_item(self) -> dict[str, Any]:
        return self.ddb.get_item(TableName="breaker", Key={"id": {"S": "redrive"}}, ConsistentRead=True).get(
            "Item", {}
        )

    def set_breaker(
        self,
        state: str,
        *,
        opened_by: str = "auto",
        reason: str = "set by the test",
        probe_ago: float | None = None,
    ) -> None:
        probe = (
            {} if probe_ago is None else {"probe_at": {"N": str(datetime.now(UTC).timestamp() - probe_ago)}}
        )
        self.ddb.put_item(
            TableName="breaker",
            Item={
                **probe,
                "id": {"S": "redrive"},
                "state": {"S": state},
                "reason": {"S": reason},
                "opened_by": {"S": opened_by},
                "since": {"N": str(datetime.now(UTC).timestamp())},
                "seen": {"N": "0"},
                "bouncing": {"N": "0"},
                "version": {"N": "3"},
            },
        )


@pytest.fixture
def stack() -> Iterator[Stack]:
    with mock_aws():
        yield Stack()


def logs(stack: Stack, which: LogEvent) -> list[dict[str, Any]]:
    """The lines of an event: tools select on the ``event`` key, never on the message text."""
    return [line for line in _lines(stack) if line.get(EVENT) == which]


def lowest(a: float, b: float) -> float:
    return a


def highest(a: float, b: float) -> float:
    return b


# --- the normal drain --------------------------------------------------------------------------


def test_given_25_dead_lettered_messages_when_run_then_each_goes_back_to_its_source_and_leaves_the_dlq(stack):
    ids = stack.dead_letter(25, trace=TRACE)
    # SLUICE_SOURCE_QUEUE_ARN unset: SQS's DeadLetterQueueSourceArn alone says where they go back to
    report = stack.redriver(source_queue_arn="").run()

    assert report.received == report.redriven == 25
    assert (report.delayed, report.isolated, report.failed, report.bouncing) == (0, 0, 0, 0)
    assert report.stopped == "drained"
    assert report.batches == 3
    assert stack.depth(stack.dlq_url) == 0
    assert stack.counts(stack.work_url)["Delayed"] == 25
    entries = stack.sent_entries(stack.work_url)
    assert len(entries) == 25
    assert all(1 <= e["DelaySeconds"] <= 120 for e in entries)  # uniform(floor 1, min(3600, 60 · 2^1))
    by_origin = {envelope_of(e).origin_id: e for e in entries}
    assert set(by_origin) == set(ids)  # the DLQ message id is the identity of a first-hop message
    for e in entries:
        env = envelope_of(e)
        assert env.attempts == 1
        assert env.source == stack.work_arn
        assert env.trace == TRACE
        assert env.redriven_at is not None
        assert env.last_error is not None
        assert env.last_error.type == "MaxReceiveCountExceeded"
        assert env.last_error.receives is not None
        assert env.last_error.receives > MAX_RECEIVE_COUNT
    assert stack.metrics.values["SuccessfulRedrives"] == 25
    for name in ("PoisonPillsIsolated", "RedriveFailures", "BouncingRedrives", "BreakerOpen"):
        assert name in stack.metrics.values
        assert stack.metrics.values[name] == 0
    redriven = logs(stack, LogEvent.MESSAGE_REDRIVEN)
    assert {line["message_id"] for line in redriven} == set(ids)
    assert {line["attempt"] for line in redriven} == {1}
    assert all(line["origin_id"] == line["message_id"] for line in redriven)


def test_given_dead_lettered_messages_of_a_tenant_when_run_then_every_way_out_keeps_their_group_id(stack):
    # Given two of tenant-a's messages dead-lettered, one at the maximum, and one without a group
    at_max = Envelope(origin_id="origin-max", attempts=5, source=stack.work_arn)
    [pill] = stack.dead_letter(1, prefix="max", envelope=at_max, group="tenant-a")
    [grouped] = stack.dead_letter(1, prefix="grp", group="tenant-a")
    [plain] = stack.dead_letter(1, prefix="plain")
    # When the redriver runs
    report = stack.redriver().run()
    # Then the redriven one goes back with its group id, the pill goes to poison with it, the other without
    assert (report.redriven, report.isolated) == (2, 1)
    entries = {envelope_of(e).origin_id: e for e in stack.sent_entries(stack.work_url)}
    assert entries[grouped]["MessageGroupId"] == "tenant-a"
    assert envelope_of(entries[grouped]).group == "tenant-a"
    assert "MessageGroupId" not in entries[plain]
    assert envelope_of(entries[plain]).group is None
    [poisoned] = stack.raw.receive_message(
        QueueUrl=stack.poison_url,
        MessageSystemAttributeNames=["MessageGroupId"],
        MessageAttributeNames=["All"],
    )["Messages"]
    assert poisoned["Attributes"]["MessageGroupId"] == "tenant-a"
    assert envelope_of(poisoned).origin_id == "origin-max"
    assert envelope_of(poisoned).group == "tenant-a"
    assert pill != grouped


def test_given_a_tenant_s_backoff_beyond_the_threshold_when_run_then_the_delay_queue_gets_its_group(stack):
    now = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
    stack.dead_letter(1, group="tenant-b")
    report = stack.redriver(clock=lambda: now, uniform=highest, redrive_base_seconds=600).run()
    assert report.delayed == 1
    [entry] = stack.sent_entries(stack.delay_url)
    assert entry["MessageGroupId"] == "tenant-b"
    assert envelope_of(entry).group == "tenant-b"  # what the park keeps when it has no SQS attribute


def test_given_25_messages_when_run_then_it_takes_3_sqs_requests_per_10_and_one_empty_receive(stack):
    stack.dead_letter(25)
    stack.calls.calls.clear()
    stack.redriver().run()
    assert stack.calls.count("ReceiveMessage") == 4
    assert stack.calls.count("SendMessageBatch") == 3
    assert stack.calls.count("DeleteMessageBatch") == 3
    assert len(stack.sqs_requests()) == 10
    receives = stack.calls.params("ReceiveMessage")
    assert [r["MaxNumberOfMessages"] for r in receives] == [10, 10, 10, 10]
    assert all(r["QueueUrl"] == stack.dlq_url for r in receives)
    assert stack.calls.count("SendMessage") == stack.calls.count("DeleteMessage") == 0


def test_given_a_message_the_consumer_forwarded_when_run_then_its_recorded_error_travels_back_with_it(stack):
    error = ErrorInfo(
        type="TransientError", message="payment gateway unavailable", at=datetime.now(UTC), receives=5
    )
    envelope = Envelope(
        origin_id="origin-9", source=stack.work_arn, trace=TRACE, last_error=error, first_failure=error.at
    )
    stack.forwarded(
        '{"order_id": "ord-9"}', envelope, {"tenant": {"DataType": "String", "StringValue": "acme"}}
    )
    report = stack.redriver().run()
    assert report.redriven == 1
    [entry] = stack.sent_entries(stack.work_url)
    env = envelope_of(entry)
    assert env.origin_id == "origin-9"
    assert env.last_error == error
    assert env.attempts == 1
    assert entry["MessageAttributes"]["tenant"]["StringValue"] == "acme"


# --- the breaker -------------------------------------------------------------------------------


def test_given_an_open_breaker_when_run_then_no_sqs_request_is_made_and_nothing_moves(stack):
    stack.dead_letter(5)
    before = stack.counts(stack.dlq_url)
    stack.set_breaker("open", opened_by="operator", reason="payments API down")
    stack.calls.calls.clear()
    report = stack.redriver().run()
    assert report.stopped == "breaker_open"
    assert report.received == 0
    assert report.breaker["isOpen"] is True
    assert report.breaker["reason"] == "payments API down"
    assert stack.sqs_requests() == []
    assert stack.counts(stack.dlq_url) == before == {"visible": 5, "NotVisible": 0, "Delayed": 0}
    assert stack.metrics.values["BreakerOpen"] == 1
    assert stack.metrics.values["SuccessfulRedrives"] == 0


def test_given_a_half_open_breaker_when_run_then_one_probe_batch_goes_and_the_rest_waits_for_the_hold(stack):
    stack.dead_letter(25)
    stack.set_breaker("half_open")
    states: list[str] = []
    stack.sqs.before_receive.append(lambda: states.append(stack.breaker_item()["state"]["S"]))
    report = stack.redriver().run()
    assert states == ["half_open"]  # exactly one probe batch
    assert report.redriven == 10
    assert report.stopped == "breaker_open"
    assert report.breaker["state"] == "half_open"
    assert report.breaker["isOpen"] is True
    assert "probe of 10 messages re-driven" in report.breaker["reason"]
    assert stack.depth(stack.dlq_url) == 15  # the rest wait until the probe is judged
    probes = [line for line in logs(stack, LogEvent.BREAKER_HALF_OPEN) if line["probe"]]
    assert [line["size"] for line in probes] == [10]


def _failed_at(stack, n: int, at: datetime, prefix: str) -> None:
    """N messages the consumer dead-lettered with an error recorded at ``at``."""
    for k in range(n):
        error = ErrorInfo(type="TransientError", message="gateway down", at=at, receives=5)
        envelope = Envelope(
            origin_id=f"{prefix}-{k}", source=stack.work_arn, last_error=error, first_failure=at
        )
        stack.forwarded(json.dumps({"order_id": f"{prefix}-{k}"}), envelope)


def test_given_a_probe_held_long_enough_and_no_fresh_failures_when_run_then_it_closes_and_drains(stack):
    _failed_at(stack, 25, datetime.now(UTC) - timedelta(hours=11), "old")  # failed before the probe
    stack.set_breaker("half_open", probe_ago=10 * 3600)  # the hold is long over
    report = stack.redriver().run()
    assert report.redriven == 25
    assert report.stopped == "drained"
    assert report.breaker["state"] == "closed"
    assert "probe passed: 0 of 10 messages failed after it went out" in report.breaker["reason"]


def test_given_a_probe_held_long_enough_and_fresh_failures_when_run_then_it_opens_again(stack):
    _failed_at(stack, 10, datetime.now(UTC) - timedelta(minutes=5), "new")  # failed after the probe
    stack.set_breaker("half_open", probe_ago=3600)
    report = stack.redriver().run()
    assert report.stopped == "breaker_open"
    assert report.breaker["state"] == "open"
    assert "the probe did not pass: 10 of 10" in report.breaker["reason"]


def test_given_bouncing_messages_when_run_then_the_breaker_opens_mid_run_and_the_run_stops(stack):
    back = Envelope(
        origin_id="x",
        attempts=1,
        source=stack.work_arn,
        redriven_at=datetime.now(UTC) - timedelta(seconds=30),
    )
    for i in range(10):
        stack.forwarded(
            json.dumps({"order_id": f"bounce-{i}"}), back.model_copy(update={"origin_id": f"b{i}"})
        )
    stack.dead_letter(15, prefix="fresh")
    report = stack.redriver().run()
    assert report.stopped == "breaker_open"
    assert report.batches == 1
    assert report.bouncing == 10
    assert report.breaker["state"] == "open"
    assert report.breaker["openedBy"] == "auto"
    assert "10 of 10" in report.breaker["reason"]
    assert stack.depth(stack.dlq_url) == 15  # the rest wait for the breaker
    assert stack.metrics.values["BouncingRedrives"] == 10
    assert stack.metrics.values["BreakerOpen"] == 1
    assert stack.breaker_item()["state"] == {"S": "open"}
    redriven = logs(stack, LogEvent.MESSAGE_REDRIVEN)
    assert all(line["bouncing"] for line in redriven)
    assert {line["attempt"] for line in redriven} == {2}


def test_given_few_bouncing_messages_when_run_then_the_breaker_stays_closed(stack):
    back = Envelope(attempts=1, source=stack.work_arn, redriven_at=datetime.now(UTC) - timedelta(seconds=30))
    for i in range(4):
        stack.forwarded(json.dumps({"order_id": f"bounce-{i}"}), back)
    stack.dead_letter(16)
    report = stack.redriver().run()
    assert report.stopped == "drained"
    assert report.bouncing == 4
    assert report.redriven == 20
    assert report.breaker["state"] == "closed"


# --- poison, delay, refusals -------------------------------------------------------------------


def test_given_messages_at_the_maximum_when_run_then_they_are_isolated_with_a_complete_envelope(stack):
    first = datetime(2026, 11, 20, 9, 30, tzinfo=UTC)
    envelope = Envelope(
        origin_id="origin-1",
        attempts=5,
        first_failure=first,
        last_error=ErrorInfo(type="MaxReceiveCountExceeded", message="earlier cycle", at=first),
        redriven_at=datetime.now(UTC) - timedelta(hours=2),
        source=stack.work_arn,
        trace=TRACE,
    )
    user = {
        "tenant": {"DataType": "String", "StringValue": "acme"},
        "amount": {"DataType": "Number", "StringValue": "4200"},
        "signature": {"DataType": "Binary", "BinaryValue": b"\x00\xffsig"},
    }
    ids = stack.dead_letter(3, attributes=user, envelope=envelope, trace=OTHER_TRACE)
    report = stack.redriver().run()
    assert report.isolated == 3
    assert report.redriven == 0
    assert stack.depth(stack.dlq_url) == 0
    poisoned = drain(stack.raw, stack.poison_url)
    assert len(poisoned) == 3
    for message in poisoned:
        assert json.loads(message["Body"])["order_id"].startswith("ord-")
        assert message["MessageAttributes"]["tenant"]["StringValue"] == "acme"
        assert message["MessageAttributes"]["amount"] == {"DataType": "Number", "StringValue": "4200"}
        assert message["MessageAttributes"]["signature"]["BinaryValue"] == b"\x00\xffsig"
        env = envelope_of(message)
        assert env.origin_id == "origin-1"
        assert env.attempts == 6
        assert env.first_failure == first
        assert env.last_error is not None
        assert env.last_error.type == "MaxReceiveCountExceeded"
        assert "redrive policy" in env.last_error.message
        assert env.last_error.at > first
        assert env.source == stack.work_arn
        assert env.trace == TRACE  # the first hop's, not this delivery's
    assert stack.metrics.values["PoisonPillsIsolated"] == 3
    assert stack.metrics.values["SuccessfulRedrives"] == 0
    isolated = logs(stack, LogEvent.MESSAGE_ISOLATED)
    assert {line["message_id"] for line in isolated} == set(ids)
    assert {line["attempt"] for line in isolated} == {6}
    assert all("still failing after 5 redrives" in line["reason"] for line in isolated)


def test_given_a_backoff_beyond_the_threshold_when_run_then_it_goes_through_the_delay_queue(stack):
    now = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
    [mid] = stack.dead_letter(1)
    report = stack.redriver(clock=lambda: now, uniform=highest, redrive_base_seconds=600).run()
    assert report.delayed == 1
    assert report.redriven == 0
    assert stack.depth(stack.dlq_url) == 0
    [entry] = stack.sent_entries(stack.delay_url)
    assert "DelaySeconds" not in entry  # the delay pipeline holds it
    [message] = drain(stack.raw, stack.delay_url)
    env = envelope_of(message)
    assert env.deliver_at == now + timedelta(seconds=1200)
    assert env.target == stack.work_url
    assert env.origin_id == mid
    assert env.attempts == 1
    assert stack.sent_entries(stack.work_url) == []
    assert stack.metrics.values["SuccessfulRedrives"] == 1


def test_given_a_send_refused_for_one_entry_when_run_then_only_that_message_stays_in_the_dlq(stack):
    stack.dead_letter(5)
    refused_body = json.dumps({"order_id": "ord-2"})
    stack.sqs.refuse[stack.work_url, refused_body] = ("ServiceUnavailable", False)
    report = stack.redriver().run()
    assert report.received == 5
    assert report.redriven == 4
    assert report.failed == 1
    assert stack.metrics.values["RedriveFailures"] == 1
    assert stack.metrics.values["SuccessfulRedrives"] == 4
    assert stack.counts(stack.dlq_url) == {"visible": 0, "NotVisible": 1, "Delayed": 0}  # back in 60 s
    tries = [e for e in stack.sent_entries(stack.work_url) if e["MessageBody"] == refused_body]
    assert tries == []  # never accepted
    assert stack.sqs.refusals == 4  # send_batch's four attempts at the refused entry
    # its three back-offs used the injected sleep (a receive returning part of the DLQ adds a pacing one)
    assert len(stack.time.sleeps) >= 3
    assert drain(stack.raw, stack.poison_url) == []
    [error] = logs(stack, LogEvent.SEND_REFUSED)
    assert error["code"] == "ServiceUnavailable"
    assert error["attempt"] == 1
    assert "message_id" in error


def test_given_a_source_refusing_a_message_as_malformed_when_run_then_it_is_isolated(stack):
    stack.dead_letter(3)
    refused_body = json.dumps({"order_id": "ord-1"})
    stack.sqs.refuse[stack.work_url, refused_body] = ("InvalidParameterValue", True)
    report = stack.redriver().run()
    assert report.redriven == 2
    assert report.isolated == 1
    assert report.failed == 0
    assert stack.depth(stack.dlq_url) == 0
    [poisoned] = drain(stack.raw, stack.poison_url)
    assert poisoned["Body"] == refused_body
    env = envelope_of(poisoned)
    assert env.last_error is not None
    assert env.last_error.type == "RedriveRefused"
    assert "InvalidParameterValue" in env.last_error.message
    assert env.redriven_at is None  # it was never re-driven
    assert env.attempts == 1
    assert stack.metrics.values["PoisonPillsIsolated"] == 1


def test_given_neither_source_nor_poison_queue_taking_a_message_when_run_then_it_stays(stack):
    stack.dead_letter(2)
    refused_body = json.dumps({"order_id": "ord-0"})
    stack.sqs.refuse[stack.work_url, refused_body] = ("InvalidParameterValue", True)
    stack.sqs.refuse[stack.poison_url, refused_body] = ("InvalidParameterValue", True)
    report = stack.redriver().run()
    assert (report.redriven, report.isolated, report.failed) == (1, 0, 1)
    assert stack.counts(stack.dlq_url)["NotVisible"] == 1


def test_given_a_delete_that_fails_when_run_then_it_counts_as_a_failure_and_the_message_stays(stack):
    stack.dead_letter(3)
    stack.sqs.refuse_delete.add(json.dumps({"order_id": "ord-1"}))
    report = stack.redriver().run()
    assert report.redriven == 3  # sent; a second copy later is absorbed by the consumer's idempotency
    assert report.failed == 1
    assert stack.depth(stack.dlq_url) == 1


def test_given_a_source_outside_the_allowlist_when_run_then_the_message_is_isolated_as_refused(stack):
    other = stack.arn(stack.raw.create_queue(QueueName="other")["QueueUrl"])
    stack.forwarded('{"order_id": "o"}', Envelope(origin_id="o", source=other))
    report = stack.redriver(source_queue_arn="").run()
    assert report.isolated == 1
    [poisoned] = drain(stack.raw, stack.poison_url)
    env = envelope_of(poisoned)
    assert env.last_error is not None
    assert env.last_error.type == "RedriveRefused"
    assert "not in the redrive allowlist" in env.last_error.message
    assert drain(stack.raw, f"{stack.work_url[: -len('work')]}other") == []


def test_given_a_corrupt_envelope_when_run_then_it_is_counted_and_the_message_still_redriven(stack):
    stack.dead_letter(1, attributes={ATTRIBUTE: {"DataType": "String", "StringValue": "{not json"}})
    report = stack.redriver().run()
    assert report.redriven == 1
    assert stack.metrics.values["EnvelopesCorrupt"] == 1


# --- forged envelopes (issue 10) -----------------------------------------------------------------


def _forge(stack: Stack, count: int, forged: dict[str, Any], prefix: str = "forged") -> list[str]:
    """What any principal allowed to send to the work queue can do: write the sluice attribute itself
    (no seal); the messages fail until the redrive policy moves them to the DLQ."""
    attribute = {ATTRIBUTE: {"DataType": "String", "StringValue": json.dumps(forged)}}
    return stack.dead_letter(count, prefix=prefix, attributes=attribute)


def test_given_12_forged_redrive_times_when_run_then_the_breaker_stays_closed_and_each_is_reported(stack):
    # Given 12 messages whose forged envelopes say "re-driven moments ago and back again": before the
    # seal, the breaker opened for everyone ("12 of 12 ... re-driven within the last 60s and are back")
    forged = {"v": 1, "attempts": 1, "source": stack.work_arn, "redriven_at": "2099-01-01T00:00:00Z"}
    ids = _forge(stack, 12, forged)
    # When the redriver runs
    report = stack.redriver().run()
    # Then nothing counts as bouncing, all 12 go back as first redrives, and each forgery is reported
    assert report.bouncing == 0
    assert report.breaker["state"] == "closed"
    assert (report.redriven, report.isolated, report.failed) == (12, 0, 0)
    assert stack.metrics.values["EnvelopesCorrupt"] == 12
    assert stack.metrics.values["BouncingRedrives"] == 0
    warned = logs(stack, LogEvent.ENVELOPE_CORRUPT)
    assert all("forged or altered" in line["message"] for line in warned)  # the reason, for people
    assert sorted(line["message_id"] for line in warned) == sorted(ids)
    assert {line["attempt"] for line in logs(stack, LogEvent.MESSAGE_REDRIVEN)} == {1}


def test_given_a_forged_attempt_count_when_first_dead_lettered_then_it_is_redriven_not_poisoned(stack):
    # Given a message whose forged envelope claims 99 failed cycles (max attempts is 5)
    [message_id] = _forge(stack, 1, {"v": 1, "attempts": 99, "origin_id": "someone-elses-order"})
    # When the redriver runs
    report = stack.redriver().run()
    # Then it is this message's first redrive, under its own identity
    assert (report.redriven, report.isolated) == (1, 0)
    assert stack.depth(stack.poison_url) == 0
    [sent] = stack.sent_entries(stack.work_url)
    envelope = envelope_of(sent)
    assert envelope.attempts == 1
    assert envelope.origin_id == message_id
    assert stack.metrics.values["EnvelopesCorrupt"] == 1


def test_given_a_genuine_envelope_on_another_body_when_run_then_its_history_is_not_borrowed(stack):
    # Given an envelope sluice sealed for one message, copied onto another (a replay of its history)
    worn = Envelope(origin_id="o-real", attempts=5, source=stack.work_arn)
    attributes = {ATTRIBUTE: {"DataType": "String", "StringValue": sealed(worn, '{"order_id": "real"}')}}
    stack.dead_letter(1, prefix="copy", attributes=attributes)
    # When the redriver runs
    report = stack.redriver().run()
    # Then the copy starts its own history: redriven, not poisoned as the original would be
    assert (report.redriven, report.isolated) == (1, 0)
    assert stack.metrics.values["EnvelopesCorrupt"] == 1


def test_given_a_message_at_the_size_limit_when_its_envelope_grows_then_it_is_redriven_offloaded(stack):
    # Given a dead-lettered message exactly at SQS's limit with the envelope the consumer gave it
    envelope = Envelope(origin_id="o-big", source=stack.work_arn, attempts=0)
    probe = sealed(envelope, "")
    attributes = {ATTRIBUTE: {"DataType": "String", "StringValue": probe}}
    body = "b" * (MAX_MESSAGE_BYTES - message_bytes("", attributes))
    stack.forwarded(body, envelope)
    # When the redriver records this cycle (attempts, redrive time, error) and sends it back
    report = stack.redriver().run()
    # Then it goes back to its source as a claim-check pointer to the whole body
    assert (report.redriven, report.isolated, report.failed) == (1, 0, 0)
    [entry] = stack.sent_entries(stack.work_url)
    pointer = claimcheck.parse_pointer(entry["MessageBody"])
    assert pointer is not None
    assert stack.s3.get_object(Bucket="claims", Key=pointer.key)["Body"].read().decode() == body
    assert envelope_of(entry).attempts == 1


def _lines(stack: Stack) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stack.log.getvalue().splitlines() if line.startswith("{")]


# --- velocity, deadline, limit -----------------------------------------------------------------


def test_given_50_messages_at_10_per_second_when_run_then_pacing_holds_at_every_moment(stack):
    stack.dead_letter(50)
    starts: list[tuple[float, int]] = []  # (time a receive starts, messages received before it)
    stack.sqs.before_receive.append(lambda: starts.append((stack.time.now, len(stack.sqs.received))))
    report = stack.redriver().run(max_per_second=10)
    assert report.redriven == 50
    assert sum(stack.time.sleeps) >= 4
    # the batch started at t ends with the count the next receive sees: never more than rate·t + 10
    ends = [before for _, before in starts[1:]]
    assert ends[-1] == 50
    for (t, _), done in zip(starts[:-1], ends, strict=True):
        assert done <= 10 * t + 10, (t, done)
    assert [t for t, _ in starts] == [0, 1, 2, 3, 4, 5]


def test_given_a_long_quiet_poll_first_when_run_then_the_wait_is_no_credit_for_a_burst(stack):
    stack.dead_letter(30)
    starts: list[float] = []

    def receive_starts() -> None:
        starts.append(stack.time.now)
        if len(starts) == 1:
            stack.time.now += 5.0  # the first long poll waited 5 s before messages arrived

    stack.sqs.before_receive.append(receive_starts)
    report = stack.redriver().run(max_per_second=10)
    assert report.redriven == 30
    # after the 5 s poll, batches of 10 still go out at most one per second
    gaps = [b - a for a, b in itertools.pairwise(starts[1:])]
    assert gaps, starts
    assert min(gaps) >= 1.0, starts


@pytest.mark.parametrize(("rate", "batch"), [(2, 2), (5, 5), (0.5, 1), (50, 10)])
def test_given_a_slow_velocity_when_run_then_batches_shrink_to_the_rate(stack, rate, batch):
    stack.dead_letter(4)
    stack.calls.calls.clear()
    stack.redriver().run(max_per_second=rate)
    assert {r["MaxNumberOfMessages"] for r in stack.calls.params("ReceiveMessage")} == {batch}


def test_given_an_impossible_velocity_when_run_then_value_error(stack):
    with pytest.raises(ValueError, match="max_per_second"):
        stack.redriver().run(max_per_second=0)


def test_given_little_time_left_when_run_then_it_stops_before_receiving(stack):
    stack.dead_letter(3)
    stack.calls.calls.clear()
    report = stack.redriver().run(lambda: 9_000)
    assert report.stopped == "deadline"
    assert report.received == 0
    assert stack.calls.count("ReceiveMessage") == 0
    assert stack.depth(stack.dlq_url) == 3


def test_given_the_deadline_nearing_mid_run_when_run_then_it_stops_between_batches(stack):
    stack.dead_letter(30)
    left = iter([60_000, 60_000, 5_000])
    report = stack.redriver().run(lambda: next(left))
    assert report.stopped == "deadline"
    assert report.received == 20
    assert stack.depth(stack.dlq_url) == 10


def test_given_a_message_limit_when_run_then_it_stops_at_the_limit(stack):
    stack.dead_letter(25)
    stack.calls.calls.clear()
    report = stack.redriver().run(max_messages=12)
    assert report.stopped == "limit"
    assert report.received == report.redriven == 12
    assert [r["MaxNumberOfMessages"] for r in stack.calls.params("ReceiveMessage")] == [10, 2]
    assert stack.depth(stack.dlq_url) == 13


# --- configuration -----------------------------------------------------------------------------


def test_given_long_backoffs_and_no_delay_queue_when_built_then_the_error_names_the_variable(stack):
    with pytest.raises(ConfigurationError, match="SLUICE_DELAY_QUEUE_URL"):
        stack.redriver(delay_queue_url="")
    stack.redriver(delay_queue_url="", redrive_cap_seconds=900)  # within the threshold: not needed


def test_given_binary_attributes_when_redriven_then_they_arrive_byte_for_byte(stack):
    user = {"signature": {"DataType": "Binary", "BinaryValue": b"\x00\x01\xfe\xff"}}
    stack.dead_letter(1, attributes=user)
    stack.redriver(uniform=lowest, redrive_floor_seconds=0).run()
    [message] = drain(stack.raw, stack.work_url)  # floor 0, lowest draw: no delay
    assert message["MessageAttributes"]["signature"]["BinaryValue"] == b"\x00\x01\xfe\xff"
    assert envelope_of(message).attempts == 1


def test_given_an_entry_sqs_would_refuse_beside_healthy_ones_when_run_then_it_alone_is_isolated(stack):
    # Given 3 healthy dead-lettered messages and one whose envelope preserves a user attribute SQS
    # refuses on re-send (no DataType): before, every SendMessageBatch it joined failed as a whole
    stack.dead_letter(3)
    forged = {
        "v": 1,
        "origin_id": "o-broken",
        "source": stack.work_arn,
        "displaced": {"broken": {"StringValue": "v"}},
    }
    stack.raw.send_message(
        QueueUrl=stack.dlq_url,
        MessageBody='{"order_id": "broken"}',
        MessageAttributes={
            "tenant": {"DataType": "String", "StringValue": "acme"},
            # written by sluice (sealed): what it preserved is what SQS refuses
            ATTRIBUTE: {
                "DataType": "String",
                "StringValue": sealed(Envelope.model_validate(forged), '{"order_id": "broken"}'),
            },
        },
    )
    # When the redriver runs
    report = stack.redriver().run()
    # Then the healthy ones go back to their source, and the bad one alone is isolated, attribute kept
    assert (report.redriven, report.isolated, report.failed) == (3, 1, 0)
    assert stack.depth(stack.dlq_url) == 0
    [poisoned] = drain(stack.raw, stack.poison_url)
    assert poisoned["MessageAttributes"]["tenant"]["StringValue"] == "acme"
    env = envelope_of(poisoned)
    assert env.refused_attributes is not None
    assert env.refused_attributes["broken"]["value"] == {"StringValue": "v"}
    assert "type" in env.refused_attributes["broken"]["reason"]
    assert env.last_error is not None
    assert env.last_error.type == "RedriveRefused"
    assert env.origin_id == "o-broken"


def test_given_the_redriver_dies_between_its_send_and_its_delete_then_nothing_is_lost_and_copies_keep_ids(
    stack,
):
    # Given three dead-lettered messages, and a redriver whose process dies just before its delete
    # (sluice_local.emulation.faults, as the soak injects it: every later call of the invocation fails)
    ids = stack.dead_letter(3)
    injector = faults.Injector(faults.FaultPlan(seed=0, aws_rate=0.0))
    undo = faults.install(injector)
    inner = faults.Scope("RedriverFunction", crash_before="DeleteMessageBatch")
    thread: Any = threading.current_thread()
    thread._sluice_scope = inner  # this thread is the invocation's handler thread
    try:
        with faults.scope(inner), pytest.raises(faults.SimulatedCrash):
            stack.redriver().run()
    finally:
        del thread._sluice_scope
        undo()
    # Then all three were sent back and are still in the DLQ (in flight, back after their visibility):
    # the next run sends them again, and every copy carries the identity the consumer dedupes on
    assert injector.where == {"RedriverFunction DeleteMessageBatch crash-mid-invocation (died before it)": 1}
    entries = stack.sent_entries(stack.work_url)
    assert sorted(envelope_of(e).origin_id or "" for e in entries) == sorted(ids)
    assert stack.counts(stack.dlq_url)["NotVisible"] == 3


def test_given_a_fifo_workload_s_dlq_when_run_then_nothing_leaves_it_and_the_log_says_why(stack):
    # Given a FIFO workload's dead-letter queue holding three messages of one group
    fifo = {"FifoQueue": "true", "ContentBasedDeduplication": "true"}
    dlq = stack.raw.create_queue(QueueName="work-dlq.fifo", Attributes=fifo)["QueueUrl"]
    for i in range(3):
        stack.raw.send_message(
            QueueUrl=dlq, MessageBody=json.dumps({"order_id": f"o-{i}"}), MessageGroupId="g"
        )
    stack.calls.calls.clear()
    # When a redrive runs on it (a FIFO queue takes no DelaySeconds, and the sends need deduplication ids)
    report = stack.redriver(dead_letter_queue_url=dlq).run()
    # Then it moves nothing (no message is isolated as malformed), makes no SQS request, and says why
    assert report.stopped == "fifo_not_redriven"
    assert report.received == report.isolated == 0
    assert stack.sqs_requests() == []
    assert stack.depth(dlq) == 3
    assert stack.depth(stack.poison_url) == 0
    assert "not re-driven yet" in stack.log.getvalue()
