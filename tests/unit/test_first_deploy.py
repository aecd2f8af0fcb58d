"""A first deploy that works (scripts/first_deploy.py, `make deploy`): every parameter's default is valid as
CloudFormation checks it, the first deploy asks only what has no safe default and checks each answer before
sam runs, the command it builds is read by sam as meant, and samconfig.toml deploys unguided in the AWS
configuration's region. Nothing here calls AWS (Given / When / Then)."""

from __future__ import annotations

import io
import shlex
import tomllib
from pathlib import Path
from typing import Any

import pytest
from samcli.cli.types import CfnParameterOverridesType

from scripts import first_deploy
from scripts.first_deploy import (
    ASKED,
    Answers,
    Destination,
    RefusedError,
    declared_parameters,
    deploy_parameters,
    encode,
    parameter_problems,
    parse_destination,
    principal_arns,
)
from sluice_cli.samconfig import parameter_overrides
from tests.unit.test_template import workload_names
from tests.unit.test_template_operations import of_type, resolved

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = [
    ROOT / "template.yaml",
    ROOT / "workloads.yaml",
    *sorted((ROOT / "stacks").glob("*.yaml")),
    *sorted((ROOT / "examples").glob("*/template.yaml")),
]
REGION = "eu-west-1"
ACCOUNT = "123456789012"
PAGER = f"arn:aws:sns:{REGION}:{ACCOUNT}:pager"
PRODUCER = f"arn:aws:iam::{ACCOUNT}:role/producer"
OPERATOR = f"arn:aws:iam::{ACCOUNT}:role/ops/operator"
TYPICAL = Answers(
    critical=Destination(email="oncall@example.com", topic_arn=PAGER),
    warning=Destination(email="team@example.com"),
    trusted_senders=(PRODUCER,),
    operators=(OPERATOR,),
    business_key="order_id",
)
"""A typical answer set: a pager topic and an on-call address, the team's list for warnings, one producer
and one operator role, the business key."""


def defaults() -> list[Any]:
    """Every parameter default of every template this repository deploys."""
    return [
        pytest.param(name, spec, id=f"{template.relative_to(ROOT)}:{name}")
        for template in TEMPLATES
        for name, spec in declared_parameters(template).items()
        if "Default" in spec
    ]


# --- every default is valid in the CloudFormation sense -------------------------------------------------


@pytest.mark.parametrize(("name", "spec"), defaults())
def test_given_a_parameter_default_then_cloudformation_would_accept_it(
    name: str, spec: dict[str, Any]
) -> None:
    assert parameter_problems(name, spec, spec["Default"]) == []


def test_given_the_root_template_then_every_parameter_has_a_default_so_an_unguided_deploy_needs_none() -> (
    None
):
    # Given template.yaml, Then no parameter must be given: `sam deploy` with samconfig.toml alone works
    required = [n for n, spec in declared_parameters().items() if "Default" not in spec]
    assert required == []


@pytest.mark.parametrize(
    ("spec", "value", "problem"),
    [
        ({"Type": "Number", "MinValue": 2}, "1", "below MinValue 2"),
        ({"Type": "Number", "MaxValue": 10}, 11, "above MaxValue 10"),
        ({"Type": "Number"}, "ten", "is not a number"),
        ({"Type": "Number", "AllowedValues": ["10", "30"]}, "20", "not among AllowedValues"),
        ({"Type": "String", "AllowedPattern": "[a-z]+"}, "abc1", "does not match AllowedPattern"),
        ({"Type": "String", "AllowedPattern": "^[a-z]+"}, "abc1", "does not match"),  # the whole value
        ({"Type": "String", "MinLength": 3}, "ab", "shorter than MinLength 3"),
        ({"Type": "String", "MaxLength": 3}, "abcd", "longer than MaxLength 3"),
        ({"Type": "String"}, True, "is not a text or a number"),  # YAML's true: quote it
        ({"Type": "CommaDelimitedList", "AllowedPattern": "(arn:.*)?"}, "arn:x,bad", "'bad' does not match"),
        ({"Type": "List<Number>", "MaxValue": 5}, "1,9", "9 is above MaxValue 5"),
        ({"Type": "AWS::EC2::Subnet::Id"}, "", "is not a AWS::EC2::Subnet::Id"),
        ({"Type": "List<AWS::EC2::SecurityGroup::Id>"}, "sg-0123abcd,web", "'web' is not a"),
        ({"Type": "AWS::SSM::Parameter::Value<String>"}, "", "is not a AWS::SSM::Parameter::Name"),
        ({"Type": "Text"}, "x", "no CloudFormation parameter type"),
    ],
)
def test_given_a_default_cloudformation_refuses_then_the_check_names_why(
    spec: dict[str, Any], value: Any, problem: str
) -> None:
    [found] = parameter_problems("P", spec, value)
    assert problem in found


