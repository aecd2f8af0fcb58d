"""batch-delay and rehydrator against in-process moto (Given / When / Then)."""

from __future__ import annotations

import io
import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from aws_lambda_powertools import Logger
from moto import mock_aws

from sluice import claimcheck
from sluice.delay.parker import BatchDelay
from sluice.delay.rehydrator import Rehydrator
from sluice.delay.schedule import bucket_of, send_delayed
from sluice.delay.settings import DelaySettings
from sluice.envelope import ATTRIBUTE, Envelope, Seal
from sluice.errors import TransientError
from sluice.limits import MAX_MESSAGE_BYTES
from sluice.logevents import EVENT, LogEvent
from sluice.sqs import message_bytes
from sluice_local.emulation.lambda_loader import LambdaContext
from sluice_local.emulation.sqs_events import drain, receive_event
from tests.conftest import TEST_SEAL, create_waiting_state_machine, envelope_key_secret
from tests.doubles import RecordingMetrics, envelope_of, last_error_of

from .conftest import ApiCalls

NOW = datetime(2026, 11, 22, 12, 0, 0, tzinfo=UTC)
REGION = "us-east-1"


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def delays():
    with mock_aws():
        session = boto3.Session(region_name=REGION)
        calls = ApiCalls(session)
        sqs, s3, sfn = session.client("sqs"), session.client("s3"), session.client("stepfunctions")
        iam = session.client("iam")
        delay_url = sqs.create_queue(QueueName="delay")["QueueUrl"]
        target = sqs.create_queue(QueueName="work")["QueueUrl"]
        other = sqs.create_queue(QueueName="elsewhere")["QueueUrl"]
        poison = sqs.create_queue(QueueName="poison")["QueueUrl"]
        s3.create_bucket(Bucket="parked")
        s3.create_bucket(Bucket="claims")
        machine = create_waiting_state_machine(sfn, iam, "delay")
        settings = DelaySettings.from_env(
            {
                "SLUICE_DELAY_BUCKET": "parked",
                "SLUICE_DELAY_STATE_MACHINE_ARN": machine,
                "SLUICE_DELAY_TARGETS": target,
                "SLUICE_DIRECT_SEND_THRESHOLD_SECONDS": "900",
                "SLUICE_DELAY_BUCKET_SECONDS": "60",
                "SLUICE_POISON_QUEUE_URL": poison,
                "SLUICE_ENVELOPE_KEY_SECRET": envelope_key_secret(),
                "SLUICE_CLAIM_CHECK_BUCKETS": "claims",
            }
        )
        yield Delays(session, calls, sqs, s3, sfn, delay_url, target, other, poison, machine, settings)


class Delays:
    def __init__(self, session, calls, sqs, s3, sfn, delay_url, target, other, poison, machine, settings):
        self.session, self.calls, self.sqs, self.s3, self.sfn = session, calls, sqs, s3, sfn
        self.delay_url, self.target, self.other, self.poison = delay_url, target, other, poison
        self.machine, self.settings = machine, settings
        self.clock = Clock(NOW)
        self.metrics = RecordingMetrics()
        self.log = io.StringIO()
        self.service = f"sluice-test-{uuid.uuid4().hex}"  # Powertools shares a logger per service name

    def logged(self, event: LogEvent) -> list[dict[str, Any]]:
        return [
            line for line in map(json.loads, self.log.getvalue().splitlines()) if line.get(EVENT) == event
        ]

    def delayer(self) -> BatchDelay:
        return BatchDelay(
            settings=self.settings, sqs=self.sqs, s3=self.s3, sfn=self.sfn,
            logger=Logger(service=self.service, stream=self.log),
            metrics_sink=self.metrics, clock=self.clock,
            seal=TEST_SEAL,
        )  # fmt: skip

    def rehydrator(self) -> Rehydrator:
        return Rehydrator(
            settings=self.settings, sqs=self.sqs, s3=self.s3,
            logger=Logger(service=self.service, stream=self.log),
            metrics_sink=self.metrics, clock=self.clock,
            seal=TEST_SEAL,
        )  # fmt: skip

    def request(
        self,
        body: str,
        seconds: float,
        target: str | None = None,
        group: str | None = None,
        **attributes: Any,
    ) -> str:
        return send_delayed(
            self.sqs,
            delay_queue_url=self.delay_url,
            target=target or self.target,
            body=body,
            deliver_at=NOW + timedelta(seconds=seconds),
            attributes={k: {"DataType": "String", "StringValue": v} for k, v in attributes.items()},
            group_id=group,
        )

    def batch(self, count: int) -> dict[str, Any]:
        arn = f"arn:aws:sqs:{REGION}:123456789012:delay"
        return receive_event(self.sqs, self.delay_url, arn, count)

    def parked_keys(self) -> list[str]:
        return [o["Key"] for o in self.s3.list_objects_v2(Bucket="parked").get("Contents", [])]


