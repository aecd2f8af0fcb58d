"""Authorizations for Lambda, Step Functions, CloudWatch, CloudWatch Logs, X-Ray, STS, CloudFormation,
EventBridge, EventBridge Scheduler and IAM.

Actions and ARN formats follow the Service Authorization Reference ("Actions, resources, and condition
keys for AWS Lambda" / "... AWS Step Functions" / "... Amazon CloudWatch" / "... Amazon CloudWatch Logs"
/ "... AWS X-Ray" / "... AWS Security Token Service" / "... AWS CloudFormation" / "... Amazon
EventBridge" / "... Amazon EventBridge Scheduler" / "... AWS Identity and Access Management",
https://docs.aws.amazon.com/service-authorization/latest/reference/reference_policies_actions-resources-contextkeys.html).
A request that hands a role to a service (CreateFunction, CreateStateMachine, CreateSchedule, a stack's
RoleARN) also needs ``iam:PassRole`` on it ("Granting a user permissions to pass a role to an AWS
service", IAM User Guide). ``sts:GetCallerIdentity`` needs no permission: AWS never denies it.
"""

from __future__ import annotations

import dataclasses

from .actions_base import Call, Handler, Req, pass_role, star

__all__ = ["COMPUTE_HANDLERS", "function_arn"]


# --- Lambda ---------------------------------------------------------------------------------------


def function_arn(req: Req, name: str, qualifier: str | None = None) -> str:
    """The function's ARN, qualified when the request names a version or alias (then only a policy
    naming that qualifier, or ``function:NAME:*``, grants it: AWS Lambda Developer Guide, "Fine-tuning
    the Resources and Conditions sections of policies")."""
    if name.startswith("arn:"):
        parts = name.split(":")
        base, qualifier = ":".join(parts[:7]), qualifier or (parts[7] if len(parts) > 7 else None)
    else:
        parts = name.split(":")
        if len(parts) >= 3 and parts[1] == "function":  # ACCOUNT:function:NAME[:QUALIFIER]
            account, short = parts[0], parts[2]
            qualifier = qualifier or (parts[3] if len(parts) > 3 else None)
        else:  # NAME[:QUALIFIER]
            account, short = req.account, parts[0]
            qualifier = qualifier or (parts[1] if len(parts) > 1 else None)
        base = req.lookup.function_arn(short) or req.arn("lambda", f"function:{short}", account=account)
    return f"{base}:{qualifier}" if qualifier else base


def _fn(action: str | None = None) -> Handler:
    def handle(req: Req) -> list[Call]:
        name = req.need("FunctionName")
        resource = function_arn(req, name, req.text("Qualifier"))
        return [req.call(action or f"lambda:{req.operation}", resource)]

    return handle


def _fn_create(req: Req) -> list[Call]:
    resource = function_arn(req, req.need("FunctionName"))
    return [
        req.call("lambda:CreateFunction", resource),
        *pass_role(req, req.text("Role"), "lambda.amazonaws.com"),
    ]


def _fn_configure(req: Req) -> list[Call]:
    resource = function_arn(req, req.need("FunctionName"))
    calls = [req.call(f"lambda:{req.operation}", resource)]
    return calls + pass_role(req, req.text("Role"), "lambda.amazonaws.com")


def _mapping_create(req: Req) -> list[Call]:
    target = function_arn(req, req.need("FunctionName"))
    return [req.call("lambda:CreateEventSourceMapping", "*", {"lambda:functionarn": target})]


def _mapping(req: Req) -> list[Call]:
    resource = req.arn("lambda", f"event-source-mapping:{req.need('UUID')}")
    return [req.call(f"lambda:{req.operation}", resource)]


def _on_resource_arn(prefix: str, parameter: str) -> Handler:
    def handle(req: Req) -> list[Call]:
        return [req.call(f"{prefix}:{req.operation}", req.need(parameter))]

    return handle


