"""Where a setting's default is stated: the settings models (``SLUICE_*``) and template.yaml's parameters.

Shared by tests/unit/test_settings_defaults.py (the template against the models, a producer's job store
against the deployed job consumer) and tests/unit/test_settings_docs.py (the docs' tables against both).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic.fields import FieldInfo

from sluice.consumer.settings import ConsumerSettings
from sluice.delay.settings import DelaySettings
from sluice.jobs.settings import JobConsumerSettings, JobSettings, JobStoreSettings
from sluice.redrive.settings import BreakerSettings, RedriveSettings
from sluice.settings import ENV_PREFIX, EnvSettings, split_csv
from sluice_local.emulation.language_extensions import with_nested

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "template.yaml"
REGION = "us-east-1"
ACCOUNT = "123456789012"

Template = dict[str, Any]

MODELS: tuple[type[EnvSettings], ...] = (
    ConsumerSettings,
    DelaySettings,
    RedriveSettings,
    BreakerSettings,
    JobStoreSettings,
    JobSettings,
    JobConsumerSettings,
)
"""Every settings model a deployed function reads."""

REQUIRED = object()
"""The default of a field that has none (the variable must be set)."""


def load_template() -> Template:
    """template.yaml with its nested templates (workloads.yaml) and ``Fn::ForEach`` loops expanded (as
    CloudFormation reads it), its
    ``Fn::FindInMap`` kept: a workload's setting is its own value or a parameter's (:func:`unwrapped`)."""
    return with_nested(TEMPLATE, {}, resolve_mappings=False)


def unwrapped(template: Template, value: Any, *, own: bool = True) -> Any:
    """A workload's setting (``Fn::FindInMap [Workloads, <name>, <key>, {DefaultValue: X}]``) as the
    value it takes: the workload's own when its block sets one (``own``), else X; anything else as it is."""
    if not (isinstance(value, dict) and set(value) == {"Fn::FindInMap"}):
        return value
    mapping, name, key, *options = value["Fn::FindInMap"]
    if mapping != "Workloads" or not isinstance(name, str):
        return value
    workload = template.get("Mappings", {}).get(mapping, {}).get(name, {})
    if own and key in workload:
        return workload[key]
    return options[0].get("DefaultValue") if options and isinstance(options[0], dict) else value


def parameter_default(template: Template, name: str) -> Any:
    """The template parameter's default; ``REQUIRED`` when it has none; KeyError when no such parameter."""
    return template["Parameters"][name].get("Default", REQUIRED)


def model_default(field: FieldInfo) -> Any:
    return REQUIRED if field.is_required() else field.default


def fields_named(
    variable: str, models: tuple[type[EnvSettings], ...] = MODELS
) -> list[tuple[str, FieldInfo]]:
    """(model name, field) of every model reading ``variable`` (``SLUICE_`` optional)."""
    name = variable.removeprefix(ENV_PREFIX).lower()
    return [(m.__name__, m.model_fields[name]) for m in models if name in m.model_fields]


def same(model_value: Any, stated: Any) -> bool:
    """Whether ``stated`` (a template default or a docs cell, usually text) is ``model_value`` once read as
    the model reads a variable: ``"50"`` is 50.0, ``"false"`` is False, ``""`` is the empty tuple."""
    if model_value is REQUIRED or stated is REQUIRED:
        return model_value is stated
    if isinstance(model_value, bool):
        return str(stated).strip().lower() == str(model_value).lower()
    if isinstance(model_value, int | float):
        try:
            return float(stated) == float(model_value)
        except (TypeError, ValueError):
            return False
    if isinstance(model_value, tuple):
        return split_csv(str(stated)) == model_value
    return str(stated) == str(model_value)


def _stand_in(template: Template, logical_id: str) -> str:
    """What a Ref to a resource gives, in the shape a setting expects (a queue's URL, a secret's ARN)."""
    kind = template["Resources"][logical_id]["Type"]
    if kind == "AWS::SQS::Queue":
        return f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/{logical_id}"
    if kind == "AWS::SecretsManager::Secret":
        return f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:{logical_id}"
    return logical_id


def function_env(
    template: Template, function: str, parameters: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment template.yaml gives ``function`` (Globals, then its own), as deployed with
    ``parameters``: a Ref to a parameter is its value there, else its default; a Ref to a resource a
    stand-in; anything else (Sub, If, GetAtt) is left out."""
    parameters = parameters or {}
    variables = {
        **template.get("Globals", {}).get("Function", {}).get("Environment", {}).get("Variables", {}),
        **template["Resources"][function]["Properties"].get("Environment", {}).get("Variables", {}),
    }
    env: dict[str, str] = {}
    for name, written in variables.items():
        value = unwrapped(template, written)
        if isinstance(value, str | int | float):
            env[name] = str(value)
        elif isinstance(value, dict) and set(value) == {"Ref"} and isinstance(value["Ref"], str):
            ref = value["Ref"]
            if ref in parameters:
                env[name] = parameters[ref]
            elif ref in template.get("Parameters", {}):
                env[name] = str(template["Parameters"][ref].get("Default", ""))
            elif ref in template["Resources"]:
                env[name] = _stand_in(template, ref)
    return env


def parameter_fed(template: Template) -> dict[str, str]:
    """``SLUICE_*`` variable → the parameter it is set from by a plain Ref, in any function."""
    fed: dict[str, str] = {}
    parameters = template.get("Parameters", {})
    for resource in template["Resources"].values():
        if resource.get("Type") != "AWS::Serverless::Function":
            continue
        variables = resource["Properties"].get("Environment", {}).get("Variables", {})
        for name, written in variables.items():
            value = unwrapped(template, written, own=False)  # a workload's: the parameter it defaults to
            if name.startswith(ENV_PREFIX) and isinstance(value, dict) and value.get("Ref") in parameters:
                fed[name] = value["Ref"]
    return fed
