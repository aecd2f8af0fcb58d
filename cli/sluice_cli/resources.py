"""Where things are: the stack's outputs, samconfig.toml defaults and the deployed redrive settings."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from sluice.errors import ConfigurationError
from sluice.redrive.breaker import DEFAULT_NAME as DEFAULT_BREAKER
from sluice.redrive.settings import RedriveSettings
from sluice_cli import PARTIAL_FAILURE, USAGE_ERROR, CliError
from sluice_cli.samconfig import deploy_settings

if TYPE_CHECKING:
    from mypy_boto3_cloudformation import CloudFormationClient
    from mypy_boto3_lambda import LambdaClient

DEFAULT_STACK_NAME = "sluice"
SAMCONFIG = "samconfig.toml"

WORKLOAD_OUTPUTS = {
    "work_queue_url": "QueueUrl",
    "work_queue_arn": "QueueArn",
    "dead_letter_queue_url": "DeadLetterQueueUrl",
    "dead_letter_queue_arn": "DeadLetterQueueArn",
    "redrive_settings_function": "RedriveSettingsFunctionName",
}
"""Resources field → the output a workload's loop gives each workload, as ``<Workload><Output>``."""

OUTPUTS = {
    **{name: "<Workload>" + key for name, key in WORKLOAD_OUTPUTS.items()},
    "poison_queue_url": "PoisonPillQueueUrl",
    "poison_queue_arn": "PoisonPillQueueArn",
    "breaker_table": "BreakerTableName",
    "redrive_mode": "RedriveMode",
    "envelope_key_secret": "EnvelopeKeySecretArn",
    "delay_queue_url": "DelayQueueUrl",
    "delay_targets": "DelayTargets",
    "delay_dead_letter_queue_url": "DelayDeadLetterQueueUrl",
    "claim_check_bucket": "ClaimCheckBucketName",
    "claim_check_prefix": "ClaimCheckPrefix",
    "database_secret_arn": "DatabaseSecretArn",
    "jobs_schema": "JobsSchema",
}
"""Resources field → stack output key."""


@dataclass(frozen=True)
class Resources:
    """The stack's resources the CLI works on; a field is None when the stack has no such output."""

    stack_name: str
    work_queue_url: str | None = None
    work_queue_arn: str | None = None
    dead_letter_queue_url: str | None = None
    dead_letter_queue_arn: str | None = None
    poison_queue_url: str | None = None
    poison_queue_arn: str | None = None
    breaker_table: str | None = None
    redrive_mode: str | None = None
    redrive_settings_function: str | None = None
    envelope_key_secret: str | None = None
    delay_queue_url: str | None = None
    delay_targets: str | None = None
    """The queues the delay pipeline delivers to (comma-separated ARNs and patterns, its stack's output)."""
    delay_dead_letter_queue_url: str | None = None
    claim_check_bucket: str | None = None
    claim_check_prefix: str | None = None
    database_secret_arn: str | None = None
    jobs_schema: str | None = None
    workload: str | None = None
    """The workload whose queue, DLQ and redrive the commands act on (``--workload``)."""
    workloads: tuple[str, ...] = ()
    """Every workload of the stack: with several and none chosen, a command on one of them refuses to
    guess; one on the shared resources (the poison queue, the delay DLQ, the job store) runs."""
    other_workload_queues: tuple[str, ...] = ()
    """The queue ARNs of the stack's other workloads (``poison replay --all`` leaves their pills alone)."""

    @property
    def breaker_name(self) -> str:
        """The workload's breaker item (template.yaml names it after the workload)."""
        self._chosen()
        return self.workload or DEFAULT_BREAKER

    def _chosen(self) -> None:
        if self.workload is None and len(self.workloads) > 1:
            raise CliError(
                f"stack {self.stack_name!r} runs the workloads {', '.join(self.workloads)}: "
                "pass --workload NAME",
                USAGE_ERROR,
            )

    @classmethod
    def from_outputs(
        cls, stack_name: str, outputs: Mapping[str, str], workload: str | None = None
    ) -> Resources:
        """The stack's resources, its workload ones those of ``workload``: required when the stack runs
        several (a redrive or replay acts on one workload's queues, never on a guess)."""
        chosen = choose_workload(stack_name, outputs, workload)
        fields: dict[str, str | None] = {
            name: outputs.get(key) or None for name, key in OUTPUTS.items() if name not in WORKLOAD_OUTPUTS
        }
        fields |= {name: outputs.get(f"{chosen}{key}") or None for name, key in WORKLOAD_OUTPUTS.items()}
        names = workloads_of(outputs)
        others = tuple(arn for name in names if name != chosen and (arn := outputs.get(f"{name}QueueArn")))
        return cls(
            stack_name, workload=chosen, workloads=tuple(names), other_workload_queues=others, **fields
        )

    def require(self, name: str) -> str:
        """The value of field ``name``, or a clear error naming the missing stack output (or, for a
        workload's, the workloads to choose from)."""
        if name in WORKLOAD_OUTPUTS:
            self._chosen()
        value = getattr(self, name)
        if not value:
            output = OUTPUTS[name].replace("<Workload>", self.workload or "<Workload>")
            raise CliError(
                f"stack {self.stack_name!r} has no output {output}: is it deployed from a "
                "template.yaml with that output?",
                USAGE_ERROR,
            )
        return str(value)


