"""The operator CLI (`sluice`) against in-process AWS (moto): queues, breaker table, settings function.

Most tests inject the stack's resources; one set resolves them from a real CloudFormation stack
created in moto. Every command runs through ``main`` exactly as the console script does.
"""

from __future__ import annotations

import io
import json
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import boto3
import pytest
from moto import mock_aws

from sluice import claimcheck
from sluice.delay import send_delayed
from sluice.envelope import Envelope, ErrorInfo, merge, split
from sluice.limits import MAX_MESSAGE_BYTES
from sluice.redrive.lease import HeldLease, RunLease
from sluice.redrive.plan import delay_pipeline_reaches
from sluice.sqs import message_bytes
from sluice_cli import poison
from sluice_cli.__main__ import main, make_context, parse
from sluice_cli.messages import QueueScan
from sluice_cli.output import Output
from sluice_cli.resources import Resources, redrive_settings
from sluice_local.emulation import moto_adapter
from tests.conftest import TEST_SEAL, envelope_key_secret

REGION = "us-east-1"
FUNCTION = "sluice-test-redriver"
FAILED_AT = datetime(2026, 11, 22, 19, 9, 1, tzinfo=UTC)
USER_ATTRIBUTES = {
    "tenant": {"DataType": "String", "StringValue": "acme"},
    "blob": {"DataType": "Binary", "BinaryValue": b"\x00\x01\xff"},
}


@dataclass
class Result:
    code: int
    stdout: str
    stderr: str

    @property
    def json(self) -> Any:
        return json.loads(self.stdout)  # the whole of stdout: JSON and nothing else


@dataclass
class Stack:
    sqs: Any
    dynamodb: Any
    lambda_: Any
    resources: Resources
    other_url: str
    other_arn: str
    env: dict[str, str] = field(default_factory=dict)

    def run(self, *argv: str, inject: bool = True) -> Result:
        out, err = io.StringIO(), io.StringIO()
        code = main(
            ["--receive-wait", "0", *argv],
            resources=self.resources if inject else None,
            stdout=out,
            stderr=err,
        )
        return Result(code, out.getvalue(), err.getvalue())

    @property
    def work_url(self) -> str:
        return str(self.resources.work_queue_url)

    @property
    def work_arn(self) -> str:
        return str(self.resources.work_queue_arn)

    @property
    def dlq_url(self) -> str:
        return str(self.resources.dead_letter_queue_url)

    @property
    def poison_url(self) -> str:
        return str(self.resources.poison_queue_url)

    def put(
        self,
        url: str,
        body: str,
        *,
        source: str | None = None,
        attempts: int = 2,
        origin: str = "",
        trace: str | None = None,
    ) -> str:
        """A message as sluice leaves it: user attributes plus an envelope (none without ``source``)."""
        attributes = self.attributes(body, source=source, attempts=attempts, origin=origin, trace=trace)
        return str(
            self.sqs.send_message(QueueUrl=url, MessageBody=body, MessageAttributes=attributes)["MessageId"]
        )

    @staticmethod
    def attributes(
        body: str, *, source: str | None, attempts: int = 2, origin: str = "", trace: str | None = None
    ) -> dict[str, Any]:
        attributes: dict[str, Any] = dict(USER_ATTRIBUTES)
        if source is not None:
            envelope = Envelope(
                trace=trace,
                origin_id=origin or None,
                attempts=attempts,
                first_failure=FAILED_AT,
                last_error=ErrorInfo(type="PermanentError", message="order exceeds the limit", at=FAILED_AT),
                source=source,
                redriven_at=FAILED_AT + timedelta(minutes=5),
            )
            attributes = merge(attributes, envelope, body=body, seal=TEST_SEAL)  # as sluice wrote it
        return attributes

    def receive_all(self, url: str, visibility: int = 30) -> list[dict[str, Any]]:
        """What any other consumer gets right now (and then holds invisible)."""
        messages: list[dict[str, Any]] = []
        while batch := self.sqs.receive_message(
            QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=visibility, MessageAttributeNames=["All"]
        ).get("Messages", []):
            messages.extend(batch)
        return messages

    def depth(self, url: str) -> dict[str, int]:
        names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
        attributes = self.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=names)["Attributes"]
        return {"visible": int(attributes[names[0]]), "inFlight": int(attributes[names[1]])}

    def set_function_env(self, **overrides: str) -> None:
        self.lambda_.update_function_configuration(
            FunctionName=FUNCTION, Environment={"Variables": {**self.env, **overrides}}
        )


def _queue(sqs: Any, name: str, **attributes: str) -> tuple[str, str]:
    url = sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    return url, arn


def _create_breaker_table(dynamodb: Any, name: str) -> None:
    dynamodb.create_table(
        TableName=name,
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        BillingMode="PAY_PER_REQUEST",
    )


def _create_settings_function(lambda_: Any, iam: Any, env: dict[str, str]) -> None:
    role = iam.create_role(RoleName="redriver-role", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    code = io.BytesIO()
    with zipfile.ZipFile(code, "w") as archive:
        archive.writestr("app.py", "def lambda_handler(event, context):\n    return {}\n")
    lambda_.create_function(
        FunctionName=FUNCTION,
        Runtime="python3.13",
        Role=role,
        Handler="app.lambda_handler",
        Code={"ZipFile": code.getvalue()},
        Environment={"Variables": env},
    )


@pytest.fixture
def stack(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Stack]:
    monkeypatch.chdir(tmp_path)  # no samconfig.toml here: the repository's must not matter
    with mock_aws():
        sqs = boto3.client("sqs", region_name=REGION)
        dynamodb = boto3.client("dynamodb", region_name=REGION)
        lambda_ = boto3.client("lambda", region_name=REGION)
        dlq_url, dlq_arn = _queue(sqs, "sluice-work-dlq")
        work_url, work_arn = _queue(
            sqs,
            "sluice-work",
            RedrivePolicy=json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 5}),
        )
        poison_url, poison_arn = _queue(sqs, "sluice-poison")
        other_url, other_arn = _queue(sqs, "someone-elses-queue")
        delay_dlq_url, delay_dlq_arn = _queue(sqs, "sluice-delay-dlq")
        delay_url, _ = _queue(
            sqs,
            "sluice-delay",
            RedrivePolicy=json.dumps({"deadLetterTargetArn": delay_dlq_arn, "maxReceiveCount": 5}),
        )
        _create_breaker_table(dynamodb, "sluice-breaker")
        env = {
            "SLUICE_DEAD_LETTER_QUEUE_URL": dlq_url,
            "SLUICE_POISON_QUEUE_URL": poison_url,
            "SLUICE_ENVELOPE_KEY_SECRET": envelope_key_secret(),
            "SLUICE_SOURCE_QUEUE_ARN": work_arn,
            "SLUICE_REDRIVE_SOURCES": work_arn,
            "SLUICE_REDRIVE_BASE_SECONDS": "1",
            "SLUICE_REDRIVE_CAP_SECONDS": "1",
            "SLUICE_REDRIVE_FLOOR_SECONDS": "0",
            "SLUICE_BREAKER_TABLE": "sluice-breaker",
        }
        _create_settings_function(lambda_, boto3.client("iam", region_name=REGION), env)
        resources = Resources(
            stack_name="sluice-test",
            work_queue_url=work_url,
            work_queue_arn=work_arn,
            dead_letter_queue_url=dlq_url,
            dead_letter_queue_arn=dlq_arn,
            poison_queue_url=poison_url,
            poison_queue_arn=poison_arn,
            breaker_table="sluice-breaker",
            redrive_mode="lambda",
            redrive_settings_function=FUNCTION,
            envelope_key_secret=env["SLUICE_ENVELOPE_KEY_SECRET"],
            delay_queue_url=delay_url,
            delay_dead_letter_queue_url=delay_dlq_url,
        )
        yield Stack(sqs, dynamodb, lambda_, resources, other_url, other_arn, env)


