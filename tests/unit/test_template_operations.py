"""The operations contract of template.yaml: who hears which alarm, what the dashboard shows.

Every check runs on the template as CloudFormation would resolve it for each combination of
``RedriveMode`` (lambda, stepfunctions) and the job store (configured or not): conditions evaluated,
``Fn::If`` resolved, resources whose condition is false removed.
"""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path
from typing import Any

import pytest
from samtranslator.yaml_helper import yaml_parse

from sluice import metrics
from sluice_local.emulation.conditions import evaluate_conditions, resolve_if
from sluice_local.emulation.language_extensions import resolve_find_in_map as _resolve_find_in_map
from tests.unit.test_template import load_template, workload_names

ROOT = Path(__file__).resolve().parents[2]
TOPICS = ("WarningTopic", "CriticalTopic")
VARIANTS = [
    pytest.param({"RedriveMode": mode, "DatabaseSecretArn": secret}, id=f"{mode}-{label}")
    for mode in ("lambda", "stepfunctions")
    for secret, label in (
        ("", "no-jobs"),
        ("arn:aws:secretsmanager:us-east-1:123456789012:secret:db", "jobs"),
    )
]

Template = dict[str, Any]


def resolved(parameters: dict[str, str], template: Path | None = None) -> Template:
    """The template's resources as CloudFormation creates them for these parameter values (and its
    mappings). ``template``: a copy's, else the project's."""
    raw = load_template(template) if template else load_template()
    values = {k: str(v.get("Default")) for k, v in raw["Parameters"].items() if "Default" in v}
    values.update(parameters)
    conditions = evaluate_conditions(raw.get("Conditions", {}), values)
    mappings = raw.get("Mappings", {})
    resources = {
        lid: _literal_sub_variables(_resolve_find_in_map(resolve_if(res, conditions), mappings, values))
        for lid, res in raw["Resources"].items()
        if conditions.get(res.get("Condition", ""), True)
    }
    return {"Resources": resources, "Conditions": conditions, "Mappings": mappings}


def _literal_sub_variables(node: Any) -> Any:
    """``Fn::Sub [text, {Name: literal}]`` as the one string CloudFormation makes of it (``Fn::Sub text``
    with the literals in), so an alarm named through a mapping reads like one named in place."""
    if isinstance(node, list):
        return [_literal_sub_variables(v) for v in node]
    if not isinstance(node, dict):
        return node
    sub: Any = node.get("Fn::Sub")
    literal = isinstance(sub, list) and all(isinstance(v, str) for v in sub[1].values())
    if set(node) == {"Fn::Sub"} and literal:
        text = sub[0]
        for name, value in sub[1].items():
            text = text.replace("${" + name + "}", value)
        return {"Fn::Sub": text}
    return {k: _literal_sub_variables(v) for k, v in node.items()}


def of_type(template: Template, kind: str) -> dict[str, dict[str, Any]]:
    return {lid: r.get("Properties", {}) for lid, r in template["Resources"].items() if r["Type"] == kind}


def alarm_name(props: dict[str, Any]) -> str:
    name = props.get("AlarmName", "")
    sub = name.get("Fn::Sub", "") if isinstance(name, dict) else ""
    assert sub.startswith("${AWS::StackName}-"), f"alarm name {name!r} must be ${{AWS::StackName}}-<name>"
    return str(sub.removeprefix("${AWS::StackName}-"))


def watched(props: dict[str, Any]) -> tuple[str, str, str]:
    """(namespace, metric, what it is about) of a single-metric alarm; ("math", return id, "") else."""
    if "Metrics" in props:
        [returned] = [m for m in props["Metrics"] if m.get("ReturnData")]
        return "math", str(returned["Id"]), ""
    [dimension] = props.get("Dimensions") or [{"Value": ""}]
    return str(props["Namespace"]), str(props["MetricName"]), about(dimension["Value"])


def about(value: Any) -> str:
    """What a dimension value names: a resource (Ref, GetAtt), a Fn::Sub's text (a workload's service),
    or the queue name an ARN ends in (a workload's queue, created or existing)."""
    if not isinstance(value, dict):
        return str(value)
    if "Ref" in value or "Fn::GetAtt" in value:
        return str(value.get("Ref") or value["Fn::GetAtt"][0])
    if "Fn::Sub" in value:
        return str(value["Fn::Sub"])
    if "Fn::Select" in value:  # !Select [5, !Split [":", <the queue's ARN>]]
        arn = value["Fn::Select"][1]["Fn::Split"][1]
        text = str(arn.get("Fn::Sub", arn) if isinstance(arn, dict) else arn)
        return re.split(r":(?![^{]*\})", text)[-1]  # the last segment (a ${AWS::...} holds colons)
    return ""


