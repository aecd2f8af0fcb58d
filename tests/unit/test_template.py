"""The template contract: what template.yaml must keep true, checked on the SAM source and on its translation.

Each rule is a ``check_*`` function returning the problems it finds (empty = the rule holds). The
contract tests run every rule on the real template; the mutation tests at the end break a copy of the
template in one way each and assert the matching rule notices, so a rule cannot silently stop
checking anything.

The rules check every workload the project runs, created queue or existing, whatever a team's
workloads.yaml lists; a rule about the one loop body every workload's resources come from checks it on
the example Orders, which the checked copy of the project always runs (the examples' blocks added to a
team's own, :func:`project_with_examples`). A fork's own workloads are checked too: a copy with one
created and one existing queue added as docs/workloads.md says (tests/unit/test_fork_workloads.py).

The translation is done like ``sam validate``: local ``CodeUri``/``ContentUri`` become a dummy S3 URI,
then samtranslator's ``Translator`` runs with the template's parameter defaults, a boto3 session for
the region and a stub managed-policy loader (SAM's bundled map covers the policies it adds itself).
"""

from __future__ import annotations

import copy
import inspect
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
import pytest
from aws_lambda_powertools.utilities.idempotency import DynamoDBPersistenceLayer
from samtranslator.parser.parser import Parser
from samtranslator.translator.translator import Translator
from samtranslator.yaml_helper import yaml_parse

from sluice.consumer.settings import ConsumerSettings
from sluice.limits import MAX_VISIBILITY_SECONDS
from sluice.redrive.settings import RedriveSettings
from sluice.settings import ENV_PREFIX
from sluice_local.emulation.language_extensions import resolve_find_in_map, with_nested
from sluice_local.testing.project import EXAMPLES, add_workloads, copy_project

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "template.yaml"
WORKLOADS_TEMPLATE = ROOT / "workloads.yaml"
REGION = "us-east-1"

Template = dict[str, Any]
Check = Callable[[Template, Template], list[str]]

WORKLOAD = "Orders"  # every workload's resources come from one loop body: the example's are checked
WORK_QUEUE = f"{WORKLOAD}Queue"
DEAD_LETTER_QUEUE = f"{WORKLOAD}DeadLetterQueue"
CONSUMER = f"{WORKLOAD}ConsumerFunction"
CONSUMER_ROLE = f"{WORKLOAD}ConsumerRole"
EVENT_SOURCE = f"{WORKLOAD}QueueSource"
VISIBILITY_MAPPING = "VisibilityTimeout"
TIMEOUT_PARAMETER = "ConsumerTimeoutSeconds"
WINDOW_PARAMETER = "MaximumBatchingWindowInSeconds"
TIMEOUT_LOOKUP = {
    "Fn::FindInMap": ["Workloads", WORKLOAD, "Timeout", {"DefaultValue": {"Ref": TIMEOUT_PARAMETER}}]
}
WINDOW_LOOKUP = {
    "Fn::FindInMap": ["Workloads", WORKLOAD, "BatchingWindow", {"DefaultValue": {"Ref": WINDOW_PARAMETER}}]
}
VISIBILITY_LOOKUP = {"Fn::FindInMap": [VISIBILITY_MAPPING, TIMEOUT_LOOKUP, WINDOW_LOOKUP]}

# Actions for which AWS offers no resource-level permissions: a statement may grant them on "*".
WILDCARD_RESOURCE_ACTIONS: dict[str, str] = {
    "xray:PutTraceSegments": "X-Ray has no resource-level permissions for writing segments",
    "xray:PutTelemetryRecords": "X-Ray has no resource-level permissions for telemetry",
    "xray:GetSamplingRules": "X-Ray sampling rules are read account-wide by the SDK",
    "xray:GetSamplingTargets": "X-Ray sampling targets are read account-wide by the SDK",
    "cloudwatch:PutMetricData": "CloudWatch metrics have no resource ARN (scope with cloudwatch:namespace)",
    **{
        f"logs:{action}": "Step Functions' vended log delivery: AWS documents it on Resource * only"
        for action in (
            "CreateLogDelivery",
            "GetLogDelivery",
            "UpdateLogDelivery",
            "DeleteLogDelivery",
            "ListLogDeliveries",
            "PutResourcePolicy",
            "DescribeResourcePolicies",
            "DescribeLogGroups",
        )
    },
}

# AWS managed policies a role may attach. Their documents are not in the template, so they could hide
# a grant on Resource "*" (SAM's AWSLambdaSQSQueueExecutionRole does): only the one below, whose
# contents are known; every other permission is an inline, resource-scoped statement checked above.
ALLOWED_MANAGED_POLICIES: dict[str, str] = {
    # SAM attaches it to a state machine's role when Tracing is enabled: X-Ray's segment and sampling
    # writes, the same actions WILDCARD_RESOURCE_ACTIONS allows on "*", nothing else.
    "AWSXrayWriteOnlyAccess": "X-Ray writes of a traced state machine",
}


# --- loading -----------------------------------------------------------------------------------


def load_template(template: Path = TEMPLATE) -> Template:
    """The whole application as CloudFormation reads it after ``AWS::LanguageExtensions``: template.yaml
    with its nested applications' templates (workloads.yaml, ...) in it, their ``Fn::ForEach`` loops
    expanded for the parameters' defaults (the loops repeat resources; none depends on a parameter, so
    every resource of every mode is here, each under its Condition). ``template``: a copy's."""
    return with_nested(template, {}, resolve_mappings=False)


def project_with_examples(into: Path, extra: dict[str, str] | None = None) -> Path:
    """``into`` made a copy of the project running its own workloads, the examples (added when a team's
    workloads.yaml left them out) and ``extra``'s (name: block, as docs/workloads.md writes one);
    returns the copy's template."""
    text = add_workloads(WORKLOADS_TEMPLATE.read_text(encoding="utf-8"), {**EXAMPLES, **(extra or {})})
    return copy_project(TEMPLATE, into, workloads=text)


def workload_names(raw: Template | None = None) -> list[str]:
    """The workloads workloads.yaml runs: the list its ``Fn::ForEach::Workload`` loops over; of ``raw``
    (a loaded template) the workloads it has a block and a consumer of."""
    if raw is not None:
        resources = raw.get("Resources", {})
        blocks = raw.get("Mappings", {}).get("Workloads", {})
        return [str(name) for name in blocks if f"{name}ConsumerFunction" in resources]
    loaded = yaml_parse(WORKLOADS_TEMPLATE.read_text(encoding="utf-8"))
    names = loaded["Resources"]["Fn::ForEach::Workload"][1]
    assert isinstance(names, list), "workloads.yaml's loop no longer lists its workloads"
    return [str(name) for name in names]


class _StubManagedPolicyLoader:
    """Stands in for ManagedPolicyLoader (which asks IAM); SAM falls back to its bundled map."""

    def load(self) -> dict[str, str]:
        return {}


def translate(raw: Template) -> Template:
    sam = copy.deepcopy(raw)
    for resource in sam.get("Resources", {}).values():
        properties = resource.get("Properties", {})
        for key in ("CodeUri", "ContentUri", "DefinitionUri"):
            value = properties.get(key)
            if isinstance(value, dict) or (isinstance(value, str) and not value.startswith("s3://")):
                properties[key] = "s3://bucket/value"  # a workload's CodeUri is a Fn::FindInMap
        if isinstance(properties.get("Layers"), dict):  # a workload's extra layers, [] by default: the
            # LanguageExtensions transform resolves the lookup before SAM adds the Globals' CommonLayer
            properties["Layers"] = resolve_find_in_map(properties["Layers"], sam.get("Mappings", {}), {})
    with pytest.MonkeyPatch.context() as env:
        env.delenv("AWS_PROFILE", raising=False)
        translator = Translator(
            managed_policy_map=None,
            sam_parser=Parser(),
            plugins=[],
            boto_session=boto3.session.Session(region_name=REGION),
        )
        translated = translator.translate(
            sam_template=sam, parameter_values={}, get_managed_policy_map=_StubManagedPolicyLoader().load
        )
    translator.metrics.publish()  # to SAM's no-op publisher; otherwise it warns when collected
    return translated