WORKLOAD_STACK_OUTPUT = "WorkloadStack"
"""The root stack's output naming the workloads' nested stack, whose outputs are the workloads'."""
NESTED_STACK_OUTPUTS = (WORKLOAD_STACK_OUTPUT, "DelayStack", "JobStack")
"""The root stack's outputs naming its nested stacks (workloads.yaml, stacks/delays.yaml,
stacks/jobs.yaml), whose outputs the CLI reads as the root's (the job store's only when it has one)."""


def workloads_of(outputs: Mapping[str, str]) -> list[str]:
    """The workloads a stack runs (its ``WorkloadNames`` output)."""
    return [name for name in outputs.get("WorkloadNames", "").split(",") if name]


def choose_workload(stack_name: str, outputs: Mapping[str, str], workload: str | None) -> str | None:
    """``workload`` when the stack runs it (a usage error naming them when it does not); the only one
    when it runs one; else None (several, or none: only the shared resources are there)."""
    names = workloads_of(outputs)
    if workload is not None:
        if workload not in names:
            raise CliError(
                f"stack {stack_name!r} runs no workload {workload!r} (it runs: {', '.join(names) or 'none'})",
                USAGE_ERROR,
            )
        return workload
    return names[0] if len(names) == 1 else None  # several: chosen when a command needs one


def stack_outputs(cloudformation: CloudFormationClient, stack_name: str) -> dict[str, str]:
    """``{OutputKey: OutputValue}`` of the stack; a missing stack is a usage error."""
    try:
        stacks = cloudformation.describe_stacks(StackName=stack_name)["Stacks"]
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") == "ValidationError":
            raise CliError(
                f"stack {stack_name!r} not found ({exc.response['Error'].get('Message', '')}); "
                "pass --stack-name, --region or --endpoint-url (the local runtime's stack is "
                "'sluice-local', at the AWS_ENDPOINT_URL `make up` prints)",
                USAGE_ERROR,
            ) from None
        raise
    if not stacks:
        raise CliError(f"stack {stack_name!r} not found; pass --stack-name", USAGE_ERROR)
    outputs = _outputs_of(stacks[0])
    for key in NESTED_STACK_OUTPUTS:  # the workloads', delays' and job store's outputs: their nested stacks'
        if nested := outputs.get(key):
            [stack] = cloudformation.describe_stacks(StackName=nested)["Stacks"]
            outputs |= _outputs_of(stack)
    return outputs