# --- batch-delay -------------------------------------------------------------------------------


def test_messages_due_within_the_threshold_go_straight_to_the_target_with_the_residual_delay(delays):
    delays.request("soon", 120.4, tenant="acme")
    delays.request("now", 0)
    response = delays.delayer().handle(delays.batch(2), LambdaContext())
    assert response == {"batchItemFailures": []}
    [call] = delays.calls.params("SendMessageBatch")
    assert sorted(e.get("DelaySeconds", 0) for e in call["Entries"]) == [0, 120]
    assert delays.parked_keys() == []
    assert delays.metrics.values["MessagesSentDirect"] == 2
    delivered = {m["Body"]: m for m in drain(delays.sqs, delays.target)}
    assert "now" in delivered  # the delayed one becomes visible in 120 s
    assert delivered["now"]["MessageAttributes"][ATTRIBUTE]


def test_given_a_tenant_s_requests_when_sent_direct_or_parked_and_rehydrated_then_they_keep_their_group(
    delays,
):
    # Given tenant-a's request due now (sent direct) and one due in an hour (parked in S3), and one without
    delays.request("direct", 0, group="tenant-a")
    delays.request("parked", 3600, group="tenant-a")
    delays.request("plain", 0)
    # When batch-delay handles them, and the rehydrator once the parked one's bucket opened
    assert delays.delayer().handle(delays.batch(3), LambdaContext()) == {"batchItemFailures": []}
    [key] = delays.parked_keys()
    delays.clock.now = NOW + timedelta(seconds=3600)
    delays.rehydrator().handle({"bucket": 0, "prefix": key.rsplit("/", 1)[0] + "/"}, LambdaContext())
    # Then each grouped one reaches its target with its MessageGroupId, the other without one
    delivered = {m["Body"]: m for m in drain(delays.sqs, delays.target)}
    assert set(delivered) == {"direct", "parked", "plain"}
    for body in ("direct", "parked"):
        assert delivered[body]["Attributes"]["MessageGroupId"] == "tenant-a"
        assert envelope_of(delivered[body]).group == "tenant-a"
    assert "MessageGroupId" not in delivered["plain"]["Attributes"]


def test_given_a_parked_request_with_a_malformed_group_when_rehydrated_then_it_is_sent_without_and_logged(
    delays,
):
    # Given a request whose envelope a producer wrote with a group id SQS would refuse, parked in S3
    body = "forged-group"
    envelope = Envelope(target=delays.target, deliver_at=NOW + timedelta(seconds=3600), group="tenant a")
    attributes = {ATTRIBUTE: {"DataType": "String", "StringValue": envelope.to_json()}}
    delays.sqs.send_message(QueueUrl=delays.delay_url, MessageBody=body, MessageAttributes=attributes)
    # When batch-delay parks it and the rehydrator sends it
    assert delays.delayer().handle(delays.batch(1), LambdaContext()) == {"batchItemFailures": []}
    [key] = delays.parked_keys()
    delays.clock.now = NOW + timedelta(seconds=3600)
    delays.rehydrator().handle({"bucket": 0, "prefix": key.rsplit("/", 1)[0] + "/"}, LambdaContext())
    # Then it is delivered, without a group (never refused by SQS for it), and the problem was logged
    # with its message id and counted
    [message] = drain(delays.sqs, delays.target)
    assert message["Body"] == body
    assert "MessageGroupId" not in message["Attributes"]
    [corrupt] = [line for line in delays.logged(LogEvent.ENVELOPE_CORRUPT) if "group id" in line["message"]]
    assert corrupt["message_id"]
    assert "only letters, digits and ASCII punctuation" in corrupt["message"]
    assert delays.metrics.values["EnvelopesCorrupt"] >= 1