@pytest.fixture(scope="module")
def raw(tmp_path_factory: pytest.TempPathFactory) -> Template:
    return load_template(project_with_examples(tmp_path_factory.mktemp("project")))


@pytest.fixture(scope="module")
def cfn(raw: Template) -> Template:
    return translate(raw)


# --- helpers -----------------------------------------------------------------------------------


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def _of_type(template: Template, resource_type: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in template.get("Resources", {}).items() if v.get("Type") == resource_type}


def _properties(template: Template, logical_id: str) -> dict[str, Any]:
    return template.get("Resources", {}).get(logical_id, {}).get("Properties", {})


def _parameter(template: Template, name: str) -> dict[str, Any]:
    return template.get("Parameters", {}).get(name, {})


def _ref(name: str) -> dict[str, str]:
    return {"Ref": name}


def _arn(logical_id: str) -> dict[str, list[str]]:
    return {"Fn::GetAtt": [logical_id, "Arn"]}


def _default(value: Any) -> Any:
    """A workload setting's stack-wide default: ``Fn::FindInMap [Workloads, <name>, <key>,
    {DefaultValue: X}]`` → X's (a setting defaulting to another, as MaximumConcurrency to
    ReservedConcurrency, to that one's); anything else as it is."""
    if isinstance(value, dict) and set(value) == {"Fn::FindInMap"}:
        args = value["Fn::FindInMap"]
        if args[0] == "Workloads" and len(args) == 4 and isinstance(args[3], dict):
            return _default(args[3].get("DefaultValue"))
    return value


def _consumer_env(cfn: Template) -> dict[str, Any]:
    return _properties(cfn, CONSUMER).get("Environment", {}).get("Variables", {})


def _consumer_mapping(cfn: Template) -> dict[str, Any]:
    for mapping in _of_type(cfn, "AWS::Lambda::EventSourceMapping").values():
        if mapping["Properties"].get("FunctionName") == _ref(CONSUMER):
            return mapping["Properties"]
    return {}


# --- rules -------------------------------------------------------------------------------------


def check_visibility_timeout(raw: Template, cfn: Template) -> list[str]:  # noqa: C901 - one check per mapping cell, each branch a rule
    """Work queue visibility >= 6 x consumer timeout + batching window, for every allowed pair."""
    problems: list[str] = []
    table = raw.get("Mappings", {}).get(VISIBILITY_MAPPING, {})
    for timeout, row in table.items():
        for window, cell in row.items():
            if int(cell) < 6 * int(timeout) + int(window):
                problems.append(
                    f"{VISIBILITY_MAPPING}[{timeout}][{window}] = {cell} < 6 x {timeout} + {window}"
                )
            if int(cell) > MAX_VISIBILITY_SECONDS:
                problems.append(f"{VISIBILITY_MAPPING}[{timeout}][{window}] = {cell} exceeds 12 hours")
    timeouts = _parameter(raw, TIMEOUT_PARAMETER).get("AllowedValues")
    windows = _parameter(raw, WINDOW_PARAMETER).get("AllowedValues")
    if not timeouts or not windows:
        problems.append(f"{TIMEOUT_PARAMETER} and {WINDOW_PARAMETER} must list AllowedValues (one cell each)")
    for timeout in timeouts or []:
        for window in windows or []:
            if str(window) not in table.get(str(timeout), {}):
                problems.append(f"no {VISIBILITY_MAPPING} cell for timeout {timeout}, window {window}")
    for where, value in (
        (f"{WORK_QUEUE}.VisibilityTimeout", _properties(raw, WORK_QUEUE).get("VisibilityTimeout")),
        (
            f"{CONSUMER} SLUICE_VISIBILITY_TIMEOUT_SECONDS",
            _consumer_env(cfn).get("SLUICE_VISIBILITY_TIMEOUT_SECONDS"),
        ),
    ):
        if value != VISIBILITY_LOOKUP:
            problems.append(f"{where} must be {VISIBILITY_LOOKUP}, is {value}")
    for where, value, lookup in (
        (f"{CONSUMER}.Timeout", _properties(cfn, CONSUMER).get("Timeout"), TIMEOUT_LOOKUP),
        (
            "SQS event MaximumBatchingWindowInSeconds",
            _consumer_mapping(cfn).get(WINDOW_PARAMETER),
            WINDOW_LOOKUP,
        ),
        ("SLUICE_BATCH_WINDOW_SECONDS", _consumer_env(cfn).get("SLUICE_BATCH_WINDOW_SECONDS"), WINDOW_LOOKUP),
    ):
        if value != lookup:
            problems.append(f"{where} must be {lookup}, is {value}")
    return problems


def check_workload_visibility(raw: Template, cfn: Template) -> list[str]:
    """A workload's own Timeout and BatchingWindow have their visibility cell (6 x timeout + window)."""
    table = raw.get("Mappings", {}).get(VISIBILITY_MAPPING, {})
    default_timeout = _parameter(raw, TIMEOUT_PARAMETER).get("Default")
    default_window = _parameter(raw, WINDOW_PARAMETER).get("Default")
    return [
        f"workload {name}: no {VISIBILITY_MAPPING} cell for its Timeout and BatchingWindow"
        for name, workload in raw.get("Mappings", {}).get("Workloads", {}).items()
        if str(workload.get("BatchingWindow", default_window))
        not in table.get(str(workload.get("Timeout", default_timeout)), {})
    ]


def check_dead_letter_retention(raw: Template, cfn: Template) -> list[str]:
    """The DLQ keeps messages longer than the work queue can (SQS keeps the original enqueue time)."""
    problems: list[str] = []
    dlq = _properties(raw, DEAD_LETTER_QUEUE).get("MessageRetentionPeriod")
    work = _properties(raw, WORK_QUEUE).get("MessageRetentionPeriod")
    if not isinstance(dlq, int):
        return [f"{DEAD_LETTER_QUEUE}.MessageRetentionPeriod must be a number, is {dlq}"]
    if isinstance(work, dict) and "Ref" in work:
        parameter = _parameter(raw, work["Ref"])
        limits = {"MaxValue": parameter.get("MaxValue"), "Default": parameter.get("Default")}
        for name, limit in limits.items():
            if limit is None or dlq <= int(limit):
                problems.append(f"DLQ retention {dlq} must exceed {work['Ref']} {name} ({limit})")
    elif not isinstance(work, int) or dlq <= work:
        problems.append(f"DLQ retention {dlq} must exceed the work queue's ({work})")
    return problems


def check_queues_encrypted(raw: Template, cfn: Template) -> list[str]:
    return [
        f"{name} has neither SqsManagedSseEnabled nor KmsMasterKeyId"
        for name, queue in _of_type(cfn, "AWS::SQS::Queue").items()
        if queue.get("Properties", {}).get("SqsManagedSseEnabled") is not True
        and not queue.get("Properties", {}).get("KmsMasterKeyId")
    ]


