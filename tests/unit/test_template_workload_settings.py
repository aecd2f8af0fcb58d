"""A workload's own consumer settings (workloads.yaml, docs/workloads.md "A workload's own function
settings"): ReservedConcurrency, Environment, SubnetIds with SecurityGroupIds, Layers.

Each is applied to the consumer of a workload whose block sets it and to no other: a workload that sets
none keeps exactly the resources it had (the expanded template compared with and without a second
workload that sets them all, and SAM's translation of both). What CloudFormation cannot check, the rules
below check on workloads.yaml itself: a reservation never below the event source's MaximumConcurrency,
a VPC given whole, variables sluice accepts, layer version ARNs.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from samtranslator.yaml_helper import yaml_parse

from sluice.errors import ConfigurationError
from sluice.workload_environment import VARIABLE, parse
from sluice_local.emulation.language_extensions import expand
from sluice_local.emulation.template import translate
from sluice_local.testing.project import copy_project, examples_only
from tests.unit.test_workloads_doc import passed

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "template.yaml"
WORKLOADS = ROOT / "workloads.yaml"
NETWORK_ACTIONS = [
    "ec2:CreateNetworkInterface",
    "ec2:DescribeNetworkInterfaces",
    "ec2:DeleteNetworkInterface",
    "ec2:AssignPrivateIpAddresses",
    "ec2:UnassignPrivateIpAddresses",
]
EXTRA_LAYER = "arn:aws:lambda:us-east-1:123456789012:layer:carrier-sdk:3"
EVERY_SETTING = f"""    Shipments:
      Code: examples/orders/
      KeyPath: order_id
      ReservedConcurrency: "5"
      SubnetIds: subnet-0123456789abcdef0,subnet-0fedcba9876543210
      SecurityGroupIds: sg-0123456789abcdef0
      Layers: ["{EXTRA_LAYER}"]
      Environment: ["CARRIER_URL=https://carrier.example/rates?from=eu", "GREETING=hello"]
