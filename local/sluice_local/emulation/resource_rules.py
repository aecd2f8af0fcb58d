"""What AWS refuses at create time and moto accepts: physical names and SQS event source batching.

The runtime's own reading of AWS's documentation (never sluice's product code), checked against the
translated template before anything is created, so that a template that would fail in AWS fails here:

- an explicit physical name (``FunctionName``, ``QueueName``, ``AlarmName``...) longer than the
  service allows or with a character it refuses (:data:`NAME_RULES`, each with its API reference);
- two resources of one kind given the same name in one deploy (CloudFormation fails the second:
  the name already exists), e.g. two alarms or two dashboards;
- an SQS event source mapping's ``BatchSize`` outside 1..10000 (standard queue) or 1..10 (FIFO), a
  standard queue's ``BatchSize`` above 10 with ``MaximumBatchingWindowInSeconds`` below 1, a window
  outside 0..300 (Lambda ``CreateEventSourceMapping``).

A name built from something known only once resources exist (``Fn::GetAtt``, an import) is not
checked; every name sluice's templates give is built from parameters and pseudo-parameters.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class NameRule:
    maximum: int
    pattern: str
    source: str
    minimum: int = 1
    unique: bool = True
    """False where the same name is legal twice (an inline policy's is its identity's own)."""
    folded: bool = False
    """Unique regardless of case (IAM's names)."""
    scope: str = ""
    """The property a name is unique within (an EventBridge rule's, its event bus)."""


_LAMBDA = "https://docs.aws.amazon.com/lambda/latest/api/API_CreateFunction.html"
_IAM = "https://docs.aws.amazon.com/IAM/latest/APIReference/API_CreateRole.html"
NAME_RULES: dict[tuple[str, str], NameRule] = {
    ("AWS::Lambda::Function", "FunctionName"): NameRule(64, r"[a-zA-Z0-9_-]+", _LAMBDA),
    ("AWS::Lambda::LayerVersion", "LayerName"): NameRule(  # a name given again publishes a new version
        140,
        r"[a-zA-Z0-9_-]+",
        "https://docs.aws.amazon.com/lambda/latest/api/API_PublishLayerVersion.html",
        unique=False,
    ),
    ("AWS::SQS::Queue", "QueueName"): NameRule(
        80,
        r"[A-Za-z0-9_-]+(\.fifo)?",
        "https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_CreateQueue.html",
    ),
    ("AWS::SNS::Topic", "TopicName"): NameRule(
        256, r"[A-Za-z0-9_-]+(\.fifo)?", "https://docs.aws.amazon.com/sns/latest/api/API_CreateTopic.html"
    ),
    ("AWS::IAM::Role", "RoleName"): NameRule(64, r"[\w+=,.@-]+", _IAM, folded=True),
    ("AWS::IAM::Policy", "PolicyName"): NameRule(128, r"[\w+=,.@-]+", _IAM, unique=False),
    ("AWS::IAM::ManagedPolicy", "ManagedPolicyName"): NameRule(
        128,
        r"[\w+=,.@-]+",
        "https://docs.aws.amazon.com/IAM/latest/APIReference/API_CreatePolicy.html",
        folded=True,
    ),
    ("AWS::StepFunctions::StateMachine", "StateMachineName"): NameRule(
        80,
        r"[^\s<>{}\[\]?*\"#%\\^|~`$&,;:/\x00-\x1f\x7f-\x9f]+",
        "https://docs.aws.amazon.com/step-functions/latest/apireference/API_CreateStateMachine.html",
    ),
    ("AWS::CloudWatch::Alarm", "AlarmName"): NameRule(  # the API gives its length only
        255,
        r"[^\x00-\x1f\x7f]+",
        "https://docs.aws.amazon.com/AmazonCloudWatch/latest/APIReference/API_PutMetricAlarm.html",
    ),
    ("AWS::CloudWatch::Dashboard", "DashboardName"): NameRule(
        255,
        r"[A-Za-z0-9_-]+",
        "https://docs.aws.amazon.com/AmazonCloudWatch/latest/APIReference/API_PutDashboard.html",
    ),
    ("AWS::Logs::LogGroup", "LogGroupName"): NameRule(
        512,
        r"[.\-_/#A-Za-z0-9]+",
        "https://docs.aws.amazon.com/AmazonCloudWatchLogs/latest/APIReference/API_CreateLogGroup.html",
    ),
    ("AWS::DynamoDB::Table", "TableName"): NameRule(
        255,
        r"[a-zA-Z0-9_.-]+",
        "https://docs.aws.amazon.com/amazondynamodb/latest/APIReference/API_CreateTable.html",
        minimum=3,
    ),
    ("AWS::Events::Rule", "Name"): NameRule(
        64,
        r"[.\-_A-Za-z0-9]+",
        "https://docs.aws.amazon.com/eventbridge/latest/APIReference/API_PutRule.html",
        scope="EventBusName",
    ),
    ("AWS::Scheduler::Schedule", "Name"): NameRule(
        64,
        r"[0-9a-zA-Z_.-]+",
        "https://docs.aws.amazon.com/scheduler/latest/APIReference/API_CreateSchedule.html",
    ),
    ("AWS::S3::Bucket", "BucketName"): NameRule(
        63,
        r"[a-z0-9][a-z0-9.-]*[a-z0-9]",
        "https://docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html",
        minimum=3,
    ),
}
_ESM = "https://docs.aws.amazon.com/lambda/latest/api/API_CreateEventSourceMapping.html"
_UNKNOWN = object()


class ResourceRuleError(ValueError):
    """A resource AWS would refuse to create: the stack fails there (CREATE_FAILED)."""


def resource_problems(resources: Mapping[str, Mapping[str, Any]], values: Mapping[str, Any]) -> list[str]:
    """Every refusal the resources meet, one line each naming the resource, the value and the limit.

    ``values``: the parameters and pseudo-parameters (``AWS::StackName``...) names are built from."""
    problems: list[str] = []
    seen: dict[tuple[str, str], str] = {}
    for logical_id, resource in resources.items():
        kind = str(resource.get("Type"))
        properties = resource.get("Properties") or {}
        for (rule_kind, prop), rule in NAME_RULES.items():
            if rule_kind != kind or prop not in properties:
                continue
            name = resolve_text(properties[prop], values)
            if name is None:
                continue
            problem = _name_problem(logical_id, kind, prop, name, rule)
            if problem:
                problems.append(problem)
            if rule.unique:
                within = resolve_text(properties.get(rule.scope, "default"), values) if rule.scope else ""
                key = (kind, f"{within}/{name.lower() if rule.folded else name}")
                first = seen.setdefault(key, logical_id)
                if first != logical_id:
                    problems.append(
                        f"{logical_id}: {kind} {prop} '{name}' already exists (also {first}'s): "
                        "a name is unique per account and Region"
                    )
        if kind == "AWS::Lambda::EventSourceMapping":
            problems.extend(_batching_problems(logical_id, properties, resources, values))
    return problems


def _name_problem(logical_id: str, kind: str, prop: str, name: str, rule: NameRule) -> str | None:
    if not rule.minimum <= len(name) <= rule.maximum:
        return (
            f"{logical_id}: {kind} {prop} '{name}' is {len(name)} characters: "
            f"AWS allows {rule.minimum} to {rule.maximum} ({rule.source})"
        )
    if re.fullmatch(rule.pattern, name) is None:
        return f"{logical_id}: {kind} {prop} '{name}' does not match {rule.pattern} ({rule.source})"
    return None


def _batching_problems(
    logical_id: str,
    properties: Mapping[str, Any],
    resources: Mapping[str, Mapping[str, Any]],
    values: Mapping[str, Any],
) -> Iterable[str]:
    fifo = _sqs_fifo(properties.get("EventSourceArn"), resources, values)
    if fifo is None:  # not an SQS queue, or one not known before it exists
        return []
    size = _number(properties.get("BatchSize", 10), values)
    window = _number(properties.get("MaximumBatchingWindowInSeconds", 0), values)
    if size is None or window is None:
        return []
    kind = "FIFO" if fifo else "standard"
    most = 10 if fifo else 10000
    problems = []
    if not 1 <= size <= most:
        problems.append(
            f"{logical_id}: BatchSize {size} on a {kind} SQS queue: Lambda allows 1 to {most} ({_ESM})"
        )
    if not 0 <= window <= 300:
        problems.append(
            f"{logical_id}: MaximumBatchingWindowInSeconds {window}: Lambda allows 0 to 300 ({_ESM})"
        )
    if fifo and window > 0:  # "Batching window is not supported for FIFO queues" (0 is its default)
        problems.append(
            f"{logical_id}: MaximumBatchingWindowInSeconds {window} on a FIFO SQS queue: Lambda supports no "
            "batching window there (https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-parameters.html)"
        )
    if not fifo and size > 10 and window < 1:
        problems.append(
            f"{logical_id}: BatchSize {size} (above 10) needs MaximumBatchingWindowInSeconds of at least 1, "
            f"not {window} ({_ESM})"
        )
    return problems


def _sqs_fifo(
    source: Any, resources: Mapping[str, Mapping[str, Any]], values: Mapping[str, Any]
) -> bool | None:
    """True for a FIFO queue, False for a standard one, None when the source is no known SQS queue."""
    if isinstance(source, dict) and "Fn::GetAtt" in source:
        target = source["Fn::GetAtt"]
        logical_id = target[0] if isinstance(target, list) else str(target).split(".", 1)[0]
        queue = resources.get(logical_id) or {}
        if queue.get("Type") != "AWS::SQS::Queue":
            return None
        props = queue.get("Properties") or {}
        name = resolve_text(props.get("QueueName", ""), values) or ""
        return str(resolve_text(props.get("FifoQueue", False), values)).lower() == "true" or name.endswith(
            ".fifo"
        )
    arn = resolve_text(source, values)
    if arn is None or ":sqs:" not in arn:
        return None
    return arn.endswith(".fifo")


def _number(value: Any, values: Mapping[str, Any]) -> int | None:
    text = resolve_text(value, values)
    try:
        return int(float(text)) if text is not None else None
    except ValueError:
        return None


def resolve_text(value: Any, values: Mapping[str, Any]) -> str | None:
    """The text ``value`` stands for, given the parameters; None when it needs a created resource."""
    found = _resolve(value, values)
    return None if found is _UNKNOWN else str(found)


def _resolve(value: Any, values: Mapping[str, Any]) -> Any:  # noqa: PLR0911 - one per function
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (str, int, float)):
        return value
    if isinstance(value, dict) and len(value) == 1:
        ((function, argument),) = value.items()
        if function == "Ref":
            return values.get(argument, _UNKNOWN)
        if function == "Fn::Sub":
            return _sub(argument, values)
        if function == "Fn::Join" and isinstance(argument, list) and len(argument) == 2:
            parts = argument[1]
            if not isinstance(parts, list):
                return _UNKNOWN
            resolved = [_resolve(part, values) for part in parts]
            if any(part is _UNKNOWN for part in resolved):
                return _UNKNOWN
            return str(argument[0]).join(map(str, resolved))
    return _UNKNOWN


def _sub(argument: Any, values: Mapping[str, Any]) -> Any:
    text, extra = (argument, {}) if isinstance(argument, str) else (argument[0], argument[1])
    scope = dict(values)
    for name, expression in extra.items():
        scope[name] = _resolve(expression, values)
    unknown = False

    def replace(match: re.Match[str]) -> str:
        nonlocal unknown
        name = match.group(1)
        if name.startswith("!"):
            return "${" + name[1:] + "}"
        found = scope.get(name, _UNKNOWN)
        if found is _UNKNOWN:
            unknown = True
            return ""
        return str(found)

    result = re.sub(r"\$\{([^}]+)\}", replace, text)
    return _UNKNOWN if unknown else result