def _envelope(message: dict[str, Any]) -> tuple[dict[str, Any], Envelope]:
    user, envelope, problem = split(
        message.get("MessageAttributes", {}), body=message["Body"], seal=TEST_SEAL
    )
    assert problem is None
    assert envelope is not None
    return user, envelope


# --- dlq stats / peek / purge -----------------------------------------------------------------


def test_given_messages_in_both_queues_when_dlq_stats_then_counts_and_oldest_age_per_queue(stack):
    for i in range(3):
        stack.put(stack.dlq_url, f"dead {i}", source=stack.work_arn)
    stack.put(stack.poison_url, "poison", source=stack.work_arn)
    stack.sqs.receive_message(QueueUrl=stack.dlq_url, MaxNumberOfMessages=1, VisibilityTimeout=300)

    result = stack.run("--json", "dlq", "stats")

    assert result.code == 0
    queues = {q["queue"]: q for q in result.json["queues"]}
    assert (queues["dead-letter"]["visible"], queues["dead-letter"]["inFlight"]) == (2, 1)
    assert (queues["poison"]["visible"], queues["poison"]["inFlight"]) == (1, 0)
    assert queues["dead-letter"]["sampled"] == 2
    assert 0 <= queues["dead-letter"]["oldestAgeSeconds"] < 60
    assert queues["dead-letter"]["url"] == stack.dlq_url
    # sampling released what it read: still 2 visible, only the other consumer's message in flight
    assert stack.depth(stack.dlq_url) == {"visible": 2, "inFlight": 1}


def test_given_empty_queues_when_dlq_stats_in_human_mode_then_a_table_without_ages(stack):
    result = stack.run("dlq", "stats")

    assert result.code == 0
    assert "dead-letter" in result.stdout
    assert "poison" in result.stdout
    assert "sluice-test" in result.stdout
    with pytest.raises(json.JSONDecodeError):
        json.loads(result.stdout)


def test_given_dlq_messages_when_peeked_then_envelope_fields_are_shown_and_others_can_receive_at_once(stack):
    first = stack.put(
        stack.dlq_url, '{"order_id": "o-1", "note": "' + "x" * 300 + '"}', source=stack.work_arn
    )
    stack.put(stack.dlq_url, "plain body, no envelope")

    result = stack.run("dlq", "peek", "-n", "5", "--json")

    assert result.code == 0
    assert result.json["count"] == 2
    by_id = {m["messageId"]: m for m in result.json["messages"]}
    peeked = by_id[first]
    assert peeked["attempts"] == 2
    assert peeked["firstFailure"] == "2026-11-22T19:09:01Z"
    assert peeked["lastError"]["type"] == "PermanentError"
    assert peeked["lastError"]["message"] == "order exceeds the limit"
    assert peeked["source"] == stack.work_arn
    assert peeked["bodyPreview"].startswith('{"order_id": "o-1"')
    assert len(peeked["bodyPreview"]) == 120
    assert peeked["bodyPreview"].endswith("…")
    bare = next(m for m in result.json["messages"] if m["messageId"] != first)
    assert bare["attempts"] is None
    assert bare["bodyPreview"] == "plain body, no envelope"
    # peeking delayed nothing: another consumer receives both messages right away
    assert len(stack.receive_all(stack.dlq_url)) == 2


def test_given_more_messages_than_asked_when_peeked_then_only_n_are_read_and_all_stay_visible(stack):
    for i in range(12):
        stack.put(stack.dlq_url, f"m{i}", source=stack.work_arn)

    result = stack.run("--json", "dlq", "peek", "-n", "3")

    assert result.code == 0
    assert result.json["count"] == 3
    assert stack.depth(stack.dlq_url) == {"visible": 12, "inFlight": 0}


def test_given_peek_in_human_mode_when_a_body_holds_markup_then_it_is_printed_literally(stack):
    message_id = stack.put(stack.dlq_url, "[bold]not markup[/bold]", source=stack.work_arn)

    result = stack.run("dlq", "peek")

    assert result.code == 0
    assert message_id in result.stdout
    assert "[bold]not markup[/bold]" in result.stdout
    assert "PermanentError: order exceeds the limit" in result.stdout


def test_given_no_yes_when_dlq_purge_then_it_refuses_with_exit_2_and_deletes_nothing(stack):
    stack.put(stack.dlq_url, "keep me", source=stack.work_arn)

    result = stack.run("dlq", "purge")

    assert result.code == 2
    assert "refusing to purge" in result.stderr
    assert "--yes" in result.stderr
    assert result.stdout == ""
    assert stack.depth(stack.dlq_url)["visible"] == 1


def test_given_yes_when_dlq_purge_then_the_dlq_is_emptied_and_the_poison_queue_is_not(stack):
    stack.put(stack.dlq_url, "delete me", source=stack.work_arn)
    stack.put(stack.poison_url, "not me", source=stack.work_arn)

    result = stack.run("--json", "dlq", "purge", "--yes")

    assert result.code == 0
    assert result.json == {"queue": stack.dlq_url, "purged": True}
    assert stack.depth(stack.dlq_url)["visible"] == 0
    assert stack.depth(stack.poison_url)["visible"] == 1


# --- dlq redrive (sluice's engine, with the deployed settings) ---------------------------------


def test_given_dlq_messages_when_redriven_then_they_return_to_their_source_with_the_deployed_settings(stack):
    message_id = stack.put(stack.dlq_url, '{"order_id": "o-7"}', source=stack.work_arn, attempts=1)

    result = stack.run("--json", "dlq", "redrive", "--max-per-second", "100")

    assert result.code == 0, result.stderr
    report = result.json
    assert (report["received"], report["redriven"], report["failed"]) == (1, 1, 0)
    assert report["stopped"] == "drained"
    assert report["engine"] == "sluice"
    assert report["settings"]["origin"] == f"function:{FUNCTION}"
    assert report["metrics"]["SuccessfulRedrives"] == 1
    assert stack.depth(stack.dlq_url) == {"visible": 0, "inFlight": 0}
    (back,) = stack.sqs.receive_message(
        QueueUrl=stack.work_url, WaitTimeSeconds=2, MessageAttributeNames=["All"]
    )["Messages"]  # SLUICE_REDRIVE_CAP_SECONDS=1: due within a second
    user, envelope = _envelope(back)
    assert back["Body"] == '{"order_id": "o-7"}'
    assert user == USER_ATTRIBUTES
    assert envelope.attempts == 2
    assert envelope.source == stack.work_arn
    assert message_id != back["MessageId"]


