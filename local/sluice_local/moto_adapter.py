"""Everything the local runtime does to moto beyond its public API, in one place: written for moto 5.2.5.

- **Settings**: Step Functions executes state machines; Lambda runs without Docker.
- **Patches** (:data:`PATCHED`, each undone by the function that installs it): Lambda invocations
  land in the runtime's in-process functions; EventBridge rules deliver to Lambda and Step Functions
  targets; ``aws-sdk:sfn`` tasks get Step Functions' PascalCase naming; SQS refuses what AWS refuses
  (sizes in bytes with attributes, characters, attribute rules); an unnamed execution gets a name;
  CloudFormation creates ``AWS::SecretsManager::Secret`` (with ``GenerateSecretString``).
- **Backend access**: switch off moto's own SQS→Lambda invoke-on-send, hand state machines created
  through CloudFormation to the executing backend, read queue metrics for alarms, list EventBridge
  rules for schedules, reset every backend.

``tests/unit/test_moto_adapter.py`` checks each assumption against the installed moto (its version,
every attribute used or replaced, with its signature), so a moto upgrade fails there, naming what
changed, rather than somewhere in a scenario. :func:`problems` is that check; the runtime logs its
findings at start.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import importlib
import inspect
import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sluice_local.asl_rules import unsupported_fields

WRITTEN_FOR = "5.2.5"
"""The moto version this module was written and checked against (pinned in pyproject.toml)."""

Undo = Callable[[], None]
InvokeFn = Callable[[str, Any, Mapping[str, str], dict[str, Any]], bytes]
"""(function name, request body, request headers, response headers to fill) → response payload."""

_SFN_AWS_SDK = (
    "moto.stepfunctions.parser.asl.component.state.exec.state_task.service.state_task_service_aws_sdk"
)
_LOCK = threading.Lock()


@dataclass(frozen=True)
class Attribute:
    """An attribute of a moto class the runtime relies on, with the parameters it expects."""

    module: str
    owner: str | None
    """The class holding it; None for a module-level function."""
    name: str
    parameters: tuple[str, ...]

    def __str__(self) -> str:
        return ".".join(part for part in (self.module, self.owner, self.name) if part)

    def owner_class(self) -> Any:
        module = importlib.import_module(self.module)
        return module if self.owner is None else getattr(module, self.owner)


LAMBDA_FUNCTION_INVOKE = Attribute(
    "moto.awslambda.models",
    "LambdaFunction",
    "invoke",
    ("self", "body", "request_headers", "response_headers"),
)
LAMBDA_BACKEND_INVOKE = Attribute(
    "moto.awslambda_simple.models",
    "LambdaSimpleBackend",
    "invoke",
    ("self", "function_name", "qualifier", "body", "headers", "response_headers"),
)
RULE_SEND_TO_TARGETS = Attribute(
    "moto.events.models", "Rule", "send_to_targets", ("self", "original_event", "transform_input")
)
AWS_SDK_PARAMETERS = Attribute(
    _SFN_AWS_SDK,
    "StateTaskServiceAwsSdk",
    "_normalise_parameters",
    ("self", "parameters", "boto_service_name", "service_action_name"),
)
AWS_SDK_RESPONSE = Attribute(
    _SFN_AWS_SDK,
    "StateTaskServiceAwsSdk",
    "_normalise_response",
    ("self", "response", "boto_service_name", "service_action_name"),
)
SQS_SEND_MESSAGE = Attribute(
    "moto.sqs.models",
    "SQSBackend",
    "send_message",
    (
        "self",
        "queue_name",
        "message_body",
        "message_attributes",
        "delay_seconds",
        "deduplication_id",
        "group_id",
        "system_attributes",
        "validate_group_id",
    ),
)
SQS_SEND_MESSAGE_BATCH = Attribute(
    "moto.sqs.models", "SQSBackend", "send_message_batch", ("self", "queue_name", "entries")
)
SFN_START_EXECUTION = Attribute(
    "moto.stepfunctions.parser.models",
    "StepFunctionsParserBackend",
    "start_execution",
    ("self", "state_machine_arn", "name", "execution_input", "trace_header"),
)
CFN_RESOURCE_CLASS = Attribute(
    "moto.cloudformation.parsing", None, "resource_class_from_type", ("resource_type",)
)
PATCHED = (
    CFN_RESOURCE_CLASS,
    LAMBDA_FUNCTION_INVOKE,
    LAMBDA_BACKEND_INVOKE,
    RULE_SEND_TO_TARGETS,
    AWS_SDK_PARAMETERS,
    AWS_SDK_RESPONSE,
    SQS_SEND_MESSAGE,
    SQS_SEND_MESSAGE_BATCH,
    SFN_START_EXECUTION,
)
"""What the runtime replaces while a stack runs (and restores on stop)."""

USED = (
    Attribute(
        _SFN_AWS_SDK, "StateTaskServiceAwsSdk", "_to_boto_request", ("self", "parameters", "structure_shape")
    ),
    Attribute(
        _SFN_AWS_SDK, "StateTaskServiceAwsSdk", "_from_boto_response", ("self", "response", "structure_shape")
    ),
    Attribute(
        "moto.events.utils", "EventTemplateParser", "parse", ("input_template", "input_paths_map", "event")
    ),
    Attribute(
        "moto.stepfunctions.parser.models",
        "StepFunctionsParserBackend",
        "_validate_definition",
        ("definition",),
    ),
    Attribute("moto.moto_api._internal.models", "MotoAPIBackend", "reset", ("self",)),
    Attribute("moto.sqs.models", "SQSBackend", "get_queue", ("self", "queue_name")),
)
"""Internals the runtime calls without replacing them."""

SETTINGS: dict[str, dict[str, Any]] = {
    "stepfunctions": {"execute_state_machine": True},
    "lambda": {"use_docker": False},
}
"""moto's ``default_user_config`` sections the runtime sets while a stack runs."""


