"""The first deploy of a sluice stack: ask only what has no safe default, then ``sam deploy``, unguided.

``make deploy`` runs it with ``--if-new``: on a stack that exists it runs ``sam deploy --config-env ENV``
(samconfig.toml's values; every other parameter keeps its deployed value). On a new one it asks for:

- where alarms go: an e-mail address, an SNS topic ARN of yours, or both, for critical and for warning
  alarms (``CriticalEmail``, ``CriticalAlarmTopicArn``, ``WarningEmail``, ``WarningAlarmTopicArn``);
- the trusted senders: roles or users outside the stack calling ``send_delayed`` (``TrustedSenderArns``);
- the operators: roles or users running the sluice CLI's redrives (``OperatorArns``);
- the business key: a JMESPath over the body, for workloads without their own ``KeyPath``
  (``IdempotencyKeyJmesPath``; empty keys each message by its identity).

Every answer is checked before sam runs (an address's or ARN's shape, the topic's region, the template's
own constraints), the region comes from the AWS configuration (``--region``, samconfig.toml's, else
``AWS_REGION``, else the profile's: none is refused), the stack is deployed with samconfig.toml's
``parameter_overrides`` and the answers, and a short checklist follows. Nothing touches AWS with
``--print-command``: it prints the exact ``sam`` command. ``--non-interactive`` takes the answers from
flags only; otherwise each unanswered one is read from stdin (docs/deploy.md).
"""

from __future__ import annotations

import argparse
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO, TypeVar

import yaml

from sluice_cli.samconfig import deploy_settings, parameter_overrides, parse_overrides

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "template.yaml"
SAMCONFIG = ROOT / "samconfig.toml"

ASKED = (
    "CriticalEmail",
    "CriticalAlarmTopicArn",
    "WarningEmail",
    "WarningAlarmTopicArn",
    "TrustedSenderArns",
    "OperatorArns",
    "IdempotencyKeyJmesPath",
)
"""The parameters the first deploy asks for: every other one has a default that deploys anywhere."""

EMAIL = re.compile(r"[^@\s,]+@[^@\s,]+\.[^@\s,]+")
TOPIC_ARN = re.compile(r"arn:(aws[a-z-]*):sns:([a-z0-9-]+):([0-9]{12}):([A-Za-z0-9_-]{1,256})")
PRINCIPAL_ARN = re.compile(r"arn:aws[a-z-]*:iam::[0-9]{12}:(role|user)/[A-Za-z0-9+=.@_/*-]+")
SESSION_ARN = re.compile(r"arn:(aws[a-z-]*):sts::([0-9]{12}):assumed-role/([^/]+)/.*")
NONE_WORDS = frozenset({"", "none", "-"})
T = TypeVar("T")


class RefusedError(Exception):
    """An answer, a setting or the account's state the deploy cannot go on with (its message says why
    and what to do)."""


# --- CloudFormation's parameter rules ---------------------------------------------------------------

NUMBER = re.compile(r"[-+]?(\d+(\.\d*)?|\.\d+)")
AWS_ID_SHAPES = {  # the AWS-specific parameter types' values (CloudFormation also checks they exist)
    "AWS::EC2::AvailabilityZone::Name": r"[a-z]{2}(-[a-z]+)+-\d[a-z]",
    "AWS::EC2::Image::Id": r"ami-[0-9a-f]{8,17}",
    "AWS::EC2::Instance::Id": r"i-[0-9a-f]{8,17}",
    "AWS::EC2::KeyPair::KeyName": r".{1,255}",
    "AWS::EC2::SecurityGroup::GroupName": r".{1,255}",
    "AWS::EC2::SecurityGroup::Id": r"sg-[0-9a-f]{8,17}",
    "AWS::EC2::Subnet::Id": r"subnet-[0-9a-f]{8,17}",
    "AWS::EC2::Volume::Id": r"vol-[0-9a-f]{8,17}",
    "AWS::EC2::VPC::Id": r"vpc-[0-9a-f]{8,17}",
    "AWS::Route53::HostedZone::Id": r"Z[0-9A-Z]{1,32}",
    "AWS::SSM::Parameter::Name": r"[a-zA-Z0-9_.\-/]{1,2048}",
}
SSM_VALUE = re.compile(r"AWS::SSM::Parameter::Value<(.+)>")