def check_tables(raw: Template, cfn: Template) -> list[str]:
    """Encrypted and recoverable; an idempotency table is keyed and expires as Powertools writes it."""
    defaults = inspect.signature(DynamoDBPersistenceLayer.__init__).parameters
    expiry, key = defaults["expiry_attr"].default, defaults["key_attr"].default
    problems: list[str] = []
    tables = _of_type(cfn, "AWS::DynamoDB::Table")
    if not tables:
        problems.append("no DynamoDB table")
    idempotency: set[str] = set()  # tables Powertools idempotency writes to (TTL rule applies)
    for function in _of_type(cfn, "AWS::Lambda::Function").values():
        variables = function["Properties"].get("Environment", {}).get("Variables", {})
        table_ref = variables.get("SLUICE_IDEMPOTENCY_TABLE")
        if isinstance(table_ref, dict) and "Ref" in table_ref:
            idempotency.add(str(table_ref["Ref"]))
    if not idempotency:
        problems.append("no function names an idempotency table (SLUICE_IDEMPOTENCY_TABLE)")
    for name, table in tables.items():
        p = table.get("Properties", {})
        if p.get("SSESpecification", {}).get("SSEEnabled") is not True:
            problems.append(f"{name} lacks SSESpecification.SSEEnabled")
        if p.get("PointInTimeRecoverySpecification", {}).get("PointInTimeRecoveryEnabled") is not True:
            problems.append(f"{name} lacks point-in-time recovery")
        ttl = p.get("TimeToLiveSpecification")
        if name in idempotency and ttl != {"AttributeName": expiry, "Enabled": True}:
            problems.append(f"{name} must expire items on {expiry!r} (Powertools' expiry attribute)")
        if name in idempotency and p.get("KeySchema") != [{"AttributeName": key, "KeyType": "HASH"}]:
            problems.append(f"{name} must be keyed by {key!r} only (Powertools' key attribute)")
    return problems


def _lifecycle_problems(name: str, lifecycle: list[dict[str, Any]]) -> list[str]:
    problems: list[str] = []
    if name == "DelayBucket":
        # Parked messages may wait a year: the lifecycle must never expire them before they are due.
        if not any(
            rule.get("Status") == "Enabled"
            and (rule.get("Prefix") or rule.get("Filter", {}).get("Prefix")) == "delayed/"
            and int(rule.get("ExpirationInDays", 0)) > 366
            for rule in lifecycle
        ):
            problems.append(f"{name} must expire delayed/ only after more than the 365-day maximum delay")
    elif name == "AccessLogBucket":
        if not any(
            r.get("Status") == "Enabled" and r.get("ExpirationInDays") == _ref("AccessLogRetentionDays")
            for r in lifecycle
        ):
            problems.append(f"{name} must expire its logs after AccessLogRetentionDays")
    elif not any(
        rule.get("Status") == "Enabled"
        and (rule.get("Prefix") or rule.get("Filter", {}).get("Prefix")) == _ref("ClaimCheckPrefix")
        and ("ExpirationInDays" in rule or "ExpirationDate" in rule)
        for rule in lifecycle
    ):
        problems.append(f"{name} has no enabled expiration rule on the ClaimCheckPrefix")
    return problems


def check_claim_check_bucket(raw: Template, cfn: Template) -> list[str]:
    problems: list[str] = []
    buckets = _of_type(cfn, "AWS::S3::Bucket")
    if not buckets:
        problems.append("no S3 bucket")
    policies = [p["Properties"] for p in _of_type(cfn, "AWS::S3::BucketPolicy").values()]
    for name, bucket in buckets.items():
        p = bucket.get("Properties", {})
        rules = p.get("BucketEncryption", {}).get("ServerSideEncryptionConfiguration", [])
        algorithms = {r.get("ServerSideEncryptionByDefault", {}).get("SSEAlgorithm") for r in rules}
        if not rules or not algorithms <= {"AES256", "aws:kms", "aws:kms:dsse"}:
            problems.append(f"{name} lacks default encryption")
        block = p.get("PublicAccessBlockConfiguration", {})
        for setting in ("BlockPublicAcls", "BlockPublicPolicy", "IgnorePublicAcls", "RestrictPublicBuckets"):
            if block.get(setting) is not True:
                problems.append(f"{name} lacks PublicAccessBlockConfiguration.{setting}")
        if not any(
            policy.get("Bucket") == _ref(name)
            and _denies_insecure_transport(policy.get("PolicyDocument", {}))
            for policy in policies
        ):
            problems.append(f"{name} has no bucket policy denying aws:SecureTransport=false")
        problems += _lifecycle_problems(name, p.get("LifecycleConfiguration", {}).get("Rules", []))
    for name in ("ClaimCheckBucket", "DelayBucket"):  # payloads may hold personal data
        logging = buckets.get(name, {}).get("Properties", {}).get("LoggingConfiguration", {})
        if logging.get("DestinationBucketName") != _ref("AccessLogBucket"):
            problems.append(f"{name} must log server access to AccessLogBucket")
    env = _consumer_env(cfn)
    if env.get("SLUICE_CLAIM_CHECK_PREFIX") != _ref("ClaimCheckPrefix"):
        problems.append("SLUICE_CLAIM_CHECK_PREFIX must be Ref ClaimCheckPrefix (the prefix that expires)")
    return problems


def _denies_insecure_transport(document: dict[str, Any]) -> bool:
    for statement in _as_list(document.get("Statement")):
        condition = statement.get("Condition", {}).get("Bool", {}).get("aws:SecureTransport")
        if (
            statement.get("Effect") == "Deny"
            and statement.get("Principal") in ("*", {"AWS": "*"})
            and "s3:*" in _as_list(statement.get("Action"))
            and str(condition).lower() == "false"
        ):
            return True
    return False


def _iam_documents(cfn: Template) -> list[tuple[str, dict[str, Any]]]:
    documents: list[tuple[str, dict[str, Any]]] = []
    for name, role in _of_type(cfn, "AWS::IAM::Role").items():
        for policy in role.get("Properties", {}).get("Policies", []):
            documents.append((f"{name}/{policy.get('PolicyName')}", policy.get("PolicyDocument", {})))
    for resource_type in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy", "AWS::IAM::RolePolicy"):
        for name, policy in _of_type(cfn, resource_type).items():
            documents.append((name, policy.get("Properties", {}).get("PolicyDocument", {})))
    return documents


def check_no_wildcard_resources(raw: Template, cfn: Template) -> list[str]:
    """An Allow on Resource '*' only for actions AWS offers no resource-level permission for."""
    problems: list[str] = []
    for where, document in _iam_documents(cfn):
        for statement in _as_list(document.get("Statement")):
            if statement.get("Effect") != "Allow":
                continue
            sid = statement.get("Sid", "?")
            if "NotResource" in statement:
                problems.append(f"{where} statement {sid} allows NotResource")
            if "*" not in _as_list(statement.get("Resource")):
                continue
            others = [a for a in _as_list(statement.get("Action")) if a not in WILDCARD_RESOURCE_ACTIONS]
            if others or "NotAction" in statement:
                problems.append(f"{where} statement {sid} allows {others or 'NotAction'} on Resource '*'")
    return problems


def check_managed_policies(raw: Template, cfn: Template) -> list[str]:
    problems: list[str] = []
    for name, role in _of_type(cfn, "AWS::IAM::Role").items():
        attached = role.get("Properties", {}).get("ManagedPolicyArns", [])
        if _default(attached) == [] and attached != []:  # a workload's own: the team's, none by default
            examples = raw.get("Mappings", {}).get("Workloads", {})
            attached = [
                arn for workload in examples.values() for arn in workload.get("ManagedPolicyArns", [])
            ]
        for arn in attached:
            text = arn.get("Fn::Sub", "") if isinstance(arn, dict) else str(arn)
            if text.partition(":policy/")[2] not in ALLOWED_MANAGED_POLICIES:
                problems.append(f"{name} attaches managed policy {arn} (not in ALLOWED_MANAGED_POLICIES)")
    return problems