@pytest.mark.parametrize("settings", ["deployed", "fallback"])
def test_given_a_dlq_message_at_the_size_limit_when_redriven_then_its_body_is_offloaded_as_deployed(
    stack, settings
):
    # Given a stack with a claim-check bucket and a dead-lettered message exactly at SQS's 1 MiB limit
    # (the settings read from the deployed redriver, or from the stack outputs when it cannot be read)
    s3 = boto3.client("s3", region_name=REGION)
    s3.create_bucket(Bucket="claims")
    if settings == "deployed":
        stack.set_function_env(SLUICE_CLAIM_CHECK_BUCKETS="claims")
    else:
        stack.resources = replace(
            stack.resources, redrive_settings_function=None, claim_check_bucket="claims"
        )
    envelope_bytes = message_bytes("", stack.attributes("", source=stack.work_arn, attempts=1))
    body = "b" * (MAX_MESSAGE_BYTES - envelope_bytes)
    stack.put(stack.dlq_url, body, source=stack.work_arn, attempts=1)
    # When the operator re-drives it (its envelope grows: a redrive time, one more attempt)
    result = stack.run("--json", "dlq", "redrive", "--max-per-second", "100")
    # Then it goes back to its source as a claim-check pointer to the whole body, not refused or isolated
    assert result.code == 0, result.stderr
    assert (result.json["redriven"], result.json["isolated"], result.json["failed"]) == (1, 0, 0)
    [key] = [o["Key"] for o in s3.list_objects_v2(Bucket="claims")["Contents"]]
    assert s3.get_object(Bucket="claims", Key=key)["Body"].read().decode() == body
    if settings == "deployed":  # SLUICE_REDRIVE_CAP_SECONDS=1: back within a second (the fallback's default
        # backoff holds it for minutes)
        (back,) = stack.sqs.receive_message(
            QueueUrl=stack.work_url, WaitTimeSeconds=2, MessageAttributeNames=["All"]
        )["Messages"]
        pointer = claimcheck.parse_pointer(back["Body"])
        assert pointer is not None
        assert pointer.key == key


def test_given_a_limit_when_redriven_then_it_stops_there(stack):
    for i in range(3):
        stack.put(stack.dlq_url, f"m{i}", source=stack.work_arn, attempts=0)

    result = stack.run("--json", "dlq", "redrive", "--max", "2")

    assert result.code == 0
    assert (result.json["received"], result.json["stopped"]) == (2, "limit")
    assert stack.depth(stack.dlq_url)["visible"] == 1


def test_given_a_timeout_already_spent_when_redriven_then_the_engine_stops_at_its_deadline(stack):
    stack.put(stack.dlq_url, "later", source=stack.work_arn)

    result = stack.run("--json", "dlq", "redrive", "--timeout", "0.001")

    assert result.code == 0
    assert (result.json["stopped"], result.json["received"]) == ("deadline", 0)
    assert stack.depth(stack.dlq_url)["visible"] == 1


def test_given_an_open_breaker_when_redriven_then_nothing_moves_and_exit_1(stack):
    stack.put(stack.dlq_url, "stay", source=stack.work_arn)
    assert stack.run("breaker", "open", "--reason", "payments API down").code == 0

    result = stack.run("--json", "dlq", "redrive")

    assert result.code == 1
    assert result.json["stopped"] == "breaker_open"
    assert result.json["received"] == 0
    assert "breaker is open (payments API down)" in result.stderr
    assert stack.depth(stack.dlq_url)["visible"] == 1


def test_given_a_lambda_run_holding_the_lease_when_redriven_then_nothing_moves_and_exit_1(stack):
    # Given the workload's redriver Lambda in the middle of a run (it holds the run lease)
    stack.put(stack.dlq_url, "stay", source=stack.work_arn)
    lambda_run = RunLease(stack.dynamodb, "sluice-breaker").acquire("sluice-test-redriver (schedule)")
    assert isinstance(lambda_run, HeldLease)
    # When an operator redrives by hand
    result = stack.run("--json", "dlq", "redrive", "--max-per-second", "100")
    # Then the CLI's run ends at once (the DLQ drains at one run's velocity), naming the run that holds it
    assert result.code == 1
    assert (result.json["stopped"], result.json["received"]) == ("another_run", 0)
    assert result.json["other_run"]["holder"] == "sluice-test-redriver (schedule)"
    assert result.json["metrics"] == {"RedriveRunsSkipped": 1}
    assert "another redrive run holds the lease (sluice-test-redriver (schedule)" in result.stderr
    assert stack.depth(stack.dlq_url)["visible"] == 1
    # And once the Lambda's run has released it, the operator's run drains the DLQ and releases it in turn
    lambda_run.release()
    assert stack.run("--json", "dlq", "redrive", "--max-per-second", "100").json["stopped"] == "drained"
    assert isinstance(RunLease(stack.dynamodb, "sluice-breaker").acquire("the next run"), HeldLease)


def test_given_native_only_options_without_native_when_redriven_then_usage_error(stack):
    result = stack.run("dlq", "redrive", "--status")

    assert result.code == 2
    assert "need --native" in result.stderr


# --- poison list / show ------------------------------------------------------------------------


def test_given_more_than_one_batch_when_poison_list_then_every_message_once_and_all_visible_after(stack):
    ids = {stack.put(stack.poison_url, f"p{i}", source=stack.work_arn) for i in range(13)}

    result = stack.run("--json", "poison", "list")

    assert result.code == 0
    assert result.json["count"] == 13
    assert {m["messageId"] for m in result.json["messages"]} == ids
    assert len(stack.receive_all(stack.poison_url)) == 13


def test_given_messages_received_again_during_a_scan_when_scanned_then_each_is_yielded_once(stack):
    ids = {stack.put(stack.poison_url, f"p{i}", source=stack.work_arn) for i in range(3)}

    # visibility 0: every receive returns the same messages again
    with QueueScan(stack.sqs, stack.poison_url, visibility_seconds=0, wait_seconds=0) as scan:
        seen = [m.message_id for m in scan.messages()]

    assert sorted(seen) == sorted(ids)
    assert scan.release_failures == []


def test_given_a_poison_pill_when_shown_then_full_envelope_user_attributes_and_body(stack):
    message_id = stack.put(stack.poison_url, '{"order_id": "o-9"}', source=stack.work_arn, origin="origin-9")
    stack.put(stack.poison_url, "another", source=stack.work_arn)

    result = stack.run("--json", "poison", "show", message_id)

    assert result.code == 0
    detail = result.json
    assert detail["messageId"] == message_id
    assert detail["body"] == '{"order_id": "o-9"}'
    assert detail["envelope"]["origin_id"] == "origin-9"
    assert detail["envelope"]["attempts"] == 2
    assert detail["envelope"]["last_error"]["message"] == "order exceeds the limit"
    assert detail["envelope"]["source"] == stack.work_arn
    assert detail["attributes"]["tenant"] == {"DataType": "String", "StringValue": "acme"}
    assert detail["attributes"]["blob"] == {"DataType": "Binary", "BinaryValue": "AAH/"}
    assert "SentTimestamp" in detail["systemAttributes"]
    assert stack.depth(stack.poison_url) == {"visible": 2, "inFlight": 0}


def test_given_an_origin_id_when_shown_in_human_mode_then_the_message_is_found_by_it(stack):
    stack.put(stack.poison_url, "body of o-3", source=stack.work_arn, origin="origin-3")

    result = stack.run("poison", "show", "origin-3")

    assert result.code == 0
    assert "origin-3" in result.stdout
    assert "acme" in result.stdout
    assert "body of o-3" in result.stdout
    assert '"last_error"' in result.stdout


def test_given_an_unknown_id_when_shown_then_exit_1_with_a_clear_message(stack):
    stack.put(stack.poison_url, "some", source=stack.work_arn)

    result = stack.run("poison", "show", "no-such-id")

    assert result.code == 1
    assert "no message 'no-such-id' in the poison queue" in result.stderr
    assert stack.depth(stack.poison_url)["visible"] == 1


# --- poison replay -----------------------------------------------------------------------------


