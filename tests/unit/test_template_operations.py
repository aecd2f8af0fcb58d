"""The operations contract of template.yaml: who hears which alarm, what the dashboard shows.

Every check runs on the template as CloudFormation would resolve it for each combination of
``RedriveMode`` (lambda, stepfunctions) and the job store (configured or not): conditions evaluated,
``Fn::If`` resolved, resources whose condition is false removed.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from samtranslator.yaml_helper import yaml_parse

from sluice import metrics
from sluice_local.emulation.language_extensions import resolve_find_in_map as _resolve_find_in_map
from sluice_local.emulation.template import _resolve_if, evaluate_conditions
from tests.unit.test_template import load_template

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


def resolved(parameters: dict[str, str]) -> Template:
    """The template's resources as CloudFormation creates them for these parameter values."""
    raw = load_template()
    values = {k: str(v.get("Default")) for k, v in raw["Parameters"].items() if "Default" in v}
    values.update(parameters)
    conditions = evaluate_conditions(raw.get("Conditions", {}), values)
    mappings = raw.get("Mappings", {})
    resources = {
        lid: _literal_sub_variables(_resolve_find_in_map(_resolve_if(res, conditions), mappings, values))
        for lid, res in raw["Resources"].items()
        if conditions.get(res.get("Condition", ""), True)
    }
    return {"Resources": resources, "Conditions": conditions}


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
    value = dimension["Value"]
    about = value.get("Ref") or value.get("Fn::GetAtt", [""])[0] if isinstance(value, dict) else str(value)
    return str(props["Namespace"]), str(props["MetricName"]), str(about)


# --- the expected alarms ----------------------------------------------------------------------------

