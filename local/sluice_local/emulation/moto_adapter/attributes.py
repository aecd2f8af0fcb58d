"""What the adapter relies on in moto: its version, every attribute it replaces or calls (with the
parameters it expects), the settings it changes; :func:`problems` checks them all against the installed
moto, and :func:`replace` is how every patch is made and undone."""

from __future__ import annotations

import importlib
import inspect
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

WRITTEN_FOR = "5.2.5"
"""The moto version this module was written and checked against (pinned in pyproject.toml)."""

Undo = Callable[[], None]

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
SQS_ADD_MESSAGE = Attribute("moto.sqs.models", "Queue", "add_message", ("self", "message"))
SQS_DELETE_MESSAGE = Attribute("moto.sqs.models", "Queue", "delete_message", ("self", "receipt_handle"))
SQS_RECEIVE_MESSAGE = Attribute(
    "moto.sqs.models",
    "SQSBackend",
    "receive_message",
    ("self", "queue_name", "count", "wait_seconds_timeout", "visibility_timeout", "message_attribute_names"),
)
SQS_RECEIVE_RESPONSE = Attribute("moto.sqs.responses", "SQSResponse", "receive_message", ("self",))
SFN_START_EXECUTION = Attribute(
    "moto.stepfunctions.parser.models",
    "StepFunctionsParserBackend",
    "start_execution",
    ("self", "state_machine_arn", "name", "execution_input", "trace_header"),
)
CFN_RESOURCE_CLASS = Attribute(
    "moto.cloudformation.parsing", None, "resource_class_from_type", ("resource_type",)
)
MODULE_LIST = Attribute("moto.backends", None, "list_of_moto_modules", ())
CFN_PARSE_TEMPLATE = Attribute("moto.cloudformation.models", "Stack", "parse_template", ("template",))
ASL_PARSE = Attribute(
    "moto.stepfunctions.parser.asl.parse.asl_parser", "AmazonStateLanguageParser", "parse", ("definition",)
)
S3_BUCKET_PERMISSION = Attribute(
    "moto.s3.models", "FakeBucket", "get_permission", ("self", "action", "resource")
)
ROLE_FROM_CFN = Attribute(
    "moto.iam.models",
    "Role",
    "create_from_cloudformation_json",
    ("resource_name", "cloudformation_json", "account_id", "region_name", "kwargs"),
)
SERVER_APP = Attribute(
    "moto.moto_server.werkzeug_app",
    "DomainDispatcherApplication",
    "__call__",
    ("self", "environ", "start_response"),
)
PATCHED = (
    MODULE_LIST,
    CFN_PARSE_TEMPLATE,
    ASL_PARSE,
    CFN_RESOURCE_CLASS,
    LAMBDA_FUNCTION_INVOKE,
    LAMBDA_BACKEND_INVOKE,
    RULE_SEND_TO_TARGETS,
    AWS_SDK_PARAMETERS,
    AWS_SDK_RESPONSE,
    SQS_SEND_MESSAGE,
    SQS_SEND_MESSAGE_BATCH,
    SQS_ADD_MESSAGE,
    SQS_DELETE_MESSAGE,
    SQS_RECEIVE_MESSAGE,
    SQS_RECEIVE_RESPONSE,
    SFN_START_EXECUTION,
    S3_BUCKET_PERMISSION,
    SERVER_APP,
    ROLE_FROM_CFN,
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
    Attribute("moto.sqs.responses", "SQSResponse", "_get_param", ("self", "param_name", "if_none")),
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
            f"moto {version} is installed; sluice_local.emulation.moto_adapter was written for moto "
            f"{WRITTEN_FOR}: "
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


def replace(owner: Any, name: str, new: Any) -> Undo:
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


def undo_all(undos: list[Undo]) -> Undo:
    def undo() -> None:
        for one in reversed(undos):
            one()

    return undo