def test_given_an_id_when_replayed_then_it_goes_to_its_source_unchanged_and_leaves_the_poison_queue(stack):
    target = stack.put(stack.poison_url, '{"order_id": "o-1"}', source=stack.work_arn, origin="origin-1")
    untouched = stack.put(stack.poison_url, "stays", source=stack.work_arn)

    result = stack.run("--json", "poison", "replay", target)

    assert result.code == 0, result.stderr
    assert result.json["counts"] == {
        "replayed": 1, "refused": 0, "failed": 0, "notDeleted": 0, "notFound": 0,
        "otherWorkloads": 0, "cameBack": 0, "isolatedTwice": 0,
    }  # fmt: skip
    assert result.json["replayed"][0]["destination"] == stack.work_url
    assert result.json["resetAttempts"] is False
    (sent,) = stack.receive_all(stack.work_url)
    user, envelope = _envelope(sent)
    assert sent["Body"] == '{"order_id": "o-1"}'
    assert user == USER_ATTRIBUTES
    assert envelope.attempts == 2
    assert envelope.redriven_at == FAILED_AT + timedelta(minutes=5)
    assert envelope.origin_id == "origin-1"
    remaining = stack.receive_all(stack.poison_url)  # the other one is visible again at once
    assert [m["MessageId"] for m in remaining] == [untouched]


def test_given_a_traced_poison_pill_when_replayed_then_it_goes_back_on_its_trace(stack):
    header = "Root=1-6746a1b2-0123456789abcdef01234567;Parent=89abcdef01234567;Sampled=1"
    target = stack.put(stack.poison_url, '{"order_id": "o-9"}', source=stack.work_arn, trace=header)
    undo = moto_adapter.install_sqs_rules()  # SQS keeps a batch entry's AWSTraceHeader; bare moto drops it
    try:
        result = stack.run("--json", "poison", "replay", target)
    finally:
        undo()

    assert result.code == 0, result.stderr
    (sent,) = stack.sqs.receive_message(
        QueueUrl=stack.work_url, MessageSystemAttributeNames=["AWSTraceHeader"], MessageAttributeNames=["All"]
    )["Messages"]
    assert sent["Attributes"]["AWSTraceHeader"] == header
    assert _envelope(sent)[1].trace == header


def test_given_a_poison_pill_of_a_tenant_when_replayed_then_it_goes_back_with_its_group_id(stack):
    # Given a pill isolated with its fair-queue tenant as its MessageGroupId (poison isolation keeps it)
    attributes = stack.attributes('{"order_id": "o-7"}', source=stack.work_arn)
    target = stack.sqs.send_message(
        QueueUrl=stack.poison_url, MessageBody='{"order_id": "o-7"}', MessageAttributes=attributes,
        MessageGroupId="tenant-7",
    )["MessageId"]  # fmt: skip

    # When replayed
    result = stack.run("--json", "poison", "replay", target)

    # Then its source queue gets it with the same group id, in the attribute and in its envelope
    assert result.code == 0, result.stderr
    (sent,) = stack.sqs.receive_message(
        QueueUrl=stack.work_url, MessageSystemAttributeNames=["MessageGroupId"], MessageAttributeNames=["All"]
    )["Messages"]
    assert sent["Attributes"]["MessageGroupId"] == "tenant-7"
    assert _envelope(sent)[1].group == "tenant-7"


def test_given_pills_of_two_tenants_when_listed_for_one_then_only_its_pills_are_shown_and_all_stay(stack):
    # Given pills of tenant-a and tenant-b (their MessageGroupId) and one without a tenant
    for body, group in (("a1", "tenant-a"), ("b1", "tenant-b"), ("a2", "tenant-a")):
        stack.sqs.send_message(
            QueueUrl=stack.poison_url, MessageBody=body, MessageGroupId=group,
            MessageAttributes=stack.attributes(body, source=stack.work_arn),
        )  # fmt: skip
    stack.put(stack.poison_url, "none", source=stack.work_arn)

    # When listed for tenant-a, and the DLQ peeked for it
    result = stack.run("--json", "poison", "list", "--tenant", "tenant-a")
    peeked = stack.run("--json", "dlq", "peek", "--tenant", "tenant-a")

    # Then only tenant-a's pills are listed, each naming its tenant, and every pill stays
    assert result.code == 0, result.stderr
    assert sorted(m["bodyPreview"] for m in result.json["messages"]) == ["a1", "a2"]
    assert {m["tenant"] for m in result.json["messages"]} == {"tenant-a"}
    assert peeked.code == 0, peeked.stderr
    assert peeked.json["count"] == 0
    assert stack.depth(stack.poison_url) == {"visible": 4, "inFlight": 0}


def _lose_the_key(stack: Stack) -> None:
    boto3.client("secretsmanager", region_name=REGION).delete_secret(
        SecretId=stack.env["SLUICE_ENVELOPE_KEY_SECRET"], ForceDeleteWithoutRecovery=True
    )


def test_given_no_access_to_the_envelope_key_when_replayed_then_it_refuses_and_nothing_moves(stack):
    # Given a poison pill and an operator who cannot read the stack's envelope key
    target = stack.put(stack.poison_url, '{"order_id": "o-1"}', source=stack.work_arn, origin="origin-1")
    _lose_the_key(stack)

    # When they replay it
    result = stack.run("--json", "poison", "replay", target)

    # Then the CLI refuses (the replayed message would lose its history) and the message stays
    assert result.code == 1
    assert "cannot read the envelope key" in result.stderr
    assert "would lose its history" in result.stderr
    assert [m["MessageId"] for m in stack.receive_all(stack.poison_url)] == [target]
    assert stack.receive_all(stack.work_url) == []


def test_given_no_access_to_the_envelope_key_when_shown_then_envelopes_are_shown_unverified(stack):
    target = stack.put(stack.poison_url, '{"order_id": "o-1"}', source=stack.work_arn, origin="origin-1")
    _lose_the_key(stack)

    result = stack.run("--json", "poison", "show", target)

    assert result.code == 0, result.stderr
    assert "envelopes are shown unverified" in result.stderr
    assert result.json["envelope"]["origin_id"] == "origin-1"


def test_given_a_hand_written_envelope_in_the_poison_queue_when_shown_then_its_bookkeeping_is_flagged(stack):
    # Given a message whose envelope was written without the stack's key
    forged = Envelope(origin_id="someone", attempts=9, source=stack.work_arn)
    stack.sqs.send_message(
        QueueUrl=stack.poison_url,
        MessageBody="x",
        MessageAttributes={"sluice": {"DataType": "String", "StringValue": forged.to_json()}},
    )

    result = stack.run("--json", "poison", "list")

    assert result.code == 0, result.stderr
    [row] = result.json["messages"]
    assert "forged or altered" in row["envelopeProblem"]


def test_given_reset_attempts_when_replayed_then_attempts_are_zero_and_redriven_at_is_cleared(stack):
    target = stack.put(stack.poison_url, "again", source=stack.work_arn, attempts=4, origin="origin-4")

    result = stack.run("--json", "poison", "replay", target, "--reset-attempts")

    assert result.code == 0
    assert result.json["replayed"][0]["attempts"] == 0
    (sent,) = stack.receive_all(stack.work_url)
    user, envelope = _envelope(sent)
    assert envelope.attempts == 0
    assert envelope.redriven_at is None
    assert envelope.origin_id == "origin-4"  # the rest of the forensic record is kept
    assert envelope.last_error is not None
    assert envelope.last_error.message == "order exceeds the limit"
    assert envelope.first_failure == FAILED_AT
    assert user == USER_ATTRIBUTES
    assert stack.depth(stack.poison_url) == {"visible": 0, "inFlight": 0}