_LAMBDA: dict[str, Handler] = {
    "Invoke": _fn("lambda:InvokeFunction"),
    "InvokeWithResponseStream": _fn("lambda:InvokeFunction"),
    "InvokeAsync": _fn("lambda:InvokeAsync"),
    "CreateFunction": _fn_create,
    "UpdateFunctionConfiguration": _fn_configure,
    "ListFunctions": star(),
    "ListEventSourceMappings": star(),
    "GetAccountSettings": star(),
    "CreateEventSourceMapping": _mapping_create,
    "GetEventSourceMapping": _mapping,
    "UpdateEventSourceMapping": _mapping,
    "DeleteEventSourceMapping": _mapping,
    "ListTags": _on_resource_arn("lambda", "Resource"),
    "TagResource": _on_resource_arn("lambda", "Resource"),
    "UntagResource": _on_resource_arn("lambda", "Resource"),
}
for _name in (
    "GetFunction",
    "GetFunctionConfiguration",
    "DeleteFunction",
    "UpdateFunctionCode",
    "GetFunctionConcurrency",
    "PutFunctionConcurrency",
    "DeleteFunctionConcurrency",
    "GetPolicy",
    "AddPermission",
    "RemovePermission",
    "PublishVersion",
    "ListVersionsByFunction",
    "CreateAlias",
    "GetAlias",
    "UpdateAlias",
    "DeleteAlias",
    "ListAliases",
    "GetFunctionEventInvokeConfig",
    "PutFunctionEventInvokeConfig",
    "DeleteFunctionEventInvokeConfig",
    "GetProvisionedConcurrencyConfig",
):
    _LAMBDA[_name] = _fn()


# --- Step Functions -------------------------------------------------------------------------------


def _sfn_create(req: Req) -> list[Call]:
    machine = req.arn("states", f"stateMachine:{req.need('name')}")
    return [
        req.call("states:CreateStateMachine", machine),
        *pass_role(req, req.text("roleArn"), "states.amazonaws.com"),
    ]


def _sfn_update(req: Req) -> list[Call]:
    machine = req.need("stateMachineArn")
    return [
        req.call("states:UpdateStateMachine", machine),
        *pass_role(req, req.text("roleArn"), "states.amazonaws.com"),
    ]


def _sfn_list_executions(req: Req) -> list[Call]:
    return [req.call("states:ListExecutions", req.text("stateMachineArn") or req.need("mapRunArn"))]


_STATES: dict[str, Handler] = {
    "CreateStateMachine": _sfn_create,
    "UpdateStateMachine": _sfn_update,
    "ListExecutions": _sfn_list_executions,
    "ListStateMachines": star(),
    "ListActivities": star(),
    "ValidateStateMachineDefinition": star(),
    # A task token names no resource the runtime can read back: "*" (see the module's report).
    "SendTaskSuccess": star(),
    "SendTaskFailure": star(),
    "SendTaskHeartbeat": star(),
    "ListTagsForResource": _on_resource_arn("states", "resourceArn"),
    "TagResource": _on_resource_arn("states", "resourceArn"),
    "UntagResource": _on_resource_arn("states", "resourceArn"),
}
for _name in ("StartExecution", "StartSyncExecution", "DescribeStateMachine", "DeleteStateMachine"):
    _STATES[_name] = _on_resource_arn("states", "stateMachineArn")
_STATES["ListStateMachineVersions"] = _on_resource_arn("states", "stateMachineArn")
for _name in (
    "DescribeExecution",
    "StopExecution",
    "GetExecutionHistory",
    "DescribeStateMachineForExecution",
    "RedriveExecution",
):
    _STATES[_name] = _on_resource_arn("states", "executionArn")


# --- CloudWatch -----------------------------------------------------------------------------------


def _alarm(req: Req, name: str) -> str:
    return req.arn("cloudwatch", f"alarm:{name}")


def _put_metric_data(req: Req) -> list[Call]:
    return [req.call("cloudwatch:PutMetricData", "*", {"cloudwatch:namespace": req.need("Namespace")})]


def _alarm_named(req: Req) -> list[Call]:
    return [req.call(f"cloudwatch:{req.operation}", _alarm(req, req.need("AlarmName")))]


def _alarms_named(req: Req) -> list[Call]:
    names = req.items("AlarmNames")
    if not names:  # AWS authorizes an empty list against the bare alarm prefix
        return [req.call(f"cloudwatch:{req.operation}", _alarm(req, ""))]
    return [req.call(f"cloudwatch:{req.operation}", _alarm(req, str(name))) for name in names]


def _alarm_history(req: Req) -> list[Call]:
    name = req.text("AlarmName")
    return [req.call("cloudwatch:DescribeAlarmHistory", _alarm(req, name) if name else "*")]


def _dashboards(req: Req) -> list[Call]:
    names = req.items("DashboardNames") or [req.need("DashboardName")]
    resource = [req.arn("cloudwatch", f"dashboard/{name}", region="") for name in names]
    return [req.call(f"cloudwatch:{req.operation}", arn) for arn in resource]