def check_consumer_event(raw: Template, cfn: Template) -> list[str]:
    problems: list[str] = []
    mapping = _consumer_mapping(cfn)
    if mapping.get("EventSourceArn") != _arn(WORK_QUEUE):
        problems.append(f"{CONSUMER} must consume {WORK_QUEUE}")
    if "ReportBatchItemFailures" not in mapping.get("FunctionResponseTypes", []):
        problems.append("SQS event lacks FunctionResponseTypes: [ReportBatchItemFailures]")
    concurrency = _default(mapping.get("ScalingConfig", {}).get("MaximumConcurrency"))
    if not isinstance(concurrency, dict) or "Ref" not in concurrency:
        problems.append(f"ScalingConfig.MaximumConcurrency must Ref a parameter, is {concurrency}")
    else:
        parameter = _parameter(raw, concurrency["Ref"])
        if int(parameter.get("MinValue", 0)) < 2:
            problems.append(f"{concurrency['Ref']} MinValue must be >= 2 (SQS MaximumConcurrency minimum)")
        if int(parameter.get("MaxValue", 10**6)) > 1000:
            problems.append(f"{concurrency['Ref']} MaxValue must be <= 1000")
    return problems


def check_redrive(raw: Template, cfn: Template) -> list[str]:
    problems: list[str] = []
    count = _parameter(raw, "MaxReceiveCount")
    if (count.get("MinValue"), count.get("MaxValue"), count.get("Default")) != (3, 10, 5):
        problems.append(f"MaxReceiveCount must allow 3..10 with default 5, is {count}")
    redrive = _properties(cfn, WORK_QUEUE).get("RedrivePolicy", {})
    if redrive.get("maxReceiveCount") != _ref("MaxReceiveCount"):
        problems.append(f"{WORK_QUEUE} RedrivePolicy.maxReceiveCount must be Ref MaxReceiveCount")
    if redrive.get("deadLetterTargetArn") != _arn(DEAD_LETTER_QUEUE):
        problems.append(f"{WORK_QUEUE} must redrive to {DEAD_LETTER_QUEUE}")
    if _consumer_env(cfn).get("SLUICE_MAX_RECEIVE_COUNT") != _ref("MaxReceiveCount"):
        problems.append("SLUICE_MAX_RECEIVE_COUNT must be Ref MaxReceiveCount")
    allow = _properties(cfn, DEAD_LETTER_QUEUE).get("RedriveAllowPolicy", {})
    if allow.get("redrivePermission") != "byQueue":
        problems.append(f"{DEAD_LETTER_QUEUE} RedriveAllowPolicy must be byQueue")
    sources = allow.get("sourceQueueArns", [])
    names_work = [  # the workload's queue: its ARN given (an existing queue), else the one it creates
        s for s in map(_default, sources) if s == _arn(WORK_QUEUE) or s == _created_queue_arn(cfn)
    ]
    if len(sources) != 1 or not names_work:
        problems.append(
            f"{DEAD_LETTER_QUEUE} RedriveAllowPolicy must name exactly {WORK_QUEUE}, is {sources}"
        )
    return problems


def check_globals(raw: Template, cfn: Template) -> list[str]:
    problems: list[str] = []
    function = raw.get("Globals", {}).get("Function", {})
    expected = {"Runtime": "python3.13", "Architectures": ["arm64"], "Tracing": "Active"}
    for key, value in expected.items():
        if function.get(key) != value:
            problems.append(f"Globals.Function.{key} must be {value}, is {function.get(key)}")
    variables = function.get("Environment", {}).get("Variables", {})
    for name in ("POWERTOOLS_SERVICE_NAME", "POWERTOOLS_METRICS_NAMESPACE", "LOG_LEVEL"):
        if not variables.get(name):
            problems.append(f"Globals.Function.Environment lacks {name}")
    layers = _of_type(cfn, "AWS::Lambda::LayerVersion")
    for name, fn in _of_type(cfn, "AWS::Lambda::Function").items():
        p = fn["Properties"]
        if p.get("Runtime") != "python3.13" or p.get("Architectures") != ["arm64"]:
            problems.append(f"{name} is not python3.13 on arm64")
        if p.get("TracingConfig") != {"Mode": "Active"}:
            problems.append(f"{name} is not traced")
        if not any(layer.get("Ref") in layers for layer in p.get("Layers", []) if isinstance(layer, dict)):
            problems.append(f"{name} does not use the common layer")
    return problems


def check_common_layer(raw: Template, cfn: Template) -> list[str]:
    problems: list[str] = []
    layer = raw.get("Resources", {}).get("CommonLayer", {})
    if layer.get("Metadata", {}).get("BuildMethod") != "makefile":
        problems.append("CommonLayer must have Metadata.BuildMethod: makefile")
    p = layer.get("Properties", {})
    architectures = sorted(p.get("CompatibleArchitectures", []))
    if "python3.13" not in p.get("CompatibleRuntimes", []) or architectures != ["arm64", "x86_64"]:
        problems.append("CommonLayer must be compatible with python3.13 on arm64 and x86_64")
    makefile = ROOT / str(p.get("ContentUri", "")) / "Makefile"
    if not makefile.is_file() or "build-CommonLayer:" not in makefile.read_text(encoding="utf-8"):
        problems.append(f"{makefile} must define the build-CommonLayer target")
    return problems


def _created_queue_arn(cfn: Template) -> object:
    """The ARN of the queue the workload creates, written as the template writes it from its QueueName
    (``Fn::Sub`` of a text, or of a text and its variables: the name's ending, by QueueType)."""
    name = _properties(cfn, WORK_QUEUE).get("QueueName", {}).get("Fn::Sub")
    prefix = "arn:${AWS::Partition}:sqs:${AWS::Region}:${AWS::AccountId}:"
    if isinstance(name, str):
        return {"Fn::Sub": prefix + name}
    if isinstance(name, list) and len(name) == 2 and isinstance(name[0], str):
        return {"Fn::Sub": [prefix + name[0], name[1]]}
    return None


def check_outputs(raw: Template, cfn: Template) -> list[str]:
    """Every queue (URL and ARN), table, bucket and function (name and ARN) is an output."""
    values = [output.get("Value") for output in raw.get("Outputs", {}).values()]
    required: list[Any] = []
    for name in _of_type(raw, "AWS::SQS::Queue"):
        required += [_ref(name), _arn(name)]
    # a workload's queue ARN is given (an existing queue) or the one it creates: the output says either
    # (a name is an Fn::Sub of a text, or of a text and its variables: compared as JSON)
    queue_names = {
        json.dumps(_properties(raw, name).get("QueueName", {}).get("Fn::Sub")): name
        for name in _of_type(raw, "AWS::SQS::Queue")
    }
    prefix = "arn:${AWS::Partition}:sqs:${AWS::Region}:${AWS::AccountId}:"
    for value in map(_default, values):
        sub = value.get("Fn::Sub", "") if isinstance(value, dict) else ""
        text = sub[0] if isinstance(sub, list) and sub and isinstance(sub[0], str) else sub
        if not isinstance(text, str) or not text.startswith(prefix):  # e.g. an existing queue's URL
            continue
        name = text.removeprefix(prefix)
        key = json.dumps([name, sub[1]] if isinstance(sub, list) and len(sub) == 2 else name)
        if key in queue_names:
            values.append(_arn(queue_names[key]))
    for name in _of_type(raw, "AWS::Serverless::Function"):
        required += [_ref(name), _arn(name)]
    for resource_type in ("AWS::DynamoDB::Table", "AWS::S3::Bucket", "AWS::Serverless::LayerVersion"):
        required += [_ref(name) for name in _of_type(raw, resource_type)]
    return [f"no output with Value {value}" for value in required if value not in values]