def test_given_a_recorded_source_outside_the_allowlist_when_replayed_then_it_is_refused_and_stays(stack):
    # Given a poison pill whose envelope records a queue the deployed allowlist does not hold (another
    # workload's queue, or an old envelope naming the delay queue, its first hop)
    target = stack.put(stack.poison_url, "foreign", source=stack.other_arn)

    # When an operator replays it
    result = stack.run("--json", "poison", "replay", target)

    # Then it is refused, naming its source and the allowlist; it stays in the poison queue, nothing
    # is sent anywhere, and the exit code says so
    assert result.code == 1, result.stderr
    reason = f"source queue {stack.other_arn!r} is not in the redrive allowlist ({stack.work_arn})"
    assert result.json["refused"] == [{"messageId": target, "reason": reason}]
    assert result.json["counts"]["replayed"] == 0
    assert stack.receive_all(stack.other_url) == []
    assert stack.receive_all(stack.work_url) == []
    assert [m["MessageId"] for m in stack.receive_all(stack.poison_url)] == [target]


def test_given_a_recorded_source_outside_the_allowlist_when_replayed_by_a_person_then_the_table_says_why(
    stack,
):
    # Given a poison pill whose recorded source is not allowlisted
    target = stack.put(stack.poison_url, "foreign", source=stack.other_arn)

    # When a person replays it (no --json)
    result = stack.run("poison", "replay", target)

    # Then the table says it was refused and why, and it stays
    assert result.code == 1
    assert "refused" in result.stdout
    assert "is not in the redrive allowlist" in result.stdout
    assert stack.depth(stack.poison_url)["visible"] == 1


def test_given_the_deployed_allowlist_names_another_queue_when_replayed_then_it_is_allowed(stack):
    stack.set_function_env(SLUICE_REDRIVE_SOURCES=f"{stack.work_arn},{stack.other_arn}")
    target = stack.put(stack.poison_url, "foreign but allowed", source=stack.other_arn)

    result = stack.run("--json", "poison", "replay", target)

    assert result.code == 0, result.stderr
    assert result.json["settings"]["allowlist"] == [stack.work_arn, stack.other_arn]
    assert [m["Body"] for m in stack.receive_all(stack.other_url)] == ["foreign but allowed"]


def test_given_a_message_without_an_envelope_when_replayed_then_refused_with_the_reason(stack):
    target = stack.put(stack.poison_url, "who knows where from")

    result = stack.run("--json", "poison", "replay", target)

    assert result.code == 1
    assert result.json["refused"] == [
        {"messageId": target, "reason": "no source queue to replay to: it has no sluice envelope"}
    ]


def test_given_an_unknown_id_when_replayed_then_reported_not_found_and_exit_1(stack):
    known = stack.put(stack.poison_url, "known", source=stack.work_arn)

    result = stack.run("--json", "poison", "replay", known, "missing-id")

    assert result.code == 1
    assert result.json["notFound"] == ["missing-id"]
    assert [r["messageId"] for r in result.json["replayed"]] == [known]


def test_given_all_without_yes_when_replayed_then_usage_error_and_nothing_moves(stack):
    stack.put(stack.poison_url, "p", source=stack.work_arn)

    result = stack.run("poison", "replay", "--all")

    assert result.code == 2
    assert "without --yes" in result.stderr
    assert stack.depth(stack.poison_url)["visible"] == 1


@pytest.mark.parametrize("argv", [["poison", "replay"], ["poison", "replay", "some-id", "--all", "--yes"]])
def test_given_neither_or_both_ids_and_all_when_replayed_then_usage_error(stack, argv):
    assert stack.run(*argv).code == 2


def test_given_all_and_yes_when_replayed_then_every_replayable_message_moves_and_counts_add_up(stack):
    for i in range(12):
        stack.put(stack.poison_url, f"ok {i}", source=stack.work_arn)
    stack.put(stack.poison_url, "no envelope")

    result = stack.run("--json", "poison", "replay", "--all", "--yes")

    assert result.code == 1  # partial: one refused
    assert result.json["counts"] == {
        "replayed": 12,
        "refused": 1,
        "failed": 0,
        "notDeleted": 0,
        "notFound": 0,
        "otherWorkloads": 0,
        "cameBack": 0,
        "isolatedTwice": 0,
    }
    assert len(stack.receive_all(stack.work_url)) == 12
    assert [m["Body"] for m in stack.receive_all(stack.poison_url)] == ["no envelope"]


def test_given_all_and_another_workloads_pills_when_replayed_then_they_are_left_for_its_own_replay(stack):
    # Given the poison queue the stack's workloads share: a pill of this workload, one of another's
    stack.resources = replace(stack.resources, other_workload_queues=(stack.other_arn,))
    ours = stack.put(stack.poison_url, "ours", source=stack.work_arn)
    theirs = stack.put(stack.poison_url, "theirs", source=stack.other_arn)

    # When this workload's pills are all replayed
    result = stack.run("--json", "poison", "replay", "--all", "--yes")

    # Then its own goes back to its queue, the other's is left where it is (no failure: exit 0)
    assert result.code == 0, result.stdout
    assert [r["messageId"] for r in result.json["replayed"]] == [ours]
    assert result.json["otherWorkloads"] == [
        {"messageId": theirs, "originId": theirs, "source": stack.other_arn}
    ]
    assert [m["Body"] for m in stack.receive_all(stack.work_url)] == ["ours"]
    assert [m["MessageId"] for m in stack.receive_all(stack.poison_url)] == [theirs]


@pytest.mark.parametrize(
    ("replay_began", "outcome"),
    [(-60.0, "cameBack"), (60.0, "isolatedTwice")],
    ids=["copy-sent-during-the-replay", "copy-there-before-it"],
)
def test_given_a_second_pill_of_one_origin_when_all_are_replayed_then_it_is_not_replayed_twice(
    stack, monkeypatch, replay_began, outcome
):
    # Given a pill and a second pill of its origin, sent (by SQS's clock) after the replay began (what a
    # replayed message that fails again becomes while the replay still runs) or before it (one failure
    # isolated twice: an Isolate task retried after its send)
    first = stack.put(stack.poison_url, "fails again", source=stack.work_arn, origin="o-1")
    again = stack.put(stack.poison_url, "fails again", source=stack.work_arn, origin="o-1")
    now = time.time()
    monkeypatch.setattr(poison, "time", SimpleNamespace(time=lambda: now + replay_began))

    result = stack.run("--json", "poison", "replay", "--all", "--yes")

    # Then the command replays the origin once and leaves the second pill, named for what it is: a
    # replay of every pill ends
    assert result.code == 0, result.stdout
    assert [r["messageId"] for r in result.json["replayed"]] == [first]
    assert result.json[outcome] == [{"messageId": again, "originId": "o-1"}]
    assert result.json["counts"]["cameBack"] + result.json["counts"]["isolatedTwice"] == 1
    assert len(stack.receive_all(stack.work_url)) == 1
    assert [m["MessageId"] for m in stack.receive_all(stack.poison_url)] == [again]


