"""Three workloads in one stack, deployed locally from template.yaml plus one block of configuration in
workloads.yaml:
``Orders`` and ``Refunds`` on queues the stack creates (different models, the same id values), and
``Invoices`` on a queue created outside the stack (docs/workloads.md, "Bringing an existing queue")."""

from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sluice_local.app.fast import FAST
from sluice_local.app.messages import ORDERS, REFUNDS, claim_check, order
from sluice_local.app.observer import Stack, envelope_of
from sluice_local.emulation.cloud import ROOT, LocalCloud
from sluice_local.emulation.existing import ExistingQueue
from sluice_local.testing import configure_existing_queue
from sluice_local.testing.project import copy_project, examples_only
from tests.waiting import wait_for

INVOICES = "Invoices"
SHORT_VISIBILITY = 5
NEEDED_VISIBILITY = 6 * int(FAST["ConsumerTimeoutSeconds"])  # + a batching window of 0


def three_workloads(tmp: Path, existing_arn: str) -> Path:
    """The project with a third workload, Invoices, on the existing queue ``existing_arn`` (its code the
    orders example's): the block docs/workloads.md shows in workloads.yaml, and its name in its list."""
    block = "      Code: examples/orders/\n      KeyPath: order_id\n      ExampleLedger: [Ledger]\n"
    block += f"      Queue: existing\n      QueueArn: {existing_arn}\n"
    text = (ROOT / "workloads.yaml").read_text(encoding="utf-8")
    configured = examples_only(text, {INVOICES: block})  # the examples and Invoices, whatever a fork lists
    copy_project(ROOT / "template.yaml", tmp, workloads=configured)
    return tmp / "template.yaml"


def start(tmp_path: Path, **parameters: str) -> tuple[LocalCloud, ExistingQueue]:
    suffix = uuid.uuid4().hex[:6]
    existing = ExistingQueue(f"invoices-outside-{suffix}", SHORT_VISIBILITY)
    arn = f"arn:aws:sqs:us-east-1:123456789012:{existing.name}"
    cloud = LocalCloud(
        template=three_workloads(tmp_path, arn),
        parameters={**FAST, **parameters},
        stack_name=f"three-{suffix}",
        attachments=[existing],
    )
    return cloud.start(), existing


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[tuple[LocalCloud, ExistingQueue]]:
    cloud, existing = start(tmp_path)
    try:
        yield cloud, existing
    finally:
        cloud.stop()


def test_three_workloads_with_the_same_ids_and_an_existing_queue_too_short_to_consume(stack) -> None:
    cloud, existing = stack
    sqs, ledger = cloud.client("sqs"), cloud.outputs["LedgerTableName"]
    # Given one id value, o-1, sent to each workload: an order, a refund, an invoice (an order body)
    sqs.send_message(QueueUrl=cloud.outputs[f"{ORDERS}QueueUrl"], MessageBody=json.dumps(order("o-1")))
    refund = {"refund_id": "o-1", "order_id": "o-1", "amount_cents": 500, "currency": "EUR"}
    sqs.send_message(QueueUrl=cloud.outputs[f"{REFUNDS}QueueUrl"], MessageBody=json.dumps(refund))
    sqs.send_message(QueueUrl=existing.url, MessageBody=json.dumps(order("o-1")))

    def effects() -> dict[str, int]:
        items = cloud.client("dynamodb").scan(TableName=ledger)["Items"]
        keys = [item["effect_key"]["S"] for item in items]
        return {key: keys.count(key) for key in keys}

    # Then the two created queues' workloads each process theirs: no key of one meets the other's
    wait_for(
        lambda: effects().get("refund:o-1#repay") == 1 and effects().get("o-1#notify") == 1, "o-1 settled"
    )
    # ... while the existing queue's consumer refuses to start, naming the queue and both values
    response = cloud.client("lambda").invoke(
        FunctionName=cloud.outputs[f"{INVOICES}ConsumerFunctionName"], Payload=json.dumps({"Records": []})
    )
    error = json.loads(response["Payload"].read())
    assert response.get("FunctionError") == "Unhandled"
    assert error["errorType"] == "ConfigurationError"
    named = rf"source queue \S*/{existing.name}: VisibilityTimeout is {SHORT_VISIBILITY} s"
    assert re.search(named, error["errorMessage"]), error["errorMessage"]
    assert f"needs at least {NEEDED_VISIBILITY} s" in error["errorMessage"]
    assert "has no redrive policy" in error["errorMessage"]
    # ... and the invoice waits in its queue, neither processed nor lost
    assert effects().get("o-1#charge") == 1

    def held() -> int:
        names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
        found = sqs.get_queue_attributes(QueueUrl=existing.url, AttributeNames=names)["Attributes"]
        return sum(int(found[n]) for n in names)

    assert held() == 1
    # When the team sets what the stack cannot (docs/workloads.md): the visibility and the redrive policy
    policy = {
        "deadLetterTargetArn": cloud.outputs[f"{INVOICES}DeadLetterQueueArn"],
        "maxReceiveCount": FAST["MaxReceiveCount"],
    }
    sqs.set_queue_attributes(
        QueueUrl=existing.url,
        Attributes={"VisibilityTimeout": str(NEEDED_VISIBILITY), "RedrivePolicy": json.dumps(policy)},
    )
    # Then the next cold start runs, and the invoice o-1 is charged as its own: a second charge of o-1,
    # by another workload, not a duplicate of the order's
    wait_for(lambda: effects().get("o-1#charge") == 2, f"the invoice charged; {effects()}", timeout=120)
    wait_for(lambda: held() == 0, "the invoice deleted from its queue")
    assert effects() == {"o-1#charge": 2, "o-1#notify": 2, "refund:o-1#repay": 1}