def workloads(template: Template) -> list[str]:
    return workload_names(template)


def queue_name(template: Template, name: str) -> str:
    """The name of a workload's queue: the one its QueueArn ends in (Queue: existing), else the one the
    stack creates."""
    block = template.get("Mappings", {}).get("Workloads", {}).get(name, {})
    if block.get("Queue") == "existing":
        return str(block["QueueArn"]).split(":")[5]
    return f"${{AWS::StackName}}-{name}-work"


# --- the expected alarms ----------------------------------------------------------------------------

WORKLOADS = workload_names()
DEAD_ENDS = {  # queue → alarm prefix: a message waiting there is critical (and each workload's DLQ)
    "DelayDeadLetterQueue": "DelayDeadLetter",
    "PoisonPillQueue": "PoisonPill",
    "JobDeadLetterQueue": "JobDeadLetter",
}


def workload_alarms(name: str, queue: str) -> dict[str, tuple[str, str, str, Any, str]]:
    """A workload's own alarms: on its queue (named ``queue``), and on sluice's metrics of its service."""
    service = "${AWS::StackName}/" + name
    return {
        f"{name}QueueAgeAlarm": (
            "AWS/SQS", "ApproximateAgeOfOldestMessage", queue,
            {"Ref": "OldestMessageAlarmSeconds"}, "WarningTopic",
        ),
        f"{name}QueueTimeToDrainAlarm": (
            "math", "drain", "", {"Ref": "TimeToDrainAlarmSeconds"}, "WarningTopic",
        ),
        f"{name}QueueConservationAlarm": (
            "math", "excess", "", {"Ref": "ConservationToleranceMessages"}, "CriticalTopic",
        ),
        f"{name}NearDeadLetterAlarm": ("Sluice", metrics.NEAR_DEAD_LETTER, service, 0, "WarningTopic"),
        f"{name}BreakerOpenAlarm": ("Sluice", metrics.BREAKER_OPEN, service, 0, "WarningTopic"),
        f"{name}RedriveFailuresAlarm": ("Sluice", metrics.REDRIVE_FAILURES, service, 0, "CriticalTopic"),
    }  # fmt: skip


NAMED = {  # alarm → (namespace, metric or math id, about, threshold, topic)
    "DelayedObjectsQuarantinedAlarm": (
        "Sluice", metrics.DELAYED_OBJECTS_QUARANTINED, "AWS::StackName", 0, "CriticalTopic",
    ),
    "DelayBucketsStrandedAlarm": ("Sluice", "DelayBucketsStranded", "AWS::StackName", 0, "WarningTopic"),
    "JobStoreUnavailableAlarm": (
        "Sluice", metrics.JOB_STORE_UNAVAILABLE, "AWS::StackName", 0, "CriticalTopic",
    ),
    "JobsDeadAlarm": ("Sluice", metrics.JOBS_DEAD, "AWS::StackName", 0, "WarningTopic"),
}  # fmt: skip
STATE_MACHINE_METRICS = ("ExecutionsFailed", "ExecutionsTimedOut", "ExecutionThrottled")


def expected_alarms(template: Template) -> dict[str, tuple[str, str, str, Any, str]]:
    """Every alarm the resolved template must have, derived from its queues, functions and state
    machines (a new function without its alarms fails here) plus the named ones."""
    resources = template["Resources"]
    out: dict[str, tuple[str, str, str, Any, str]] = {}
    dead_ends = DEAD_ENDS | {f"{name}DeadLetterQueue": f"{name}DeadLetter" for name in workloads(template)}
    for queue, prefix in dead_ends.items():
        if queue in resources:
            out[f"{prefix}DepthAlarm"] = (
                "AWS/SQS",
                "ApproximateNumberOfMessagesVisible",
                queue,
                0,
                "CriticalTopic",
            )
            out[f"{prefix}AgeAlarm"] = (
                "AWS/SQS", "ApproximateAgeOfOldestMessage", queue, {"Ref": "DeadLetterAgeAlarmSeconds"},
                "CriticalTopic",
            )  # fmt: skip
    for function in of_type(template, "AWS::Serverless::Function"):
        base = function.removesuffix("Function")
        for metric in ("Errors", "Throttles"):
            out[f"{base}{metric}Alarm"] = ("AWS/Lambda", metric, function, 0, "CriticalTopic")
    for machine in of_type(template, "AWS::Serverless::StateMachine"):
        for metric in STATE_MACHINE_METRICS:
            out[f"{machine}{metric}Alarm"] = ("AWS/States", metric, machine, 0, "CriticalTopic")
    for name in workloads(template):
        out |= workload_alarms(name, queue_name(template, name))
        if f"{name}RedriveStateMachine" in resources:  # a breaker-open run ends in Fail: not counted
            out[f"{name}RedriveStateMachineExecutionsFailedAlarm"] = (
                "math",
                "failedclosed",
                "",
                0,
                "CriticalTopic",
            )
    jobs = "JobQueue" in resources
    out |= {k: v for k, v in NAMED.items() if jobs or not k.startswith(("JobStore", "Jobs"))}
    return out