_CLOUDWATCH: dict[str, Handler] = {
    "PutMetricData": _put_metric_data,
    "GetMetricData": star(),
    "GetMetricStatistics": star(),
    "ListMetrics": star(),
    "GetMetricWidgetImage": star(),
    "DescribeAlarmsForMetric": star(),
    "ListDashboards": star(),
    # Whatever names it asks for, AWS authorizes DescribeAlarms on every alarm of the account.
    "DescribeAlarms": lambda req: [req.call("cloudwatch:DescribeAlarms", _alarm(req, "*"))],
    "DescribeAlarmHistory": _alarm_history,
    "PutMetricAlarm": _alarm_named,
    "PutCompositeAlarm": _alarm_named,
    "SetAlarmState": _alarm_named,
    "DeleteAlarms": _alarms_named,
    "EnableAlarmActions": _alarms_named,
    "DisableAlarmActions": _alarms_named,
    "PutDashboard": _dashboards,
    "GetDashboard": _dashboards,
    "DeleteDashboards": _dashboards,
    "ListTagsForResource": _on_resource_arn("cloudwatch", "ResourceARN"),
    "TagResource": _on_resource_arn("cloudwatch", "ResourceARN"),
}


# --- CloudWatch Logs ------------------------------------------------------------------------------


def _log(stream: bool) -> Handler:
    """A log group's operations are authorized on ``log-group:G:log-stream:`` (AWS's error messages show
    the stream part, empty where the request names none): a policy's ``log-group:G:*`` matches both."""

    def handle(req: Req) -> list[Call]:
        group = req.text("logGroupName") or ""
        if not group and req.operation != "DescribeLogGroups":
            group = req.need("logGroupName")
        name = req.need("logStreamName") if stream else ""
        return [req.call(f"logs:{req.operation}", req.arn("logs", f"log-group:{group}:log-stream:{name}"))]

    return handle


_LOGS: dict[str, Handler] = {
    "CreateLogStream": _log(stream=True),
    "PutLogEvents": _log(stream=True),
    "GetLogEvents": _log(stream=True),
    "DescribeLogGroups": _log(stream=False),
}
for _name in (
    "CreateLogGroup",
    "DeleteLogGroup",
    "DescribeLogStreams",
    "FilterLogEvents",
    "PutRetentionPolicy",
    "DeleteRetentionPolicy",
):
    _LOGS[_name] = _log(stream=False)


# --- X-Ray, STS -----------------------------------------------------------------------------------

_XRAY: dict[str, Handler] = {
    name: star()
    for name in (
        "PutTraceSegments",
        "PutTelemetryRecords",
        "GetTraceSummaries",
        "BatchGetTraces",
        "GetSamplingRules",
        "GetSamplingTargets",
        "GetServiceGraph",
    )
}

_STS: dict[str, Handler] = {
    "GetCallerIdentity": lambda req: [],
    # the role's trust policy must let the caller in, as a key policy must (or trust the account, with
    # an identity-based allow): IAM User Guide, "Policy evaluation logic", roles' trust policies
    "AssumeRole": lambda req: [
        dataclasses.replace(call, resource_required=True) for call in _on_resource_arn("sts", "RoleArn")(req)
    ],
}


# --- CloudFormation -------------------------------------------------------------------------------


def _stack(req: Req, name: str) -> str:
    return name if name.startswith("arn:") else req.arn("cloudformation", f"stack/{name}/*")


def _on_stack(optional: bool = False) -> Handler:
    def handle(req: Req) -> list[Call]:
        name = req.text("StackName")
        if not name and optional:
            return [req.call(f"cloudformation:{req.operation}", "*")]
        calls = [req.call(f"cloudformation:{req.operation}", _stack(req, name or req.need("StackName")))]
        return calls + pass_role(req, req.text("RoleARN"), "cloudformation.amazonaws.com")

    return handle


_CLOUDFORMATION: dict[str, Handler] = {
    "DescribeStacks": _on_stack(optional=True),
    "DescribeStackEvents": _on_stack(),
    "DescribeStackResource": _on_stack(),
    "DescribeStackResources": _on_stack(),
    "ListStackResources": _on_stack(),
    "GetTemplate": _on_stack(),
    "GetTemplateSummary": _on_stack(optional=True),
    "CreateStack": _on_stack(),
    "UpdateStack": _on_stack(),
    "DeleteStack": _on_stack(),
    "CreateChangeSet": _on_stack(),
    "ExecuteChangeSet": _on_stack(),
    "DescribeChangeSet": _on_stack(),
    "DeleteChangeSet": _on_stack(),
    "ListChangeSets": _on_stack(),
    "ListStacks": star(),
    "ListExports": star(),
    "ListImports": star(),
    "ValidateTemplate": star(),
}


# --- EventBridge, Scheduler -----------------------------------------------------------------------


def _bus(req: Req, name: str | None) -> str:
    name = name or "default"
    return name if name.startswith("arn:") else req.arn("events", f"event-bus/{name}")