def test_given_unreadable_settings_when_falling_back_then_the_delay_pipelines_targets_come_from_the_stack(
    stack,
):
    # Given a stack whose delay pipeline delivers only to its own work queues, and a redriver that
    # cannot be read
    targets = "arn:aws:sqs:us-east-1:123456789012:sluice-*-work"
    stack.resources = replace(stack.resources, delay_targets=targets)
    stack.lambda_.delete_function(FunctionName=FUNCTION)
    # When the CLI plans with the fallback settings
    loaded = redrive_settings(stack.resources, stack.lambda_)
    # Then they hold the pipeline's targets, as the deployed redriver's do: a backoff the pipeline would
    # refuse to deliver is cut to the direct-send threshold instead of isolated (docs/workloads.md)
    assert loaded.origin == "fallback"
    assert loaded.settings.delay_targets == (targets,)
    assert not delay_pipeline_reaches("arn:aws:sqs:us-east-1:123456789012:their-orders", loaded.settings)
    assert delay_pipeline_reaches("arn:aws:sqs:us-east-1:123456789012:sluice-orders-work", loaded.settings)


def test_given_an_unreadable_settings_function_when_replayed_then_fallback_settings_are_announced(stack):
    stack.lambda_.delete_function(FunctionName=FUNCTION)
    target = stack.put(stack.poison_url, "p", source=stack.work_arn)

    result = stack.run("--json", "poison", "replay", target)

    assert result.code == 0
    assert result.json["settings"]["origin"] == "fallback"
    assert result.json["settings"]["allowlist"] == [stack.work_arn]
    assert f"cannot read the settings of function '{FUNCTION}'" in result.stderr
    assert "using the stack outputs and default redrive settings" in result.stderr


def test_given_invalid_deployed_settings_when_replayed_then_exit_1_naming_the_variable(stack):
    stack.set_function_env(SLUICE_REDRIVE_SOURCES="not-a-queue")
    stack.put(stack.poison_url, "p", source=stack.work_arn)

    result = stack.run("poison", "replay", "--all", "--yes")

    assert result.code == 1
    assert "SLUICE_REDRIVE_SOURCES" in result.stderr
    assert stack.depth(stack.poison_url)["visible"] == 1


# --- breaker -----------------------------------------------------------------------------------


def test_given_a_fresh_table_when_breaker_open_status_close_then_the_state_round_trips(stack):
    fresh = stack.run("--json", "breaker", "status")
    opened = stack.run("breaker", "open", "--reason", "downstream outage", "--json")
    status = stack.run("--json", "breaker", "status")
    closed = stack.run("--json", "breaker", "close")

    assert [r.code for r in (fresh, opened, status, closed)] == [0, 0, 0, 0]
    assert fresh.json["state"] == "closed"
    assert fresh.json["reason"] == "never opened"
    assert set(status.json) == {
        "isOpen",
        "state",
        "reason",
        "openedBy",
        "since",
        "seen",
        "bouncing",
        "probeAt",
        "version",
        "table",
        "breaker",
    }
    assert status.json["isOpen"] is True
    assert (status.json["state"], status.json["reason"], status.json["openedBy"]) == (
        "open",
        "downstream outage",
        "operator",
    )
    assert status.json["table"] == "sluice-breaker"
    assert datetime.fromisoformat(status.json["since"]).tzinfo is not None
    assert (closed.json["state"], closed.json["isOpen"], closed.json["openedBy"]) == ("closed", False, None)
    assert closed.json["version"] == status.json["version"] + 1
    item = stack.dynamodb.get_item(TableName="sluice-breaker", Key={"id": {"S": "redrive"}})["Item"]
    assert item["state"] == {"S": "closed"}


def test_given_no_reason_when_breaker_open_then_usage_error_and_nothing_is_written(stack):
    result = stack.run("breaker", "open")

    assert result.code == 2
    assert "Item" not in stack.dynamodb.get_item(TableName="sluice-breaker", Key={"id": {"S": "redrive"}})


def test_given_an_open_breaker_when_status_in_human_mode_then_state_and_reason_are_shown(stack):
    stack.run("breaker", "open", "--reason", "bad deploy 42")

    result = stack.run("breaker", "status")

    assert result.code == 0
    assert "open" in result.stdout
    assert "bad deploy 42" in result.stdout
    assert "operator" in result.stdout


# --- resources from a CloudFormation stack -----------------------------------------------------

WORKLOADS = ("Orders", "Refunds")
MINIMAL_TEMPLATE = {  # what the CLI reads of a stack of two workloads: their outputs and the shared ones
    "Resources": {
        **{f"{w}{q}": {"Type": "AWS::SQS::Queue"} for w in WORKLOADS for q in ("Queue", "DeadLetterQueue")},
        "PoisonPillQueue": {"Type": "AWS::SQS::Queue"},
        "BreakerTable": {
            "Type": "AWS::DynamoDB::Table",
            "Properties": {
                "BillingMode": "PAY_PER_REQUEST",
                "AttributeDefinitions": [{"AttributeName": "id", "AttributeType": "S"}],
                "KeySchema": [{"AttributeName": "id", "KeyType": "HASH"}],
            },
        },
    },
    "Outputs": {
        "WorkloadNames": {"Value": ",".join(WORKLOADS)},
        **{
            f"{w}{q}{kind}": {
                "Value": {"Ref": f"{w}{q}"} if kind == "Url" else {"Fn::GetAtt": [f"{w}{q}", "Arn"]}
            }
            for w in WORKLOADS
            for q in ("Queue", "DeadLetterQueue")
            for kind in ("Url", "Arn")
        },
        **{
            f"{w}RedriveSettingsFunctionName": {"Value": f"not-deployed-{w.lower()}-redriver"}
            for w in WORKLOADS
        },
        "PoisonPillQueueUrl": {"Value": {"Ref": "PoisonPillQueue"}},
        "PoisonPillQueueArn": {"Value": {"Fn::GetAtt": ["PoisonPillQueue", "Arn"]}},
        "BreakerTableName": {"Value": {"Ref": "BreakerTable"}},
        "RedriveMode": {"Value": "lambda"},
    },
}