def test_given_an_entry_the_target_refuses_beside_healthy_ones_then_it_alone_is_isolated_and_counted(delays):
    # Given a producer's delay request whose envelope carries a displaced attribute SQS refuses
    # (no DataType), beside two healthy requests due soon: one SendMessageBatch to the target
    delays.request("healthy-1", 30)
    forged = {
        "v": 1,
        "deliver_at": NOW.isoformat(),
        "target": delays.target,
        "displaced": {"broken": {"StringValue": "v"}},
    }
    delays.sqs.send_message(
        QueueUrl=delays.delay_url,
        MessageBody="broken",
        MessageAttributes={ATTRIBUTE: {"DataType": "String", "StringValue": json.dumps(forged)}},
    )
    delays.request("healthy-2", 30)
    # When batch-delay handles the batch
    response = delays.delayer().handle(delays.batch(3), LambdaContext())
    # Then the healthy ones go to the target, the broken one to poison with the reason, and the
    # isolation is counted (it was not, for this path, before the battery found it)
    assert response == {"batchItemFailures": []}
    assert delays.metrics.values["MessagesSentDirect"] == 2
    assert delays.metrics.values["RecordsIsolated"] == 1
    [poisoned] = drain(delays.sqs, delays.poison)
    assert poisoned["Body"] == "broken"
    assert "must contain non-empty message attribute type" in last_error_of(poisoned).message


@pytest.mark.parametrize("seconds", [30, 3600], ids=["direct", "parked"])
def test_given_a_target_that_refuses_at_the_send_then_that_entry_alone_is_isolated_with_sqs_reason(
    delays, seconds
):
    # Given a target whose MaximumMessageSize is 1 KiB (every check before the send passes: they use
    # SQS's 1 MiB) and a 2 KiB request to it beside a healthy one to the same queue (one SendMessageBatch)
    small = delays.sqs.create_queue(QueueName="small", Attributes={"MaximumMessageSize": "1024"})["QueueUrl"]
    delays.settings = delays.settings.model_copy(update={"delay_targets": (delays.target, small)})
    refused = delays.request("r" * 2048, seconds, target=small)
    delays.request("healthy", seconds, target=small)
    # When batch-delay sends it (or parks it and the rehydrator sends it when due)
    assert delays.delayer().handle(delays.batch(2), LambdaContext()) == {"batchItemFailures": []}
    if seconds > 900:
        [key] = delays.parked_keys()
        delays.clock.now = NOW + timedelta(seconds=seconds)
        prefix = key.rsplit("/", 1)[0] + "/"
        result = delays.rehydrator().handle({"bucket": 0, "prefix": prefix}, LambdaContext())
        assert result == {"more": False, "sent": 1, "objects": 1}
    # Then SQS's refusal isolates that entry with SQS's reason; the healthy one is sent
    assert delays.metrics.values["RecordsIsolated"] == 1
    [poisoned] = drain(delays.sqs, delays.poison)
    assert poisoned["Body"] == "r" * 2048
    assert envelope_of(poisoned).origin_id == refused
    assert "Message must be shorter than 1024 bytes" in last_error_of(poisoned).message
    # ... and logs it with the id of the trace the poison message goes on with
    said = LogEvent.DELAYED_ISOLATED if seconds <= 900 else LogEvent.PARKED_ISOLATED
    [line] = delays.logged(said)
    traceparent = envelope_of(poisoned).traceparent
    assert traceparent is not None
    assert line["correlation_id"] == traceparent.split("-")[1]
    [call] = [c for c in delays.calls.params("SendMessageBatch") if c["QueueUrl"] == small]
    assert sorted(e["MessageBody"][:7] for e in call["Entries"]) == ["healthy", "rrrrrrr"]  # one call
    names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesDelayed"]
    depth = delays.sqs.get_queue_attributes(QueueUrl=small, AttributeNames=names)["Attributes"]
    assert sum(int(v) for v in depth.values()) == 1  # the healthy one, on its way (residual delay)


