"""The consumer's flows through the deployed template: queue → event source mapping → function."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from sluice.envelope import ATTRIBUTE, Envelope
from sluice_local.app import messages
from sluice_local.app.messages import ORDERS
from sluice_local.demo.scenarios import consumer, runner
from tests.doubles import extended_client_session


@pytest.mark.parametrize(
    "make",
    [
        consumer.Normal,
        consumer.Duplicates,
        consumer.TwoWorkloads,
        consumer.Poison,
        consumer.TransientThenSuccess,
        consumer.LargePayload,
    ],
    ids=["normal", "duplicate", "two-workloads", "poison", "transient-then-success", "claim-check"],
)
def test_consumer_scenario(stack, make):
    [outcome] = runner.run(stack, [make()])
    assert outcome.ok, f"{outcome.name}: expected {outcome.expected}; observed {outcome.observed}"


def poisoned(stack, mid: str) -> tuple[dict, Envelope] | None:
    """The poison queue's message whose envelope names ``mid`` as its origin (polled for 60 s), or None."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for message in stack.every_message("PoisonPillQueueUrl"):
            env = Envelope.model_validate_json(message["MessageAttributes"][ATTRIBUTE]["StringValue"])
            if env.origin_id == mid:
                return message, env
        time.sleep(0.1)  # the next poll of the queue
    return None


def test_poison_message_carries_a_complete_envelope(stack):
    sqs = stack.client("sqs")
    mid = sqs.send_message(
        QueueUrl=stack.outputs[ORDERS + "QueueUrl"],
        MessageBody=json.dumps(messages.order("e2e-envelope", amount_cents=99_000_000)),
        MessageAttributes={"tenant": {"DataType": "String", "StringValue": "acme"}},
    )["MessageId"]
    found = poisoned(stack, mid)
    assert found, "the over-limit order never reached the poison queue"
    message, env = found
    assert message["MessageAttributes"]["tenant"]["StringValue"] == "acme"
    assert env.attempts == 1
    assert env.source == stack.outputs[ORDERS + "QueueArn"]
    assert env.first_failure is not None
    assert env.last_error is not None
    assert env.last_error.type == "PermanentError"
    assert "single-order limit" in env.last_error.message


def test_consumer_through_the_lambda_invoke_api(stack, lambda_api):
    client, function = lambda_api
    event = json.loads((Path(__file__).resolve().parents[2] / "events/orders/duplicate.json").read_text())
    for record in event["Records"]:
        record["eventSourceARN"] = stack.outputs[ORDERS + "QueueArn"]
        record["body"] = json.dumps(messages.order("e2e-invoke"))
    response = client.invoke(FunctionName=function, Payload=json.dumps(event).encode())
    assert "FunctionError" not in response, response["Payload"].read()
    assert json.loads(response["Payload"].read()) == {"batchItemFailures": []}
    assert stack.charges("e2e-invoke") == {"e2e-invoke": 1}
    [charge] = stack.side_effects("e2e-invoke")
    assert charge.request_id, "the ledger item names the Lambda request id that performed the charge"


def test_a_function_error_surfaces_as_function_error(stack, lambda_api):
    client, function = lambda_api
    response = client.invoke(FunctionName=function, Payload=b'{"Records": "not a list"}')
    assert response.get("FunctionError") == "Unhandled"
    assert "errorMessage" in json.loads(response["Payload"].read())


def test_a_default_stack_reads_what_the_python_extended_client_writes_in_both_formats(stack, monkeypatch):
    # Given the real Extended Client set up as its README shows, against the deployed default stack
    # (ClaimCheckPrefix ''): payloads at the bucket root, current and legacy format
    assert stack.outputs["ClaimCheckPrefix"] == ""
    monkeypatch.setenv("AWS_ENDPOINT_URL", stack.endpoint)  # its S3 client is made without arguments
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "testing")
    wanted = {}
    for legacy in (False, True):
        sqs = extended_client_session()(region_name=stack.region).client("sqs")
        sqs.large_payload_support = stack.outputs["ClaimCheckBucketName"]
        sqs.use_legacy_attribute = legacy
        order_id = f"e2e-extended-{'legacy' if legacy else 'current'}"
        body = json.dumps(messages.order(order_id) | {"note": "x" * 300_000})
        sqs.send_message(QueueUrl=stack.outputs[ORDERS + "QueueUrl"], MessageBody=body)
        wanted[order_id] = 1
    # When the stack consumes them, Then each order is charged once
    deadline = time.monotonic() + 60
    while stack.charges("e2e-extended-") != wanted and time.monotonic() < deadline:
        time.sleep(0.2)
    assert stack.charges("e2e-extended-") == wanted


def test_a_tenant_s_poison_pill_keeps_its_group_id_through_the_local_runtime(stack):
    # Given an order of tenant-e2e (its MessageGroupId: a fair queue's tenant) that fails permanently
    sqs = stack.client("sqs")
    mid = sqs.send_message(
        QueueUrl=stack.outputs[ORDERS + "QueueUrl"],
        MessageBody=json.dumps(messages.order("e2e-tenant", amount_cents=99_000_000)),
        MessageGroupId="tenant-e2e",
    )["MessageId"]
    # When the deployed consumer isolates it (polled with a deadline)
    found = poisoned(stack, mid)
    # Then the poison message has the group id, as SQS's attribute and in its envelope
    assert found, "the tenant's over-limit order never reached the poison queue"
    message, env = found
    assert message["Attributes"]["MessageGroupId"] == "tenant-e2e"
    assert env.group == "tenant-e2e"