@pytest.mark.parametrize(
    ("spec", "value"),
    [
        ({"Type": "CommaDelimitedList", "AllowedPattern": "^(arn:aws:iam::[0-9]{12}:role/.+)?$"}, ""),
        ({"Type": "Number", "AllowedValues": ["0", "1"]}, "1"),
        ({"Type": "Number", "MinValue": 1}, "1.5"),
        ({"Type": "AWS::EC2::Subnet::Id"}, "subnet-0123456789abcdef0"),
        ({"Type": "AWS::SSM::Parameter::Value<String>"}, "/sluice/layer-arn"),
    ],
)
def test_given_a_value_cloudformation_accepts_then_the_check_finds_nothing(
    spec: dict[str, Any], value: Any
) -> None:
    assert parameter_problems("P", spec, value) == []


# --- what the first deploy asks, and what it refuses ----------------------------------------------------


def test_given_the_asked_parameters_then_each_is_the_templates_and_has_a_safe_default() -> None:
    declared = declared_parameters()
    assert set(ASKED) <= set(declared)
    both = Destination("team@example.com", PAGER)
    everything = Answers(both, both, (PRODUCER,), (OPERATOR,), "order_id")
    assert set(everything.parameters()) == set(ASKED)  # each answer is one of them
    assert all(declared[name]["Default"] == "" for name in ASKED)  # unanswered: none, nothing breaks


def test_given_the_reserved_concurrency_then_its_default_reserves_nothing_so_any_account_deploys() -> None:
    assert str(declared_parameters()["RedriverReservedConcurrency"]["Default"]) == "0"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("oncall@example.com", Destination(email="oncall@example.com")),
        (PAGER, Destination(topic_arn=PAGER)),
        (f"oncall@example.com, {PAGER}", Destination("oncall@example.com", PAGER)),
        ("none", Destination()),
    ],
)
def test_given_an_alarm_destination_then_it_is_read_as_an_address_a_topic_or_both(
    text: str, expected: Destination
) -> None:
    assert parse_destination(text, REGION, "critical") == expected


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("oncall", "neither an e-mail address"),
        ("oncall@localhost", "neither an e-mail address"),
        ("a@example.com b@example.com", "one e-mail address"),
        (f"arn:aws:sns:us-east-1:{ACCOUNT}:pager", "alarms publish to topics of their own region, eu-west-1"),
        (f"{PAGER}.fifo", "FIFO topic"),
        (f"arn:aws:sqs:{REGION}:{ACCOUNT}:queue", "not an SNS topic ARN"),
    ],
)
def test_given_a_wrong_alarm_destination_then_it_is_refused_saying_why(text: str, why: str) -> None:
    with pytest.raises(RefusedError, match=why):
        parse_destination(text, REGION, "critical")


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (
            f"arn:aws:sts::{ACCOUNT}:assumed-role/ops/alice",
            f"give the role's ARN \\(arn:aws:iam::{ACCOUNT}:role/ops",
        ),
        ("arn:aws:iam::1234:role/x", "not an IAM role or user ARN"),
        (f"arn:aws:iam::{ACCOUNT}:group/ops", "not an IAM role or user ARN"),
        ("alice", "not an IAM role or user ARN"),
    ],
)
def test_given_a_wrong_principal_then_it_is_refused_saying_why(text: str, why: str) -> None:
    with pytest.raises(RefusedError, match=why):
        principal_arns(text, "operators")