def at_the_limit(delays, seconds: float) -> tuple[str, str]:
    """A delay request exactly 1 MiB as the producer sent it (body + its envelope): (message id, body)."""
    delays.request("x" * 1000, seconds)
    [sent] = delays.sqs.receive_message(QueueUrl=delays.delay_url, MessageAttributeNames=["All"])["Messages"]
    delays.sqs.delete_message(QueueUrl=delays.delay_url, ReceiptHandle=sent["ReceiptHandle"])
    attributes = {
        k: {"DataType": v["DataType"], "StringValue": v["StringValue"]}
        for k, v in sent["MessageAttributes"].items()
    }
    body = "b" * (MAX_MESSAGE_BYTES - message_bytes("", attributes))
    mid = delays.sqs.send_message(QueueUrl=delays.delay_url, MessageBody=body, MessageAttributes=attributes)
    return mid["MessageId"], body


def claim_checks(delays) -> list[str]:
    return [o["Key"] for o in delays.s3.list_objects_v2(Bucket="claims").get("Contents", [])]


def test_given_a_request_at_the_size_limit_when_its_envelope_grows_then_the_body_is_offloaded_not_lost(
    delays,
):
    # Given a delay request that is exactly 1 MiB as the producer sent it (body + its envelope)
    _, body = at_the_limit(delays, 30)
    # When batch-delay adds the first hop's identity and sends it to its target
    response = delays.delayer().handle(delays.batch(1), LambdaContext())
    # Then it arrives as a claim-check pointer to the whole body, within SQS's limit
    assert response == {"batchItemFailures": []}
    [call] = delays.calls.params("SendMessageBatch")
    [delivered] = call["Entries"]  # due in 30 s: sent with its residual delay
    pointer = claimcheck.parse_pointer(delivered["MessageBody"])
    assert pointer is not None
    assert pointer.bucket == "claims"
    assert delays.s3.get_object(Bucket="claims", Key=pointer.key)["Body"].read().decode() == body
    assert delivered["MessageAttributes"]["ExtendedPayloadSize"]["StringValue"] == str(len(body))
    assert drain(delays.sqs, delays.poison) == []


def test_given_a_parked_request_at_the_size_limit_then_its_body_is_offloaded_when_sent_not_parked(delays):
    # Given a 1 MiB request due in 30 days: longer than the claim-check objects' lifecycle (7 days)
    days = 30 * 86_400
    _, body = at_the_limit(delays, days)
    # When batch-delay parks it
    assert delays.delayer().handle(delays.batch(1), LambdaContext()) == {"batchItemFailures": []}
    # Then nothing is in the claim-check bucket to expire: the body is parked inline
    assert claim_checks(delays) == []
    [key] = delays.parked_keys()
    [parked] = json.loads(delays.s3.get_object(Bucket="parked", Key=key)["Body"].read())["messages"]
    assert parked["body"] == body
    # When its bucket opens, the rehydrator offloads it as it sends it
    delays.clock.now = NOW + timedelta(seconds=days)
    result = delays.rehydrator().handle({"bucket": 0, "prefix": key.rsplit("/", 1)[0] + "/"}, LambdaContext())
    assert result == {"more": False, "sent": 1, "objects": 1}
    [message] = drain(delays.sqs, delays.target)
    pointer = claimcheck.parse_pointer(message["Body"])
    assert pointer is not None
    assert claim_checks(delays) == [pointer.key]
    assert delays.s3.get_object(Bucket="claims", Key=pointer.key)["Body"].read().decode() == body
    assert message_bytes(message["Body"], message["MessageAttributes"]) <= MAX_MESSAGE_BYTES
    assert envelope_of(message).deliver_at == NOW + timedelta(seconds=days)
    assert drain(delays.sqs, delays.poison) == []


def test_given_no_claim_check_bucket_when_a_request_too_large_to_send_is_planned_then_it_is_not_parked(
    delays,
):
    # Given a stack with no claim-check bucket and a 1 MiB request due in an hour
    delays.settings = delays.settings.model_copy(update={"claim_check_buckets": ()})
    mid, _ = at_the_limit(delays, 3600)
    # When batch-delay plans it
    response = delays.delayer().handle(delays.batch(1), LambdaContext())
    # Then it is not parked to fail in an hour: the poison queue cannot take it either (the reason makes it
    # larger still), so it stays on the delay queue, retried until SQS moves it to the alarmed delay DLQ
    assert response == {"batchItemFailures": [{"itemIdentifier": mid}]}
    assert delays.parked_keys() == []
    assert drain(delays.sqs, delays.poison) == []