def check_settings_variables(raw: Template, cfn: Template) -> list[str]:
    """The consumer's SLUICE_* variables are exactly ConsumerSettings fields, required ones all set."""
    fields = {ENV_PREFIX + name.upper(): info for name, info in ConsumerSettings.model_fields.items()}
    env = {name for name in _consumer_env(cfn) if name.startswith(ENV_PREFIX)}
    problems = [f"{name} is set but is no ConsumerSettings field" for name in sorted(env - fields.keys())]
    problems += [
        f"{name} is required by ConsumerSettings but not set"
        for name, info in sorted(fields.items())
        if info.is_required() and name not in env
    ]
    return problems


REDRIVE_MODES = {  # logical id → the Condition that must guard it (exactly one mode is wired)
    f"{WORKLOAD}RedriverFunction": "RedriveWithLambda",
    f"{WORKLOAD}RedriverRole": "RedriveWithLambda",
    f"{WORKLOAD}RedrivePlanFunction": "RedriveWithStepFunctions",
    f"{WORKLOAD}RedrivePlanRole": "RedriveWithStepFunctions",
    f"{WORKLOAD}RedriveStateMachine": "RedriveWithStepFunctions",
}


CRITICAL_DESTINATION = {
    "Fn::If": ["HasCriticalAlarmTopic", {"Ref": "CriticalAlarmTopicArn"}, {"Ref": "CriticalTopic"}]
}
"""Where template.yaml has every critical alarm publish (its CriticalTopic parameter, in a nested template):
the topic of yours CriticalAlarmTopicArn names, else the stack's own."""


def _redrive_trigger_problems(raw: Template) -> list[str]:
    """Both modes start on the DLQ alarm's state change; the alarm itself notifies people only."""
    problems: list[str] = []
    if _properties(raw, f"{WORKLOAD}DeadLetterDepthAlarm").get("AlarmActions") != [CRITICAL_DESTINATION]:
        problems.append("WorkDeadLetterDepthAlarm must notify the critical topic in both modes")
    pattern = {
        "source": ["aws.cloudwatch"],
        "detail-type": ["CloudWatch Alarm State Change"],
        "resources": [{"Fn::GetAtt": [f"{WORKLOAD}DeadLetterDepthAlarm", "Arn"]}],
        "detail": {"state": {"value": ["ALARM"]}},
    }
    for logical_id in (
        f"{WORKLOAD}RedriverFunction",
        f"{WORKLOAD}RedriveStateMachine",
    ):  # the same trigger in both modes
        event = _properties(raw, logical_id).get("Events", {}).get("DeadLetterAlarm", {})
        if event.get("Type") != "EventBridgeRule" or event.get("Properties", {}).get("Pattern") != pattern:
            problems.append(f"{logical_id} must start on the DLQ alarm entering ALARM (EventBridge rule)")
    return problems


def check_redrive_modes(raw: Template, cfn: Template) -> list[str]:
    """RedriveMode wires exactly one redriver; both share their settings; the pace table is right."""
    problems: list[str] = []
    conditions = raw.get("Conditions", {})
    expected = {
        "RedriveWithLambda": {"Fn::Equals": [{"Ref": "RedriveMode"}, "lambda"]},
        # workloads.yaml: the root allows lambda and stepfunctions only, so one is the other's negation
        "RedriveWithStepFunctions": {"Fn::Not": [{"Condition": "RedriveWithLambda"}]},
    }
    for name, body in expected.items():
        if conditions.get(name) != body:
            problems.append(f"Condition {name} must be {body}")
    if set(_parameter(raw, "RedriveMode").get("AllowedValues", [])) != {"lambda", "stepfunctions"}:
        problems.append("RedriveMode must allow exactly lambda and stepfunctions")
    resources = raw.get("Resources", {})
    for logical_id, condition in REDRIVE_MODES.items():
        if resources.get(logical_id, {}).get("Condition") != condition:
            problems.append(f"{logical_id} must have Condition {condition}")
    env = [
        _properties(raw, name).get("Environment", {}).get("Variables")
        for name in (f"{WORKLOAD}RedriverFunction", f"{WORKLOAD}RedrivePlanFunction")
    ]
    if env[0] != env[1] or not env[0]:
        problems.append("RedriverFunction and RedrivePlanFunction must have the same SLUICE_* settings")
    fields = {ENV_PREFIX + name.upper(): info for name, info in RedriveSettings.model_fields.items()}
    for name in sorted({n for n in env[0] or {} if n.startswith(ENV_PREFIX)} - fields.keys()):
        problems.append(f"{name} is set on the redriver but is no RedriveSettings field")
    shared = raw.get("Globals", {}).get("Function", {}).get("Environment", {}).get("Variables", {})
    for name, info in sorted(fields.items()):
        if info.is_required() and name not in (env[0] or {}) and name not in shared:
            problems.append(f"{name} is required by RedriveSettings but not set on the redriver")
    problems += _redrive_trigger_problems(raw)
    pace = raw.get("Mappings", {}).get("RedrivePace", {})
    for allowed in _parameter(raw, "RedriveMaxPerSecond").get("AllowedValues", []):
        rate = int(allowed)  # text in the template (see its Mappings), a number to CloudFormation
        want = math.ceil(10 / rate) if rate <= 10 else 0
        got = pace.get(str(rate), {}).get("seconds")
        if got != want:
            problems.append(
                f"RedrivePace[{rate}] must be {want} s (10 messages per loop at {rate}/s), is {got}"
            )
    return problems


WORKLOAD_ROLES = "workload roles"
WORKLOAD_ROLE_PATTERN = "arn:${AWS::Partition}:iam::${AWS::AccountId}:role/${AWS::StackName}/*"
WORKLOAD_ROLE_PATH = {"Fn::Sub": "/${AWS::StackName}/"}
SENDING_WORKLOAD_ROLES = ("ConsumerRole", "RedriverRole")
SEALING_ROLES = (  # every role whose function reads or writes envelopes
    f"{WORKLOAD}ConsumerRole",
    "BatchDelayRole",
    "RehydratorRole",
    "PoisonIsolatorRole",
    f"{WORKLOAD}RedriverRole",
    f"{WORKLOAD}RedrivePlanRole",
)
SENDERS = {  # queue → the only principals that may send to it (a Deny for everyone else)
    DEAD_LETTER_QUEUE: [CONSUMER_ROLE],
    # WORKLOAD_ROLES: every workload's consumer and redriver, by the stack's role path
    "PoisonPillQueue": [
        WORKLOAD_ROLES,
        "BatchDelayRole",
        "RehydratorRole",
        "PoisonIsolatorRole",
        "JobConsumerRole",
        "OperatorArns",
    ],
    "DelayQueue": [WORKLOAD_ROLES, "TrustedSenderArns", "OperatorArns"],
    "DelayDeadLetterQueue": [],  # only SQS's own move (not a SendMessage) puts messages there
}


def _named(node: Any) -> set[str]:
    """Every logical id or parameter a (sub)tree names through GetAtt or Ref (and WORKLOAD_ROLES for the
    ARN pattern of the stack's workload roles)."""
    if isinstance(node, dict):
        found: set[str] = set()
        if node.get("Fn::Sub") == WORKLOAD_ROLE_PATTERN:
            found.add(WORKLOAD_ROLES)
        if "Fn::GetAtt" in node:
            found.add(str(node["Fn::GetAtt"][0]))
        if "Ref" in node and node["Ref"] != "AWS::NoValue":
            found.add(str(node["Ref"]))
        for value in node.values():
            found |= _named(value)
        return found
    if isinstance(node, list):
        return set().union(*(_named(item) for item in node)) if node else set()
    return set()