def installed_version() -> str:
    import moto  # noqa: PLC0415 - moto is heavy; loaded when a stack starts

    return str(moto.__version__)


def problems() -> list[str]:
    """Every assumption of this module the installed moto breaks (empty: all hold)."""
    from moto.core.config import default_user_config  # noqa: PLC0415

    found: list[str] = []
    version = installed_version()
    if version != WRITTEN_FOR:
        found.append(
            f"moto {version} is installed; sluice_local.moto_adapter was written for moto {WRITTEN_FOR}: "
            "re-check every patch and internal it uses, then update WRITTEN_FOR and the pin in pyproject.toml"
        )
    found += [problem for a in (*PATCHED, *USED) if (problem := attribute_problem(a)) is not None]
    for section, values in SETTINGS.items():
        current = default_user_config.get(section)
        if not isinstance(current, dict) or set(values) - set(current):
            found.append(
                f"moto's default_user_config[{section!r}] no longer has {sorted(values)}: {current!r}"
            )
    return found


def attribute_problem(attribute: Attribute) -> str | None:
    """What is wrong with one attribute the runtime relies on (None: it is there, as expected)."""
    try:
        owner = attribute.owner_class()
    except (ImportError, AttributeError) as exc:
        return f"{attribute}: its owner {attribute.module}.{attribute.owner} is gone ({exc})"
    value = getattr(owner, attribute.name, None)
    if not callable(value):
        return f"{attribute}: no such method any more"
    got = tuple(inspect.signature(value).parameters)
    if got != attribute.parameters:
        return f"{attribute}: parameters are now {got}, the runtime expects {attribute.parameters}"
    return None


# --- server and settings -----------------------------------------------------------------------


def start_server(port: int) -> Any:
    """moto's threaded HTTP server on a loopback port (stop it with ``.stop()``)."""
    from moto.server import ThreadedMotoServer  # noqa: PLC0415

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    return server


def configure() -> Undo:
    """Apply :data:`SETTINGS`; returns what restores the previous ones."""
    from moto.core.config import default_user_config  # noqa: PLC0415

    saved = {key: default_user_config.get(key) for key in SETTINGS}
    for key, value in SETTINGS.items():
        default_user_config[key] = dict(value)  # type: ignore[literal-required]

    def undo() -> None:
        for key, value in saved.items():
            default_user_config[key] = value  # type: ignore[literal-required]

    return undo


def reset() -> None:
    """Reset every moto backend (what ``POST /moto-api/reset`` does)."""
    from moto.moto_api._internal.models import moto_api_backend  # noqa: PLC0415

    moto_api_backend.reset()


# --- patches -----------------------------------------------------------------------------------


def _replace(owner: Any, name: str, new: Any) -> Undo:
    """Set ``owner.name`` to ``new``; the undo restores exactly what was there (own or inherited)."""
    with _LOCK:
        own = name in vars(owner)
        original = vars(owner).get(name)
        setattr(owner, name, new)

    def undo() -> None:
        with _LOCK:
            if own:
                setattr(owner, name, original)
            else:
                delattr(owner, name)

    return undo