@pytest.mark.parametrize("parameters", VARIANTS)
def test_given_each_mode_then_every_alarm_watches_its_metric_at_its_threshold_and_notifies_its_topic(
    parameters: dict[str, str],
) -> None:
    check_alarms(resolved(parameters))


def check_alarms(template: Template) -> None:
    """Every alarm of the resolved ``template`` is an expected one, watching its metric at its threshold
    and notifying its topic, and none is missing (tests/unit/test_fork_workloads.py runs it on a fork)."""
    alarms = of_type(template, "AWS::CloudWatch::Alarm")
    expected = expected_alarms(template)

    assert sorted(alarms) == sorted(expected)
    for lid, (namespace, metric, about, threshold, topic) in expected.items():
        props = alarms[lid]
        assert watched(props) == (namespace, metric, about if namespace != "math" else ""), lid
        assert props["Threshold"] == threshold, lid
        assert props["AlarmActions"] == [{"Ref": topic}], lid
        assert props.get("OKActions", [{"Ref": topic}]) == [{"Ref": topic}], lid
        assert props["TreatMissingData"] in ("notBreaching", "breaching", "ignore", "missing"), lid


def test_given_the_template_then_every_alarm_has_a_unique_name_and_says_why_it_treats_missing_data_so() -> (
    None
):
    text = (ROOT / "template.yaml").read_text(encoding="utf-8")
    lines = [line for line in text.splitlines() if line.strip().startswith("TreatMissingData:")]
    alarms: dict[str, dict[str, Any]] = {}
    for variant in VARIANTS:
        alarms |= of_type(resolved(variant.values[0]), "AWS::CloudWatch::Alarm")  # type: ignore[arg-type]
    names = [alarm_name(props) for props in alarms.values()]

    assert all("TreatMissingData" in props for props in alarms.values())
    # every TreatMissingData written in the source (once for each alarm a loop repeats) says why
    assert lines
    assert all("#" in line and len(line.split("#", 1)[1].strip()) > 10 for line in lines)
    assert len(set(names)) == len(names)


def test_given_the_work_dlq_alarm_then_it_starts_the_redrive_by_its_state_change_in_both_modes() -> None:
    for (mode, starter), name in itertools.product(
        (("lambda", "RedriverFunction"), ("stepfunctions", "RedriveStateMachine")), WORKLOADS
    ):
        template = resolved({"RedriveMode": mode})
        [rule] = [
            e["Properties"]["Pattern"]
            for e in template["Resources"][f"{name}{starter}"]["Properties"]["Events"].values()
            if e["Type"] == "EventBridgeRule"
        ]
        assert rule["resources"] == [{"Fn::GetAtt": [f"{name}DeadLetterDepthAlarm", "Arn"]}]  # its own DLQ
        assert rule["detail"] == {"state": {"value": ["ALARM"]}}
        topics = of_type(template, "AWS::SNS::Topic")
        assert sorted(topics) == sorted(TOPICS)  # no topic of its own: the alarm notifies people only
        assert all(t["KmsMasterKeyId"] == {"Ref": "AlarmTopicKey"} for t in topics.values())


# --- the dashboard ----------------------------------------------------------------------------------


def dashboard(template: Template) -> dict[str, Any]:
    """The dashboards' widgets (the stack's and each workload's) as CloudFormation renders them, ``${X}``
    left as ``<X>`` (a Fn::Sub variable as what it names: ``<Resource>``, ``<Resource.Attribute>``)."""
    widgets: list[Any] = []
    for props in of_type(template, "AWS::CloudWatch::Dashboard").values():
        separator, parts = props["DashboardBody"]["Fn::Join"]
        widgets += json.loads(separator.join(_rendered(p) for p in parts))["widgets"]
    return {"widgets": widgets}


