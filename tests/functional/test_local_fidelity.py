"""The local runtime fails where AWS fails: SQS's rules and Step Functions' execution names.

moto alone accepts a 1.2 MB message of two-byte characters, eleven attributes, a NUL in a body, and
names every unnamed execution ``None``. With the runtime's adapter installed (as LocalCloud installs
it), each is refused or named exactly as AWS does.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws
from samtranslator.yaml_helper import yaml_parse

from sluice.limits import MAX_MESSAGE_BYTES
from sluice_local.app.stack import samconfig_parameters
from sluice_local.emulation import moto_adapter
from sluice_local.emulation.cloud import DeployError, LocalCloud
from sluice_local.emulation.template import parameter_problems
from tests.conftest import ROOT

REGION = "us-east-1"


@pytest.fixture
def sqs() -> Iterator[Any]:
    undo = moto_adapter.install_sqs_rules()
    try:
        with mock_aws():
            yield boto3.client("sqs", region_name=REGION)
    finally:
        undo()


@pytest.fixture
def queue(sqs: Any, request: pytest.FixtureRequest) -> str:
    name = "fidelity-" + "".join(c if c.isalnum() else "-" for c in request.node.name)[-60:]
    return str(sqs.create_queue(QueueName=name)["QueueUrl"])


def attribute(value: str = "v", data_type: str = "String") -> dict[str, Any]:
    return {"DataType": data_type, "StringValue": value}


def refused(sqs: Any, queue: str, body: str, attributes: dict[str, Any] | None = None) -> ClientError:
    with pytest.raises(ClientError) as caught:
        sqs.send_message(QueueUrl=queue, MessageBody=body, MessageAttributes=attributes or {})
    return caught.value


def visible(sqs: Any, queue: str) -> int:
    attrs = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["ApproximateNumberOfMessages"])
    return int(attrs["Attributes"]["ApproximateNumberOfMessages"])


def test_given_a_body_over_the_limit_only_in_bytes_when_sent_then_it_is_refused_as_sqs_refuses_it(sqs, queue):
    error = refused(sqs, queue, "é" * (MAX_MESSAGE_BYTES // 2 + 1))  # 524,289 characters, 1,048,578 bytes
    assert error.response["Error"]["Code"] == "InvalidParameterValue"
    assert "Message must be shorter than 1048576 bytes" in error.response["Error"]["Message"]
    assert visible(sqs, queue) == 0


def test_given_a_body_exactly_at_the_limit_when_sent_then_it_is_accepted(sqs, queue):
    sqs.send_message(QueueUrl=queue, MessageBody="x" * MAX_MESSAGE_BYTES)
    assert visible(sqs, queue) == 1


def test_given_attributes_that_push_a_message_over_the_limit_when_sent_then_it_is_refused(sqs, queue):
    error = refused(
        sqs, queue, "x" * (MAX_MESSAGE_BYTES - 7), {"k": attribute("v")}
    )  # +1+6+1 bytes: one over
    assert "shorter than" in error.response["Error"]["Message"]


def test_given_eleven_attributes_when_sent_then_it_is_refused(sqs, queue):
    error = refused(sqs, queue, "{}", {f"a{i}": attribute() for i in range(11)})
    assert (
        error.response["Error"]["Message"]
        == "Number of message attributes [11] exceeds the allowed maximum [10]."
    )


@pytest.mark.parametrize(("character", "shown"), [("\x00", "#x0"), ("\x08", "#x8"), ("\ufffe", "#xFFFE")])
def test_given_a_character_sqs_refuses_when_sent_then_it_is_invalid_message_contents(
    sqs, queue, character, shown
):
    error = refused(sqs, queue, f"a{character}b")
    assert error.response["Error"]["Code"] == "InvalidMessageContents"
    assert shown in error.response["Error"]["Message"]


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("AWS.reserved", attribute()),
        ("bad name", attribute()),
        ("n", attribute("twelve", "Number")),
        ("e", attribute("")),
    ],
    ids=["reserved prefix", "space in name", "not a number", "empty value"],
)
def test_given_an_attribute_sqs_refuses_when_sent_then_it_is_refused(sqs, queue, name, value):
    error = refused(sqs, queue, "{}", {name: value})
    assert error.response["Error"]["Code"] == "InvalidParameterValue"


def test_given_a_binary_attribute_when_sized_then_its_bytes_count_not_its_base64(sqs, queue):
    # 786,000 raw bytes travel as 1,048,000 base64 characters: counted raw, the message fits.
    big = {"b": {"DataType": "Binary", "BinaryValue": b"\x01" * 786_000}}
    sqs.send_message(QueueUrl=queue, MessageBody="x" * 262_000, MessageAttributes=big)
    assert visible(sqs, queue) == 1


def test_given_a_queue_with_a_smaller_maximum_when_a_larger_message_is_sent_then_it_is_refused(sqs):
    url = sqs.create_queue(QueueName="fidelity-small", Attributes={"MaximumMessageSize": "1024"})["QueueUrl"]
    error = refused(sqs, url, "é" * 513)
    assert "shorter than 1024 bytes" in error.response["Error"]["Message"]


def test_given_a_queue_with_a_smaller_maximum_when_a_batch_holds_a_larger_entry_then_only_it_fails(sqs):
    # The batch limit is SQS's fixed 1 MiB (SendMessageBatch docs); the queue's own maximum applies per
    # entry. The local check used to fail the whole call against the queue's maximum.
    url = sqs.create_queue(QueueName="fidelity-small-batch", Attributes={"MaximumMessageSize": "1024"})[
        "QueueUrl"
    ]
    entries = [{"Id": "big", "MessageBody": "x" * 2048}, {"Id": "small", "MessageBody": "{}"}]
    response = sqs.send_message_batch(QueueUrl=url, Entries=entries)
    assert [s["Id"] for s in response["Successful"]] == ["small"]
    [failed] = response["Failed"]
    assert (failed["Id"], failed["SenderFault"]) == ("big", True)
    assert "shorter than 1024 bytes" in failed["Message"]


def test_given_a_bad_entry_in_a_batch_when_sent_then_only_it_fails_and_its_batch_mates_are_sent(sqs, queue):
    entries = [
        {"Id": "good-1", "MessageBody": "{}"},
        {"Id": "bad", "MessageBody": "nul\x00"},
        {"Id": "eleven", "MessageBody": "{}", "MessageAttributes": {f"a{i}": attribute() for i in range(11)}},
        {"Id": "good-2", "MessageBody": "{}", "MessageAttributes": {"k": attribute()}},
    ]
    response = sqs.send_message_batch(QueueUrl=queue, Entries=entries)
    assert sorted(s["Id"] for s in response["Successful"]) == ["good-1", "good-2"]
    failed = {f["Id"]: f for f in response["Failed"]}
    assert set(failed) == {"bad", "eleven"}
    assert failed["bad"]["Code"] == "InvalidMessageContents"
    assert all(f["SenderFault"] for f in failed.values())
    assert visible(sqs, queue) == 2


def test_given_a_batch_over_the_limit_only_with_attributes_when_sent_then_the_whole_call_fails(sqs, queue):
    half = MAX_MESSAGE_BYTES // 2
    entries = [
        {"Id": "a", "MessageBody": "x" * half},
        {"Id": "b", "MessageBody": "x" * (half - 4), "MessageAttributes": {"k": attribute("v")}},
    ]
    with pytest.raises(ClientError) as caught:
        sqs.send_message_batch(QueueUrl=queue, Entries=entries)
    assert caught.value.response["Error"]["Code"].endswith("BatchRequestTooLong")  # query-compatible code
    assert visible(sqs, queue) == 0


@pytest.mark.parametrize(
    ("entries", "code"),
    [
        (
            [{"Id": "bad", "MessageBody": "nul\x00"}]
            + [{"Id": f"e{i}", "MessageBody": "{}"} for i in range(10)],
            "TooManyEntriesInBatchRequest",
        ),
        ([{"Id": "caf\u00e9", "MessageBody": "{}"}], "InvalidBatchEntryId"),
        ([{"Id": "i" * 81, "MessageBody": "{}"}], "InvalidBatchEntryId"),
        (
            [{"Id": "same", "MessageBody": "nul\x00"}, {"Id": "same", "MessageBody": "{}"}],
            "BatchEntryIdsNotDistinct",
        ),
    ],
    ids=["eleven entries, one bad", "id beyond ASCII", "id of 81", "ids repeated, one entry bad"],
)
def test_given_a_batch_that_breaks_a_rule_of_the_call_when_sent_then_the_whole_call_fails(
    sqs, queue, entries, code
):
    # The rules of a call are judged on all its entries, before any entry: moto judged them only on
    # the entries left after the refused ones (eleven with one bad went through), and took any
    # Unicode letter in an id.
    with pytest.raises(ClientError) as caught:
        sqs.send_message_batch(QueueUrl=queue, Entries=entries)
    assert caught.value.response["Error"]["Code"].endswith(code)
    assert visible(sqs, queue) == 0


def test_given_a_negative_delay_when_sent_then_it_is_refused_as_sqs_refuses_it(sqs, queue):
    with pytest.raises(ClientError) as caught:
        sqs.send_message(QueueUrl=queue, MessageBody="{}", DelaySeconds=-1)
    assert caught.value.response["Error"]["Code"] == "InvalidParameterValue"
    assert "DelaySeconds must be >= 0 and <= 900" in caught.value.response["Error"]["Message"]


def test_given_a_type_label_with_any_body_character_when_sent_then_it_is_accepted(sqs, queue):
    # "The custom-type label has the same restrictions as the message body" (SQS developer guide)
    sqs.send_message(
        QueueUrl=queue, MessageBody="{}", MessageAttributes={"k": attribute("v", "String.image/png")}
    )
    assert visible(sqs, queue) == 1


GOOD_TRACE = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"


@pytest.mark.parametrize(
    "system",
    [
        {"AWSTraceHeader": attribute("Root=1-5759e988-bd862e3fe1be4;Sampled=1")},  # a short trace id
        {"AWSTraceHeader": attribute(GOOD_TRACE + "\n")},
        {"AWSTraceHeader": attribute("not a trace header")},
    ],
    ids=["short trace id", "trailing newline", "no Root"],
)
def test_given_a_malformed_trace_header_when_sent_then_it_is_refused_alone_and_in_a_batch(sqs, queue, system):
    # "its value must be a correctly formatted X-Ray trace header string" (SendMessage): moto took any
    with pytest.raises(ClientError) as caught:
        sqs.send_message(QueueUrl=queue, MessageBody="{}", MessageSystemAttributes=system)
    assert caught.value.response["Error"]["Code"] == "InvalidParameterValue"
    entries = [
        {"Id": "bad", "MessageBody": "{}", "MessageSystemAttributes": system},
        {
            "Id": "good",
            "MessageBody": "{}",
            "MessageSystemAttributes": {"AWSTraceHeader": attribute(GOOD_TRACE)},
        },
    ]
    response = sqs.send_message_batch(QueueUrl=queue, Entries=entries)
    assert [s["Id"] for s in response["Successful"]] == ["good"]
    assert [(f["Id"], f["Code"], f["SenderFault"]) for f in response["Failed"]] == [
        ("bad", "InvalidParameterValue", True)
    ]
    # the batch mate keeps its trace header
    [message] = sqs.receive_message(QueueUrl=queue, MessageSystemAttributeNames=["AWSTraceHeader"])[
        "Messages"
    ]
    assert message["Attributes"]["AWSTraceHeader"] == GOOD_TRACE


def test_given_a_well_formed_trace_header_when_sent_then_the_receiver_gets_it(sqs, queue):
    sqs.send_message(
        QueueUrl=queue, MessageBody="{}", MessageSystemAttributes={"AWSTraceHeader": attribute(GOOD_TRACE)}
    )
    [message] = sqs.receive_message(QueueUrl=queue, MessageSystemAttributeNames=["AWSTraceHeader"])[
        "Messages"
    ]
    assert message["Attributes"]["AWSTraceHeader"] == GOOD_TRACE


# --- DeadLetterQueueSourceArn: a message a redrive policy moves says where from ----------------------


def dead_letter_pair(sqs: Any) -> tuple[str, str, str]:
    """(source URL, source ARN, DLQ URL): a source queue moving a message after 1 receive."""
    dlq = sqs.create_queue(QueueName="fidelity-dlq")["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    policy = json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 1})
    source = sqs.create_queue(QueueName="fidelity-source", Attributes={"RedrivePolicy": policy})["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=source, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    return source, arn, dlq


def test_given_a_message_its_redrive_policy_moves_when_received_from_the_dlq_then_it_names_its_source(sqs):
    # Given a message received as often as its queue's redrive policy allows
    source, source_arn, dlq = dead_letter_pair(sqs)
    sqs.send_message(QueueUrl=source, MessageBody="moved")
    sqs.receive_message(QueueUrl=source, VisibilityTimeout=0)
    # When the next receive moves it, and the DLQ is read with every system attribute
    assert sqs.receive_message(QueueUrl=source).get("Messages", []) == []
    [moved] = sqs.receive_message(QueueUrl=dlq, MessageSystemAttributeNames=["All"])["Messages"]
    # Then it names the queue it was moved from, as SQS does (moto 5.2.5 alone leaves it out)
    assert moved["Body"] == "moved"
    assert moved["Attributes"]["DeadLetterQueueSourceArn"] == source_arn


def test_given_a_message_sent_to_the_dlq_when_received_then_it_names_no_source(sqs):
    # Given a message a consumer sent to the DLQ itself (SendMessage), beside one the policy moved
    source, _, dlq = dead_letter_pair(sqs)
    sqs.send_message(QueueUrl=dlq, MessageBody="sent")
    sqs.send_message(QueueUrl=source, MessageBody="moved")
    sqs.receive_message(QueueUrl=source, VisibilityTimeout=0)
    sqs.receive_message(QueueUrl=source)
    # When both are read asking for the attribute by name, and then without asking for it
    named = sqs.receive_message(
        QueueUrl=dlq, MaxNumberOfMessages=10, VisibilityTimeout=0, AttributeNames=["DeadLetterQueueSourceArn"]
    )["Messages"]
    unasked = sqs.receive_message(QueueUrl=dlq, MaxNumberOfMessages=10)["Messages"]
    # Then only the moved one carries it, and only when asked for
    by_body = {m["Body"]: m.get("Attributes", {}) for m in named}
    assert set(by_body) == {"sent", "moved"}
    assert "DeadLetterQueueSourceArn" not in by_body["sent"]
    assert "DeadLetterQueueSourceArn" in by_body["moved"]
    assert all("DeadLetterQueueSourceArn" not in m.get("Attributes", {}) for m in unasked)


def test_given_unnamed_executions_when_started_then_each_gets_its_own_generated_name():
    definition = {"StartAt": "Done", "States": {"Done": {"Type": "Succeed"}}}
    undo = [moto_adapter.configure(), moto_adapter.install_execution_names()]
    try:
        with mock_aws():
            sfn = boto3.client("stepfunctions", region_name=REGION)
            arn = sfn.create_state_machine(
                name="fidelity", definition=json.dumps(definition), roleArn="arn:aws:iam::123456789012:role/x"
            )["stateMachineArn"]
            names = {
                sfn.start_execution(stateMachineArn=arn)["executionArn"].rsplit(":", 1)[-1] for _ in range(2)
            }
    finally:
        for one in reversed(undo):
            one()
    assert len(names) == 2
    assert "None" not in names


# --- template parameter constraints, as CloudFormation checks them at deploy ------------------------

SPEC: dict[str, Any] = {
    "Count": {"Type": "Number", "MinValue": 3, "MaxValue": 10, "Default": 5},
    "Mode": {"Type": "String", "AllowedValues": ["lambda", "stepfunctions"], "Default": "lambda"},
    "Rate": {"Type": "Number", "AllowedValues": [1, 2, 5], "Default": 1},
    "Prefix": {"Type": "String", "AllowedPattern": "^[a-z]+/$", "Default": "claim/"},
    "Name": {"Type": "String", "MinLength": 2, "MaxLength": 4, "Default": "abc"},
    "Arns": {"Type": "CommaDelimitedList", "AllowedPattern": "^arn:.*|$", "Default": ""},
    "Described": {"Type": "Number", "MinValue": 1, "Default": 1, "ConstraintDescription": "at least one"},
}


@pytest.mark.parametrize(
    ("given", "says"),
    [
        (
            {"Count": "0"},
            "Parameter 'Count' failed to satisfy constraint: "
            "Parameter 'Count' must be a number not less than 3",
        ),
        ({"Count": "11"}, "not greater than 10"),
        ({"Count": "five"}, "Parameter 'Count' must be a number"),
        ({"Mode": "sfn"}, "Parameter 'Mode' must be one of AllowedValues"),
        ({"Rate": "3"}, "Parameter 'Rate' must be one of AllowedValues"),
        ({"Prefix": ""}, "must match pattern ^[a-z]+/$"),
        ({"Prefix": "claim/x"}, "must match pattern"),  # the whole value must match, as in CloudFormation
        ({"Name": "a"}, "at least 2 characters"),
        ({"Name": "abcde"}, "more than 4 characters"),
        ({"Arns": "arn:aws:sqs:x,not-an-arn"}, "Parameter Arns must match pattern"),
        ({"Described": "0"}, "Parameter 'Described' failed to satisfy constraint: at least one"),
    ],
)
def test_given_a_parameter_breaking_its_constraint_when_deployed_then_it_is_refused(given, says):
    assert any(says in problem for problem in parameter_problems(SPEC, given))


def test_given_values_within_every_constraint_when_deployed_then_nothing_is_refused():
    assert parameter_problems(SPEC, {}) == []
    assert parameter_problems(SPEC, {"Count": "10", "Rate": "5", "Arns": "arn:a,arn:b", "Name": "ab"}) == []


def test_given_a_parameter_without_value_or_default_when_deployed_then_it_is_missing():
    assert parameter_problems({"Needed": {"Type": "String"}}, {}) == ["Parameters: [Needed] must have values"]


def test_given_the_project_template_when_max_receive_count_is_zero_then_the_local_deploy_fails_as_aws_does():
    with pytest.raises(DeployError, match="ValidationError: Parameter 'MaxReceiveCount' failed to satisfy"):
        LocalCloud(parameters={"MaxReceiveCount": "0"}).start()


def test_given_the_project_defaults_and_samconfig_when_checked_then_they_satisfy_every_constraint():
    template = yaml_parse((ROOT / "template.yaml").read_text())
    assert parameter_problems(template["Parameters"], samconfig_parameters(ROOT)) == []


def test_given_a_list_parameter_left_at_its_default_when_deployed_then_a_ref_to_it_is_the_list(tmp_path):
    # moto reads a CommaDelimitedList's Default as one text (joined, "a,b" becomes "a,,,b"); CloudFormation
    # makes the same list of a default as of a given value, and so does the local runtime
    template = tmp_path / "template.yaml"
    template.write_text(
        json.dumps(
            {
                "Parameters": {"Names": {"Type": "CommaDelimitedList", "Default": "Orders,Refunds"}},
                "Resources": {"Queue": {"Type": "AWS::SQS::Queue"}},
                "Outputs": {
                    "Joined": {"Value": {"Fn::Join": ["+", {"Ref": "Names"}]}},
                    "Second": {"Value": {"Fn::Select": [1, {"Ref": "Names"}]}},
                },
            }
        )
    )
    cloud = LocalCloud(template=template, stack_name="list-default").start()
    try:
        assert (cloud.outputs["Joined"], cloud.outputs["Second"]) == ("Orders+Refunds", "Refunds")
    finally:
        cloud.stop()