def _outputs_of(stack: Any) -> dict[str, str]:
    """A stack's outputs. A key with a dot is the local runtime's copy of a nested stack's output on the
    root (``DelayStack.DelayBucketName``): CloudFormation's keys are alphanumeric, and the nested
    stack's own outputs are read from it, so those are left out."""
    return {
        o["OutputKey"]: o["OutputValue"]
        for o in stack.get("Outputs", [])
        if "OutputKey" in o and "." not in o["OutputKey"]
    }


# --- samconfig.toml ----------------------------------------------------------------------------


def samconfig(path: Path, config_env: str) -> dict[str, str]:
    """``stack_name`` and ``region`` of ``config_env`` in samconfig.toml (deploy's win over global's)."""
    try:
        return deploy_settings(path, config_env)
    except ValueError as exc:
        raise CliError(str(exc), USAGE_ERROR) from None


# --- the deployed redrive settings -------------------------------------------------------------


@dataclass(frozen=True)
class LoadedSettings:
    settings: RedriveSettings
    origin: str
    """``function:<name>`` when read from the deployed function, else ``fallback``."""
    note: str | None = None
    """Why the fallback was used (shown to the operator)."""

    def to_dict(self) -> dict[str, object]:
        return {"origin": self.origin, "note": self.note, "allowlist": list(self.settings.allowlist)}


def redrive_settings(resources: Resources, lambda_client: LambdaClient) -> LoadedSettings:
    """The SLUICE_* RedriveSettings of the deployed function, so the CLI plans exactly like it.

    When the function cannot be read, the settings come from the stack outputs and the defaults,
    and ``note`` says so. Settings the function holds but that do not validate are an error: the
    deployed redriver could not start with them either.
    """
    name = resources.redrive_settings_function
    if not name:
        return _fallback(
            resources,
            f"stack {resources.stack_name!r} has no output "
            f"{resources.workload or ''}RedriveSettingsFunctionName",
        )
    try:
        config = lambda_client.get_function_configuration(FunctionName=name)
    except (ClientError, BotoCoreError) as exc:
        return _fallback(resources, f"cannot read the settings of function {name!r} ({exc})")
    env = dict((config.get("Environment") or {}).get("Variables") or {})
    try:
        return LoadedSettings(RedriveSettings.from_env(env), f"function:{name}")
    except ConfigurationError as exc:
        raise CliError(f"function {name!r} holds invalid redrive settings: {exc}", PARTIAL_FAILURE) from None


def _fallback(resources: Resources, why: str) -> LoadedSettings:
    env = {
        "SLUICE_BREAKER_TABLE": resources.require("breaker_table"),
        "SLUICE_BREAKER_NAME": resources.breaker_name,
        "SLUICE_DEAD_LETTER_QUEUE_URL": resources.require("dead_letter_queue_url"),
        "SLUICE_POISON_QUEUE_URL": resources.require("poison_queue_url"),
        "SLUICE_SOURCE_QUEUE_ARN": resources.require("work_queue_arn"),
        "SLUICE_ENVELOPE_KEY_SECRET": resources.require("envelope_key_secret"),
        # as the deployed redriver: long backoffs through the delay queue, bodies that outgrow SQS offloaded
        "SLUICE_DELAY_QUEUE_URL": resources.delay_queue_url or "",
        "SLUICE_DELAY_TARGETS": resources.delay_targets
        or "",  # a backoff it cannot deliver is cut, as deployed
        "SLUICE_CLAIM_CHECK_BUCKETS": resources.claim_check_bucket or "",
        "SLUICE_CLAIM_CHECK_PREFIX": resources.claim_check_prefix or "",
    }
    settings = RedriveSettings.from_env(env)
    note = f"{why}; using the stack outputs and default redrive settings (allowlist: the work queue only)"
    return LoadedSettings(settings, "fallback", note)