def check_envelope_key_and_queue_policies(raw: Template, cfn: Template) -> list[str]:
    """The stack makes its envelope key, every sealing function gets it, and only the stack's roles
    (plus the trusted senders, on the delay queue) may send to the DLQ, poison and delay queues."""
    problems: list[str] = []
    key = raw.get("Resources", {}).get("EnvelopeKey", {})
    generate = key.get("Properties", {}).get("GenerateSecretString", {})
    if key.get("Type") != "AWS::SecretsManager::Secret" or int(generate.get("PasswordLength", 0)) < 32:
        problems.append("EnvelopeKey must be a generated secret of at least 32 characters")
    shared = raw.get("Globals", {}).get("Function", {}).get("Environment", {}).get("Variables", {})
    if shared.get("SLUICE_ENVELOPE_KEY_SECRET") != {"Ref": "EnvelopeKey"}:
        problems.append("Globals must hand SLUICE_ENVELOPE_KEY_SECRET: !Ref EnvelopeKey to every function")
    for role in SEALING_ROLES:
        statements = (
            _properties(raw, role).get("Policies", [{}])[0].get("PolicyDocument", {}).get("Statement", [])
        )
        if not any(
            st.get("Action") == ["secretsmanager:GetSecretValue"]
            and st.get("Resource") == {"Ref": "EnvelopeKey"}
            for st in statements
        ):
            problems.append(f"{role} must be allowed secretsmanager:GetSecretValue on EnvelopeKey only")
    policies = {
        str(_properties(raw, lid).get("Queues", [{}])[0].get("Ref")): _properties(raw, lid)
        for lid in _of_type(raw, "AWS::SQS::QueuePolicy")
    }
    for queue, senders in SENDERS.items():
        statements = policies.get(queue, {}).get("PolicyDocument", {}).get("Statement", [])
        wanted = {"Effect": "Deny", "Principal": "*", "Action": "sqs:SendMessage"}
        denies = [
            st
            for st in statements
            if all(st.get(k) == v for k, v in wanted.items())
            and st.get("Resource") == {"Fn::GetAtt": [queue, "Arn"]}
        ]
        allowed = _named([d.get("Condition") for d in denies]) - {
            "RedriveWithLambda",
            "HasTrustedSenders",
            "HasOperators",
            "HasDatabase",
        }
        if len(denies) != 1 or allowed != set(senders):
            problems.append(f"{queue} must deny SendMessage to all but {senders}, got {sorted(allowed)}")
    workloads = workload_names(raw)
    workload_roles = {f"{name}{role}" for name in workloads for role in SENDING_WORKLOAD_ROLES}
    for role in _of_type(raw, "AWS::IAM::Role"):  # the path admits exactly the workloads' senders
        on_path = _properties(raw, role).get("Path") == WORKLOAD_ROLE_PATH
        if on_path != (role in workload_roles):
            problems.append(
                f"{role}: only a workload's consumer and redriver roles are on the stack's role path"
            )
    return problems


def _grants(statements: list[dict[str, Any]], action: str, resource: Any) -> bool:
    """Some statement allows ``action`` on ``resource`` (one of its resources), unconditionally."""
    return any(
        st.get("Effect") == "Allow"
        and action in _as_list(st.get("Action"))
        and resource in _as_list(st.get("Resource"))
        and not st.get("Condition")
        for st in statements
    )


def check_follow_up_delays(raw: Template, cfn: Template) -> list[str]:
    """Every workload's consumer can ask for a follow-up (``record.later``, docs/delays.md): its role may
    send to the delay queue (and use the queue's key, when it has a customer managed one), the delay
    queue's policy admits it (a role on the stack's path), and its settings name the queue."""
    problems: list[str] = []
    queue = _properties(raw, "DelayQueue")
    key = queue.get("KmsMasterKeyId")
    denied = _properties(raw, "DelayQueuePolicy").get("PolicyDocument", {}).get("Statement", [])
    admits_workload_roles = WORKLOAD_ROLES in _named([st.get("Condition") for st in denied])
    for name in workload_names(raw):
        role = _properties(raw, f"{name}ConsumerRole")
        statements = [
            st for policy in role.get("Policies", []) for st in policy["PolicyDocument"]["Statement"]
        ]
        if not _grants(statements, "sqs:SendMessage", _arn("DelayQueue")):
            problems.append(f"{name}ConsumerRole must be allowed sqs:SendMessage on the delay queue")
        if key is not None and not all(
            _grants(statements, action, key) for action in ("kms:GenerateDataKey", "kms:Decrypt")
        ):
            problems.append(
                f"{name}ConsumerRole must be allowed kms:GenerateDataKey and kms:Decrypt on {key}"
            )
        if role.get("Path") != WORKLOAD_ROLE_PATH or not admits_workload_roles:
            problems.append(f"the delay queue's policy must admit {name}ConsumerRole (the stack's role path)")
        env = _properties(raw, f"{name}ConsumerFunction").get("Environment", {}).get("Variables", {})
        if env.get("SLUICE_DELAY_QUEUE_URL") != _ref("DelayQueue"):
            problems.append(f"{name}ConsumerFunction must have SLUICE_DELAY_QUEUE_URL: !Ref DelayQueue")
    if "delay_queue_url" not in ConsumerSettings.model_fields:
        problems.append("ConsumerSettings no longer reads SLUICE_DELAY_QUEUE_URL")
    return problems


def check_dead_letter_queues_alarm(raw: Template, cfn: Template) -> list[str]:
    """Every dead-letter queue (and the poison queue) has a depth alarm that notifies someone: a message
    waiting there is never silent."""
    resources = raw.get("Resources", {})
    watched = {"PoisonPillQueue"} | {
        str(props.get("RedrivePolicy", {}).get("deadLetterTargetArn", {}).get("Fn::GetAtt", [""])[0])
        for lid in _of_type(raw, "AWS::SQS::Queue")
        if (props := _properties(raw, lid)).get("RedrivePolicy")
    }
    alarmed = {
        str(dimension.get("Value", {}).get("Fn::GetAtt", [""])[0])
        for lid in _of_type(raw, "AWS::CloudWatch::Alarm")
        if (props := _properties(raw, lid)).get("MetricName") == "ApproximateNumberOfMessagesVisible"
        and props.get("AlarmActions")
        and float(props.get("Threshold", 1)) == 0
        for dimension in props.get("Dimensions", [])
    }
    return [
        f"{queue} has no depth alarm (> 0) with an action"
        for queue in sorted(watched - alarmed)
        if queue in resources
    ]


RULES: list[Check] = [
    check_visibility_timeout,
    check_workload_visibility,
    check_dead_letter_retention,
    check_queues_encrypted,
    check_tables,
    check_claim_check_bucket,
    check_no_wildcard_resources,
    check_managed_policies,
    check_consumer_event,
    check_redrive,
    check_globals,
    check_common_layer,
    check_outputs,
    check_settings_variables,
    check_redrive_modes,
    check_envelope_key_and_queue_policies,
    check_follow_up_delays,
    check_dead_letter_queues_alarm,
]


# --- the contract ------------------------------------------------------------------------------


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.__name__.removeprefix("check_"))
def test_given_the_template_when_checked_then_the_rule_holds(
    rule: Check, raw: Template, cfn: Template
) -> None:
    assert rule(raw, cfn) == []