def _undo_all(undos: list[Undo]) -> Undo:
    def undo() -> None:
        for one in reversed(undos):
            one()

    return undo


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

    return _undo_all(
        [
            _replace(LAMBDA_FUNCTION_INVOKE.owner_class(), "invoke", function_invoke),
            _replace(LAMBDA_BACKEND_INVOKE.owner_class(), "invoke", backend_invoke),
        ]
    )


def install_event_delivery(
    invoke_async: Callable[[str, dict[str, Any]], None], start_execution: Callable[[str, str], None]
) -> Undo:
    """EventBridge rules deliver to Lambda and Step Functions targets (moto only delivers to SQS, logs
    and buses, and raises on the rest); a scheduled rule no longer matches every event on its bus."""
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
                invoke_async(arn, payload)
            else:
                start_execution(arn, json.dumps(payload))

    return _replace(rule_class, "send_to_targets", send_to_targets)


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

    return _undo_all(
        [
            _replace(task_class, "_normalise_parameters", parameters),
            _replace(task_class, "_normalise_response", response),
        ]
    )


def install_sqs_rules() -> Undo:
    """SQS refuses what AWS refuses (moto is lenient), judged by the runtime's own table of SQS's
    documented rules (:mod:`sluice_local.sqs_rules`, read by :mod:`sluice_local.sqs_checker`; never
    the layer's :mod:`sluice.sqs`, whose reading of the same rules this is here to catch): the body's
    characters, the size in bytes including attributes against the queue's ``MaximumMessageSize``,
    at most 10 attributes, each attribute's name, ``DataType`` and value, ``DelaySeconds``, the
    FIFO fields and ``MessageSystemAttributes`` (a well-formed ``AWSTraceHeader`` only). SendMessage
    raises the error SQS raises; SendMessageBatch fails a whole call that breaks a rule of the call
    (1 to 10 entries, distinct ids of up to 80 alphanumerics, hyphens and underscores, all entries
    together within SQS's 1 MiB: ``BatchRequestTooLong`` whatever the queue's own limit) and reports
    every other refused entry (one over the queue's ``MaximumMessageSize`` included) in ``Failed``
    with ``SenderFault``, sending the rest, as SQS does; and each entry keeps its
    ``MessageSystemAttributes`` (the ``AWSTraceHeader``), which moto's batch drops."""
    from moto.sqs.exceptions import SQSException  # noqa: PLC0415

    from sluice_local.sqs_checker import Violation, check_batch, check_entry  # noqa: PLC0415

    backend_class = SQS_SEND_MESSAGE.owner_class()
    original_send = backend_class.send_message
    original_batch = backend_class.send_message_batch

    def judge(backend: Any, queue_name: str, entry: Mapping[str, Any]) -> Violation | None:
        queue = backend.get_queue(queue_name)
        return check_entry(
            entry.get("MessageBody"),
            wire_attributes(entry.get("MessageAttributes")),
            max_bytes=int(queue.maximum_message_size),
            delay_seconds=entry.get("DelaySeconds"),
            system_attributes=entry.get("MessageSystemAttributes"),
            fifo=bool(queue.fifo_queue),
            content_based_deduplication=queue.attributes.get("ContentBasedDeduplication") == "true",
            group_id=entry.get("MessageGroupId"),
            deduplication_id=entry.get("MessageDeduplicationId"),
        )

    def send_message(  # noqa: PLR0917 - moto's signature
        self: Any,
        queue_name: str,
        message_body: str,
        message_attributes: dict[str, Any] | None = None,
        delay_seconds: int | None = None,
        deduplication_id: str | None = None,
        group_id: str | None = None,
        system_attributes: dict[str, Any] | None = None,
        validate_group_id: bool = True,
    ) -> Any:
        entry = {
            "MessageBody": message_body,
            "MessageAttributes": message_attributes,
            "DelaySeconds": delay_seconds,
            "MessageGroupId": group_id,
            "MessageDeduplicationId": deduplication_id,
            "MessageSystemAttributes": system_attributes,
        }
        violation = judge(self, queue_name, entry)
        if violation is not None:
            raise SQSException(violation.code, violation.message)
        return original_send(
            self,
            queue_name,
            message_body,
            message_attributes,
            delay_seconds,
            deduplication_id,
            group_id,
            system_attributes,
            validate_group_id,
        )

    def send_message_batch(self: Any, queue_name: str, entries: dict[str, dict[str, Any]]) -> Any:
        call = [
            {**e, "MessageAttributes": wire_attributes(e.get("MessageAttributes"))} for e in entries.values()
        ]
        violation = check_batch(call)  # rules of the whole call first: SQS judges no entry then
        if violation is not None:
            raise SQSException(violation.code, violation.message)
        failed: list[dict[str, Any]] = []
        accepted: dict[str, dict[str, Any]] = {}
        for key, entry in entries.items():
            violation = judge(self, queue_name, entry)
            if violation is None:
                accepted[key] = entry
            else:
                failed.append(
                    {
                        "Id": entry["Id"],
                        "SenderFault": True,
                        "Code": violation.code,
                        "Message": violation.message,
                    }
                )
        if not accepted:
            return [], failed
        sent, also_failed = original_batch(self, queue_name, accepted)
        by_id = {str(e["Id"]): e for e in accepted.values()}
        for message in sent:  # moto drops an entry's MessageSystemAttributes (AWSTraceHeader); SQS keeps them
            system = by_id.get(str(getattr(message, "user_id", "")), {}).get("MessageSystemAttributes")
            if system:
                message.system_attributes = dict(system)
        return sent, failed + list(also_failed)

    return _undo_all(
        [
            _replace(backend_class, "send_message", send_message),
            _replace(backend_class, "send_message_batch", send_message_batch),
        ]
    )