def test_given_the_offload_fails_for_one_record_then_only_that_record_is_retried(delays):
    # Given a 1 MiB request and a small one, both due within the direct-send threshold
    big, _ = at_the_limit(delays, 30)
    delays.request("small", 30)
    # When the claim-check bucket cannot be written (PutObject fails)
    delays.s3.delete_bucket(Bucket="claims")
    response = delays.delayer().handle(delays.batch(2), LambdaContext())
    # Then the big one is retried, the small one is delivered
    assert response == {"batchItemFailures": [{"itemIdentifier": big}]}
    sent = [e["MessageBody"] for c in delays.calls.params("SendMessageBatch") for e in c["Entries"]]
    assert sent == ["small"]


def test_messages_due_later_are_parked_per_bucket_with_one_execution_each(delays):
    first = delays.request("a", 3600)
    delays.request("b", 3600 + 10)  # same 60 s bucket
    delays.request("c", 7200)  # another bucket
    response = delays.delayer().handle(delays.batch(3), LambdaContext())
    assert response == {"batchItemFailures": []}
    keys = delays.parked_keys()
    assert len(keys) == 2
    buckets = {bucket_of(NOW + timedelta(seconds=s), 60) for s in (3600, 7200)}
    assert {int(k.split("/")[1]) for k in keys} == buckets
    executions = delays.sfn.list_executions(stateMachineArn=delays.machine)["executions"]
    assert sorted(e["name"] for e in executions) == sorted(f"bucket-{b}" for b in buckets)
    doc = json.loads(delays.s3.get_object(Bucket="parked", Key=min(keys))["Body"].read())
    assert [m["body"] for m in doc["messages"]] == ["a", "b"]
    assert (
        Envelope.model_validate_json(doc["messages"][0]["attributes"][ATTRIBUTE]["StringValue"]).origin_id
        == first
    )
    assert delays.metrics.values["MessagesDelayed"] == 3
    assert delays.metrics.values["DelayBucketsStarted"] == 2


def test_a_second_start_for_the_same_bucket_is_a_no_op(delays):
    delays.request("a", 3600)
    delays.delayer().handle(delays.batch(1), LambdaContext())
    delays.request("b", 3600 + 5)
    response = delays.delayer().handle(delays.batch(1), LambdaContext())
    assert response == {"batchItemFailures": []}
    assert len(delays.parked_keys()) == 2  # one object per invocation and bucket
    assert len(delays.sfn.list_executions(stateMachineArn=delays.machine)["executions"]) == 1
    assert delays.metrics.values["DelayBucketsStarted"] == 1


@pytest.mark.parametrize(
    ("seconds", "target", "reason"),
    [
        (3600, "https://sqs.us-east-1.amazonaws.com/123456789012/elsewhere", "not in the allowlist"),
        (366 * 86400, None, "more than 365 days away"),
        (-3600, None, "in the past"),
    ],
)
def test_invalid_requests_go_to_the_poison_queue_with_a_clear_reason(delays, seconds, target, reason):
    mid = delays.request("bad", seconds, target=target)
    event = delays.batch(1)
    response = delays.delayer().handle(event, LambdaContext())
    assert response == {"batchItemFailures": []}
    [poisoned] = drain(delays.sqs, delays.poison)
    assert reason in last_error_of(poisoned).message
    assert delays.parked_keys() == []
    # the first hop's identity survives isolation: its message id and the queue it came from
    env = envelope_of(poisoned)
    assert env.origin_id == mid
    assert env.source == event["Records"][0]["eventSourceARN"]


def test_given_a_request_valid_when_sent_but_retried_past_the_grace_then_it_is_sent_now_not_poisoned(delays):
    # Given a request due 10 s after it was sent, whose first batch-delay invocation failed: it is back
    # after the delay queue's visibility timeout (360 s), longer than the 300 s grace (found by the soak)
    mid = delays.request("late", 10)
    event = delays.batch(1)
    event["Records"][0]["attributes"]["SentTimestamp"] = str(int(NOW.timestamp() * 1000))
    delays.clock.now = NOW + timedelta(seconds=370)
    # When batch-delay handles it now
    assert delays.delayer().handle(event, LambdaContext()) == {"batchItemFailures": []}
    # Then it is delivered at once (late, never lost to the poison queue for a wait that was not its own)
    [call] = delays.calls.params("SendMessageBatch")
    [entry] = call["Entries"]
    assert (entry["MessageBody"], entry.get("DelaySeconds", 0)) == ("late", 0)
    assert drain(delays.sqs, delays.poison) == []
    assert envelope_of(drain(delays.sqs, delays.target)[0]).origin_id == mid