def parameter_problems(name: str, spec: Mapping[str, Any], value: Any) -> list[str]:  # noqa: C901, PLR0912 - one branch per rule
    """What CloudFormation would refuse in ``value`` for the parameter ``name`` declared as ``spec``
    (its Parameters syntax): the type (Number, List<Number>, CommaDelimitedList, the AWS-specific
    types, SSM parameter types), AllowedValues, AllowedPattern (the whole value of a String, each item
    of a list), MinLength / MaxLength (String), MinValue / MaxValue (Number, each item of List<Number>).
    """
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return [f"{name}: {value!r} is not a text or a number (quote it)"]
    text = str(value)
    kind = str(spec.get("Type", ""))
    problems: list[str] = []
    listed = kind == "CommaDelimitedList" or kind.startswith("List<")
    items = text.split(",") if listed else [text]
    item_kind = kind[5:-1] if kind.startswith("List<") else kind
    ssm = SSM_VALUE.fullmatch(kind)
    if ssm is not None:
        item_kind = "AWS::SSM::Parameter::Name"  # the value is the name of the SSM parameter
        items = [text]
    if item_kind not in ("String", "Number", "CommaDelimitedList") and item_kind not in AWS_ID_SHAPES:
        return [f"{name}: Type {kind!r} is no CloudFormation parameter type"]
    allowed = spec.get("AllowedValues")
    if allowed is not None and any(item not in {str(a) for a in allowed} for item in items):
        problems.append(f"{name}: {text!r} is not among AllowedValues {[str(a) for a in allowed]}")
    pattern = spec.get("AllowedPattern")
    if pattern is not None and kind in ("String", "CommaDelimitedList"):
        misfits = [item for item in items if re.fullmatch(str(pattern), item) is None]
        if misfits:
            problems.append(f"{name}: {misfits[0]!r} does not match AllowedPattern {pattern}")
    if kind == "String":
        if "MinLength" in spec and len(text) < int(spec["MinLength"]):
            problems.append(f"{name}: {text!r} is shorter than MinLength {spec['MinLength']}")
        if "MaxLength" in spec and len(text) > int(spec["MaxLength"]):
            problems.append(f"{name}: {text!r} is longer than MaxLength {spec['MaxLength']}")
    if item_kind == "Number":
        for item in items:
            if NUMBER.fullmatch(item.strip()) is None or not math.isfinite(float(item)):
                problems.append(f"{name}: {item!r} is not a number")
                continue
            if "MinValue" in spec and float(item) < float(spec["MinValue"]):
                problems.append(f"{name}: {item} is below MinValue {spec['MinValue']}")
            if "MaxValue" in spec and float(item) > float(spec["MaxValue"]):
                problems.append(f"{name}: {item} is above MaxValue {spec['MaxValue']}")
    if item_kind in AWS_ID_SHAPES:
        shape = AWS_ID_SHAPES[item_kind]
        problems += [
            f"{name}: {item!r} is not a {item_kind}" for item in items if re.fullmatch(shape, item) is None
        ]
    return problems


class _TemplateLoader(yaml.SafeLoader):
    """YAML with CloudFormation's short forms (!Ref, !If, ...): read as plain values."""


def _short_form(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> Any:
    if isinstance(node, yaml.ScalarNode):
        return loader.construct_scalar(node)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node)
    return loader.construct_mapping(node)  # type: ignore[arg-type]


_TemplateLoader.add_multi_constructor("!", _short_form)


def declared_parameters(template: Path = TEMPLATE) -> dict[str, dict[str, Any]]:
    """The Parameters section of ``template``."""
    loaded = yaml.load(template.read_text(encoding="utf-8"), Loader=_TemplateLoader)  # noqa: S506 - a SafeLoader
    return dict(loaded.get("Parameters") or {})


# --- the answers ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Destination:
    """Where one severity's alarms go: an e-mail address, a topic of yours, both or neither."""

    email: str = ""
    topic_arn: str = ""

    def __str__(self) -> str:
        return " and ".join(filter(None, (self.email, self.topic_arn))) or "nowhere (nobody hears them)"