def fix_existing_queue(cloud: LocalCloud, existing: ExistingQueue) -> None:
    """What docs/workloads.md asks of a team once the stack is deployed (the test kit's way)."""
    assert cloud.outputs[f"{INVOICES}QueueArn"].endswith(f":{existing.name}")
    configure_existing_queue(cloud.client, cloud.outputs, INVOICES)
    attributes = cloud.client("sqs").get_queue_attributes(QueueUrl=existing.url, AttributeNames=["All"])
    assert attributes["Attributes"]["VisibilityTimeout"] == str(NEEDED_VISIBILITY)


def alarms_in_alarm(cloud: LocalCloud, workload: str) -> set[str]:
    assert cloud.alarms is not None
    prefix = f"{cloud.stack_name}-{workload}-"
    return {
        alarm.name.removeprefix(prefix)
        for alarm in cloud.alarms.alarms
        if alarm.name.startswith(prefix) and any(new == "ALARM" for _, new in alarm.transitions)
    }


@pytest.mark.parametrize("mode", ["lambda", "stepfunctions"])
def test_each_workloads_failures_go_through_its_own_dlq_and_redrive_back_to_its_own_queue(
    tmp_path, mode, caplog
) -> None:
    # Given three workloads, the existing queue set up as the docs say, in this RedriveMode, each redrive
    # started by its workload's DLQ alarm alone (no backstop run empties a DLQ before the alarm sees it);
    # with the Lambda redriver every backoff (3-4 s) beyond the direct-send threshold (2 s): the created
    # queue's through the delay pipeline, the existing queue's (not in ExtraDelayTargetArns) cut to 2 s
    longer = {"DirectSendThresholdSeconds": "2", "DelayBucketSeconds": "1", "RedriveFloorSeconds": "3"}
    longer = longer if mode == "lambda" else {}
    cloud, existing = start(tmp_path, RedriveMode=mode, RedriveBackstopRate="rate(1 hour)", **longer)
    try:
        fix_existing_queue(cloud, existing)
        sqs, outputs = cloud.client("sqs"), cloud.outputs
        bucket, prefix = outputs["ClaimCheckBucketName"], outputs["ClaimCheckPrefix"]
        # When a refund (and, with the Lambda redriver, an invoice) point at payloads that never appear
        # (they fail on every receive) while an order with the same id is fine; with the state machine the
        # refund fails alone, so the existing queue's workload is a healthy one beside it
        failing = {
            REFUNDS: sqs.send_message(
                QueueUrl=outputs[f"{REFUNDS}QueueUrl"], MessageBody=claim_check(bucket, f"{prefix}never-r")
            )["MessageId"],
        }
        if mode == "lambda":
            failing[INVOICES] = sqs.send_message(
                QueueUrl=existing.url, MessageBody=claim_check(bucket, f"{prefix}never-i")
            )["MessageId"]
        healthy = [name for name in (ORDERS, REFUNDS, INVOICES) if name not in failing]
        sqs.send_message(QueueUrl=outputs[f"{ORDERS}QueueUrl"], MessageBody=json.dumps(order("o-7")))
        sources = {REFUNDS: outputs[f"{REFUNDS}QueueArn"], INVOICES: outputs[f"{INVOICES}QueueArn"]}
        seen = Stack(
            cloud.endpoint, outputs, tmp_path / "no-log", cloud.region
        )  # its queues, seen from outside

        def isolated() -> dict[str, Any]:
            found: dict[str, Any] = {}
            for message in seen.every_message("PoisonPillQueueUrl"):
                envelope = envelope_of(message)
                for workload, message_id in failing.items():
                    if envelope is not None and envelope.origin_id == message_id:
                        found[workload] = envelope
            return found

        # Then each is dead-lettered to its own DLQ, re-driven to its own queue until its redrives run
        # out, and isolated with its own queue as its source (an existing queue's too)
        ended = wait_for(lambda: len(isolated()) == len(failing) and isolated(), "all isolated", timeout=240)
        for workload, envelope in ended.items():
            assert envelope.source == sources[workload], (workload, envelope.source)
            assert envelope.attempts == int(FAST["RedriveMaxAttempts"]) + 1, (workload, envelope.attempts)
        # ... each failing workload's DLQ alarm moved, and none of the healthy workload's alarms did
        wait_for(
            lambda: all("dlq-depth" in alarms_in_alarm(cloud, name) for name in failing),
            "each failing workload's dlq-depth alarm in ALARM",
        )
        for name in healthy:
            assert alarms_in_alarm(cloud, name) == set(), name
        if mode == "lambda":  # the created queue's backoffs went through the delay pipeline, the other's not
            redriven = [r for r in caplog.records if r.getMessage() == "message re-driven"]
            reasons = {(r.name, str(getattr(r, "reason", ""))) for r in redriven}
            assert any("delay pipeline" in why for name, why in reasons if name.endswith(REFUNDS)), reasons
            cut = [why for name, why in reasons if name.endswith(INVOICES)]
            assert cut, reasons
            assert all("ExtraDelayTargetArns" in why for why in cut), cut
        charged = cloud.client("dynamodb").scan(TableName=outputs["LedgerTableName"])["Items"]
        assert {item["effect_key"]["S"] for item in charged} >= {"o-7#charge", "o-7#notify"}
    finally:
        cloud.stop()