def test_given_a_request_already_past_the_grace_when_sent_then_it_is_still_refused(delays):
    delays.request("stale", -400)
    event = delays.batch(1)
    event["Records"][0]["attributes"]["SentTimestamp"] = str(int(NOW.timestamp() * 1000))
    assert delays.delayer().handle(event, LambdaContext()) == {"batchItemFailures": []}
    [poisoned] = drain(delays.sqs, delays.poison)
    assert "was more than 300s in the past when it was sent" in last_error_of(poisoned).message


def test_a_message_without_an_envelope_is_isolated(delays):
    mid = delays.sqs.send_message(QueueUrl=delays.delay_url, MessageBody="raw")["MessageId"]
    event = delays.batch(1)
    delays.delayer().handle(event, LambdaContext())
    [poisoned] = drain(delays.sqs, delays.poison)
    assert "no sluice envelope" in last_error_of(poisoned).message
    assert (envelope_of(poisoned).origin_id, envelope_of(poisoned).source) == (
        mid,
        event["Records"][0]["eventSourceARN"],
    )


def test_records_are_retried_when_their_bucket_cannot_be_parked(delays):
    mid = delays.request("a", 3600)
    delays.s3.delete_bucket(Bucket="parked")
    response = delays.delayer().handle(delays.batch(1), LambdaContext())
    assert response == {"batchItemFailures": [{"itemIdentifier": mid}]}


# --- rehydrator --------------------------------------------------------------------------------


def park(delays, *specs: tuple[str, float]) -> str:
    for body, seconds in specs:
        delays.request(body, seconds, tenant="acme")
    delays.delayer().handle(delays.batch(len(specs)), LambdaContext())
    [key] = delays.parked_keys()
    return key.rsplit("/", 1)[0] + "/"


def test_rehydration_sends_every_message_with_its_residual_delay_and_deletes_the_object(delays):
    prefix = park(delays, ("x", 3600), ("y", 3620))
    delays.clock.now = NOW + timedelta(seconds=3600 - 30)  # the bucket opened
    result = delays.rehydrator().handle({"bucket": 0, "prefix": prefix}, LambdaContext())
    assert result == {"more": False, "sent": 2, "objects": 1}
    [call] = delays.calls.params("SendMessageBatch")[-1:]
    assert sorted(e["DelaySeconds"] for e in call["Entries"]) == [30, 50]
    assert delays.parked_keys() == []
    assert delays.metrics.values["MessagesRehydrated"] == 2


def test_rehydrated_messages_keep_body_user_attributes_and_envelope(delays):
    prefix = park(delays, ("payload", 3600))
    delays.clock.now = NOW + timedelta(seconds=3600)
    delays.rehydrator().handle({"bucket": 0, "prefix": prefix}, LambdaContext())
    [message] = drain(delays.sqs, delays.target)
    assert message["Body"] == "payload"
    assert message["MessageAttributes"]["tenant"]["StringValue"] == "acme"
    env = envelope_of(message)
    assert env.target == delays.target
    assert env.deliver_at == NOW + timedelta(seconds=3600)
    assert env.origin_id is not None


def test_given_a_parked_seal_no_key_verifies_when_rehydrated_then_it_is_reported_and_still_sent(delays):
    # Given a request parked under a key that has since rotated out twice
    prefix = park(delays, ("payload", 3600))
    delays.clock.now = NOW + timedelta(seconds=3600)
    rehydrator = delays.rehydrator()
    rehydrator._seal = Seal((b"a-key-of-two-rotations-later-0123456789",))
    # When it is rehydrated
    assert rehydrator.handle({"bucket": 0, "prefix": prefix}, LambdaContext())["sent"] == 1
    # Then it is delivered (without the bookkeeping the consumer cannot verify either), with the reason
    # counted here, where the rotation shows
    assert [m["Body"] for m in drain(delays.sqs, delays.target)] == ["payload"]
    assert delays.metrics.values["EnvelopesCorrupt"] == 1