def wire_attributes(attributes: Mapping[str, Any] | None) -> dict[str, Any]:
    """Message attributes as moto's SQS backend holds them (JSON protocol: binary values in base64)
    → the SendMessage shape with binary values as bytes (what SQS measures and checks)."""
    out: dict[str, Any] = {}
    for name, value in (attributes or {}).items():
        out[name] = value
        if isinstance(value, dict) and isinstance(value.get("BinaryValue"), str):
            # left as text when it is not base64: the check refuses a Binary value that is not bytes
            with contextlib.suppress(binascii.Error):
                out[name] = {**value, "BinaryValue": base64.b64decode(value["BinaryValue"], validate=True)}
    return out


def install_execution_names() -> Undo:
    """StartExecution without a name gets a generated one, as in Step Functions (moto names every
    such execution ``None``, so the second unnamed start fails with ExecutionAlreadyExists)."""
    import uuid  # noqa: PLC0415

    backend_class = SFN_START_EXECUTION.owner_class()
    original = backend_class.start_execution

    def start_execution(
        self: Any,
        state_machine_arn: str,
        name: Any = None,
        execution_input: Any = None,
        trace_header: Any = None,
    ) -> Any:
        return original(self, state_machine_arn, name or str(uuid.uuid4()), execution_input, trace_header)

    return _replace(backend_class, "start_execution", start_execution)


class _CfnSecret:
    """``AWS::SecretsManager::Secret`` for moto's CloudFormation (duck-typed: a CloudFormationModel
    subclass would stay in moto's cached model list after the patch is undone)."""

    def __init__(self, arn: str, name: str) -> None:
        self.arn, self.name = arn, name

    @property
    def physical_resource_id(self) -> str:
        return self.arn

    @staticmethod
    def cloudformation_name_type() -> str:
        return "Name"

    @staticmethod
    def cloudformation_type() -> str:
        return "AWS::SecretsManager::Secret"

    @classmethod
    def has_cfn_attr(cls, attr: str) -> bool:
        return attr == "Id"

    def get_cfn_attribute(self, attribute_name: str) -> str:
        return self.arn

    def is_created(self) -> bool:
        return True

    @classmethod
    def create_from_cloudformation_json(
        cls, resource_name: str, cloudformation_json: Any, account_id: str, region_name: str, **_: Any
    ) -> _CfnSecret:
        from moto.secretsmanager.models import secretsmanager_backends  # noqa: PLC0415

        props = cloudformation_json.get("Properties") or {}
        value = props.get("SecretString")
        if value is None and isinstance(props.get("GenerateSecretString"), Mapping):
            value = _generated_secret(props["GenerateSecretString"])
        created = json.loads(
            secretsmanager_backends[account_id][region_name].create_secret(
                name=str(props.get("Name") or resource_name),
                secret_string=value,
                secret_binary=None,
                description=props.get("Description"),
                tags=props.get("Tags"),
                kms_key_id=props.get("KmsKeyId"),
                client_request_token=None,
                replica_regions=[],
                force_overwrite=False,
            )
        )
        return cls(created["ARN"], created["Name"])

    @classmethod
    def update_from_cloudformation_json(cls, original_resource: Any, *_: Any, **__: Any) -> Any:
        return original_resource  # a generated key is kept across stack updates, as in AWS

    @classmethod
    def delete_from_cloudformation_json(
        cls, resource_name: str, cloudformation_json: Any, account_id: str, region_name: str
    ) -> None:
        from moto.secretsmanager.models import secretsmanager_backends  # noqa: PLC0415

        with contextlib.suppress(Exception):  # already gone
            secretsmanager_backends[account_id][region_name].delete_secret(resource_name, None, True)