def _put_events(req: Req) -> list[Call]:
    buses: dict[str, tuple[set[str], set[str]]] = {}
    for entry in req.items("Entries"):
        sources, types = buses.setdefault(_bus(req, entry.get("EventBusName")), (set(), set()))
        sources.add(str(entry.get("Source", "")))
        types.add(str(entry.get("DetailType", "")))
    return [
        req.call("events:PutEvents", bus, {"events:source": sorted(s), "events:detail-type": sorted(t)})
        for bus, (s, t) in buses.items()
    ]


def _rule(req: Req) -> list[Call]:
    name = req.text("Rule") or req.need("Name")
    bus = req.text("EventBusName")
    if bus and bus.startswith("arn:"):
        bus = bus.rsplit("/", 1)[-1]
    rule = f"rule/{bus}/{name}" if bus and bus != "default" else f"rule/{name}"
    calls = [req.call(f"events:{req.operation}", req.arn("events", rule))]
    for target in req.items("Targets") if req.operation == "PutTargets" else []:
        calls += pass_role(req, target.get("RoleArn"), "events.amazonaws.com")
    return calls + pass_role(req, req.text("RoleArn"), "events.amazonaws.com")


_EVENTS: dict[str, Handler] = {
    "PutEvents": _put_events,
    "ListRules": star(),
    "ListEventBuses": star(),
    "CreateEventBus": lambda req: [req.call("events:CreateEventBus", _bus(req, req.need("Name")))],
    "DescribeEventBus": lambda req: [req.call("events:DescribeEventBus", _bus(req, req.text("Name")))],
    "DeleteEventBus": lambda req: [req.call("events:DeleteEventBus", _bus(req, req.need("Name")))],
}
for _name in (
    "PutRule",
    "DescribeRule",
    "DeleteRule",
    "EnableRule",
    "DisableRule",
    "PutTargets",
    "RemoveTargets",
    "ListTargetsByRule",
):
    _EVENTS[_name] = _rule


def _schedule(req: Req) -> list[Call]:
    group = req.text("GroupName") or "default"
    calls = [
        req.call(f"scheduler:{req.operation}", req.arn("scheduler", f"schedule/{group}/{req.need('Name')}"))
    ]
    target = req.params.get("Target")
    role = target.get("RoleArn") if isinstance(target, dict) else None
    return calls + pass_role(req, role, "scheduler.amazonaws.com")


def _schedule_group(req: Req) -> list[Call]:
    return [
        req.call(f"scheduler:{req.operation}", req.arn("scheduler", f"schedule-group/{req.need('Name')}"))
    ]


_SCHEDULER: dict[str, Handler] = {
    "CreateSchedule": _schedule,
    "UpdateSchedule": _schedule,
    "GetSchedule": _schedule,
    "DeleteSchedule": _schedule,
    "ListSchedules": star(),
    "ListScheduleGroups": star(),
    "CreateScheduleGroup": _schedule_group,
    "GetScheduleGroup": _schedule_group,
    "DeleteScheduleGroup": _schedule_group,
}


# --- IAM ------------------------------------------------------------------------------------------


def _role(req: Req) -> list[Call]:
    path = req.text("Path") or "/"
    role = req.arn("iam", f"role{path}{req.need('RoleName')}", region="")
    context = {"iam:policyarn": req.text("PolicyArn") or ""}
    return [req.call(f"iam:{req.operation}", role, {k: v for k, v in context.items() if v})]


def _policy(req: Req) -> list[Call]:
    arn = req.text("PolicyArn")
    if not arn:
        path = req.text("Path") or "/"
        arn = req.arn("iam", f"policy{path}{req.need('PolicyName')}", region="")
    return [req.call(f"iam:{req.operation}", arn)]


_IAM: dict[str, Handler] = {
    "ListRoles": star(),
    "ListPolicies": star(),
    "CreatePolicy": _policy,
    "GetPolicy": _policy,
    "GetPolicyVersion": _policy,
    "DeletePolicy": _policy,
}
for _name in (
    "CreateRole",
    "GetRole",
    "DeleteRole",
    "UpdateRole",
    "UpdateAssumeRolePolicy",
    "PutRolePolicy",
    "GetRolePolicy",
    "DeleteRolePolicy",
    "ListRolePolicies",
    "AttachRolePolicy",
    "DetachRolePolicy",
    "ListAttachedRolePolicies",
    "TagRole",
    "UntagRole",
):
    _IAM[_name] = _role


COMPUTE_HANDLERS: dict[str, dict[str, Handler]] = {
    "lambda": _LAMBDA,
    "states": _STATES,
    "cloudwatch": _CLOUDWATCH,
    "logs": _LOGS,
    "xray": _XRAY,
    "sts": _STS,
    "cloudformation": _CLOUDFORMATION,
    "events": _EVENTS,
    "scheduler": _SCHEDULER,
    "iam": _IAM,
}