def _rendered(part: Any) -> str:
    if not isinstance(part, dict):
        return str(part)
    sub = part["Fn::Sub"]
    text, variables = (sub, {}) if isinstance(sub, str) else sub
    for name, value in variables.items():
        if "Fn::GetAtt" in value:
            shown = ".".join(value["Fn::GetAtt"])
        else:
            shown = value.get("Ref") or about(value).replace("${", "").replace("}", "")
        text = text.replace("${" + name + "}", "<" + shown + ">")
    return re.sub(r"\$\{([^}]+)\}", r"<\1>", text)


def published() -> set[str]:
    """Every metric sluice publishes: the layer's names and what the state machines put themselves."""
    names = {v for k, v in vars(metrics).items() if k.isupper() and isinstance(v, str)}
    for path in (ROOT / "statemachines").glob("*.asl.json"):
        names |= set(re.findall(r'"MetricName":\s*"([A-Za-z]+)"', path.read_text(encoding="utf-8")))
    return names


@pytest.mark.parametrize("parameters", VARIANTS)
def test_given_each_mode_then_the_dashboard_shows_every_queue_metric_and_alarm(
    parameters: dict[str, str],
) -> None:
    template = resolved(parameters)
    body = dashboard(template)
    shown: set[tuple[str, ...]] = set()
    alarms_shown: set[str] = set()
    for widget in body["widgets"]:
        for line in widget["properties"].get("metrics", []):
            shown.add(tuple(x for x in line if isinstance(x, str)))
        alarms_shown |= set(widget["properties"].get("alarms", []))

    queues = {  # a workload's queue is shown by the name its ARN ends in (created or existing)
        f"<AWS::StackName-{q.removesuffix('Queue')}-work>"
        if q.removesuffix("Queue") in WORKLOADS
        else f"<{q}.QueueName>"
        for q in of_type(template, "AWS::SQS::Queue")
    }
    per_queue = {
        "ApproximateNumberOfMessagesVisible", "ApproximateNumberOfMessagesNotVisible",
        "ApproximateAgeOfOldestMessage", "NumberOfMessagesSent", "NumberOfMessagesDeleted",
    }  # fmt: skip
    for queue in queues:
        assert {line[1] for line in shown if line[:1] == ("AWS/SQS",) and queue in line} >= per_queue, queue
    sluice = {line[1] for line in shown if line[:1] == ("Sluice",)}
    jobs = set(metrics.JOB_CONSUMER_COUNTERS) | {
        metrics.JOBS_REAPED,
        metrics.JOBS_RETRIED,
        metrics.JOBS_REENQUEUED,
    }
    assert published() - (set() if "JobQueue" in template["Resources"] else jobs) - sluice == set()
    expected = {
        "arn:<AWS::Partition>:cloudwatch:<AWS::Region>:<AWS::AccountId>:alarm:<AWS::StackName>-"
        + alarm_name(p)
        for p in of_type(template, "AWS::CloudWatch::Alarm").values()
    }
    assert alarms_shown == expected
    machines = {line[3] for line in shown if line[:1] == ("AWS/States",)}
    assert machines == {f"<{m}>" for m in of_type(template, "AWS::Serverless::StateMachine")}
    for name in workloads(template):
        consumer = {
            line[1] for line in shown if line[:1] == ("AWS/Lambda",) and f"<{name}ConsumerFunction>" in line
        }
        assert consumer >= {"ConcurrentExecutions", "Errors", "Throttles", "Duration"}, name


# --- one stack's own metrics ------------------------------------------------------------------------

STACK_SERVICE = [{"Name": "service", "Value": {"Ref": "AWS::StackName"}}]
"""The dimension every read of sluice's metrics selects: the stack's name, as its functions write it;
or, for a workload's resources, the stack's name and the workload's (:func:`service_of`)."""


def service_of(lid: str) -> Any:
    """The ``service`` of a resource's metrics: ``<stack>/<workload>`` for a workload's, else the stack's."""
    for name in WORKLOADS:
        if lid.startswith(name) and lid.removeprefix(name)[:1].isupper():
            return {"Fn::Sub": "${AWS::StackName}/" + name}
    return {"Ref": "AWS::StackName"}