DEAD_ENDS = {  # queue → alarm prefix: a message waiting there is critical
    "WorkDeadLetterQueue": "WorkDeadLetter",
    "DelayDeadLetterQueue": "DelayDeadLetter",
    "PoisonPillQueue": "PoisonPill",
    "JobDeadLetterQueue": "JobDeadLetter",
}
NAMED = {  # alarm → (namespace, metric or math id, about, threshold, topic)
    "WorkQueueAgeAlarm": (
        "AWS/SQS", "ApproximateAgeOfOldestMessage", "WorkQueue", {"Ref": "OldestMessageAlarmSeconds"},
        "WarningTopic",
    ),
    "WorkQueueTimeToDrainAlarm": ("math", "drain", "", {"Ref": "TimeToDrainAlarmSeconds"}, "WarningTopic"),
    "WorkQueueConservationAlarm": (
        "math", "excess", "", {"Ref": "ConservationToleranceMessages"}, "CriticalTopic",
    ),
    "NearDeadLetterAlarm": ("Sluice", metrics.NEAR_DEAD_LETTER, "AWS::StackName", 0, "WarningTopic"),
    "BreakerOpenAlarm": ("Sluice", metrics.BREAKER_OPEN, "AWS::StackName", 0, "WarningTopic"),
    "RedriveFailuresAlarm": ("Sluice", metrics.REDRIVE_FAILURES, "AWS::StackName", 0, "CriticalTopic"),
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
    for queue, prefix in DEAD_ENDS.items():
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
    if "RedriveStateMachine" in resources:  # a breaker-open run ends in Fail: not counted (the warning is)
        out["RedriveStateMachineExecutionsFailedAlarm"] = ("math", "failedclosed", "", 0, "CriticalTopic")
    jobs = "JobQueue" in resources
    out |= {k: v for k, v in NAMED.items() if jobs or not k.startswith(("JobStore", "Jobs"))}
    return out


@pytest.mark.parametrize("parameters", VARIANTS)
def test_given_each_mode_then_every_alarm_watches_its_metric_at_its_threshold_and_notifies_its_topic(
    parameters: dict[str, str],
) -> None:
    template = resolved(parameters)
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
    for mode, starter in (("lambda", "RedriverFunction"), ("stepfunctions", "RedriveStateMachine")):
        template = resolved({"RedriveMode": mode})
        [rule] = [
            e["Properties"]["Pattern"]
            for e in template["Resources"][starter]["Properties"]["Events"].values()
            if e["Type"] == "EventBridgeRule"
        ]
        assert rule["resources"] == [{"Fn::GetAtt": ["WorkDeadLetterDepthAlarm", "Arn"]}]
        assert rule["detail"] == {"state": {"value": ["ALARM"]}}
        topics = of_type(template, "AWS::SNS::Topic")
        assert sorted(topics) == sorted(TOPICS)  # no topic of its own: the alarm notifies people only
        assert all(t["KmsMasterKeyId"] == {"Ref": "AlarmTopicKey"} for t in topics.values())


# --- the dashboard ----------------------------------------------------------------------------------


def dashboard(template: Template) -> dict[str, Any]:
    """The dashboard's body as CloudFormation renders it, ``${X}`` left as ``<X>``."""
    [props] = of_type(template, "AWS::CloudWatch::Dashboard").values()
    separator, parts = props["DashboardBody"]["Fn::Join"]
    text = separator.join(
        re.sub(r"\$\{([^}]+)\}", r"<\1>", p["Fn::Sub"] if isinstance(p, dict) else p) for p in parts
    )
    return dict(json.loads(text))


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

    queues = {f"<{q}.QueueName>" for q in of_type(template, "AWS::SQS::Queue")}
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
    consumer = {line[1] for line in shown if line[:1] == ("AWS/Lambda",) and "<ConsumerFunction>" in line}
    assert consumer >= {"ConcurrentExecutions", "Errors", "Throttles", "Duration"}


# --- one stack's own metrics ------------------------------------------------------------------------

STACK_SERVICE = [{"Name": "service", "Value": {"Ref": "AWS::StackName"}}]
"""The dimension every read of sluice's metrics selects: the stack's name, as its functions write it."""


def service_problems(raw: Template, definitions: dict[str, dict[str, Any]]) -> list[str]:
    """Where a reader or writer of sluice's metrics is not scoped to the stack (``service`` = its name)."""
    problems: list[str] = []
    shared = raw["Globals"]["Function"]["Environment"]["Variables"]
    if shared.get("POWERTOOLS_SERVICE_NAME") != {"Ref": "AWS::StackName"}:
        problems.append(f"Globals POWERTOOLS_SERVICE_NAME is {shared.get('POWERTOOLS_SERVICE_NAME')!r}")
    for lid, resource in raw["Resources"].items():
        props = resource.get("Properties", {})
        if resource["Type"] == "AWS::CloudWatch::Alarm":
            stats = (
                [props]
                if "MetricName" in props
                else [m["MetricStat"]["Metric"] for m in props["Metrics"] if "MetricStat" in m]
            )
            problems += [
                f"{lid} reads {stat['MetricName']} with {stat.get('Dimensions')}"
                for stat in stats
                if stat.get("Namespace") == "Sluice" and stat.get("Dimensions") != STACK_SERVICE
            ]
        if resource["Type"] == "AWS::Serverless::StateMachine":
            name = Path(str(props.get("DefinitionUri", ""))).name
            text = json.dumps(definitions.get(name, {}))
            if "putMetricData" in text and props["DefinitionSubstitutions"].get("MetricsService") != {
                "Ref": "AWS::StackName"
            }:
                problems.append(f"{lid} puts metrics without MetricsService = the stack's name")
    for name, definition in definitions.items():
        for metric in _metric_data(definition):
            if metric.get("Dimensions") != [{"Name": "service", "Value": "${MetricsService}"}]:
                problems.append(f"{name} puts {metric['MetricName']} with {metric.get('Dimensions')}")
    body = raw["Resources"]["Dashboard"]["Properties"]["DashboardBody"]
    for text in _strings(body):
        for metric, service in re.findall(r'\["Sluice", "(\w+)"(?:, "service", "([^"]*)")?', text):
            if service != "${AWS::StackName}":
                problems.append(f"the dashboard shows {metric} with service {service!r}")
    return problems


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
        raw["Resources"]["BreakerOpenAlarm"]["Properties"]["Dimensions"] = [
            {"Name": "service", "Value": "sluice"}
        ]
    elif where == "globals":
        raw["Globals"]["Function"]["Environment"]["Variables"]["POWERTOOLS_SERVICE_NAME"] = "sluice"
    elif where == "state machine":
        report = definitions["redrive.asl.json"]["States"]["ReportBatch"]["Parameters"]["MetricData"][0]
        report["Dimensions"] = [{"Name": "service", "Value": "sluice"}]
    else:
        dashboard_props = raw["Resources"]["Dashboard"]["Properties"]
        text = json.dumps(dashboard_props["DashboardBody"])
        shown = '\\"BreakerOpen\\", \\"service\\", \\"${AWS::StackName}\\"'
        assert text.count(shown) == 1
        dashboard_props["DashboardBody"] = json.loads(
            text.replace(shown, shown.replace("${AWS::StackName}", "sluice"))
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
    assert {"WorkDeadLetterQueue", "PoisonPillQueue", "IdempotencyTable", "ClaimCheckBucket"} <= set(stateful)
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
    assert len(groups) == len(machines) == 2


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