"""

Template = dict[str, Any]


def with_shipments(text: str, block: str = EVERY_SETTING) -> str:
    """workloads.yaml's ``text`` as sluice ships it (the examples alone, whatever a fork lists:
    :func:`examples_only`) with a third workload, Shipments, configured by ``block``."""
    name, _, settings = block.partition("\n")
    assert name.strip() == "Shipments:", "the block configures Shipments"
    return examples_only(text, {"Shipments": settings})


def renamed(resource: Any) -> Any:
    """An Orders resource as the same one of Shipments."""
    return json.loads(json.dumps(resource).replace("Orders", "Shipments"))


def expanded(text: str) -> dict[str, Any]:
    return dict(expand(yaml_parse(text), passed())["Resources"])


@pytest.fixture(scope="module")
def before() -> dict[str, Any]:
    return expanded(examples_only(WORKLOADS.read_text(encoding="utf-8")))


@pytest.fixture(scope="module")
def after() -> dict[str, Any]:
    return expanded(with_shipments(WORKLOADS.read_text(encoding="utf-8")))


def test_given_a_workload_with_every_setting_then_its_consumer_gets_each_and_the_others_nothing(
    before: dict[str, Any], after: dict[str, Any]
) -> None:
    # Then the workloads that set none keep every resource exactly as it was
    assert {lid: after[lid] for lid in before} == before
    # ... and Shipments' consumer has its reservation, its VPC, its layers and its variables
    consumer = after["ShipmentsConsumerFunction"]["Properties"]
    assert consumer["ReservedConcurrentExecutions"] == "5"
    assert consumer["VpcConfig"] == {
        "SubnetIds": {"Fn::Split": [",", "subnet-0123456789abcdef0,subnet-0fedcba9876543210"]},
        "SecurityGroupIds": {"Fn::Split": [",", "sg-0123456789abcdef0"]},
    }
    assert consumer["Layers"] == [EXTRA_LAYER]  # SAM puts the Globals' CommonLayer first (below)
    assert consumer["Environment"]["Variables"][VARIABLE] == {
        "Fn::Join": ["\n", ["CARRIER_URL=https://carrier.example/rates?from=eu", "GREETING=hello"]]
    }
    # ... its role may manage the network interfaces, and the function is created after that grant
    policy = after["ShipmentsConsumerNetworkPolicy"]["Properties"]
    assert policy["Roles"] == [{"Ref": "ShipmentsConsumerRole"}]
    [statement] = policy["PolicyDocument"]["Statement"]
    assert (statement["Effect"], statement["Action"], statement["Resource"]) == (
        "Allow",
        NETWORK_ACTIONS,
        "*",
    )
    assert consumer["Tags"] == {"sluice:network-policy": {"Ref": "ShipmentsConsumerNetworkPolicy"}}
    # ... its event source's cap defaults to its reservation, never above it
    assert after["ShipmentsQueueSource"]["Properties"]["ScalingConfig"] == {"MaximumConcurrency": "5"}
    # ... and every other resource of it is an Orders' one renamed: its redrive chain gets none of them
    settled = {"ShipmentsConsumerFunction", "ShipmentsConsumerNetworkPolicy", "ShipmentsQueueSource"}
    others = sorted(set(after) - set(before) - settled)
    assert {"ShipmentsRedriverFunction", "ShipmentsConsumerRole"} <= set(others)
    for lid in others:
        assert after[lid] == renamed(before[lid.replace("Shipments", "Orders", 1)]), lid


def test_given_a_workload_without_them_then_its_consumer_has_none_of_them(before: dict[str, Any]) -> None:
    for name in ("Orders", "Refunds"):
        consumer = before[f"{name}ConsumerFunction"]["Properties"]
        assert not {"ReservedConcurrentExecutions", "VpcConfig", "Tags"} & set(consumer)
        assert consumer["Layers"] == []  # nothing added to the Globals' CommonLayer
        assert consumer["Environment"]["Variables"][VARIABLE] == {"Fn::Join": ["\n", []]}  # ''
        assert f"{name}ConsumerNetworkPolicy" not in before
        scaling = before[f"{name}QueueSource"]["Properties"]["ScalingConfig"]
        assert scaling == {"MaximumConcurrency": {"Ref": "MaximumConcurrency"}}


def test_given_sams_transform_then_the_extra_layers_come_after_the_common_layer(tmp_path: Path) -> None:
    copy_project(ROOT / "template.yaml", tmp_path)
    text = with_shipments(WORKLOADS.read_text(encoding="utf-8"))
    (tmp_path / "workloads.yaml").write_text(text, encoding="utf-8")
    translated, _ = translate(tmp_path / "template.yaml", {})
    functions = translated.template["Resources"]
    layers = {
        name: functions[f"{name}ConsumerFunction"]["Properties"]["Layers"] for name in ("Orders", "Shipments")
    }
    [common] = layers["Orders"]
    assert common["Ref"].startswith("CommonLayer")
    assert layers["Shipments"] == [common, EXTRA_LAYER]


# --- what CloudFormation cannot check: the rules on workloads.yaml's blocks ---------------------------

LAYER_VERSION_ARN = re.compile(r"^arn:aws[a-z-]*:lambda:[a-z0-9-]+:\d{12}:layer:[A-Za-z0-9_-]+:\d+$")
SUBNET, SECURITY_GROUP = re.compile(r"^subnet-[0-9a-f]{8,17}$"), re.compile(r"^sg-[0-9a-f]{8,17}$")


def _ids(value: object, pattern: re.Pattern[str]) -> bool:
    return isinstance(value, str) and all(pattern.match(part) for part in value.split(","))


def _concurrency_problems(name: str, block: dict[str, Any], stack_maximum: int) -> list[str]:
    reserved = block.get("ReservedConcurrency")
    if reserved is None:
        maximum = int(block.get("MaximumConcurrency", stack_maximum))
        return [] if 2 <= maximum <= 1000 else [f"{name}: MaximumConcurrency {maximum} is outside 2..1000"]
    if not isinstance(reserved, str) or not reserved.isdigit():
        return [f"{name}: ReservedConcurrency must be a quoted whole number, is {reserved!r}"]
    # Lambda's event source polls up to its MaximumConcurrency without counting the reservation: above
    # it, batches are throttled and their receives count towards the dead-letter queue
    maximum = int(block.get("MaximumConcurrency", reserved))
    problems = [] if 2 <= maximum <= 1000 else [f"{name}: MaximumConcurrency {maximum} is outside 2..1000"]
    if int(reserved) < maximum:
        problems.append(f"{name}: ReservedConcurrency {reserved} is below its MaximumConcurrency {maximum}")
    return problems


def _network_problems(name: str, block: dict[str, Any]) -> list[str]:
    if ("SubnetIds" in block) != ("SecurityGroupIds" in block):
        return [f"{name}: SubnetIds and SecurityGroupIds go together (a VPC needs both)"]
    return [
        f"{name}: {key} must be comma-separated {what} ids, is {block[key]!r}"
        for key, pattern, what in (
            ("SubnetIds", SUBNET, "subnet"),
            ("SecurityGroupIds", SECURITY_GROUP, "group"),
        )
        if key in block and not _ids(block[key], pattern)
    ]


def _code_problems(name: str, block: dict[str, Any]) -> list[str]:
    problems = []
    layers = block.get("Layers", [])
    if not isinstance(layers, list) or not all(
        isinstance(a, str) and LAYER_VERSION_ARN.match(a) for a in layers
    ):
        problems.append(f"{name}: Layers must be a list of layer version ARNs, is {layers!r}")
    environment = block.get("Environment", [])
    if not isinstance(environment, list) or not all(
        isinstance(e, str) and "\n" not in e for e in environment
    ):
        return [*problems, f"{name}: Environment must be a list of NAME=value texts (one line each)"]
    try:
        variables = parse("\n".join(environment))
    except ConfigurationError as exc:
        return [*problems, f"{name}: {exc}"]
    taken = sorted(set(variables) & _consumer_variables())
    if taken:  # refused at every cold start in AWS (apply): refused here, before a deploy
        problems.append(f"{name}: Environment sets {', '.join(taken)}, the consumer's own")
    return problems


def _queue_type_problems(name: str, block: dict[str, Any]) -> list[str]:
    """A fifo workload (docs/workloads.md "FIFO workloads"): what SQS and Lambda allow a FIFO queue."""
    kind = block.get("QueueType", "standard")
    if kind not in ("standard", "fifo"):
        return [f"{name}: QueueType must be standard or fifo, is {kind!r}"]
    problems = [
        f'{name}: {key} must be "true" or "false" (quoted), is {block[key]!r}'
        for key in ("ContentBasedDeduplication", "SkipGroupOnError")
        if key in block and block[key] not in ("true", "false")
    ]
    if kind == "standard":
        problems += [
            f"{name}: {key} is a fifo workload's setting (QueueType: fifo)"
            for key in ("ContentBasedDeduplication", "SkipGroupOnError")
            if key in block
        ]
    arn = block.get("QueueArn")
    if isinstance(arn, str) and arn.endswith(".fifo") != (kind == "fifo"):
        problems.append(f"{name}: QueueArn {arn} is {'' if arn.endswith('.fifo') else 'not '}a FIFO queue")
    if kind == "fifo":
        if int(block.get("BatchSize", 10)) > 10:
            problems.append(
                f"{name}: BatchSize {block['BatchSize']} is above 10, Lambda's most for a FIFO queue"
            )
        if "BatchingWindow" in block:
            problems.append(f"{name}: BatchingWindow: Lambda supports no batching window on a FIFO queue")
        if int(block.get("InBatchConcurrency", 1)) != 1:
            problems.append(
                f"{name}: InBatchConcurrency must be 1 on a FIFO queue (its records run in order)"
            )
    return problems


def _consumer_variables() -> set[str]:
    """The names the consumer's environment already has: its own and the Globals'."""
    raw = yaml_parse(WORKLOADS.read_text(encoding="utf-8"))
    body = raw["Resources"]["Fn::ForEach::Workload"][2]
    consumer = body["${Name}ConsumerFunction"]["Properties"]["Environment"]["Variables"]
    shared = raw["Globals"]["Function"]["Environment"]["Variables"]
    return set(consumer) | set(shared)


def check_workload_settings(workloads: dict[str, dict[str, Any]], stack_maximum: int) -> list[str]:
    """The problems of each workload's block (``stack_maximum``: the MaximumConcurrency default)."""
    return [
        problem
        for name, block in workloads.items()
        for problem in (
            *_concurrency_problems(name, block, stack_maximum),
            *_network_problems(name, block),
            *_code_problems(name, block),
            *_queue_type_problems(name, block),
        )
    ]