def service_problems(raw: Template, definitions: dict[str, dict[str, Any]]) -> list[str]:
    """Where a reader or writer of sluice's metrics is not scoped to the stack (``service`` = its name) or,
    for a workload's resource, to the stack and the workload."""
    problems: list[str] = []
    shared = raw["Globals"]["Function"]["Environment"]["Variables"]
    if shared.get("POWERTOOLS_SERVICE_NAME") != {"Ref": "AWS::StackName"}:
        problems.append(f"Globals POWERTOOLS_SERVICE_NAME is {shared.get('POWERTOOLS_SERVICE_NAME')!r}")
    for lid, resource in raw["Resources"].items():
        problems += _resource_service_problems(lid, resource, definitions)
    for name, definition in definitions.items():
        for metric in _metric_data(definition):
            if metric.get("Dimensions") != [{"Name": "service", "Value": "${MetricsService}"}]:
                problems.append(f"{name} puts {metric['MetricName']} with {metric.get('Dimensions')}")
    return problems


def _resource_service_problems(lid: str, resource: Template, definitions: dict[str, Any]) -> list[str]:
    props, kind, own = resource.get("Properties", {}), resource["Type"], service_of(lid)
    if kind == "AWS::CloudWatch::Alarm":
        stats = (
            [props]
            if "MetricName" in props
            else [m["MetricStat"]["Metric"] for m in props["Metrics"] if "MetricStat" in m]
        )
        return [
            f"{lid} reads {stat['MetricName']} with {stat.get('Dimensions')}"
            for stat in stats
            if stat.get("Namespace") == "Sluice"
            and stat.get("Dimensions") != [{"Name": "service", "Value": own}]
        ]
    if kind == "AWS::Serverless::Function":
        written = props.get("Environment", {}).get("Variables", {}).get("POWERTOOLS_SERVICE_NAME")
        inherits = written is None and own == STACK_SERVICE[0]["Value"]  # Globals' (checked above)
        return [] if inherits or written == own else [f"{lid} writes its metrics as service {written!r}"]
    if kind == "AWS::Serverless::StateMachine":
        text = json.dumps(definitions.get(Path(str(props.get("DefinitionUri", ""))).name, {}))
        given = props["DefinitionSubstitutions"].get("MetricsService")
        return (
            [f"{lid} puts metrics without MetricsService = its service"]
            if "putMetricData" in text and given != own
            else []
        )
    if kind == "AWS::CloudWatch::Dashboard":
        expected = own.get("Fn::Sub") or "${AWS::StackName}"
        return [
            f"{lid} shows {metric} with service {service!r}"
            for text in _strings(props["DashboardBody"])
            for metric, service in re.findall(r'\["Sluice", "(\w+)"(?:, "service", "([^"]*)")?', text)
            if service != expected
        ]
    return []


def _metric_data(node: Any) -> list[dict[str, Any]]:
    """Every entry of every ``MetricData`` list in a state machine definition."""
    if isinstance(node, list):
        return [m for item in node for m in _metric_data(item)]
    if not isinstance(node, dict):
        return []
    found = list(node.get("MetricData", [])) if isinstance(node.get("MetricData"), list) else []
    return found + [m for key, value in node.items() if key != "MetricData" for m in _metric_data(value)]


def _strings(node: Any) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, list):
        return [t for item in node for t in _strings(item)]
    if isinstance(node, dict):
        return [t for value in node.values() for t in _strings(value)]
    return []


def _definitions() -> dict[str, dict[str, Any]]:
    return {p.name: json.loads(p.read_text()) for p in (ROOT / "statemachines").glob("*.asl.json")}


def test_given_the_template_then_every_metric_of_sluices_is_written_and_read_as_the_stacks_own() -> None:
    # Two stacks in one account and region: each function writes service=<its stack>, and every alarm,
    # state machine metric and dashboard line reads or writes that, never another stack's
    assert service_problems(load_template(), _definitions()) == []


@pytest.mark.parametrize("where", ["alarm", "globals", "state machine", "dashboard"])
def test_given_a_metric_not_scoped_to_the_stack_then_the_check_names_it(where: str) -> None:
    raw, definitions = load_template(), _definitions()
    if where == "alarm":
        raw["Resources"][f"{WORKLOADS[0]}BreakerOpenAlarm"]["Properties"]["Dimensions"] = [
            {"Name": "service", "Value": "sluice"}
        ]
    elif where == "globals":
        raw["Globals"]["Function"]["Environment"]["Variables"]["POWERTOOLS_SERVICE_NAME"] = "sluice"
    elif where == "state machine":
        report = definitions["redrive.asl.json"]["States"]["ReportBatch"]["Parameters"]["MetricData"][0]
        report["Dimensions"] = [{"Name": "service", "Value": "sluice"}]
    else:
        dashboard_props = raw["Resources"][f"{WORKLOADS[0]}Dashboard"]["Properties"]
        text = json.dumps(dashboard_props["DashboardBody"])
        shown = f'\\"BreakerOpen\\", \\"service\\", \\"${{AWS::StackName}}/{WORKLOADS[0]}\\"'
        assert text.count(shown) == 1
        dashboard_props["DashboardBody"] = json.loads(
            text.replace(shown, shown.replace(f"${{AWS::StackName}}/{WORKLOADS[0]}", "sluice"))
        )
    found = service_problems(raw, definitions)
    assert len(found) == 1, found


