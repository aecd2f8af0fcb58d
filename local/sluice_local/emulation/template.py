"""Turn the project's SAM template into the CloudFormation template moto can create.

Uses samtranslator (the library `sam` itself uses) and applies only the fixes moto needs:

- local ``CodeUri`` / ``ContentUri`` folders become S3 locations of small zips uploaded to the
  embedded S3 (moto's Lambda wants code it can fetch); the folders are remembered so functions run
  from the real source;
- state machine ``DefinitionUri`` files are inlined as ``DefinitionString`` (``Fn::Sub`` with the
  ``DefinitionSubstitutions``), since moto does not read local files;
- ``Fn::ForEach`` loops (``AWS::LanguageExtensions``) are expanded first
  (:mod:`sluice_local.emulation.language_extensions`);
- ``Fn::FindInMap`` keyed by parameters is resolved here, its ``DefaultValue`` included (moto looks
  Number parameters up as integers in string-keyed mappings, which CloudFormation never does);
- ``AWS::CloudWatch::Alarm``, ``AWS::Scheduler::Schedule`` and ``AWS::SNS::Subscription`` resources,
  which moto's CloudFormation does not create, are set aside and created or emulated by the runtime
  (see :mod:`sluice_local.emulation.emulated`); ``Ref`` to them resolves to their name, as in AWS.
"""

from __future__ import annotations

import copy
import io
import json
import re
import zipfile
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
from samtranslator.parser.parser import Parser
from samtranslator.translator.translator import Translator

from sluice_local.emulation import cfn_yaml, language_extensions, nested
from sluice_local.emulation.conditions import evaluate_conditions, resolve_if
from sluice_local.emulation.language_extensions import resolve_find_in_map
from sluice_local.emulation.template_rules import rule_problems

ARTIFACT_BUCKET = "sluice-local-artifacts"
EMULATED_TYPES = (
    "AWS::CloudWatch::Alarm",
    "AWS::Scheduler::Schedule",
    "AWS::Scheduler::ScheduleGroup",
    "AWS::SNS::Subscription",
)


class _NoManagedPolicies:
    """samtranslator asks IAM for managed policy ARNs by name; sluice names none."""

    def load(self) -> dict[str, str]:
        return {}


@dataclass
class Translated:
    template: dict[str, Any]
    code_dirs: dict[str, Path] = field(default_factory=dict)
    """S3 key → local folder, for functions and layers."""
    emulated: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Logical id → resource (alarms, schedules) the runtime emulates instead of moto."""
    local_rates: dict[str, str] = field(default_factory=dict)
    """Logical id → schedule expression in seconds (local only; moto is given a valid rate)."""


class ParameterError(ValueError):
    """A parameter value breaks its template constraint: CloudFormation's ValidationError."""


def parameter_problems(
    declared: dict[str, Any], given: dict[str, str], deferred: Collection[str] = ()
) -> list[str]:
    """Every parameter constraint the values break, worded as CloudFormation's ValidationError.

    CloudFormation checks ``AllowedValues``, ``AllowedPattern`` (the whole value), ``MinLength`` /
    ``MaxLength``, ``MinValue`` / ``MaxValue`` and that a ``Number`` is a number, against the given value
    or else the ``Default``; a parameter with neither is missing. moto checks none of it. A value for a
    parameter the root template does not declare is left out, as the deploy passes only the template's
    (the fast settings and samconfig.toml's apply to the templates that declare them); a nested
    application given one is refused (:func:`nested.passed_parameters`).
    """
    problems: list[str] = []
    missing = [
        name
        for name, spec in declared.items()
        if name not in given and name not in deferred and "Default" not in spec
    ]
    if missing:
        problems.append(f"Parameters: [{', '.join(missing)}] must have values")
    for name, spec in declared.items():
        if name in given or "Default" in spec:
            value = str(given[name]) if name in given else _cfn_text(spec["Default"])
            problem = _parameter_problem(name, spec, value)
            if problem:
                problems.append(problem)
    return problems