def _generated_secret(spec: Mapping[str, Any]) -> str:
    """A value as ``GenerateSecretString`` makes it (``PasswordLength``, ``ExcludePunctuation``,
    ``ExcludeCharacters``)."""
    import secrets as random_source  # noqa: PLC0415
    import string  # noqa: PLC0415

    alphabet = string.ascii_letters + string.digits
    if str(spec.get("ExcludePunctuation", "false")).lower() != "true":
        alphabet += string.punctuation
    alphabet = "".join(c for c in alphabet if c not in str(spec.get("ExcludeCharacters", "")))
    return "".join(random_source.choice(alphabet) for _ in range(int(spec.get("PasswordLength", 32))))


def install_cloudformation_secrets() -> Undo:
    """CloudFormation creates ``AWS::SecretsManager::Secret`` as AWS does (moto 5.2.5 skips the type
    with a warning): ``SecretString`` as given, or ``GenerateSecretString``; ``Ref`` is the secret's ARN."""
    parsing = CFN_RESOURCE_CLASS.owner_class()
    original = parsing.resource_class_from_type

    def resource_class_from_type(resource_type: str) -> Any:
        return _CfnSecret if resource_type == _CfnSecret.cloudformation_type() else original(resource_type)

    return _replace(parsing, "resource_class_from_type", resource_class_from_type)


# --- backends ----------------------------------------------------------------------------------


def detach_sqs_invoke(account: str, region: str, queue_name: str) -> None:
    """Switch off moto's own synchronous invoke-on-send for a queue (the runtime's poller replaces it)."""
    from moto.sqs.models import sqs_backends  # noqa: PLC0415

    sqs_backends[account][region].queues[queue_name].lambda_event_source_mappings.clear()


def hand_over_state_machines(account: str, region: str) -> None:
    """CloudFormation creates state machines in moto's plain backend; executions run in its parser
    backend (``execute_state_machine``). Hand each new one over, validating its definition as AWS
    would: raises ``ValueError`` naming the first invalid one."""
    from moto.stepfunctions.models import stepfunctions_backends  # noqa: PLC0415
    from moto.stepfunctions.parser.models import (  # noqa: PLC0415
        StepFunctionsParserBackend,
        stepfunctions_parser_backends,
    )

    plain = stepfunctions_backends[account][region]
    executing = stepfunctions_parser_backends[account][region]
    known = {sm.arn for sm in executing.state_machines}
    for machine in plain.state_machines:
        if machine.arn in known:
            continue
        try:
            StepFunctionsParserBackend._validate_definition(definition=machine.definition)
        except Exception as exc:
            raise ValueError(f"state machine {machine.name}: invalid definition: {exc}") from exc
        if problems := unsupported_fields(json.loads(machine.definition)):  # moto drops them at run time
            raise ValueError(
                f"state machine {machine.name}: SCHEMA_VALIDATION_FAILED: " + "; ".join(problems)
            )
        executing.state_machines.append(machine)


def event_rules(account: str, region: str) -> list[Any]:
    """Every EventBridge rule on every bus (moto ``Rule`` objects: ``name``, ``arn``, ``state``,
    ``scheduled_expression``, ``send_to_targets(event)``)."""
    from moto.events.models import events_backends  # noqa: PLC0415

    return [
        rule for bus in events_backends[account][region].event_buses.values() for rule in bus.rules.values()
    ]


def queue_metric(account: str, region: str, queue_name: str, metric: str) -> float | None:
    """An ``AWS/SQS`` queue metric as CloudWatch would report it now; None if unknown."""
    from moto.sqs.models import sqs_backends  # noqa: PLC0415

    queue = sqs_backends[account][region].queues.get(queue_name)
    if queue is None:
        return None
    if metric == "ApproximateNumberOfMessagesVisible":
        return float(queue.approximate_number_of_messages)
    if metric == "ApproximateNumberOfMessagesNotVisible":
        return float(queue.approximate_number_of_messages_not_visible)
    if metric == "ApproximateNumberOfMessagesDelayed":
        return float(queue.approximate_number_of_messages_delayed)
    if metric == "ApproximateAgeOfOldestMessage":
        sent: list[int] = []
        for message in list(queue._messages):
            if message.sent_timestamp is not None:
                sent.append(message.sent_timestamp)
        return max(0.0, time.time() - min(sent) / 1000) if sent else 0.0
    return None