# --- nothing lost on delete --------------------------------------------------------------------------

STATEFUL_TYPES = (
    "AWS::SQS::Queue", "AWS::DynamoDB::Table", "AWS::S3::Bucket", "AWS::KMS::Key",
    "AWS::SecretsManager::Secret",
)  # fmt: skip


def test_given_the_template_then_every_stateful_resource_is_retained_unless_the_stack_says_otherwise() -> (
    None
):
    raw = load_template()
    parameter = raw["Parameters"]["StatefulResourcePolicy"]
    stateful = {lid: r for lid, r in raw["Resources"].items() if r["Type"] in STATEFUL_TYPES}

    source = yaml_parse((ROOT / "template.yaml").read_text(encoding="utf-8"))
    assert "AWS::LanguageExtensions" in source["Transform"]  # what lets the policies name a parameter
    assert (parameter["Default"], sorted(parameter["AllowedValues"])) == ("Retain", ["Delete", "Retain"])
    assert {
        f"{WORKLOADS[0]}DeadLetterQueue",
        "PoisonPillQueue",
        "IdempotencyTable",
        "ClaimCheckBucket",
    } <= set(stateful)
    for lid, resource in stateful.items():
        # a conditional resource cannot Ref a parameter here (cfn-language-discussion#124): it is kept
        expected = "Retain" if "Condition" in resource else {"Ref": "StatefulResourcePolicy"}
        assert resource.get("DeletionPolicy") == expected, lid
        assert resource.get("UpdateReplacePolicy") == expected, lid
    for lid, resource in raw["Resources"].items():  # every other resource says what happens, too
        if resource["Type"] == "AWS::Logs::LogGroup":
            assert (resource.get("DeletionPolicy"), resource.get("UpdateReplacePolicy")) == (
                "Delete",
                "Delete",
            ), lid


def test_given_each_state_machine_then_it_logs_to_its_own_group_without_bodies_by_default_and_is_traced() -> (
    None
):
    raw = load_template()
    machines = {
        lid: r["Properties"]
        for lid, r in raw["Resources"].items()
        if r["Type"] == "AWS::Serverless::StateMachine"
    }

    assert (
        raw["Parameters"]["StateMachineLogExecutionData"]["Default"] == "false"
    )  # bodies may hold personal data
    assert raw["Parameters"]["StateMachineLogLevel"]["Default"] in ("ERROR", "ALL")
    groups = set()
    for lid, props in machines.items():
        logging = props["Logging"]
        assert props["Tracing"] == {"Enabled": True}, lid
        assert logging["Level"] == {"Ref": "StateMachineLogLevel"}, lid
        assert logging["IncludeExecutionData"] == {"Ref": "StateMachineLogExecutionData"}, lid
        [destination] = logging["Destinations"]
        group = destination["CloudWatchLogsLogGroup"]["LogGroupArn"]["Fn::GetAtt"][0]
        assert raw["Resources"][group]["Type"] == "AWS::Logs::LogGroup", lid
        groups.add(group)
    assert len(groups) == len(machines) == 1 + len(WORKLOADS)  # the delay machine, a redrive one each


def test_given_a_checkov_suppression_then_it_sits_on_its_resource_with_its_reason() -> None:
    """`make security` runs checkov with 0 failed checks; what it skips, the template explains."""
    raw = load_template()
    skips = [
        (lid, skip)
        for lid, resource in raw["Resources"].items()
        for skip in resource.get("Metadata", {}).get("checkov", {}).get("skip", [])
    ]

    assert skips
    for lid, skip in skips:
        assert re.fullmatch(r"CKV2?_AWS_\d+", skip["id"]), (lid, skip)
        assert len(skip.get("comment", "")) >= 40, (lid, skip)  # a reason, not a shrug
    assert len({(lid, skip["id"]) for lid, skip in skips}) == len(skips)