def test_given_the_template_when_translated_then_the_consumer_and_its_resources_exist(cfn: Template) -> None:
    assert _properties(cfn, CONSUMER)
    assert _consumer_mapping(cfn)
    assert {WORK_QUEUE, DEAD_LETTER_QUEUE} <= set(_of_type(cfn, "AWS::SQS::Queue"))
    assert _iam_documents(cfn)


# --- the rules notice a broken template ---------------------------------------------------------


def _node(template: Template, path: list[str]) -> Any:
    node: Any = template
    for key in path:
        node = node[int(key)] if isinstance(node, list) else node[key]
    return node


def _set(path: str, value: Any) -> Callable[[Template], None]:
    def mutate(template: Template) -> None:
        *parents, last = path.split(".")
        node = _node(template, parents)
        node[int(last) if isinstance(node, list) else last] = value

    return mutate


def _delete(path: str) -> Callable[[Template], None]:
    def mutate(template: Template) -> None:
        *parents, last = path.split(".")
        node = _node(template, parents)
        del node[int(last) if isinstance(node, list) else last]

    return mutate


def _append(path: str, value: Any) -> Callable[[Template], None]:
    def mutate(template: Template) -> None:
        _node(template, path.split(".")).append(value)

    return mutate


def _add_consumer_statement(statement: dict[str, Any] | str) -> Callable[[Template], None]:
    """Inline statements join the consumer role's policy; SAM policy templates and managed policy
    names need SAM's generated role, so the function gets `Policies` instead of its explicit role."""

    def mutate(template: Template) -> None:
        function = template["Resources"][CONSUMER]["Properties"]
        if isinstance(statement, dict) and "Statement" in statement and "Role" in function:
            role = template["Resources"][f"{WORKLOAD}ConsumerRole"]["Properties"]
            role["Policies"][0]["PolicyDocument"]["Statement"].extend(statement["Statement"])
        else:
            function.pop("Role", None)
            function.setdefault("Policies", []).append(statement)

    return mutate


def _drop_statement(role: str, sid: str) -> Callable[[Template], None]:
    def mutate(template: Template) -> None:
        document = template["Resources"][role]["Properties"]["Policies"][0]["PolicyDocument"]
        kept = [st for st in document["Statement"] if st.get("Sid") != sid]
        assert len(kept) == len(document["Statement"]) - 1, f"{role} has no statement {sid}"
        document["Statement"] = kept

    return mutate


CONSUMER_ENV = f"Resources.{CONSUMER}.Properties.Environment.Variables"
BUCKET = "Resources.ClaimCheckBucket.Properties"

MUTATIONS: dict[str, tuple[Callable[[Template], None], Check]] = {
    "the delay DLQ fills silently": (
        _delete("Resources.DelayDeadLetterDepthAlarm"),
        check_dead_letter_queues_alarm,
    ),
    "anyone may send to the poison queue": (
        _delete("Resources.PoisonPillQueuePolicy"),
        check_envelope_key_and_queue_policies,
    ),
    "a producer may write to the DLQ": (
        _set(
            f"Resources.{WORKLOAD}DeadLetterQueuePolicy.Properties.PolicyDocument.Statement.0.Condition.ArnNotEquals"
            ".aws:PrincipalArn.0",
            {"Fn::GetAtt": ["BatchDelayRole", "Arn"]},
        ),
        check_envelope_key_and_queue_policies,
    ),
    "the rehydrator cannot read the key": (
        _delete("Resources.RehydratorRole.Properties.Policies.0.PolicyDocument.Statement.1"),
        check_envelope_key_and_queue_policies,
    ),
    "no key for the functions": (
        _delete("Globals.Function.Environment.Variables.SLUICE_ENVELOPE_KEY_SECRET"),
        check_envelope_key_and_queue_policies,
    ),
    "a consumer cannot ask for delays": (
        _drop_statement("RefundsConsumerRole", "AskForDelays"),  # the second workload's: every one is checked
        check_follow_up_delays,
    ),
    "a consumer without the delay queue's url": (
        _delete(f"{CONSUMER_ENV}.SLUICE_DELAY_QUEUE_URL"),
        check_follow_up_delays,
    ),
    "the delay queue on a key the consumers cannot use": (
        _set("Resources.DelayQueue.Properties.KmsMasterKeyId", {"Fn::GetAtt": ["LogsKey", "Arn"]}),
        check_follow_up_delays,
    ),
    "the delay queue refuses the workload roles": (
        _set("Resources.DelayQueuePolicy.Properties.PolicyDocument.Statement.0.Condition.ArnNotLike", {}),
        check_follow_up_delays,
    ),
    "redriver in both modes": (
        _delete(f"Resources.{WORKLOAD}RedriverFunction.Condition"),
        check_redrive_modes,
    ),
    "redrive settings differ": (
        _set(
            f"Resources.{WORKLOAD}RedrivePlanFunction.Properties.Environment.Variables.SLUICE_REDRIVE_MAX_ATTEMPTS",
            "9",
        ),
        check_redrive_modes,
    ),
    "pace cell wrong": (_set("Mappings.RedrivePace.2.seconds", 1), check_redrive_modes),
    "dlq alarm notifies nobody": (
        _delete(f"Resources.{WORKLOAD}DeadLetterDepthAlarm.Properties.AlarmActions"),
        check_redrive_modes,
    ),
    "redriver started by another alarm": (
        _set(
            f"Resources.{WORKLOAD}RedriverFunction.Properties.Events.DeadLetterAlarm.Properties.Pattern.resources",
            [{"Fn::GetAtt": ["PoisonPillDepthAlarm", "Arn"]}],
        ),
        check_redrive_modes,
    ),
    "visibility cell too small": (_set(f"Mappings.{VISIBILITY_MAPPING}.30.0", 179), check_visibility_timeout),
    "visibility cell missing": (_delete(f"Mappings.{VISIBILITY_MAPPING}.900.300"), check_visibility_timeout),
    "timeout value without cells": (
        _append(f"Parameters.{TIMEOUT_PARAMETER}.AllowedValues", 600),
        check_visibility_timeout,
    ),
    "window value without cells": (
        _append(f"Parameters.{WINDOW_PARAMETER}.AllowedValues", 600),
        check_visibility_timeout,
    ),
    "queue visibility literal": (
        _set(f"Resources.{WORK_QUEUE}.Properties.VisibilityTimeout", 180),
        check_visibility_timeout,
    ),
    "consumer visibility literal": (
        _set(f"{CONSUMER_ENV}.SLUICE_VISIBILITY_TIMEOUT_SECONDS", "180"),
        check_visibility_timeout,
    ),
    "consumer timeout literal": (
        _set(f"Resources.{CONSUMER}.Properties.Timeout", 30),
        check_visibility_timeout,
    ),
    "batching window literal": (
        _set(f"Resources.{EVENT_SOURCE}.Properties.MaximumBatchingWindowInSeconds", 5),
        check_visibility_timeout,
    ),
    "dlq retention at work maximum": (
        _set(f"Resources.{DEAD_LETTER_QUEUE}.Properties.MessageRetentionPeriod", 1123200),
        check_dead_letter_retention,
    ),
    "dlq retention below work default": (
        _set(f"Resources.{DEAD_LETTER_QUEUE}.Properties.MessageRetentionPeriod", 86400),
        check_dead_letter_retention,
    ),
    "queue unencrypted": (
        _delete("Resources.PoisonPillQueue.Properties.SqsManagedSseEnabled"),
        check_queues_encrypted,
    ),
    "table unencrypted": (_delete("Resources.IdempotencyTable.Properties.SSESpecification"), check_tables),
    "table without pitr": (
        _set(
            "Resources.IdempotencyTable.Properties.PointInTimeRecoverySpecification.PointInTimeRecoveryEnabled",
            False,
        ),
        check_tables,
    ),
    "ledger unencrypted": (_delete("Resources.LedgerTable.Properties.SSESpecification"), check_tables),
    "idempotency table with a sort key": (
        _append(
            "Resources.IdempotencyTable.Properties.KeySchema", {"AttributeName": "sk", "KeyType": "RANGE"}
        ),
        check_tables,
    ),
    "table ttl on another attribute": (
        _set("Resources.IdempotencyTable.Properties.TimeToLiveSpecification.AttributeName", "ttl"),
        check_tables,
    ),
    "bucket unencrypted": (_delete(f"{BUCKET}.BucketEncryption"), check_claim_check_bucket),
    "bucket allows public policies": (
        _set(f"{BUCKET}.PublicAccessBlockConfiguration.BlockPublicPolicy", False),
        check_claim_check_bucket,
    ),
    "bucket allows plain http": (
        _set("Resources.ClaimCheckBucketPolicy.Properties.PolicyDocument.Statement.0.Effect", "Allow"),
        check_claim_check_bucket,
    ),
    "bucket keeps claim checks forever": (
        _delete(f"{BUCKET}.LifecycleConfiguration.Rules.0.Prefix"),
        check_claim_check_bucket,
    ),
    "inline statement on every queue": (
        _add_consumer_statement(
            {"Statement": [{"Effect": "Allow", "Action": ["sqs:SendMessage"], "Resource": "*"}]}
        ),
        check_no_wildcard_resources,
    ),
    "sam policy template on every instance": (
        _add_consumer_statement({"EC2DescribePolicy": {}}),
        check_no_wildcard_resources,
    ),
    "broad managed policy": (_add_consumer_statement("AmazonSQSFullAccess"), check_managed_policies),
    "no partial batch responses": (
        _delete(f"Resources.{EVENT_SOURCE}.Properties.FunctionResponseTypes"),
        check_consumer_event,
    ),
    "maximum concurrency of one": (_set("Parameters.MaximumConcurrency.MinValue", 1), check_consumer_event),
    "receive count up to 20": (_set("Parameters.MaxReceiveCount.MaxValue", 20), check_redrive),
    "any queue may redrive": (
        _set(
            f"Resources.{DEAD_LETTER_QUEUE}.Properties.RedriveAllowPolicy", {"redrivePermission": "allowAll"}
        ),
        check_redrive,
    ),
    "x86 functions": (_set("Globals.Function.Architectures", ["x86_64"]), check_globals),
    "untraced functions": (_delete("Globals.Function.Tracing"), check_globals),
    "no log level": (_delete("Globals.Function.Environment.Variables.LOG_LEVEL"), check_globals),
    "layer built by pip": (_delete("Resources.CommonLayer.Metadata"), check_common_layer),
    "layer for arm64 only": (
        _set("Resources.CommonLayer.Properties.CompatibleArchitectures", ["arm64"]),
        check_common_layer,
    ),
    "no dead-letter queue url": (_delete(f"Outputs.{WORKLOAD}DeadLetterQueueUrl"), check_outputs),
    "no function arn": (_delete(f"Outputs.{WORKLOAD}ConsumerFunctionArn"), check_outputs),
    "misspelt setting": (_set(f"{CONSUMER_ENV}.SLUICE_CONCURENCY", "4"), check_settings_variables),
    "required setting unset": (_delete(f"{CONSUMER_ENV}.SLUICE_POISON_QUEUE_URL"), check_settings_variables),
}