def test_given_principals_then_they_are_read_comma_or_space_separated_once_each() -> None:
    assert principal_arns(f"{PRODUCER}, {OPERATOR} {PRODUCER}", "x") == (PRODUCER, OPERATOR)


def test_given_the_answers_then_deploy_parameters_are_samconfigs_with_the_answers_over_them() -> None:
    values = deploy_parameters(TYPICAL, "default")
    assert values == {**parameter_overrides(ROOT / "samconfig.toml", "default"), **TYPICAL.parameters()}


@pytest.mark.parametrize(
    ("extra", "why"),
    [
        ({"MaximumConcurrency": "1"}, "below MinValue 2"),
        ({"LogLevels": "DEBUG"}, "template.yaml has no such parameter"),
        ({"RedriverReservedConcurrency": "11"}, "above MaxValue 10"),
    ],
)
def test_given_a_value_the_template_refuses_then_the_deploy_stops_before_sam(
    extra: dict[str, str], why: str
) -> None:
    with pytest.raises(RefusedError, match=why):
        deploy_parameters(TYPICAL, "default", extra)


# --- the command sam is given ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value", ["DEBUG", "rate(5 minutes)", 'detail."order-id"', "a,b", "x=y", "it's"], ids=repr
)
def test_given_a_value_when_encoded_then_sams_own_parser_reads_it_back_unchanged(value: str) -> None:
    assert CfnParameterOverridesType().convert((encode("K", value),), None, None) == {"K": value}


def test_given_an_empty_value_then_it_is_left_to_the_default_not_passed() -> None:
    with pytest.raises(RefusedError, match="empty value"):
        encode("K", "")
    assert "IdempotencyKeyJmesPath" not in Answers(Destination(), Destination()).parameters()


def run(argv: list[str], stdin: str = "", **kwargs: Any) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = first_deploy.main(
        argv, stdin=io.StringIO(stdin), out=out, err=err, environ=kwargs.pop("environ", {}), **kwargs
    )
    return code, out.getvalue(), err.getvalue()


def typical_flags() -> list[str]:
    return [
        "--non-interactive", "--region", REGION, "--critical", f"oncall@example.com,{PAGER}",
        "--warning", "team@example.com", "--trusted-senders", PRODUCER, "--operators", OPERATOR,
        "--business-key", "order_id",
    ]  # fmt: skip


def test_given_flags_when_the_command_is_printed_then_sam_reads_exactly_the_answers_and_samconfigs() -> None:
    # When the first deploy prints its command (nothing touches AWS)
    code, out, _ = run([*typical_flags(), "--print-command"])
    # Then it is sam deploy of samconfig.toml's environment, unguided, in the region given
    assert code == 0
    argv = shlex.split(out)
    split = argv.index("--parameter-overrides")
    assert argv[:split] == [
        "sam", "deploy", "--config-env", "default", "--stack-name", "sluice-dev", "--region", REGION,
        "--no-confirm-changeset",
    ]  # fmt: skip
    assert "--guided" not in argv
    # and sam reads its parameters as samconfig.toml's with the answers
    parsed = CfnParameterOverridesType().convert(tuple(argv[split + 1 :]), None, None)
    assert parsed == deploy_parameters(TYPICAL, "default")


def test_given_no_region_anywhere_then_the_first_deploy_refuses_saying_how_to_set_one() -> None:
    code, _, err = run(
        ["--non-interactive", "--critical", "a@example.com", "--print-command"], session_region=lambda: None
    )
    assert code == 2
    assert "no AWS region configured" in err
    assert "aws configure set region" in err


def test_given_the_aws_configuration_then_its_region_is_used_aws_region_first() -> None:
    flags = ["--non-interactive", "--critical", "a@example.com", "--print-command"]
    _, out, _ = run(flags, session_region=lambda: "ap-south-1")
    assert "--region ap-south-1" in out
    _, out, _ = run(flags, environ={"AWS_REGION": "sa-east-1"}, session_region=lambda: "ap-south-1")
    assert "--region sa-east-1" in out