@dataclass(frozen=True)
class Answers:
    critical: Destination
    warning: Destination
    trusted_senders: tuple[str, ...] = ()
    operators: tuple[str, ...] = ()
    business_key: str = ""

    def parameters(self) -> dict[str, str]:
        """The parameter values the answers give (an empty answer is the template's default)."""
        values = {
            "CriticalEmail": self.critical.email,
            "CriticalAlarmTopicArn": self.critical.topic_arn,
            "WarningEmail": self.warning.email,
            "WarningAlarmTopicArn": self.warning.topic_arn,
            "TrustedSenderArns": ",".join(self.trusted_senders),
            "OperatorArns": ",".join(self.operators),
            "IdempotencyKeyJmesPath": self.business_key,
        }
        return {name: value for name, value in values.items() if value}


def parse_destination(text: str, region: str, severity: str) -> Destination:
    """``ops@example.com``, ``arn:aws:sns:<region>:<account>:<topic>``, both (comma or space between),
    or ``none``."""
    email = topic = ""
    for item in re.split(r"[,\s]+", text.strip()):
        if item.lower() in NONE_WORDS:
            continue
        if item.startswith("arn:"):
            if topic:
                raise RefusedError(f"{severity}: one topic ARN (fan out from it for more): {topic}, {item}")
            topic = topic_arn(item, region, severity)
        elif EMAIL.fullmatch(item):
            if email:
                raise RefusedError(
                    f"{severity}: one e-mail address (a distribution list for more): {email}, {item}"
                )
            email = item
        else:
            raise RefusedError(
                f"{severity}: {item!r} is neither an e-mail address (name@example.com) nor an SNS topic ARN "
                "(arn:aws:sns:REGION:ACCOUNT:TOPIC)"
            )
    return Destination(email, topic)


def topic_arn(text: str, region: str, severity: str) -> str:
    if text.endswith(".fifo"):
        raise RefusedError(
            f"{severity}: {text} is a FIFO topic; CloudWatch alarms publish to standard topics only"
        )
    match = TOPIC_ARN.fullmatch(text)
    if match is None:
        raise RefusedError(f"{severity}: {text!r} is not an SNS topic ARN (arn:aws:sns:REGION:ACCOUNT:TOPIC)")
    if match.group(2) != region:
        raise RefusedError(
            f"{severity}: topic {text} is in {match.group(2)}; alarms publish to topics of their own region, "
            f"{region}"
        )
    return text


def principal_arns(text: str, what: str) -> tuple[str, ...]:
    """IAM role or user ARNs, comma- or space-separated; ``none`` for none."""
    found: list[str] = []
    for item in re.split(r"[,\s]+", text.strip()):
        if item.lower() in NONE_WORDS:
            continue
        session = SESSION_ARN.fullmatch(item)
        if session is not None:
            role = f"arn:{session.group(1)}:iam::{session.group(2)}:role/{session.group(3)}"
            raise RefusedError(
                f"{what}: {item} is a session of a role; give the role's ARN ({role}, with its path)"
            )
        if PRINCIPAL_ARN.fullmatch(item) is None:
            raise RefusedError(
                f"{what}: {item!r} is not an IAM role or user ARN "
                "(arn:aws:iam::ACCOUNT:role/NAME or arn:aws:iam::ACCOUNT:user/NAME)"
            )
        if item not in found:
            found.append(item)
    return tuple(found)


def business_key(text: str) -> str:
    """A JMESPath expression over the message body, or '' (``none``) for each message's identity."""
    path = text.strip()
    if path.lower() in NONE_WORDS:
        return ""
    import jmespath  # noqa: PLC0415 - boto3's dependency; only an answer needs it
    from jmespath.exceptions import JMESPathError  # noqa: PLC0415

    try:
        jmespath.compile(path)
    except JMESPathError as exc:
        raise RefusedError(f"business key: {path!r} is not a JMESPath expression: {exc}") from None
    return path


# --- asking -----------------------------------------------------------------------------------------