def _blocks(text: str) -> dict[str, dict[str, Any]]:
    return dict(yaml_parse(text)["Mappings"]["Workloads"])


def _stack_maximum() -> int:
    return int(
        yaml_parse(TEMPLATE.read_text(encoding="utf-8"))["Parameters"]["MaximumConcurrency"]["Default"]
    )


def test_given_workloads_yaml_then_every_workloads_settings_hold() -> None:
    assert check_workload_settings(_blocks(WORKLOADS.read_text(encoding="utf-8")), _stack_maximum()) == []
    shipments = _blocks(with_shipments(WORKLOADS.read_text(encoding="utf-8")))
    assert check_workload_settings(shipments, _stack_maximum()) == []


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (
            {"ReservedConcurrency": "5", "MaximumConcurrency": 10},
            "ReservedConcurrency 5 is below its MaximumConcurrency 10",
        ),
        ({"ReservedConcurrency": "1"}, "MaximumConcurrency 1 is outside 2..1000"),
        ({"ReservedConcurrency": 5}, "ReservedConcurrency must be a quoted whole number"),
        ({"SubnetIds": "subnet-0123456789abcdef0"}, "SubnetIds and SecurityGroupIds go together"),
        ({"SecurityGroupIds": "sg-0123456789abcdef0"}, "SubnetIds and SecurityGroupIds go together"),
        (
            {"SubnetIds": ["subnet-0123456789abcdef0"], "SecurityGroupIds": "sg-0123456789abcdef0"},
            "SubnetIds must be comma-separated subnet ids",
        ),
        ({"QueueType": "FIFO"}, "QueueType must be standard or fifo"),
        ({"ContentBasedDeduplication": "true"}, "is a fifo workload's setting"),
        ({"QueueType": "fifo", "SkipGroupOnError": True}, 'SkipGroupOnError must be "true" or "false"'),
        ({"QueueType": "fifo", "BatchSize": 20}, "BatchSize 20 is above 10"),
        ({"QueueType": "fifo", "BatchingWindow": "5"}, "no batching window on a FIFO queue"),
        ({"QueueType": "fifo", "InBatchConcurrency": 4}, "InBatchConcurrency must be 1 on a FIFO queue"),
        (
            {"Queue": "existing", "QueueArn": "arn:aws:sqs:us-east-1:123456789012:orders.fifo"},
            "is a FIFO queue",
        ),
        (
            {
                "QueueType": "fifo",
                "Queue": "existing",
                "QueueArn": "arn:aws:sqs:us-east-1:123456789012:orders",
            },
            "is not a FIFO queue",
        ),
        (
            {"Layers": "arn:aws:lambda:us-east-1:123456789012:layer:x:1"},
            "Layers must be a list of layer version ARNs",
        ),
        (
            {"Layers": ["arn:aws:lambda:us-east-1:123456789012:layer:x"]},
            "Layers must be a list of layer version ARNs",
        ),
        ({"Environment": ["SLUICE_IDEMPOTENCY_TABLE=mine"]}, "SLUICE_IDEMPOTENCY_TABLE is reserved"),
        ({"Environment": ["POWERTOOLS_SERVICE_NAME=mine"]}, "POWERTOOLS_SERVICE_NAME is reserved"),
        ({"Environment": "GREETING=hello"}, "Environment must be a list of NAME=value texts"),
        ({"Environment": ["LOG_LEVEL=DEBUG"]}, "Environment sets LOG_LEVEL, the consumer's own"),
        ({"Environment": ["LEDGER_TABLE_NAME=x"]}, "Environment sets LEDGER_TABLE_NAME, the consumer's own"),
        ({"Environment": ["PATH=/tmp"]}, "PATH is reserved"),
        ({"Environment": ["TZ=UTC"]}, "TZ is reserved"),
        ({"Environment": [f"BIG={'x' * 2100}"]}, "more than 2048 (Lambda's 4 KB in all)"),
    ],
)
def test_given_a_broken_workload_block_then_the_rule_reports_it(change: dict[str, Any], said: str) -> None:
    blocks = {"Shipments": {"Code": "workloads/shipments/", **change}}
    problems = check_workload_settings(blocks, _stack_maximum())
    assert any(said in problem for problem in problems), problems