@pytest.fixture
def cfn_stack(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[dict[str, str]]:
    monkeypatch.chdir(tmp_path)
    with mock_aws():
        cloudformation = boto3.client("cloudformation", region_name=REGION)
        template = json.loads(json.dumps(MINIMAL_TEMPLATE))
        template["Outputs"]["EnvelopeKeySecretArn"] = {"Value": envelope_key_secret()}
        cloudformation.create_stack(StackName="cli-stack", TemplateBody=json.dumps(template))
        outputs = cloudformation.describe_stacks(StackName="cli-stack")["Stacks"][0]["Outputs"]
        yield {o["OutputKey"]: o["OutputValue"] for o in outputs}


def _run(*argv: str) -> Result:
    out, err = io.StringIO(), io.StringIO()
    code = main(["--receive-wait", "0", *argv], stdout=out, stderr=err)
    return Result(code, out.getvalue(), err.getvalue())


def test_given_a_cloudformation_stack_when_commands_run_then_resources_come_from_its_outputs(cfn_stack):
    sqs = boto3.client("sqs", region_name=REGION)
    sqs.send_message(QueueUrl=cfn_stack["RefundsDeadLetterQueueUrl"], MessageBody="dead")

    stats = _run("--stack-name", "cli-stack", "--workload", "Refunds", "--json", "dlq", "stats")
    opened = _run(
        "--stack-name",
        "cli-stack",
        "--workload",
        "Refunds",
        "--json",
        "breaker",
        "open",
        "--reason",
        "from the stack",
    )

    assert stats.code == 0
    assert stats.json["workload"] == "Refunds"
    queues = {q["queue"]: q for q in stats.json["queues"]}
    assert queues["dead-letter"]["url"] == cfn_stack["RefundsDeadLetterQueueUrl"]
    assert queues["dead-letter"]["visible"] == 1
    assert queues["poison"]["url"] == cfn_stack["PoisonPillQueueUrl"]
    assert opened.code == 0
    assert (opened.json["table"], opened.json["breaker"]) == (cfn_stack["BreakerTableName"], "Refunds")
    dynamodb = boto3.client("dynamodb", region_name=REGION)
    item = dynamodb.get_item(TableName=cfn_stack["BreakerTableName"], Key={"id": {"S": "Refunds"}})["Item"]
    assert item["reason"] == {"S": "from the stack"}  # the Refunds breaker; the Orders one untouched
    assert "Item" not in dynamodb.get_item(
        TableName=cfn_stack["BreakerTableName"], Key={"id": {"S": "Orders"}}
    )


def test_given_a_stack_of_two_workloads_when_a_shared_queue_is_listed_then_no_workload_is_needed(cfn_stack):
    # Given a pill in the poison queue every workload shares
    sqs = boto3.client("sqs", region_name=REGION)
    attributes = merge(
        {}, Envelope(origin_id="o-9", source=cfn_stack["RefundsQueueArn"]), body="b", seal=TEST_SEAL
    )
    sqs.send_message(QueueUrl=cfn_stack["PoisonPillQueueUrl"], MessageBody="b", MessageAttributes=attributes)  # type: ignore[arg-type]
    # When it is listed without --workload, Then the command runs (it needs no workload's queue)
    result = _run("--stack-name", "cli-stack", "--json", "poison", "list")
    assert result.code == 0, result.stderr
    assert result.json["count"] == 1


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        ((), "runs the workloads Orders, Refunds: pass --workload NAME"),
        (("--workload", "Shipments"), "runs no workload 'Shipments' (it runs: Orders, Refunds)"),
    ],
)
def test_given_a_stack_of_two_workloads_when_none_or_an_unknown_one_is_named_then_exit_2_naming_them(
    cfn_stack, argv, said
):
    sqs = boto3.client("sqs", region_name=REGION)
    sqs.send_message(QueueUrl=cfn_stack["OrdersDeadLetterQueueUrl"], MessageBody="dead")

    result = _run("--stack-name", "cli-stack", *argv, "dlq", "redrive", "--yes")

    assert result.code == 2
    assert said in result.stderr
    assert (
        sqs.get_queue_attributes(
            QueueUrl=cfn_stack["OrdersDeadLetterQueueUrl"], AttributeNames=["ApproximateNumberOfMessages"]
        )["Attributes"]["ApproximateNumberOfMessages"]
        == "1"
    )  # nothing moved on a guess


def test_given_a_stack_whose_settings_function_is_missing_when_replaying_then_outputs_and_defaults_are_used(
    cfn_stack,
):
    sqs = boto3.client("sqs", region_name=REGION)
    attributes = merge(
        {},
        Envelope(origin_id="o-1", attempts=1, source=cfn_stack["OrdersQueueArn"]),
        body="b",
        seal=TEST_SEAL,
    )
    sqs.send_message(QueueUrl=cfn_stack["PoisonPillQueueUrl"], MessageBody="b", MessageAttributes=attributes)  # type: ignore[arg-type]

    result = _run("--stack-name", "cli-stack", "--workload", "Orders", "--json", "poison", "replay", "o-1")

    assert result.code == 0, result.stderr
    assert result.json["settings"]["origin"] == "fallback"
    assert "not-deployed-orders-redriver" in result.stderr
    assert result.json["replayed"][0]["destination"] == cfn_stack["OrdersQueueUrl"]
    body = sqs.receive_message(QueueUrl=cfn_stack["OrdersQueueUrl"])["Messages"][0]["Body"]
    assert body == "b"


def test_given_no_such_stack_when_a_command_runs_then_exit_2_naming_the_stack(cfn_stack):
    result = _run("--stack-name", "nope", "breaker", "status")

    assert result.code == 2
    assert "stack 'nope' not found" in result.stderr


def test_given_a_stack_without_the_needed_output_when_a_command_runs_then_exit_2_naming_the_output(
    stack,
):
    stack.resources = Resources(stack_name="old-stack", poison_queue_url=stack.poison_url)

    result = stack.run("breaker", "status")

    assert result.code == 2
    assert "stack 'old-stack' has no output BreakerTableName" in result.stderr


def test_given_a_queue_that_is_gone_when_stats_then_exit_1_with_the_aws_error(stack):
    stack.sqs.delete_queue(QueueUrl=stack.poison_url)

    result = stack.run("dlq", "stats")

    assert result.code == 1
    assert "AWS refused GetQueueAttributes" in result.stderr


# --- global options ----------------------------------------------------------------------------


def test_given_a_samconfig_when_no_stack_name_is_given_then_its_environment_decides(tmp_path):
    (tmp_path / "samconfig.toml").write_text(
        'version = 0.1\n[default.global.parameters]\nstack_name = "from-default"\nregion = "eu-west-1"\n'
        '[prod.deploy.parameters]\nstack_name = "from-prod"\n'
    )
    out = Output(json_mode=True, stdout=io.StringIO(), stderr=io.StringIO())

    default = make_context(parse(["dlq", "stats"]), out, cwd=tmp_path)
    prod = make_context(parse(["--config-env", "prod", "dlq", "stats"]), out, cwd=tmp_path)
    explicit = make_context(parse(["dlq", "stats", "--stack-name", "given"]), out, cwd=tmp_path)
    nothing = make_context(parse(["dlq", "stats"]), out, cwd=tmp_path / "missing")

    assert (default.stack_name, prod.stack_name, explicit.stack_name, nothing.stack_name) == (
        "from-default",
        "from-prod",
        "given",
        "sluice",
    )
    assert default.clients.sqs.meta.region_name == "eu-west-1"


def test_given_an_endpoint_option_or_variable_when_clients_are_made_then_they_talk_to_it(
    monkeypatch, tmp_path
):
    out = Output(json_mode=True, stdout=io.StringIO(), stderr=io.StringIO())
    given = make_context(
        parse(["--endpoint-url", "http://127.0.0.1:4566", "dlq", "stats"]), out, cwd=tmp_path
    )
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:5000")
    from_env = make_context(parse(["dlq", "stats"]), out, cwd=tmp_path)

    assert given.clients.sqs.meta.endpoint_url == "http://127.0.0.1:4566"
    assert from_env.clients.sqs.meta.endpoint_url == "http://127.0.0.1:5000"


def test_given_global_options_after_the_command_when_parsed_then_they_apply():
    args = parse(["breaker", "status", "--json", "--stack-name", "s", "--region", "eu-central-1"])

    assert (args.json, args.stack_name, args.region, args.receive_wait) == (True, "s", "eu-central-1", None)


def test_given_help_or_an_unknown_command_when_main_runs_then_exit_0_or_2(capsys):
    assert main(["--help"]) == 0
    assert "dlq" in capsys.readouterr().out
    assert main(["dlq", "explode"]) == 2


def test_given_no_rich_when_a_table_is_printed_then_plain_aligned_columns():
    stdout = io.StringIO()
    out = Output(json_mode=False, stdout=stdout, stderr=io.StringIO(), use_rich=False)

    out.table("Queues", ("queue", "visible"), [("dead-letter", 3), ("poison", None)])

    assert stdout.getvalue().splitlines() == [
        "Queues",
        "queue        visible",
        "-----------  -------",
        "dead-letter  3",
        "poison       -",
    ]


# --- delay-dlq -----------------------------------------------------------------------------------