def test_given_non_interactive_without_an_alarm_destination_then_it_is_refused() -> None:
    code, _, err = run(["--non-interactive", "--region", REGION, "--print-command"])
    assert code == 2
    assert "--non-interactive needs --critical" in err


def test_given_answers_on_stdin_then_a_refused_one_is_asked_again_and_warnings_follow_critical() -> None:
    # Given answers typed (or piped): a wrong address first, then a right one, the defaults for the rest
    answers = "oncall\noncall@example.com\n\n\n" + OPERATOR + "\n\n"
    code, out, err = run(["--region", REGION, "--print-command"], stdin=answers)
    # Then the wrong one is refused and asked again, and the command carries the answers
    assert code == 0, err
    assert "'oncall' is neither an e-mail address" in err
    parsed = shlex.split(out)
    assert {
        "CriticalEmail=oncall@example.com",
        "WarningEmail=oncall@example.com",
        f"OperatorArns={OPERATOR}",
    } <= set(parsed)
    assert not any(word.startswith(("TrustedSenderArns=", "IdempotencyKeyJmesPath=")) for word in parsed)


def test_given_stdin_ends_before_the_answers_then_it_is_refused_pointing_at_the_flags() -> None:
    code, _, err = run(["--region", REGION, "--print-command"], stdin="")
    assert code == 2
    assert "--non-interactive" in err


class FakeCloudFormation:
    """describe_stacks of a stack in ``status`` (None: no such stack), its nested WorkloadStack's outputs."""

    def __init__(self, status: str | None) -> None:
        self.status = status

    def describe_stacks(self, StackName: str) -> dict[str, Any]:  # noqa: N803 - boto3's name
        from botocore.exceptions import ClientError  # noqa: PLC0415

        if self.status is None:
            error = {
                "Error": {"Code": "ValidationError", "Message": f"Stack with id {StackName} does not exist"}
            }
            raise ClientError(error, "DescribeStacks")  # type: ignore[arg-type]
        if StackName == "nested":
            return {
                "Stacks": [{"Outputs": [{"OutputKey": "WorkloadNames", "OutputValue": "Payments,Orders"}]}]
            }
        outputs = [{"OutputKey": "WorkloadStack", "OutputValue": "nested"}]
        return {"Stacks": [{"StackStatus": self.status, "Outputs": outputs}]}


def recorder(ran: list[list[str]]) -> Any:
    """A stand-in for running sam: records the command, succeeds."""

    def run(argv: list[str]) -> int:
        ran.append(argv)
        return 0

    return run


def test_given_a_stack_that_exists_when_make_deploy_runs_then_it_is_sam_deploy_with_samconfig_unguided() -> (
    None
):
    ran: list[list[str]] = []
    code, _, err = run(
        ["--if-new", "--region", REGION],
        cloudformation=lambda region: FakeCloudFormation("UPDATE_COMPLETE"),
        run=recorder(ran),
    )
    assert code == 0
    assert ran == [
        ["sam", "deploy", "--config-env", "default", "--stack-name", "sluice-dev", "--region", REGION]
    ]
    assert "exists" in err


def test_given_a_stack_its_first_deploy_left_rolled_back_then_it_says_how_to_start_again() -> None:
    ran: list[list[str]] = []
    code, _, err = run(
        ["--if-new", "--region", REGION],
        cloudformation=lambda region: FakeCloudFormation("ROLLBACK_COMPLETE"),
        run=recorder(ran),
    )
    assert (code, ran) == (2, [])
    assert f"sam delete --stack-name sluice-dev --region {REGION}" in err


def test_given_a_new_stack_when_deployed_then_sam_runs_once_and_the_checklist_follows() -> None:
    # Given no stack yet, When make deploy runs with the answers as flags
    ran: list[list[str]] = []
    cloud = FakeCloudFormation(None)

    def sam(argv: list[str]) -> int:
        ran.append(argv)
        cloud.status = "CREATE_COMPLETE"
        return 0

    code, out, _ = run(["--if-new", *typical_flags()], cloudformation=lambda region: cloud, run=sam)
    # Then sam deploys once, non-guided, with the answers, and the checklist names what to do next
    assert code == 0
    [argv] = ran
    assert "--guided" not in argv
    assert "CriticalAlarmTopicArn=" + PAGER in argv
    assert "Confirm the alarm e-mails: AWS sent a confirmation to oncall@example.com, team@example.com" in out
    assert PAGER in out
    assert "#dashboards/dashboard/sluice-dev-flow" in out
    assert "outputs PaymentsQueueUrl" in out  # the first deployed workload
    assert f".venv/bin/sluice --stack-name sluice-dev --region {REGION} --workload Payments dlq stats" in out
    # one redrive at a time needs no reservation (the run lease): nothing about it to do after a deploy
    assert "RedriverReservedConcurrency" not in out


