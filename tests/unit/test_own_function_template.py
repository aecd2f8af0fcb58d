"""examples/own-function/template.yaml, the resources snippet docs/library.md points to, holds what the
page says sluice's consumer needs: the idempotency table Powertools writes, an envelope key long enough,
one MaxReceiveCount and one visibility timeout for the queue and the consumer, only SLUICE_* variables
the consumer reads, and a role whose every statement names its resource (X-Ray's aside)."""

from __future__ import annotations

import tomllib
from typing import Any

import boto3
import pytest
from aws_lambda_powertools.utilities.idempotency import DynamoDBPersistenceLayer
from samtranslator.yaml_helper import yaml_parse

import sluice
from sluice.consumer.settings import ConsumerSettings
from sluice.envelope import MIN_KEY_BYTES
from sluice.settings import ENV_PREFIX
from sluice_local.emulation.cloud import ROOT

TEMPLATE = ROOT / "examples" / "own-function" / "template.yaml"


@pytest.fixture(scope="module")
def resources() -> dict[str, Any]:
    return dict(yaml_parse(TEMPLATE.read_text(encoding="utf-8"))["Resources"])


@pytest.fixture(scope="module")
def variables(resources: dict[str, Any]) -> dict[str, Any]:
    return dict(resources["ConsumerFunction"]["Properties"]["Environment"]["Variables"])


def test_the_idempotency_table_is_the_one_powertools_writes(resources):
    layer = DynamoDBPersistenceLayer(
        table_name="t", boto3_client=boto3.client("dynamodb", region_name="us-east-1")
    )
    table = resources["IdempotencyTable"]["Properties"]
    assert table["KeySchema"] == [{"AttributeName": layer.key_attr, "KeyType": "HASH"}]
    assert table["AttributeDefinitions"] == [{"AttributeName": layer.key_attr, "AttributeType": "S"}]
    assert table["TimeToLiveSpecification"] == {"AttributeName": layer.expiry_attr, "Enabled": True}


def test_the_envelope_key_is_long_enough_to_seal(resources):
    generated = resources["EnvelopeKey"]["Properties"]["GenerateSecretString"]
    assert generated["PasswordLength"] >= MIN_KEY_BYTES


def test_the_queue_and_the_consumer_share_one_max_receive_count_one_visibility_and_one_dlq(
    resources, variables
):
    queue = resources["ReadingsQueue"]["Properties"]
    assert queue["RedrivePolicy"]["maxReceiveCount"] == variables["SLUICE_MAX_RECEIVE_COUNT"]
    assert queue["RedrivePolicy"]["deadLetterTargetArn"] == {"Fn::GetAtt": ["ReadingsDeadLetterQueue", "Arn"]}
    assert variables["SLUICE_DEAD_LETTER_QUEUE_URL"] == {"Ref": "ReadingsDeadLetterQueue"}
    assert queue["VisibilityTimeout"] == variables["SLUICE_VISIBILITY_TIMEOUT_SECONDS"]
    assert variables["SLUICE_SOURCE_QUEUE_URL"] == {
        "Fn::GetAtt": ["ReadingsQueue", "Arn"]
    }  # checked at cold start
    [mapping] = resources["ConsumerFunction"]["Properties"]["Events"].values()
    assert mapping["Properties"]["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert mapping["Properties"]["MaximumBatchingWindowInSeconds"] == variables["SLUICE_BATCH_WINDOW_SECONDS"]


def test_the_defaults_pass_the_consumers_cold_start_check():
    parameters = yaml_parse(TEMPLATE.read_text(encoding="utf-8"))["Parameters"]
    default = {name: int(spec["Default"]) for name, spec in parameters.items() if spec["Type"] == "Number"}
    needed = 6 * default["FunctionTimeoutSeconds"] + default["BatchingWindowSeconds"]
    assert default["QueueVisibilityTimeoutSeconds"] >= needed


def test_every_sluice_variable_of_the_function_is_a_consumer_setting(variables):
    settings = {ENV_PREFIX + name.upper() for name in ConsumerSettings.model_fields}
    assert {
        name for name in variables if name.startswith(ENV_PREFIX)
    } <= settings  # a typo is ignored silently


def test_the_function_is_x86_64_and_gets_the_library_from_its_own_package(resources):
    function = resources["ConsumerFunction"]["Properties"]
    assert function["Architectures"] == ["x86_64"]
    assert "Layers" not in function
    requirements = (TEMPLATE.parent / function["CodeUri"] / "requirements.txt").read_text(encoding="utf-8")
    project = tomllib.loads((ROOT / "layers/common/pyproject.toml").read_text(encoding="utf-8"))["project"]
    pinned = [line for line in requirements.splitlines() if line and not line.startswith("#")]
    # the library this repository builds, at its version, and the SDK the handler's Tracer needs
    assert pinned == [f"{project['name']}=={sluice.__version__}", "aws-xray-sdk>=2.12,<3"]


def test_every_statement_of_the_role_names_its_resource_but_x_rays(resources):
    [policy] = resources["ConsumerRole"]["Properties"]["Policies"]
    unscoped = [s["Sid"] for s in policy["PolicyDocument"]["Statement"] if s["Resource"] == "*"]
    assert unscoped == ["WriteTraces"]