GREETER_APP = '''"""A workload's consumer that answers with the variable its block's Environment gives it."""

import os
from typing import Any

from aws_lambda_powertools import Logger, Metrics

from sluice.consumer import Consumer

consumer = Consumer.from_env(lambda record: None, logger=Logger(), metrics_sink=Metrics())
GREETING = os.environ["GREETING"]  # the workload's Environment, put there by Consumer.from_env


def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    if event.get("Records"):  # from its queue
        return consumer.handle(event, context)
    return {"greeting": GREETING}  # asked directly
'''


def test_a_workloads_own_function_settings_reach_its_consumer(tmp_path, caplog) -> None:
    # Given a project whose one workload, Greeter, sets a variable for its code, a reservation, a VPC
    # and an extra layer (docs/workloads.md, "A workload's own function settings")
    copy_project(ROOT / "template.yaml", tmp_path)
    (tmp_path / "greeter").mkdir()
    (tmp_path / "greeter" / "app.py").write_text(GREETER_APP, encoding="utf-8")
    text = examples_only((ROOT / "workloads.yaml").read_text(encoding="utf-8"))  # whatever a fork lists
    layer = "arn:aws:lambda:us-east-1:123456789012:layer:carrier-sdk:3"
    block = (
        '  Workloads:\n    Greeter:\n      Code: greeter/\n      ReservedConcurrency: "3"\n'
        "      SubnetIds: subnet-0123456789abcdef0\n      SecurityGroupIds: sg-0123456789abcdef0\n"
        f'      Layers: ["{layer}"]\n      Environment: ["GREETING=hello=world"]\n'
    )
    configured = text.replace(f"&workloads [{ORDERS}, {REFUNDS}]", "&workloads [Greeter]", 1)
    configured = configured.replace("  Workloads:\n", block, 1)
    assert configured.count("Greeter") == 2, "workloads.yaml no longer lists its workloads the expected way"
    (tmp_path / "workloads.yaml").write_text(configured, encoding="utf-8")
    cloud = LocalCloud(
        template=tmp_path / "template.yaml",
        parameters=dict(FAST),
        stack_name=f"greeter-{uuid.uuid4().hex[:6]}",
    )
    with caplog.at_level("WARNING", logger="sluice_local"):
        cloud.start()
    try:
        lam, name = cloud.client("lambda"), cloud.outputs["GreeterConsumerFunctionName"]
        # When its consumer is invoked
        response = lam.invoke(FunctionName=name, Payload=json.dumps({}))
        # Then its code read the variable at cold start, and the variable left with the cold start (it never
        # reaches this process's other functions; docs/local.md: not there in later invocations either)
        assert json.loads(response["Payload"].read()) == {"greeting": "hello=world"}
        assert "GREETING" not in os.environ
        # ... the reservation is the function's, and its event source's cap defaults to it
        assert lam.get_function_concurrency(FunctionName=name)["ReservedConcurrentExecutions"] == 3
        arn = cloud.outputs["GreeterConsumerFunctionArn"]
        [mapping] = [
            m for m in lam.list_event_source_mappings()["EventSourceMappings"] if m["FunctionArn"] == arn
        ]
        assert mapping["ScalingConfig"] == {"MaximumConcurrency": 3}
        # ... the VPC is on the function (not emulated), the layer not here is left out, each said so (the
        # function runs with the stack's own layers on its path, as every local function does)
        config = lam.get_function_configuration(FunctionName=name)
        assert config["VpcConfig"]["SubnetIds"] == ["subnet-0123456789abcdef0"]
        said = [r.getMessage() for r in caplog.records]
        assert f"GreeterConsumerFunction: layer {layer} is not available locally: left out" in said
        assert "GreeterConsumerFunction: VpcConfig is not emulated: it runs on this machine's network" in said
    finally:
        cloud.stop()