def _delay_request(stack: Stack, body: str, due: datetime, *, origin: str) -> str:
    """A delay request as the batch-delay function left it in the delay DLQ (sealed: it identified it)."""
    envelope = Envelope(origin_id=origin, deliver_at=due, target=stack.work_url, source="arn:delay")
    user: dict[str, Any] = dict(USER_ATTRIBUTES)
    attributes = merge(user, envelope, body=body, seal=TEST_SEAL)
    url = str(stack.resources.delay_dead_letter_queue_url)
    return str(
        stack.sqs.send_message(QueueUrl=url, MessageBody=body, MessageAttributes=attributes)["MessageId"]
    )


def test_given_failed_delay_requests_when_redriven_then_they_return_to_the_delay_queue_overdue_ones_due_now(
    stack,
):
    # Given two requests the batch-delay function gave up on (one still in the future, one overdue)
    # and a message that is no delay request at all
    later = datetime.now(UTC) + timedelta(hours=3)
    _delay_request(stack, '{"order_id": "later"}', later, origin="o-later")
    _delay_request(
        stack, '{"order_id": "overdue"}', datetime.now(UTC) - timedelta(days=2), origin="o-overdue"
    )
    stray = stack.sqs.send_message(QueueUrl=stack.resources.delay_dead_letter_queue_url, MessageBody="stray")

    # When the operator re-drives the delay DLQ
    before = datetime.now(UTC)
    result = stack.run("--json", "delay-dlq", "redrive")

    # Then both requests are back on the delay queue with their history, the overdue one due now;
    # the stray message is refused with the reason and stays
    assert result.code == 1, result.stderr  # partial: one refused
    assert result.json["counts"]["replayed"] == 2
    [refused] = result.json["refused"]
    assert refused["messageId"] == stray["MessageId"]
    assert "not a delay request" in refused["reason"]
    sent = {
        json.loads(m["Body"])["order_id"]: m for m in stack.receive_all(str(stack.resources.delay_queue_url))
    }
    _, later_env = _envelope(sent["later"])
    _, overdue_env = _envelope(sent["overdue"])
    assert later_env.deliver_at == later
    assert overdue_env.deliver_at is not None
    assert overdue_env.deliver_at >= before - timedelta(seconds=1)
    assert overdue_env.origin_id == "o-overdue"  # sealed again: the next hop keeps its identity
    assert [m["MessageId"] for m in stack.receive_all(str(stack.resources.delay_dead_letter_queue_url))] == [
        stray["MessageId"]
    ]


def test_given_a_request_dead_lettered_before_batch_delay_identified_it_when_redriven_then_it_keeps_its_id(
    stack,
):
    # Given a request as the producer sent it (no origin yet) that SQS moved to the delay DLQ with its id
    dlq = str(stack.resources.delay_dead_letter_queue_url)
    first_id = send_delayed(
        stack.sqs, delay_queue_url=dlq, target=stack.work_url, body="b",
        deliver_at=datetime.now(UTC) + timedelta(hours=1),
    )  # fmt: skip
    # When the operator re-drives the delay DLQ
    result = stack.run("--json", "delay-dlq", "redrive")
    # Then it goes back under the identity it had: a copy batch-delay parked before failing is delivered
    # under that id too, so the consumer's idempotency absorbs the second of the two
    assert result.code == 0, result.stderr
    [back] = stack.receive_all(str(stack.resources.delay_queue_url))
    assert _envelope(back)[1].origin_id == first_id


def test_given_a_request_at_the_size_limit_in_the_delay_dlq_when_redriven_then_its_body_is_offloaded(stack):
    # Given a producer's delay request of exactly 1 MiB (no identity yet) that SQS moved to the delay DLQ
    s3 = boto3.client("s3", region_name=REGION)
    s3.create_bucket(Bucket="claims")
    stack.set_function_env(SLUICE_CLAIM_CHECK_BUCKETS="claims")
    dlq = str(stack.resources.delay_dead_letter_queue_url)
    due = datetime.now(UTC) + timedelta(hours=1)
    probe = send_delayed(
        stack.sqs, delay_queue_url=stack.other_url, target=stack.work_url, body="p", deliver_at=due
    )
    [sent] = stack.sqs.receive_message(QueueUrl=stack.other_url, MessageAttributeNames=["All"])["Messages"]
    assert sent["MessageId"] == probe
    attributes = {k: {"DataType": v["DataType"], "StringValue": v["StringValue"]} for k, v in
                  sent["MessageAttributes"].items()}  # fmt: skip
    body = "b" * (MAX_MESSAGE_BYTES - message_bytes("", attributes))  # the seal-less request: size fixed
    first_id = stack.sqs.send_message(QueueUrl=dlq, MessageBody=body, MessageAttributes=attributes)[
        "MessageId"
    ]
    # When the operator re-drives it (it now carries its identity, and grows past the limit)
    result = stack.run("--json", "delay-dlq", "redrive")
    # Then it is back on the delay queue as a claim-check pointer to the whole body, with its identity
    assert result.code == 0, result.stderr
    [back] = stack.receive_all(str(stack.resources.delay_queue_url))
    pointer = claimcheck.parse_pointer(back["Body"])
    assert pointer is not None
    assert s3.get_object(Bucket=pointer.bucket, Key=pointer.key)["Body"].read().decode() == body
    assert _envelope(back)[1].origin_id == first_id
    assert stack.depth(dlq) == {"visible": 0, "inFlight": 0}


def test_given_failed_delay_requests_when_peeked_then_they_are_listed_and_stay(stack):
    _delay_request(stack, '{"order_id": "p"}', datetime.now(UTC), origin="o-peek")

    result = stack.run("--json", "delay-dlq", "peek")

    assert result.code == 0, result.stderr
    assert [m["originId"] for m in result.json["messages"]] == ["o-peek"]
    assert len(stack.receive_all(str(stack.resources.delay_dead_letter_queue_url))) == 1


def test_given_no_yes_when_the_delay_dlq_is_purged_then_it_refuses(stack):
    result = stack.run("delay-dlq", "purge")

    assert result.code == 2
    assert "without --yes" in result.stderr


def test_given_an_entry_sqs_refuses_beside_healthy_ones_when_replayed_then_only_it_stays_with_the_reason(
    stack,
):
    # Given two healthy poison pills and one whose (sealed) envelope preserves an attribute SQS refuses
    healthy = [
        stack.put(stack.poison_url, f'{{"order_id": "h{i}"}}', source=stack.work_arn) for i in range(2)
    ]
    body = '{"order_id": "broken"}'
    broken = Envelope.model_validate(
        {
            "origin_id": "o-broken",
            "source": stack.work_arn,
            "displaced": {"x": {"StringValue": "no DataType"}},
        }
    )
    bad = stack.sqs.send_message(
        QueueUrl=stack.poison_url,
        MessageBody=body,
        MessageAttributes={
            "sluice": {"DataType": "String", "StringValue": TEST_SEAL.sign(broken, body).to_json()}
        },
    )["MessageId"]

    # When every poison pill is replayed (one SendMessageBatch to the work queue)
    result = stack.run("--json", "poison", "replay", "--all", "--yes")

    # Then the healthy ones go back; the bad one is reported with SQS's reason and stays
    assert result.code == 1
    assert sorted(r["messageId"] for r in result.json["replayed"]) == sorted(healthy)
    [failed] = result.json["failed"]
    assert failed["messageId"] == bad
    assert "must contain non-empty message attribute type" in failed["reason"]
    assert [m["MessageId"] for m in stack.receive_all(stack.poison_url)] == [bad]
