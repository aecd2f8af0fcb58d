"""Invocations and event delivery: Lambda invocations land in the runtime's in-process functions,
EventBridge rules deliver to Lambda and Step Functions targets, ``aws-sdk:sfn`` tasks get Step
Functions' PascalCase naming, and an unnamed execution gets a name."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from sluice_local.emulation.moto_adapter.attributes import (
    AWS_SDK_PARAMETERS,
    LAMBDA_BACKEND_INVOKE,
    LAMBDA_FUNCTION_INVOKE,
    RULE_SEND_TO_TARGETS,
    SFN_START_EXECUTION,
    Undo,
    replace,
    undo_all,
)  # fmt: skip

InvokeFn = Callable[[str, Any, Mapping[str, str], dict[str, Any]], bytes]
"""(function name, request body, request headers, response headers to fill) → response payload."""


def install_invoke(invoke: InvokeFn) -> Undo:
    """Route every Lambda invocation moto handles (Invoke API, Step Functions tasks, SNS) to ``invoke``."""

    # Each replacement keeps the parameters of the method it replaces.
    def function_invoke(self: Any, body: Any, request_headers: Any, response_headers: Any) -> bytes:
        return invoke(self.function_name, body, request_headers or {}, response_headers)

    def backend_invoke(  # noqa: PLR0917 - moto's signature
        self: Any, function_name: str, qualifier: Any, body: Any, headers: Any, response_headers: Any
    ) -> bytes:
        fn = self.get_function(function_name, qualifier)
        return invoke(fn.function_name, body, headers or {}, response_headers)

    return undo_all(
        [
            replace(LAMBDA_FUNCTION_INVOKE.owner_class(), "invoke", function_invoke),
            replace(LAMBDA_BACKEND_INVOKE.owner_class(), "invoke", backend_invoke),
        ]
    )


def install_event_delivery(
    invoke_async: Callable[[str, dict[str, Any], str], None],
    start_execution: Callable[[str, str, str | None], None],
) -> Undo:
    """EventBridge rules deliver to Lambda and Step Functions targets (moto only delivers to SQS, logs
    and buses, and raises on the rest); a scheduled rule no longer matches every event on its bus.
    ``invoke_async(function, payload, rule ARN)`` (EventBridge invokes as its service principal, for
    the rule); ``start_execution(state machine, input, the target's RoleArn)``."""
    from moto.events.utils import EventTemplateParser  # noqa: PLC0415

    rule_class = RULE_SEND_TO_TARGETS.owner_class()
    original = rule_class.send_to_targets

    def ours(target: dict[str, Any]) -> bool:
        return ":lambda:" in target["Arn"] or ":states:" in target["Arn"]

    def send_to_targets(self: Any, original_event: Any, transform_input: bool = True) -> None:
        if (
            getattr(self, "scheduled_expression", None)
            and original_event.get("detail-type") != "Scheduled Event"
        ):
            return  # a scheduled rule has no event pattern: it must not match every event on the bus
        others = [t for t in self.targets if not ours(t)]
        if others:  # moto delivers to the targets it knows (SQS, logs, buses); it raises on the rest
            every = self.targets
            self.targets = others
            try:
                original(self, original_event, transform_input)
            finally:
                self.targets = every
        if not self.event_pattern.matches_event(original_event):
            return
        for target in self.targets:
            arn = target["Arn"]
            if not ours(target):
                continue
            if "Input" in target:
                payload = json.loads(target["Input"])
            elif "InputTransformer" in target and transform_input:
                transformer = target["InputTransformer"]
                payload = EventTemplateParser.parse(
                    input_template=transformer.get("InputTemplate"),
                    input_paths_map=transformer.get("InputPathsMap", {}),
                    event=original_event,
                )
            else:
                payload = original_event
            if ":lambda:" in arn:
                invoke_async(arn, payload, self.arn)
            else:
                start_execution(arn, json.dumps(payload), target.get("RoleArn"))

    return replace(rule_class, "send_to_targets", send_to_targets)


def install_aws_sdk_casing(region: str = "us-east-1") -> Undo:
    """What Step Functions does for ``aws-sdk`` tasks and moto 5.2 leaves out, for ``sfn`` calls.

    Step Functions names every parameter and result field in PascalCase, even for an API whose wire
    names are camelCase (its own): ``StateMachineArn`` goes to boto3 as ``stateMachineArn``, and
    ``executions[].executionArn`` comes back as ``Executions[].ExecutionArn`` (timestamps as JSON
    text). moto passes Parameters as written, so the redrive state machine's guard
    (``aws-sdk:sfn:listExecutions``) would fail with ``States.Runtime``. SQS is PascalCase on the wire
    and needs nothing. Uses moto's own (otherwise unused) request/response normalisers.
    """
    import boto3  # noqa: PLC0415
    from moto.stepfunctions.parser.asl.utils.encoding import to_json_str  # noqa: PLC0415

    task_class: Any = AWS_SDK_PARAMETERS.owner_class()
    original_parameters = task_class._normalise_parameters
    original_response = task_class._normalise_response
    model = boto3.session.Session().client("stepfunctions", region_name=region).meta.service_model

    def operation(task: Any) -> Any:
        action = task.resource.api_action
        return model.operation_model(action[0].upper() + action[1:])

    def parameters(
        self: Any,
        parameters: dict[str, Any],
        boto_service_name: str | None = None,
        service_action_name: str | None = None,
    ) -> None:
        if self.resource.api_name != "sfn":
            original_parameters(self, parameters, boto_service_name, service_action_name)
            return
        self._to_boto_request(parameters, operation(self).input_shape)

    def response(
        self: Any, response: Any, boto_service_name: str | None = None, service_action_name: str | None = None
    ) -> None:
        if self.resource.api_name != "sfn" or not isinstance(response, dict):
            original_response(self, response, boto_service_name, service_action_name)
            return
        self._from_boto_response(response, operation(self).output_shape)
        as_json = json.loads(to_json_str(response))
        response.clear()
        response.update(as_json)

    return undo_all(
        [
            replace(task_class, "_normalise_parameters", parameters),
            replace(task_class, "_normalise_response", response),
        ]
    )


def install_execution_names() -> Undo:
    """StartExecution without a name gets a generated one, as in Step Functions (moto names every
    such execution ``None``, so the second unnamed start fails with ExecutionAlreadyExists). The
    execution acts as the state machine's role (:mod:`sluice_local.emulation.iam.acting`)."""
    import uuid  # noqa: PLC0415

    from sluice_local.emulation.iam.acting import Acting, acting_as  # noqa: PLC0415

    backend_class = SFN_START_EXECUTION.owner_class()
    original = backend_class.start_execution

    def start_execution(
        self: Any,
        state_machine_arn: str,
        name: Any = None,
        execution_input: Any = None,
        trace_header: Any = None,
    ) -> Any:
        name = name or str(uuid.uuid4())
        role = getattr(self.describe_state_machine(state_machine_arn), "roleArn", None)
        if not role:
            return original(self, state_machine_arn, name, execution_input, trace_header)
        # the execution's tasks call as the state machine's role (its worker thread inherits this)
        with acting_as(Acting.role_session(role, name)):
            return original(self, state_machine_arn, name, execution_input, trace_header)

    return replace(backend_class, "start_execution", start_execution)