@dataclass
class Prompter:
    """Reads each answer from ``stdin`` (a terminal or a pipe), asking again after a refused one."""

    stdin: TextIO
    out: TextIO
    attempts: int = 3

    def ask(self, question: str, parse: Callable[[str], T], default: str = "") -> T:
        for _ in range(self.attempts):
            hint = f" [{default}]" if default else ""
            print(f"{question}{hint}: ", end="", file=self.out, flush=True)
            line = self.stdin.readline()
            if not line:
                raise RefusedError(
                    "no answer (stdin closed): give the answers as flags with --non-interactive"
                )
            if not self.stdin.isatty():  # a piped answer: shown, as a terminal would echo it
                print(line.strip(), file=self.out)
            answer = line.strip() or default
            try:
                return parse(answer)
            except RefusedError as exc:
                print(f"  {exc}", file=self.out)
        raise RefusedError(f"no valid answer after {self.attempts} tries")


def _critical(text: str, region: str) -> Destination:
    if not text.strip():
        raise RefusedError(
            "critical alarms need somewhere to go (an e-mail address or a topic ARN); "
            "'none' deploys without (they publish to a topic nobody reads)"
        )
    return parse_destination(text, region, "critical alarms")


def _prompter(prompter: Prompter | None) -> Prompter:
    if prompter is None:
        raise RefusedError("--non-interactive needs --critical (an e-mail address, a topic ARN, or none)")
    return prompter


def gather(args: argparse.Namespace, region: str, prompter: Prompter | None) -> Answers:
    """The answers: each from its flag, else (interactive) from the prompter; ``--non-interactive``
    needs ``--critical`` and takes every other unanswered one as none (warning: as critical)."""
    if prompter is None and args.critical is None:
        raise RefusedError("--non-interactive needs --critical (an e-mail address, a topic ARN, or none)")
    if args.critical is not None:
        critical = _critical(args.critical, region)
    else:
        critical = _prompter(prompter).ask(
            "Critical alarms (messages wait in a DLQ or the poison queue, something fails) go to: "
            "an e-mail address, an SNS topic ARN of yours, or both",
            lambda text: _critical(text, region),
        )
    warning_text = args.warning
    if warning_text is None and prompter is not None:
        warning = prompter.ask(
            "Warning alarms (something slows down) go to ('same' as critical, or as above)",
            lambda text: critical if text == "same" else parse_destination(text, region, "warning alarms"),
            default="same",
        )
    elif warning_text is None or warning_text == "same":
        warning = critical
    else:
        warning = parse_destination(warning_text, region, "warning alarms")

    def answer(flag: str | None, question: str, parse: Callable[[str], T]) -> T:
        if flag is not None:
            return parse(flag)
        if prompter is None:
            return parse("")
        return prompter.ask(question, parse, default="none")

    senders = answer(
        args.trusted_senders,
        "Trusted senders: IAM role or user ARNs outside this stack whose code calls send_delayed "
        "(comma-separated)",
        lambda text: principal_arns(text, "trusted senders"),
    )
    operators = answer(
        args.operators,
        "Operators: IAM role or user ARNs who run the sluice CLI's redrives (comma-separated)",
        lambda text: principal_arns(text, "operators"),
    )
    key = answer(
        args.business_key,
        "Business key for workloads without a KeyPath of their own: a JMESPath over the JSON body, "
        "e.g. order_id ('none': each message's identity)",
        business_key,
    )
    return Answers(critical, warning, senders, operators, key)


# --- the deploy -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    env: str
    stack_name: str
    region: str
    parameters: dict[str, str] = field(default_factory=dict)
    new: bool = True
    """A stack created by this deploy: nothing to review in its change set (every resource is added, and
    the answers were confirmed); on one that exists (ASK=1), sam shows it as samconfig.toml says."""

    def command(self) -> list[str]:
        """The exact ``sam deploy``: samconfig.toml's environment, with the region and the parameters
        given (sam takes the parameters given here instead of samconfig.toml's, so they include them)."""
        argv = [
            "sam", "deploy", "--config-env", self.env, "--stack-name", self.stack_name,
            "--region", self.region,
        ]  # fmt: skip
        if self.new:
            argv.append("--no-confirm-changeset")
        if self.parameters:
            argv += ["--parameter-overrides", *(encode(k, v) for k, v in self.parameters.items())]
        return argv