def test_the_rehydrator_stops_before_its_deadline_and_asks_for_more(delays):
    prefix = park(delays, ("x", 3600))
    result = delays.rehydrator().handle({"bucket": 0, "prefix": prefix}, LambdaContext(timeout_seconds=5))
    assert result["more"] is True
    assert len(delays.parked_keys()) == 1


class FlakySqs:
    """Refuses (as a throttle would) every entry whose body starts with 'flaky' for the first calls."""

    def __init__(self, sqs: Any, failures: int) -> None:
        self._sqs = sqs
        self.failures = failures

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sqs, name)

    def send_message_batch(self, QueueUrl: str, Entries: list[dict[str, Any]]) -> dict[str, Any]:  # noqa: N803
        if self.failures <= 0:
            return self._sqs.send_message_batch(QueueUrl=QueueUrl, Entries=Entries)
        self.failures -= 1
        ok = [e for e in Entries if not e["MessageBody"].startswith("flaky")]
        response = self._sqs.send_message_batch(QueueUrl=QueueUrl, Entries=ok) if ok else {"Successful": []}
        failed = [
            {"Id": e["Id"], "Code": "ThrottlingException", "Message": "slow down", "SenderFault": False}
            for e in Entries
            if e["MessageBody"].startswith("flaky")
        ]
        return {"Successful": response.get("Successful", []), "Failed": failed}


def test_a_crash_part_way_through_an_object_loses_and_repeats_nothing(delays):
    prefix = park(delays, ("ok-1", 3600), ("flaky-2", 3601), ("ok-3", 3602))
    delays.clock.now = NOW + timedelta(seconds=3660)  # all due: residual delay 0, visible at once
    flaky = FlakySqs(delays.sqs, failures=10)
    rehydrator = delays.rehydrator()
    rehydrator._sqs = flaky
    with pytest.raises(TransientError, match="not accepted yet"):
        rehydrator.handle({"bucket": 0, "prefix": prefix}, LambdaContext())
    [key] = delays.parked_keys()  # the object now holds only what was not sent
    doc = json.loads(delays.s3.get_object(Bucket="parked", Key=key)["Body"].read())
    assert [m["body"] for m in doc["messages"]] == ["flaky-2"]
    flaky.failures = 0
    assert rehydrator.handle({"bucket": 0, "prefix": prefix}, LambdaContext())["more"] is False
    bodies = sorted(m["Body"] for m in drain(delays.sqs, delays.target))
    assert bodies == ["flaky-2", "ok-1", "ok-3"]  # every message once
    assert delays.parked_keys() == []


def test_given_the_offload_fails_at_rehydration_then_that_message_stays_parked_and_its_batch_mate_is_sent(
    delays,
):
    # Given a parked 1 MiB request and a small one in the same bucket
    _, body = at_the_limit(delays, 3600)
    delays.request("small", 3601)
    delays.delayer().handle(delays.batch(2), LambdaContext())
    [key] = delays.parked_keys()
    prefix = key.rsplit("/", 1)[0] + "/"
    delays.clock.now = NOW + timedelta(seconds=3660)
    # When the claim-check bucket cannot be written as the bucket opens
    delays.s3.delete_bucket(Bucket="claims")
    with pytest.raises(TransientError, match="not accepted yet"):
        delays.rehydrator().handle({"bucket": 0, "prefix": prefix}, LambdaContext())
    # Then the small one is delivered and the big one stays parked, unchanged, for the retry
    assert [m["Body"] for m in drain(delays.sqs, delays.target)] == ["small"]
    [kept] = json.loads(delays.s3.get_object(Bucket="parked", Key=key)["Body"].read())["messages"]
    assert kept["body"] == body
    # And once the bucket can be written again, the retry delivers it offloaded
    delays.s3.create_bucket(Bucket="claims")
    assert delays.rehydrator().handle({"bucket": 0, "prefix": prefix}, LambdaContext())["sent"] == 1
    [message] = drain(delays.sqs, delays.target)
    assert claimcheck.parse_pointer(message["Body"]) is not None
    assert delays.parked_keys() == []