@pytest.mark.parametrize("mutation", list(MUTATIONS))
def test_given_a_broken_template_when_checked_then_the_rule_reports_it(mutation: str, raw: Template) -> None:
    mutate, rule = MUTATIONS[mutation]
    broken = copy.deepcopy(raw)
    mutate(broken)

    assert rule(broken, translate(broken)) != []


@pytest.mark.parametrize("action", sorted(WILDCARD_RESOURCE_ACTIONS))
def test_given_an_allowlisted_action_on_every_resource_when_checked_then_it_is_accepted(
    action: str, raw: Template
) -> None:
    broadened = copy.deepcopy(raw)
    _add_consumer_statement({"Statement": [{"Effect": "Allow", "Action": [action], "Resource": "*"}]})(
        broadened
    )

    assert check_no_wildcard_resources(broadened, translate(broadened)) == []


def test_given_the_delay_queue_when_checked_then_its_visibility_covers_six_timeouts_plus_the_window(
    raw: Template,
) -> None:
    # The same rule as the work queue, for the delay queue's mapping: 6 x the batch-delay timeout + window.
    timeout = int(raw["Resources"]["BatchDelayFunction"]["Properties"]["Timeout"])
    windows = raw["Parameters"]["DelayBatchingWindowInSeconds"]["AllowedValues"]
    table = raw["Mappings"]["DelayVisibilityTimeout"]
    for window in windows:
        assert int(table[str(window)]["seconds"]) >= 6 * timeout + int(window), window
    queue = raw["Resources"]["DelayQueue"]["Properties"]
    assert queue["VisibilityTimeout"] == {
        "Fn::FindInMap": ["DelayVisibilityTimeout", {"Ref": "DelayBatchingWindowInSeconds"}, "seconds"]
    }
    mapping = raw["Resources"]["BatchDelayFunction"]["Properties"]["Events"]["Delay"]["Properties"]
    assert mapping["MaximumBatchingWindowInSeconds"] == {"Ref": "DelayBatchingWindowInSeconds"}


def test_given_each_workloads_redrive_roles_then_they_reach_only_its_own_breaker_item(raw: Template) -> None:
    # The breaker table holds every workload's item: a workload's redrive may read and write its own,
    # and its redriver (RedriveMode=lambda) its run lease beside it, with UpdateItem only
    # (sluice.redrive.lease: take, renew and release are each a conditional update)
    workloads = workload_names(raw)
    for name in workloads:
        for role in ("CircuitBreakerRole", "RedriverRole", "RedrivePlanRole"):
            statements = _properties(raw, f"{name}{role}")["Policies"][0]["PolicyDocument"]["Statement"]
            on_table = [s for s in statements if s.get("Resource") == {"Fn::GetAtt": ["BreakerTable", "Arn"]}]
            assert on_table, f"{name}{role} has no breaker statement"
            leases = [s for s in on_table if s.get("Sid") == "RunLease"]
            for statement in on_table:
                condition = statement.get("Condition", {}).get("ForAllValues:StringEquals", {})
                if statement in leases:
                    assert statement["Action"] == ["dynamodb:UpdateItem"], (f"{name}{role}", statement)
                    assert condition == {"dynamodb:LeadingKeys": [f"{name}#lease"]}, statement
                else:
                    assert condition == {"dynamodb:LeadingKeys": [name]}, (f"{name}{role}", statement)
            assert len(leases) == (role == "RedriverRole"), f"{name}{role}: the lease is the redriver's only"


def test_given_each_workloads_consumer_then_it_reaches_only_its_idempotency_records(raw: Template) -> None:
    # Every key a consumer writes starts with its function's name and a dot (sluice.consumer.idempotency;
    # tests/functional/test_consumer_key.py): its role reaches those items only
    for name in workload_names(raw):
        function = _properties(raw, f"{name}ConsumerFunction")["FunctionName"]
        statements = _properties(raw, f"{name}ConsumerRole")["Policies"][0]["PolicyDocument"]["Statement"]
        [records] = [s for s in statements if s.get("Sid") == "IdempotencyRecords"]
        leading = {"Fn::Sub": function["Fn::Sub"] + ".*"}
        assert records["Condition"] == {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": [leading]}}