def encode(key: str, value: str) -> str:
    """One ``Key=Value`` as sam's --parameter-overrides reads it: a value with a space or a quote is
    quoted (sam cuts an unquoted one there); an empty one cannot be passed (leave it out: the default)."""
    if not value:
        raise RefusedError(f"{key}: sam cannot pass an empty value (leave it out for the template's default)")
    if not re.search(r"[\s\"']", value):
        return f"{key}={value}"
    if '"' not in value:
        return f'{key}="{value}"'
    if "'" not in value:
        return f"{key}='{value}'"
    raise RefusedError(f"{key}: sam cannot pass a value holding both quote characters: {value!r}")


def deploy_parameters(
    answers: Answers,
    env: str = "default",
    extra: Mapping[str, str] | None = None,
    *,
    samconfig: Path = SAMCONFIG,
    template: Path = TEMPLATE,
) -> dict[str, str]:
    """samconfig.toml's ``parameter_overrides`` of ``env``, the answers over them, ``extra`` over both;
    each checked against the template's declaration (refused: a name it does not declare, a value it
    would refuse)."""
    values = {**parameter_overrides(samconfig, env), **answers.parameters(), **(extra or {})}
    declared = declared_parameters(template)
    problems = [f"{name}: {template.name} has no such parameter" for name in values if name not in declared]
    for name, value in values.items():
        if name in declared:
            problems += parameter_problems(name, declared[name], value)
    if problems:
        raise RefusedError("; ".join(problems))
    return values


def resolve_region(
    explicit: str | None,
    configured: str | None,
    environ: Mapping[str, str] = os.environ,
    session_region: Callable[[], str | None] | None = None,
) -> tuple[str, str]:
    """(region, where it came from): ``--region``, samconfig.toml's, ``AWS_REGION``, else the AWS
    configuration's (``AWS_DEFAULT_REGION``, the profile's)."""
    if explicit:
        return explicit, "--region"
    if configured:
        return configured, "samconfig.toml"
    if environ.get("AWS_REGION"):
        return environ["AWS_REGION"], "AWS_REGION"
    found = (session_region or _session_region)()
    if found:
        profile = environ.get("AWS_PROFILE", "default")
        source = "AWS_DEFAULT_REGION" if environ.get("AWS_DEFAULT_REGION") else f"AWS profile {profile}"
        return found, source
    raise RefusedError(
        "no AWS region configured: set one with `aws configure set region <region>` (your profile's), "
        "export AWS_REGION=<region>, or pass --region <region>"
    )


def _session_region() -> str | None:
    import boto3  # noqa: PLC0415 - not needed to print a command

    region = boto3.Session().region_name
    return str(region) if region else None


def stack_state(cloudformation: Any, stack_name: str) -> str | None:
    """The stack's status, or None when there is none (or only a review of a change set never run)."""
    from botocore.exceptions import BotoCoreError, ClientError  # noqa: PLC0415

    try:
        [stack] = cloudformation.describe_stacks(StackName=stack_name)["Stacks"]
    except ClientError as exc:
        if "does not exist" in str(exc):
            return None
        raise RefusedError(f"cannot look for stack {stack_name}: {exc}") from None
    except BotoCoreError as exc:  # no credentials, an expired SSO session, no network
        raise RefusedError(
            f"cannot look for stack {stack_name}: {exc} (your AWS credentials: aws configure, aws sso login)"
        ) from None
    status = str(stack["StackStatus"])
    return None if status == "REVIEW_IN_PROGRESS" else status


def refuse_unusable(status: str, stack_name: str, region: str) -> None:
    """A stack its first deploy left failed cannot be updated: say how to look and start again."""
    if status in ("ROLLBACK_COMPLETE", "ROLLBACK_FAILED", "DELETE_FAILED"):
        raise RefusedError(
            f"stack {stack_name} in {region} is {status} (its first deploy failed). See why: "
            f"aws cloudformation describe-stack-events --stack-name {stack_name} --region {region}; "
            f"remove it: sam delete --stack-name {stack_name} --region {region}; then deploy again"
        )


# --- after it ---------------------------------------------------------------------------------------