def _cfn_text(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return ",".join(map(_cfn_text, value))
    return str(value)


def _parameter_problem(name: str, spec: dict[str, Any], value: str) -> str | None:  # noqa: PLR0911 - one per constraint
    described = spec.get("ConstraintDescription")

    def failed(default: str) -> str:
        return f"Parameter '{name}' failed to satisfy constraint: {described or default}"

    kind = spec.get("Type", "String")
    items = [part.strip() for part in value.split(",")] if kind == "CommaDelimitedList" else [value]
    allowed = spec.get("AllowedValues")
    if allowed is not None and any(item not in {_cfn_text(a) for a in allowed} for item in items):
        return f"Parameter '{name}' must be one of AllowedValues"
    pattern = spec.get("AllowedPattern")
    if pattern is not None and any(re.fullmatch(pattern, item) is None for item in items):
        return failed(f"Parameter {name} must match pattern {pattern}")
    if "MinLength" in spec and len(value) < int(spec["MinLength"]):
        return failed(f"Parameter '{name}' must contain at least {spec['MinLength']} characters")
    if "MaxLength" in spec and len(value) > int(spec["MaxLength"]):
        return failed(f"Parameter '{name}' must not contain more than {spec['MaxLength']} characters")
    if kind == "Number":
        try:
            number = float(value)
        except ValueError:
            return f"Parameter '{name}' must be a number"
        if "MinValue" in spec and number < float(spec["MinValue"]):
            return failed(f"Parameter '{name}' must be a number not less than {spec['MinValue']}")
        if "MaxValue" in spec and number > float(spec["MaxValue"]):
            return failed(f"Parameter '{name}' must be a number not greater than {spec['MaxValue']}")
    return None


def _code_folder(base: Path, uri: str, logical_id: str) -> Path:
    """The folder a function's ``CodeUri`` (a layer's ``ContentUri``) names, relative to its template's
    own folder as ``sam build`` reads it; one that is not there is refused, as ``sam build`` refuses it."""
    folder = (base / uri).resolve()
    if not folder.is_dir():
        raise ParameterError(f"{logical_id}: its code folder {uri!r} (relative to {base}) is not a folder")
    return folder


def _zip_of(folder: Path) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for path in sorted(folder.rglob("*.py")):
            zf.write(path, path.relative_to(folder).as_posix())
        if not zf.namelist():
            zf.writestr("placeholder.txt", "sluice local")
    return buf.getvalue()


def translate(
    template_path: Path, parameters: dict[str, str], region: str = "us-east-1"
) -> tuple[Translated, dict[str, bytes]]:
    """Returns the CloudFormation template and the artifacts (S3 key → zip) to upload first."""
    translated, artifacts, _ = _translate(template_path, parameters, region)
    return translated, artifacts


def _translate(
    template_path: Path,
    parameters: dict[str, str],
    region: str,
    *,
    deferred: frozenset[str] = frozenset(),
    key_prefix: str = "",
) -> tuple[Translated, dict[str, bytes], dict[str, bool]]:
    """``deferred``: parameters a parent passes as expressions known only once its resources exist (a
    nested template's); ``key_prefix`` keeps a nested template's artifact keys apart from its parent's."""
    base = template_path.resolve().parent
    sam = cfn_yaml.parse(template_path.read_text())
    problems = parameter_problems(sam.get("Parameters", {}), parameters, deferred)
    problems += rule_problems(sam, parameters, deferred)  # the Rules section, which moto ignores
    if problems:
        raise ParameterError("; ".join(problems))
    # Fn::ForEach and Fn::FindInMap (AWS::LanguageExtensions), before SAM's transform
    sam = language_extensions.expand(sam, parameters)
    artifacts, code_dirs = _package(sam, base, key_prefix)
    translator = Translator(None, Parser(), boto_session=boto3.Session(region_name=region))
    cfn = translator.translate(
        sam, parameter_values=dict(parameters), get_managed_policy_map=_NoManagedPolicies().load
    )
    _inline_state_machines(cfn)
    values = {k: str(v.get("Default")) for k, v in cfn.get("Parameters", {}).items() if "Default" in v}
    values.update({k: str(v) for k, v in parameters.items()})
    for name in deferred:
        values.pop(name, None)
    _refuse_deferred_conditions(cfn.get("Conditions", {}), deferred, template_path)
    conditions = evaluate_conditions(cfn.get("Conditions", {}), values)

    try:
        inlined = nested.inline(
            cfn, base, values, conditions, _child_translator(region), key_prefix=key_prefix
        )
    except nested.NestedStackError as exc:
        raise ParameterError(str(exc)) from exc
    cfn = inlined.template
    artifacts.update(inlined.artifacts)
    code_dirs.update(inlined.code_dirs)
    cfn["Resources"] = resolve_find_in_map(cfn["Resources"], cfn.get("Mappings", {}), values)
    emulated = {
        lid: res for lid, res in cfn.get("Resources", {}).items() if res.get("Type") in EMULATED_TYPES
    }
    for lid in emulated:
        del cfn["Resources"][lid]
    # Fn::If with the known conditions, as CloudFormation resolves them (the runtime reads resolved
    # properties, e.g. ReservedConcurrentExecutions).
    cfn["Resources"] = resolve_if(cfn["Resources"], conditions)
    # CloudFormation skips a resource whose Condition is false; so does the emulation.
    emulated = {
        lid: resolve_if(res, conditions)
        for lid, res in emulated.items()
        if conditions.get(str(res.get("Condition")), True) or "Condition" not in res
    }
    names = {lid: _emulated_name(lid, res) for lid, res in emulated.items()}
    arns = _emulated_arns(emulated, names)
    cfn = _replace_refs(cfn, names, arns)
    # a nested stack's, resolved in its own terms; a parent's alarm it was given is named as the parent's,
    # and a Fn::If the parent passed it (a parameter's value) resolved with the parent's conditions
    for lid, res in inlined.emulated.items():
        emulated[lid] = _replace_refs(resolve_if(res, conditions), names, arns)
    local_rates = {**_seconds_rates(cfn, values), **inlined.local_rates}
    return Translated(cfn, code_dirs, emulated, local_rates), artifacts, conditions


LAYER_VERSION_ARN = re.compile(r"^arn:aws[a-z-]*:lambda:[a-z0-9-]+:\d{12}:layer:[A-Za-z0-9_-]+:\d+$")


def without_unemulated(template: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """``template`` as the embedded cloud can deploy it, and what it leaves out or does not emulate, one
    note each: a function's layer that is not one of the stack's own (a workload's ``Layers``) is left
    out, its code not being here (one that is no layer version ARN is refused, as Lambda refuses it); a
    ``VpcConfig`` is kept on the function, which runs on this machine's network all the same."""
    resources = copy.deepcopy(template.get("Resources", {}))
    notes: list[str] = []
    for logical_id, resource in resources.items():
        if resource.get("Type") != "AWS::Lambda::Function":
            continue
        properties = resource.get("Properties", {})
        layers = properties.get("Layers", [])
        external = [layer for layer in layers if isinstance(layer, str)]  # the stack's own are Refs
        malformed = [layer for layer in external if not LAYER_VERSION_ARN.match(layer)]
        if malformed:
            raise ParameterError(f"{logical_id}: Layers {malformed} is not a layer version ARN")
        if external:
            properties["Layers"] = [layer for layer in layers if not isinstance(layer, str)]
            notes.append(f"{logical_id}: layer {', '.join(external)} is not available locally: left out")
        if "VpcConfig" in properties:
            notes.append(f"{logical_id}: VpcConfig is not emulated: it runs on this machine's network")
    return {**template, "Resources": resources}, notes


def _package(sam: dict[str, Any], base: Path, key_prefix: str) -> tuple[dict[str, bytes], dict[str, Path]]:
    """What ``sam package`` uploads: each local code folder zipped (the folder remembered, so functions
    run from the real source); state machine definitions read in."""
    artifacts: dict[str, bytes] = {}
    code_dirs: dict[str, Path] = {}
    globals_fn = sam.get("Globals", {}).get("Function", {})
    for logical_id, resource in sam.get("Resources", {}).items():
        props = resource.setdefault("Properties", {})
        kind = resource.get("Type")
        if kind == "AWS::Serverless::Function":
            uri = props.get("CodeUri", globals_fn.get("CodeUri"))
            if isinstance(uri, str) and not uri.startswith("s3://"):
                key = f"{key_prefix}{logical_id}.zip"
                code_dirs[key] = _code_folder(base, uri, logical_id)
                artifacts[key] = _zip_of(code_dirs[key])
                props["CodeUri"] = f"s3://{ARTIFACT_BUCKET}/{key}"
        elif kind == "AWS::Serverless::LayerVersion":
            uri = props.get("ContentUri")
            if isinstance(uri, str) and not uri.startswith("s3://"):
                key = f"{key_prefix}{logical_id}.zip"
                code_dirs[key] = _code_folder(base, uri, logical_id)
                artifacts[key] = _zip_of(code_dirs[key])
                props["ContentUri"] = f"s3://{ARTIFACT_BUCKET}/{key}"
        elif kind == "AWS::Serverless::StateMachine" and "DefinitionUri" in props:
            definition = json.loads((base / props.pop("DefinitionUri")).read_text())
            substitutions = props.pop("DefinitionSubstitutions", {})
            props["Definition"] = definition
            props["DefinitionSubstitutions"] = substitutions
    return artifacts, code_dirs


def _child_translator(region: str) -> nested.TranslateChild:
    def translate_child(
        path: Path, literals: dict[str, str], later: frozenset[str], prefix: str
    ) -> nested.Child:
        child, blobs, conditions = _translate(path, literals, region, deferred=later, key_prefix=prefix)
        outputs = resolve_if(_kept(child.template.get("Outputs", {}), conditions, path), conditions)
        return nested.Child(
            resources=_kept(child.template.get("Resources", {}), conditions, path),
            outputs={name: out["Value"] for name, out in outputs.items()},
            parameters=child.template.get("Parameters", {}),
            emulated=child.emulated,
            local_rates=child.local_rates,
            code_dirs=child.code_dirs,
            artifacts=blobs,
        )

    return translate_child


def _refuse_deferred_conditions(conditions: dict[str, Any], deferred: frozenset[str], path: Path) -> None:
    used = set(re.findall(r"'Ref': '([^']+)'", str(conditions))) & deferred
    if used:
        raise ParameterError(
            f"{path.name}: its Conditions read {sorted(used)}, which its parent passes from a resource "
            "that does not exist yet: the local runtime evaluates conditions before deploying (pass a "
            "parameter's value instead)"
        )


def _kept(section: dict[str, Any], conditions: dict[str, bool], path: Path) -> dict[str, Any]:
    """A nested template's resources or outputs whose condition holds, without their ``Condition``
    (the parent's template does not declare the child's conditions)."""
    kept = {
        lid: {k: v for k, v in item.items() if k != "Condition"}
        for lid, item in section.items()
        if conditions.get(str(item.get("Condition")), True) or "Condition" not in item
    }
    if "Fn::FindInMap" in str(kept):
        raise ParameterError(f"{path.name}: a Fn::FindInMap the local runtime could not resolve")
    return kept


def _seconds_rates(cfn: dict[str, Any], params: dict[str, str]) -> dict[str, str]:
    """Rules scheduled in seconds (a local-only unit): moto gets a valid rate, the runtime the real one."""
    found: dict[str, str] = {}
    for lid, resource in cfn.get("Resources", {}).items():
        if resource.get("Type") != "AWS::Events::Rule":
            continue
        props = resource.get("Properties", {})
        expression = props.get("ScheduleExpression")
        if isinstance(expression, dict) and set(expression) == {"Ref"}:
            expression = params.get(expression["Ref"], expression)
        if isinstance(expression, str) and "second" in expression:
            found[lid] = expression
            props["ScheduleExpression"] = "rate(1 minute)"
    return found


def _inline_state_machines(cfn: dict[str, Any]) -> None:
    """AWS::StepFunctions::StateMachine: Definition + DefinitionSubstitutions → DefinitionString Fn::Sub."""
    for resource in cfn.get("Resources", {}).values():
        if resource.get("Type") != "AWS::StepFunctions::StateMachine":
            continue
        props = resource["Properties"]
        definition = props.pop("Definition", None)
        if definition is not None:
            text = json.dumps(definition, indent=2)
        else:
            text = props.get("DefinitionString")
            if isinstance(text, dict) and set(text) == {"Fn::Join"}:  # SAM joins the file's lines
                separator, parts = text["Fn::Join"]
                if not all(isinstance(p, str) for p in parts):
                    continue
                text = separator.join(parts)
            if not isinstance(text, str):
                continue
        substitutions = props.pop("DefinitionSubstitutions", {})
        props["DefinitionString"] = _substituted(text, substitutions) if substitutions else text


def _substituted(text: str, substitutions: dict[str, Any]) -> Any:
    """The definition with its ``${Name}`` substitutions, as an ``Fn::Join`` of the literal parts and
    the values. Not ``Fn::Sub``: moto substitutes with Python's ``string.Template``, which turns the
    ``$$`` of ASL's context paths (``$$.Execution.Id``) into ``$``; CloudFormation leaves it alone."""
    parts: list[Any] = []
    last = 0
    for match in re.finditer(r"\$\{([A-Za-z0-9_]+)\}", text):
        if match.group(1) in substitutions:
            parts += [text[last : match.start()], substitutions[match.group(1)]]
            last = match.end()
    parts.append(text[last:])
    return {"Fn::Join": ["", [p for p in parts if p != ""]]}


def _emulated_name(logical_id: str, resource: dict[str, Any]) -> Any:
    """What ``Ref`` returns for an emulated resource (its name; the runtime uses the same scheme)."""
    props = resource.get("Properties", {})
    explicit = props.get("AlarmName") or props.get("Name")
    return explicit or {"Fn::Sub": "${AWS::StackName}-" + logical_id}


def _emulated_arns(emulated: dict[str, dict[str, Any]], names: dict[str, Any]) -> dict[str, Any]:
    """``Fn::GetAtt [Alarm, Arn]`` of an emulated alarm (an EventBridge pattern names it)."""
    arns: dict[str, Any] = {}
    for lid, res in emulated.items():
        if res.get("Type") == "AWS::CloudWatch::Alarm":
            name = names[lid]
            arns[lid] = {
                "Fn::Join": [
                    "",
                    [
                        "arn:aws:cloudwatch:",
                        {"Ref": "AWS::Region"},
                        ":",
                        {"Ref": "AWS::AccountId"},
                        ":alarm:",
                        name,
                    ],
                ]
            }
    return arns


def _replace_refs(node: Any, names: dict[str, Any], arns: dict[str, Any] | None = None) -> Any:
    arns = arns or {}
    if isinstance(node, list):
        return [_replace_refs(v, names, arns) for v in node]
    if not isinstance(node, dict):
        return node
    if set(node) == {"Ref"} and node["Ref"] in names:
        return names[node["Ref"]]
    if set(node) == {"Fn::GetAtt"}:
        target = node["Fn::GetAtt"]
        logical, attr = target if isinstance(target, list) else str(target).split(".", 1)
        if logical in arns and attr == "Arn":
            return arns[logical]
    return {k: _replace_refs(v, names, arns) for k, v in node.items()}
