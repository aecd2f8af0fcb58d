"""A follow-up from a processor (``record.later``, docs/delays.md "From a processor") through the deployed
template: the consumer's role, variable and the delay queue's policy as workloads.yaml and
stacks/delays.yaml make them, and the follow-up back on the workload's queue after the delay pipeline
parked it. Also what the delay queue's policy admits: the consumers (the stack's role path) and an outside
producer once listed in ``TrustedSenderArns`` (the parameter override docs/delays.md shows), no one else."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import pytest

from sluice_local.app.fast import FAST
from sluice_local.app.messages import ORDERS, REFUNDS
from sluice_local.emulation.cloud import ROOT, LocalCloud
from sluice_local.testing.project import copy_project, examples_only
from tests.unit.test_delays_doc import trusted_senders
from tests.waiting import wait_for

WORKLOAD = "Shipments"
FOLLOW_UP_SECONDS = 10
"""Well beyond the direct-send threshold below (2 s), even when a loaded machine reaches the request late:
parked in the delay bucket and rehydrated, the path a follow-up of more than 15 minutes takes in AWS."""
ACCOUNT = "123456789012"  # moto's
PIPELINE = {"DirectSendThresholdSeconds": "2", "DelayBucketSeconds": "1"}

SHIPMENTS_APP = '''"""A workload whose processor asks for a shipment's delivery check a few seconds later."""

import json
import os
import time
from typing import Any

import boto3
from aws_lambda_powertools import Logger, Metrics

from sluice.consumer import Consumer, SluiceRecord

ledger, table = boto3.client("dynamodb"), os.environ["LEDGER_TABLE_NAME"]


def note(record: SluiceRecord, step: str, at: float | None = None) -> None:
    item = {"effect_key": f"{record.data['shipment_id']}#{step}", "execution_id": record.message_id,
            "traceparent": record.envelope.traceparent or "", "at": repr(time.time() if at is None else at)}
    ledger.put_item(TableName=table, Item={key: {"S": value} for key, value in item.items()})


def process(record: SluiceRecord) -> None:
    if record.data.get("step") == "check-delivery":  # the follow-up, back on this queue
        note(record, "checked")
        return
    check = json.dumps({"shipment_id": record.data["shipment_id"], "step": "check-delivery"})
    asked = time.time()  # when the follow-up is asked for (its bookkeeping and this note take a while)
    record.once("schedule-check", record.later, check, delay_seconds=record.data["check_after_seconds"])
    note(record, "dispatched", asked)


consumer = Consumer.from_env(process, logger=Logger(), metrics_sink=Metrics())