def checklist(plan: Plan, answers: Answers, workloads: Sequence[str] = ()) -> str:
    """What to do once the stack is up (printed after the deploy; docs/deploy.md shows the same)."""
    stack, region = plan.stack_name, plan.region
    cli = f".venv/bin/sluice --stack-name {stack} --region {region}"
    workload = workloads[0] if workloads else "Orders"
    lines = [f"{stack} is deployed in {region}. Before you rely on it:", ""]
    emails = sorted({d.email for d in (answers.critical, answers.warning) if d.email})
    topics = sorted({d.topic_arn for d in (answers.critical, answers.warning) if d.topic_arn})
    step = 1
    if emails:
        lines.append(
            f"{step}. Confirm the alarm e-mails: AWS sent a confirmation to {', '.join(emails)}; until "
            "its link is followed, no alarm reaches it."
        )
        step += 1
    if topics:
        lines.append(
            f"{step}. Your topics ({', '.join(topics)}) now receive the alarms: their access policy must let "
            "cloudwatch.amazonaws.com publish, and an encrypting KMS key must let it use the key."
        )
        step += 1
    if not emails and not topics:
        lines.append(
            f"{step}. No alarm goes anywhere yet: subscribe to the outputs WarningTopicArn and "
            f"CriticalTopicArn ({cli} outputs CriticalTopicArn)."
        )
        step += 1
    dashboard = (
        f"https://{region}.console.aws.amazon.com/cloudwatch/home?region={region}#dashboards/dashboard"
    )
    lines.append(
        f"{step}. The dashboards: {dashboard}/{stack}-flow (what the workloads share) and one per workload, "
        f"{stack}-<Workload>."
    )
    step += 1
    body = (
        '{"order_id": "first-1", "customer_id": "c-1", "amount_cents": 100, "currency": "EUR"}'
        if workload == "Orders"
        else "<a body your processor accepts>"
    )
    lines += [
        f"{step}. Send a first message to {workload} and watch it on the dashboard:",
        f'     aws sqs send-message --region {region} --queue-url "$({cli} outputs {workload}QueueUrl)" \\',
        f"       --message-body '{body}'",
    ]
    step += 1
    lines += [
        f"{step}. The operator CLI (docs/operations.md): {workload}'s dead letters, the poison queue:",
        f"     {cli} --workload {workload} dlq stats",
        f"     {cli} poison list",
    ]
    step += 1
    if not answers.trusted_senders:
        lines.append(
            f"{step}. send_delayed from code outside the stack is refused until its role is listed: "
            "TrustedSenderArns (docs/delays.md)."
        )
        step += 1
    lines += ["", f"Later deploys: make deploy (sam deploy --config-env {plan.env}: every answer is kept)."]
    return "\n".join(lines)


def workload_names(cloudformation: Any, stack_name: str) -> list[str]:
    """The deployed workloads (the nested WorkloadStack's output WorkloadNames); [] when unreadable."""
    try:
        [root] = cloudformation.describe_stacks(StackName=stack_name)["Stacks"]
        nested = {o["OutputKey"]: o["OutputValue"] for o in root.get("Outputs", [])}.get("WorkloadStack")
        [stack] = cloudformation.describe_stacks(StackName=nested)["Stacks"]
        names = {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}.get("WorkloadNames", "")
    except Exception:  # noqa: BLE001 - the checklist then names the example workload
        return []
    return [name for name in str(names).split(",") if name]


# --- the command ------------------------------------------------------------------------------------


def arguments(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="scripts/first_deploy.py",
        description="Deploy a new sluice stack, asking only what has no safe default (docs/deploy.md).",
    )
    parser.add_argument("--env", default="default", help="samconfig.toml environment (default: default)")
    parser.add_argument("--stack-name", help="the stack (default: samconfig.toml's)")
    parser.add_argument("--region", help="AWS region (default: samconfig.toml's, AWS_REGION, your profile's)")
    parser.add_argument(
        "--critical", help="where critical alarms go: an e-mail address and/or an SNS topic ARN, or none"
    )
    parser.add_argument("--warning", help="where warning alarms go, as --critical, or same (default: same)")
    parser.add_argument(
        "--trusted-senders", help="IAM role or user ARNs calling send_delayed, comma-separated, or none"
    )
    parser.add_argument(
        "--operators", help="IAM role or user ARNs running the CLI's redrives, comma-separated, or none"
    )
    parser.add_argument(
        "--business-key", help="JMESPath of the business key for workloads without their own, or none"
    )
    parser.add_argument(
        "--parameter", action="append", default=[], metavar="KEY=VALUE",
        help="any other template parameter (over samconfig.toml's); repeat for more",
    )  # fmt: skip
    parser.add_argument("--non-interactive", action="store_true", help="ask nothing: answers from flags only")
    parser.add_argument(
        "--print-command", "--dry-run", action="store_true", dest="print_command",
        help="print the sam command and exit (no AWS call)",
    )  # fmt: skip
    parser.add_argument(
        "--if-new", action="store_true",
        help="on a stack that exists, run sam deploy with samconfig.toml's values instead (make deploy)",
    )  # fmt: skip
    parser.add_argument("--yes", action="store_true", help="deploy without asking to confirm")
    return parser.parse_args(argv)


