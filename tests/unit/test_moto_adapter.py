"""The local runtime's moto adapter still fits the installed moto: written for moto 5.2.5.

Every monkeypatch and moto internal the local runtime uses lives in ``sluice_local/emulation/moto_adapter/``.
When moto changes (an upgrade, a changed signature, a fixed gap), these tests fail first and say what
changed, instead of a scenario failing somewhere downstream.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from sluice_local.emulation import moto_adapter
from sluice_local.emulation.iam import enforce as iam_enforce

ROOT = Path(__file__).resolve().parents[2]
WRITTEN_FOR = "5.2.5"
ACCOUNT = "123456789012"
REGION = "us-east-1"


def pinned_moto() -> str:
    dev = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["dev"]
    [pin] = [re.sub(r"^moto(\[[^]]*\])?==", "", d) for d in dev if re.match(r"^moto(\[[^]]*\])?==", d)]
    return pin


def test_the_adapter_is_written_for_the_installed_and_pinned_moto():
    assert moto_adapter.WRITTEN_FOR == WRITTEN_FOR
    assert pinned_moto() == WRITTEN_FOR, (
        f"pyproject.toml pins moto {pinned_moto()}, sluice_local.emulation.moto_adapter was written for moto "
        f"{WRITTEN_FOR}: re-check the adapter against the new version (this file says how), then update "
        "WRITTEN_FOR here and in the adapter"
    )
    assert moto_adapter.installed_version() == WRITTEN_FOR, (
        f"moto {moto_adapter.installed_version()} is installed, sluice_local.emulation.moto_adapter was "
        "written for "
        f"moto {WRITTEN_FOR}: run `make venv` (pyproject.toml pins it), or re-check the adapter"
    )


@pytest.mark.parametrize("attribute", [*moto_adapter.PATCHED, *moto_adapter.USED], ids=str)
def test_every_moto_attribute_the_runtime_uses_is_there_with_the_expected_parameters(attribute):
    problem = moto_adapter.attribute_problem(attribute)
    assert problem is None, f"{problem} — update sluice_local.emulation.moto_adapter for this moto version"


def test_the_settings_the_runtime_changes_exist_in_moto():
    assert moto_adapter.problems() == []


@pytest.mark.parametrize("attribute", moto_adapter.PATCHED, ids=str)
def test_every_replacement_keeps_the_parameters_of_the_method_it_replaces(attribute):
    undo = {
        moto_adapter.LAMBDA_FUNCTION_INVOKE: lambda: moto_adapter.install_invoke(lambda *_: b""),
        moto_adapter.LAMBDA_BACKEND_INVOKE: lambda: moto_adapter.install_invoke(lambda *_: b""),
        moto_adapter.RULE_SEND_TO_TARGETS: lambda: moto_adapter.install_event_delivery(print, print),
        moto_adapter.AWS_SDK_PARAMETERS: lambda: moto_adapter.install_aws_sdk_casing(REGION),
        moto_adapter.AWS_SDK_RESPONSE: lambda: moto_adapter.install_aws_sdk_casing(REGION),
        moto_adapter.SQS_SEND_MESSAGE: moto_adapter.install_sqs_rules,
        moto_adapter.SQS_SEND_MESSAGE_BATCH: moto_adapter.install_sqs_rules,
        moto_adapter.SQS_ADD_MESSAGE: moto_adapter.install_dead_letter_sources,
        moto_adapter.SQS_DELETE_MESSAGE: moto_adapter.install_sqs_locks,
        moto_adapter.SQS_RECEIVE_MESSAGE: moto_adapter.install_dead_letter_sources,
        moto_adapter.SQS_RECEIVE_RESPONSE: moto_adapter.install_dead_letter_sources,
        moto_adapter.SFN_START_EXECUTION: moto_adapter.install_execution_names,
        moto_adapter.CFN_RESOURCE_CLASS: moto_adapter.install_cloudformation_secrets,
        moto_adapter.MODULE_LIST: moto_adapter.install_module_list_once,
        moto_adapter.CFN_PARSE_TEMPLATE: moto_adapter.install_parse_once,
        moto_adapter.ASL_PARSE: moto_adapter.install_parse_once,
        moto_adapter.ROLE_FROM_CFN: moto_adapter.install_role_managed_policies,
        moto_adapter.S3_BUCKET_PERMISSION: lambda: iam_enforce.install(iam_enforce.Enforcer("123456789012")),
        moto_adapter.SERVER_APP: lambda: iam_enforce.install(iam_enforce.Enforcer("123456789012")),
    }[attribute]()
    try:
        assert moto_adapter.attribute_problem(attribute) is None
    finally:
        undo()


def test_installing_then_undoing_every_patch_leaves_moto_exactly_as_it_was():
    def state():
        return {str(a): vars(a.owner_class()).get(a.name) for a in moto_adapter.PATCHED}

    before = state()
    undos = [
        moto_adapter.configure(),
        moto_adapter.install_invoke(lambda *_: b""),
        moto_adapter.install_event_delivery(print, print),
        moto_adapter.install_aws_sdk_casing(REGION),
        moto_adapter.install_sqs_rules(),
        moto_adapter.install_dead_letter_sources(),
        moto_adapter.install_sqs_locks(),
        moto_adapter.install_execution_names(),
        moto_adapter.install_cloudformation_secrets(),
        moto_adapter.install_cloudformation_policies(),
        moto_adapter.install_role_managed_policies(),
        moto_adapter.install_module_list_once(),
        moto_adapter.install_parse_once(),
        iam_enforce.install(iam_enforce.Enforcer("123456789012")),  # the server hook, S3's own check off
    ]
    assert all(state()[name] is not value for name, value in before.items())
    for undo in reversed(undos):
        undo()
    assert state() == before


def test_moto_still_lacks_step_functions_casing_for_aws_sdk_sfn_tasks():
    # The casing patch is needed while moto's aws-sdk task uses the generic normalisers, which pass
    # Step Functions' PascalCase parameters (StateMachineArn) to boto3 unchanged.
    task_class = moto_adapter.AWS_SDK_PARAMETERS.owner_class()
    own = {name for name in ("_normalise_parameters", "_normalise_response") if name in vars(task_class)}
    assert not own, (
        f"moto's StateTaskServiceAwsSdk now defines {sorted(own)} itself: check whether it names aws-sdk:sfn "
        "fields as Step Functions does, and drop install_aws_sdk_casing if so"
    )


def test_the_backend_reads_and_writes_work_on_moto_backends():
    with mock_aws():
        sqs = boto3.client("sqs", region_name=REGION)
        url = sqs.create_queue(QueueName="adapter-probe")["QueueUrl"]
        sqs.send_message(QueueUrl=url, MessageBody="one")
        events = boto3.client("events", region_name=REGION)
        events.put_rule(Name="adapter-probe", ScheduleExpression="rate(5 minutes)")

        visible = moto_adapter.queue_metric(
            ACCOUNT, REGION, "adapter-probe", "ApproximateNumberOfMessagesVisible"
        )
        age = moto_adapter.queue_metric(ACCOUNT, REGION, "adapter-probe", "ApproximateAgeOfOldestMessage")
        moto_adapter.detach_sqs_invoke(ACCOUNT, REGION, "adapter-probe")
        rules = [rule.name for rule in moto_adapter.event_rules(ACCOUNT, REGION)]

        assert visible == 1.0
        assert age is not None
        assert age >= 0.0
        assert "adapter-probe" in rules
        moto_adapter.reset()
        assert sqs.list_queues().get("QueueUrls", []) == []


def test_state_machines_are_handed_to_the_executing_backend_and_invalid_ones_refused():
    definition = {"StartAt": "Done", "States": {"Done": {"Type": "Succeed"}}}
    with mock_aws():
        sfn = boto3.client("stepfunctions", region_name=REGION)
        role = f"arn:aws:iam::{ACCOUNT}:role/probe"
        sfn.create_state_machine(name="good", definition=json.dumps(definition), roleArn=role)
        moto_adapter.hand_over_state_machines(ACCOUNT, REGION)
        from moto.stepfunctions.parser.models import stepfunctions_parser_backends  # noqa: PLC0415

        names = [sm.name for sm in stepfunctions_parser_backends[ACCOUNT][REGION].state_machines]
        assert names == ["good"]

        sfn.create_state_machine(name="bad", definition='{"StartAt": "Nowhere", "States": {}}', roleArn=role)
        with pytest.raises(ValueError, match="state machine bad: invalid definition"):
            moto_adapter.hand_over_state_machines(ACCOUNT, REGION)


@pytest.mark.usefixtures("lenient_moto")
def test_moto_still_accepts_what_sqs_refuses():
    # install_sqs_rules is needed while moto counts characters, not bytes, and ignores attributes.
    with mock_aws():
        sqs = boto3.client("sqs", region_name=REGION)
        url = sqs.create_queue(QueueName="lenient-probe")["QueueUrl"]
        eleven: dict[str, Any] = {f"a{i}": {"DataType": "String", "StringValue": "v"} for i in range(11)}
        sqs.send_message(QueueUrl=url, MessageBody="é" * (600 * 1024), MessageAttributes=eleven)
        sqs.send_message(QueueUrl=url, MessageBody="nul \x00")
    # If this starts raising, moto enforces SQS's rules itself: check they match, then drop the patch.


def test_moto_still_names_an_unnamed_execution_none():
    definition = {"StartAt": "Done", "States": {"Done": {"Type": "Succeed"}}}
    with mock_aws():
        moto_adapter_settings = moto_adapter.configure()
        try:
            sfn = boto3.client("stepfunctions", region_name=REGION)
            arn = sfn.create_state_machine(
                name="unnamed-probe",
                definition=json.dumps(definition),
                roleArn=f"arn:aws:iam::{ACCOUNT}:role/x",
            )["stateMachineArn"]
            name = sfn.start_execution(stateMachineArn=arn)["executionArn"].rsplit(":", 1)[-1]
        finally:
            moto_adapter_settings()
    assert name == "None", f"moto now names unnamed executions {name!r}: drop install_execution_names"


SECRET_TEMPLATE = {
    "Resources": {
        "Key": {
            "Type": "AWS::SecretsManager::Secret",
            "Properties": {
                "Description": "envelope key",
                "GenerateSecretString": {"PasswordLength": 64, "ExcludePunctuation": True},
            },
        }
    },
    "Outputs": {"KeyArn": {"Value": {"Ref": "Key"}}},
}


def _secret_stack() -> dict[str, str]:
    cfn = boto3.client("cloudformation", region_name=REGION)
    cfn.create_stack(StackName="secret-probe", TemplateBody=json.dumps(SECRET_TEMPLATE))
    [stack] = cfn.describe_stacks(StackName="secret-probe")["Stacks"]
    return {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}


def test_given_a_generated_secret_in_a_template_when_deployed_then_it_exists_as_cloudformation_makes_it():
    with mock_aws():
        undo = moto_adapter.install_cloudformation_secrets()
        try:
            arn = _secret_stack()["KeyArn"]
            value = boto3.client("secretsmanager", region_name=REGION).get_secret_value(SecretId=arn)
        finally:
            undo()
    assert arn.startswith(f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:")
    assert re.fullmatch(r"[A-Za-z0-9]{64}", value["SecretString"])


def test_moto_still_skips_secrets_in_cloudformation():
    with mock_aws():
        outputs = _secret_stack()
    # If this fails, moto creates the secret itself: check Ref and GenerateSecretString, drop the patch.
    assert not str(outputs.get("KeyArn", "")).startswith("arn:aws:secretsmanager:")


def test_given_the_module_list_listed_once_then_moto_sees_the_same_backends() -> None:
    from moto import backends  # noqa: PLC0415

    listed = list(backends.list_of_moto_modules())
    undo = moto_adapter.install_module_list_once()
    try:
        assert list(backends.list_of_moto_modules()) == listed
        assert {"sqs", "stepfunctions", "awslambda"} <= set(listed)
    finally:
        undo()


def test_given_a_json_template_body_then_moto_reads_the_same_template_with_and_without_the_patch() -> None:
    owner = moto_adapter.CFN_PARSE_TEMPLATE.owner_class()
    as_json = json.dumps({"Resources": {"Q": {"Type": "AWS::SQS::Queue", "Properties": {"DelaySeconds": 5}}}})
    as_yaml = "Resources:\n  Q:\n    Type: AWS::SQS::Queue\n    Properties: {DelaySeconds: !Ref D}\n"
    before = owner.parse_template(as_json), owner.parse_template(as_yaml)
    undo = moto_adapter.install_parse_once()
    try:
        assert (owner.parse_template(as_json), owner.parse_template(as_yaml)) == before
    finally:
        undo()


def test_given_a_definition_parsed_twice_then_it_is_parsed_once_with_every_heap_key_drawn() -> None:
    owner = moto_adapter.ASL_PARSE.owner_class()
    from moto.stepfunctions.parser.asl.component.eval_component import EvalComponent  # noqa: PLC0415

    definition = (ROOT / "statemachines" / "redrive.asl.json").read_text()
    undo = moto_adapter.install_parse_once()
    try:
        first, _ = owner.parse(definition)
        second, _ = owner.parse(definition)
        assert first is second
        undrawn = [
            type(c).__name__
            for c in _components(first)
            if isinstance(c, EvalComponent) and c._EvalComponent__heap_key is None  # type: ignore[attr-defined]
        ]
        assert not undrawn
        for _ in range(2):  # a definition that does not parse is refused each time, not remembered
            with pytest.raises(Exception, match="ASLParserException"):
                owner.parse('{"StartAt": "A", "States": {"A": }}')
    finally:
        undo()
    assert owner.parse(definition)[0] is not first  # undone: moto parses afresh again


def _components(root: Any) -> list[Any]:
    found, stack, seen = [], [root], set()
    while stack:
        item = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        found.append(item)
        if hasattr(item, "__dict__") and type(item).__module__.startswith("moto.stepfunctions"):
            stack.extend(vars(item).values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
    return found