def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return consumer.handle(event, context)
'''


def arn_like(pattern: str, arn: str) -> bool:
    """IAM's ArnLike: the six colon-separated parts matched one by one, ``*`` and ``?`` wildcards."""
    parts, wanted = arn.split(":", 5), pattern.split(":", 5)
    return len(parts) == len(wanted) == 6 and all(
        fnmatchcase(a, p) for a, p in zip(parts, wanted, strict=True)
    )


def admitted(policy: dict[str, Any], principal: str) -> bool:
    """Whether the delay queue's policy lets ``principal`` send: no Deny of SendMessage applies to it (its
    ArnNotLike on aws:PrincipalArn names a pattern the principal's ARN matches)."""
    for statement in policy["Statement"]:
        if statement["Effect"] != "Deny" or statement["Action"] != "sqs:SendMessage":
            continue
        patterns = statement["Condition"]["ArnNotLike"]["aws:PrincipalArn"]
        if not any(arn_like(p, principal) for p in ([patterns] if isinstance(patterns, str) else patterns)):
            return False
    return True


def delay_queue_policy(cloud: LocalCloud) -> dict[str, Any]:
    """The delay queue's policy as deployed: its SQS attribute, or where the local runtime has none (moto's
    CloudFormation creates no AWS::SQS::QueuePolicy, docs/local.md) the stack's resource resolved with the
    stack's parameters and conditions, as CloudFormation would hand it to SQS."""
    found = cloud.client("sqs").get_queue_attributes(
        QueueUrl=cloud.outputs["DelayQueueUrl"], AttributeNames=["Policy"]
    )
    if "Policy" in found.get("Attributes", {}):
        return dict(json.loads(found["Attributes"]["Policy"]))
    from moto.backends import get_backend  # noqa: PLC0415 - only where the runtime did not create it
    from moto.cloudformation.parsing import clean_json  # noqa: PLC0415

    backend = get_backend("cloudformation")[ACCOUNT][cloud.region]
    [stack] = [s for s in backend.stacks.values() if s.name == cloud.stack_name]
    resource = stack.template_dict["Resources"]["DelayQueuePolicy"]
    return dict(clean_json(resource["Properties"], stack.resource_map)["PolicyDocument"])


@pytest.fixture
def cloud(tmp_path: Path) -> Iterator[LocalCloud]:
    """A stack whose one workload, Shipments, asks for follow-ups; the trusted sender docs/delays.md lists."""
    copy_project(ROOT / "template.yaml", tmp_path)
    (tmp_path / "shipments").mkdir()
    (tmp_path / "shipments" / "app.py").write_text(SHIPMENTS_APP, encoding="utf-8")
    text = examples_only((ROOT / "workloads.yaml").read_text(encoding="utf-8"))  # whatever a fork lists
    block = f"  Workloads:\n    {WORKLOAD}:\n      Code: shipments/\n      ExampleLedger: [Ledger]\n"
    configured = text.replace(f"&workloads [{ORDERS}, {REFUNDS}]", f"&workloads [{WORKLOAD}]", 1)
    configured = configured.replace("  Workloads:\n", block, 1)
    assert configured.count(WORKLOAD) == 2, "workloads.yaml no longer lists its workloads the expected way"
    (tmp_path / "workloads.yaml").write_text(configured, encoding="utf-8")
    parameters = {**FAST, **PIPELINE, "TrustedSenderArns": ",".join(trusted_senders())}
    running = LocalCloud(
        template=tmp_path / "template.yaml",
        parameters=parameters,
        stack_name=f"follow-up-{uuid.uuid4().hex[:6]}",
    ).start()
    try:
        yield running
    finally:
        running.stop()


def test_a_processors_follow_up_is_parked_and_comes_back_to_its_queue(cloud: LocalCloud) -> None:
    outputs = cloud.outputs
    # Given the workload's consumer as deployed: the delay queue's URL in its settings, a role the delay
    # queue's policy admits (the stack's role path), as it admits the producer listed in TrustedSenderArns
    # and refuses an unlisted one
    config = cloud.client("lambda").get_function_configuration(
        FunctionName=outputs[f"{WORKLOAD}ConsumerFunctionName"]
    )
    assert config["Environment"]["Variables"]["SLUICE_DELAY_QUEUE_URL"] == outputs["DelayQueueUrl"]
    policy = delay_queue_policy(cloud)
    assert f":role/{cloud.stack_name}/" in config["Role"], config["Role"]
    assert admitted(policy, config["Role"]), (config["Role"], policy)
    for producer in trusted_senders():
        assert admitted(policy, producer), (producer, policy)
    assert not admitted(policy, "arn:aws:iam::123456789012:role/not-listed"), policy

    # When a shipment asks for its delivery check a few seconds later
    body = {"shipment_id": "s-1", "check_after_seconds": FOLLOW_UP_SECONDS}
    cloud.client("sqs").send_message(QueueUrl=outputs[f"{WORKLOAD}QueueUrl"], MessageBody=json.dumps(body))

    def noted() -> dict[str, dict[str, str]]:
        items = cloud.client("dynamodb").scan(TableName=outputs["LedgerTableName"])["Items"]
        return {item["effect_key"]["S"]: {k: v["S"] for k, v in item.items()} for item in items}

    # Then the check comes back to the workload's queue and runs, once, on the shipment's trace, no sooner
    # than asked; parked on the way (its bucket's execution of the delay state machine)
    steps = wait_for(lambda: "s-1#checked" in noted() and noted(), "the follow-up checked", timeout=60)
    assert set(steps) == {"s-1#dispatched", "s-1#checked"}, steps
    dispatched, checked = steps["s-1#dispatched"], steps["s-1#checked"]
    assert checked["traceparent"].split("-")[1] == dispatched["traceparent"].split("-")[1]
    assert checked["execution_id"] != dispatched["execution_id"]  # a new message, not the same one again
    assert float(checked["at"]) - float(dispatched["at"]) >= FOLLOW_UP_SECONDS - 1
    executions = cloud.client("stepfunctions").list_executions(
        stateMachineArn=outputs["DelayStateMachineArn"]
    )
    assert executions["executions"], "the follow-up was not parked"