def test_an_unreadable_object_is_quarantined_and_does_not_block_its_bucket(delays):
    prefix = park(delays, ("good", 3600))
    delays.s3.put_object(Bucket="parked", Key=f"{prefix}0-broken.json", Body=b"{not json")  # listed first
    delays.clock.now = NOW + timedelta(seconds=3660)
    result = delays.rehydrator().handle({"bucket": 0, "prefix": prefix}, LambdaContext())
    assert result["sent"] == 1
    assert delays.parked_keys() == [f"delayed/quarantine/{prefix[len('delayed/') :]}0-broken.json"]
    assert delays.metrics.values["DelayedObjectsQuarantined"] == 1
    assert [m["Body"] for m in drain(delays.sqs, delays.target)] == ["good"]


def test_a_target_that_keeps_refusing_does_not_hold_back_other_objects(delays):
    first = park(delays, ("flaky-1", 3600))
    delays.request("ok-2", 3605)
    delays.delayer().handle(delays.batch(1), LambdaContext(aws_request_id="second"))
    delays.clock.now = NOW + timedelta(seconds=3660)
    rehydrator = delays.rehydrator()
    rehydrator._sqs = FlakySqs(delays.sqs, failures=1000)
    with pytest.raises(TransientError, match="kept for a retry"):
        rehydrator.handle({"bucket": 0, "prefix": first}, LambdaContext())
    assert [m["Body"] for m in drain(delays.sqs, delays.target)] == ["ok-2"]  # the other object went out
    for _ in range(3):  # later cycles: still refused …
        with pytest.raises(TransientError):
            rehydrator.handle({"bucket": 0, "prefix": first}, LambdaContext())
    # … until MAX_SEND_CYCLES: then it is isolated with the reason instead of blocking forever
    assert rehydrator.handle({"bucket": 0, "prefix": first}, LambdaContext())["more"] is False
    [poisoned] = drain(delays.sqs, delays.poison)
    assert poisoned["Body"] == "flaky-1"
    assert "ThrottlingException" in last_error_of(poisoned).message
    assert delays.parked_keys() == []


def test_the_sweep_rehydrates_only_buckets_whose_time_has_passed(delays):
    past = park(delays, ("late", 3600))
    delays.request("future", 4 * 3600)
    delays.delayer().handle(delays.batch(1), LambdaContext())
    delays.clock.now = NOW + timedelta(seconds=3600 + 60 + 301)  # bucket end + grace passed
    result = delays.rehydrator().handle({"sweep": True}, LambdaContext())
    assert result["sent"] == 1
    assert delays.metrics.values["DelayedObjectsSwept"] == 1
    remaining = delays.parked_keys()
    assert len(remaining) == 1
    assert not remaining[0].startswith(past)


SCHEDULED = {
    "version": "0",
    "id": "5f1e5e32-1234-4d2c-9a39-7d0b0c1a2b3c",
    "detail-type": "Scheduled Event",
    "source": "aws.events",
    "account": "123456789012",
    "time": "2026-11-24T10:00:00Z",
    "region": "us-east-1",
    "resources": ["arn:aws:events:us-east-1:123456789012:rule/sweep"],
    "detail": {},
}


def test_given_a_plain_scheduled_event_when_the_rehydrator_runs_then_it_sweeps(delays):
    park(delays, ("late", 3600))
    delays.clock.now = NOW + timedelta(seconds=3600 + 60 + 301)
    result = delays.rehydrator().handle(SCHEDULED, LambdaContext())
    assert result["sent"] == 1
    assert delays.metrics.values["DelayedObjectsSwept"] == 1


@pytest.mark.parametrize("event", [{}, {"bucket": 3}, {"prefix": 7}, {"Records": []}])
def test_given_an_event_it_cannot_interpret_when_the_rehydrator_runs_then_the_error_names_the_expected_shape(
    delays, event
):
    from sluice.errors import InvalidEventError  # noqa: PLC0415

    with pytest.raises(InvalidEventError, match=r"the rehydrator expects .*'prefix'"):
        delays.rehydrator().handle(event, LambdaContext())


def test_a_prefix_outside_the_delay_prefix_is_refused(delays):
    from sluice.errors import PermanentError  # noqa: PLC0415

    with pytest.raises(PermanentError, match="not a bucket under"):
        delays.rehydrator().handle({"bucket": 1, "prefix": "claim-check/"}, LambdaContext())