def test_given_sam_fails_then_its_exit_code_is_returned_and_no_checklist_is_printed() -> None:
    code, out, err = run(
        ["--if-new", *typical_flags()],
        cloudformation=lambda region: FakeCloudFormation(None),
        run=lambda argv: 1,
    )
    assert (code, out) == (1, "")
    assert "sam deploy failed" in err


# --- samconfig.toml --------------------------------------------------------------------------------------


def test_given_samconfig_then_each_environment_deploys_unguided_in_the_configured_region() -> None:
    config = tomllib.loads((ROOT / "samconfig.toml").read_text(encoding="utf-8"))
    for env in ("default", "prod"):
        sections = config[env]
        # no fixed region: sam takes the AWS configuration's
        assert all("region" not in s.get("parameters", {}) for s in sections.values()), env
        deploy = sections["deploy"]["parameters"]
        assert set(deploy["capabilities"].split()) == {"CAPABILITY_IAM", "CAPABILITY_AUTO_EXPAND"}, env
        assert deploy["resolve_s3"] is True, env
        assert sections["global"]["parameters"]["stack_name"], env
        # its parameter values are ones the template accepts
        assert deploy_parameters(Answers(Destination(), Destination()), env) == parameter_overrides(
            ROOT / "samconfig.toml", env
        )


@pytest.mark.parametrize("reservation", ["0", "1"])
def test_given_the_reservation_then_only_a_nonzero_one_reserves_the_redrivers_and_the_job_maintenance(
    reservation: str,
) -> None:
    # Given the stack with the job store (its reaper and sweeper reserve as the redrivers do)
    secret = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:db"
    template = resolved({"RedriverReservedConcurrency": reservation, "DatabaseSecretArn": secret})
    # Then 0 (the default) reserves nothing anywhere, 1 exactly the redrivers, the reaper and the sweeper
    reserved = {
        lid: props["ReservedConcurrentExecutions"]
        for lid, props in of_type(template, "AWS::Serverless::Function").items()
        if "ReservedConcurrentExecutions" in props
    }
    if reservation == "0":
        assert reserved == {}
    else:
        expected = {f"{w}RedriverFunction" for w in workload_names()} | {
            "JobReaperFunction",
            "JobSweeperFunction",
        }
        assert set(reserved) == expected


def test_given_no_aws_credentials_then_the_deploy_stops_saying_so_not_with_a_traceback() -> None:
    from botocore.exceptions import NoCredentialsError  # noqa: PLC0415

    class NoCredentials:
        def describe_stacks(self, StackName: str) -> dict[str, Any]:  # noqa: N803 - boto3's name
            raise NoCredentialsError

    code, _, err = run(["--if-new", *typical_flags()], cloudformation=lambda region: NoCredentials())
    assert code == 2
    assert "Unable to locate credentials" in err
    assert "aws sso login" in err


def test_given_ask_on_a_stack_that_exists_then_sam_shows_its_change_set_as_samconfig_says() -> None:
    # Given a stack that exists, When the answers are given again (make deploy ASK=1: no --if-new)
    ran: list[list[str]] = []
    code, _, _ = run(
        typical_flags(),
        cloudformation=lambda region: FakeCloudFormation("UPDATE_COMPLETE"),
        run=recorder(ran),
    )
    # Then sam deploys them without skipping the change set's review (only a new stack's is skipped)
    assert code == 0
    [argv] = ran
    assert "--no-confirm-changeset" not in argv
    assert f"OperatorArns={OPERATOR}" in argv