def main(
    argv: Sequence[str],
    *,
    stdin: TextIO = sys.stdin,
    out: TextIO = sys.stdout,
    err: TextIO = sys.stderr,
    environ: Mapping[str, str] = os.environ,
    cloudformation: Callable[[str], Any] | None = None,
    run: Callable[[list[str]], int] | None = None,
    session_region: Callable[[], str | None] | None = None,
) -> int:
    args = arguments(argv)
    try:
        settings = deploy_settings(SAMCONFIG, args.env)
        stack_name = _stack_name(args.stack_name or settings.get("stack_name"), args.env)
        region, source = resolve_region(args.region, settings.get("region"), environ, session_region)
        extra = parse_overrides(args.parameter, where="--parameter")
        client = None if args.print_command else (cloudformation or _cloudformation)(region)
        status = None if client is None else stack_state(client, stack_name)
        if status is not None:
            refuse_unusable(status, stack_name, region)
        if args.if_new and status is not None:
            update = ["sam", "deploy", "--config-env", args.env, "--stack-name", stack_name]
            update += ["--region", region]
            print(f"stack {stack_name} exists in {region} ({status}): {shlex.join(update)}", file=err)
            return (run or _run)(update)
        if status is None and client is not None:
            print(f"stack {stack_name} does not exist in {region} ({source}): its first deploy", file=err)
        prompter = None if args.non_interactive else Prompter(stdin, err)
        answers = gather(args, region, prompter)
        plan = Plan(args.env, stack_name, region, deploy_parameters(answers, args.env, extra), status is None)
    except RefusedError as exc:
        print(f"first deploy: {exc}", file=err)
        return 2
    command = plan.command()
    if args.print_command:
        print(shlex.join(command), file=out)
        return 0
    print(f"deploying {stack_name} to {region} ({source}); critical alarms: {answers.critical}; "
          f"warnings: {answers.warning}", file=err)  # fmt: skip
    print(shlex.join(command), file=err)
    if prompter is not None and not args.yes:
        go = prompter.ask("Deploy now? (yes/no)", _yes_no, default="yes")
        if not go:
            print("not deployed", file=err)
            return 1
    code = (run or _run)(command)
    if code != 0:
        print(f"sam deploy failed (exit {code}); nothing above was deployed unless sam says so", file=err)
        return code
    print(checklist(plan, answers, workload_names(client, stack_name)), file=out)
    return 0


def _stack_name(name: str | None, env: str) -> str:
    if not name:
        raise RefusedError(f"samconfig.toml [{env}] names no stack_name: pass --stack-name")
    return name


def _yes_no(text: str) -> bool:
    if text.lower() in ("y", "yes"):
        return True
    if text.lower() in ("n", "no"):
        return False
    raise RefusedError("yes or no")


def _cloudformation(region: str) -> Any:
    import boto3  # noqa: PLC0415

    return boto3.client("cloudformation", region_name=region)


def _run(command: list[str]) -> int:
    sam = shutil.which("sam") or shutil.which("sam", path=str(Path(sys.executable).parent))
    if sam is None:
        print("first deploy: no `sam` on PATH (make venv installs the AWS SAM CLI)", file=sys.stderr)
        return 127
    return subprocess.call([sam, *command[1:]], cwd=ROOT)  # noqa: S603 - sam with the arguments above


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
