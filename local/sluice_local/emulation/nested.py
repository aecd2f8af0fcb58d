"""Nested stacks: an ``AWS::Serverless::Application`` (or ``AWS::CloudFormation::Stack``) whose
template is a file beside the root template is deployed with the root, as ``sam build`` and
``sam deploy`` package and CloudFormation creates it.

CloudFormation creates a nested stack of its own; the local runtime inlines its resources into the
one stack it gives moto, as CloudFormation would resolve them:

- each ``Ref`` to one of the child's parameters becomes the expression the parent passes (a
  ``CommaDelimitedList`` or ``List<…>`` parameter is split, as CloudFormation does), else the
  parameter's ``Default``; a ``${Parameter}`` in a ``Fn::Sub`` text becomes what the parent passes,
  written in the text where it can be (``${Name}``, ``${Resource.Attribute}``, a literal), else a
  variable of that ``Fn::Sub`` (a parameter neither passed nor defaulted is refused, as CloudFormation
  refuses it);
- ``AWS::StackName`` in the child is the nested stack's own name, ``<parent>-<LogicalId>-<suffix>``
  as CloudFormation names it (so a name the child builds from it is as long as it will be in AWS);
- the child's conditions are evaluated with what the parent passes; a condition that depends on a value
  only known once the parent's resources exist (an ARN, say) is refused with the parameter's name: the
  local runtime cannot evaluate it before deploying;
- ``Fn::GetAtt [<Application>, Outputs.<Name>]`` in the parent becomes the child's output expression;
  ``Ref`` to the application, the nested stack's name;
- the child's outputs are its own stack's: the runtime creates a stack of that name holding just them
  (``DescribeStacks`` on the name the parent's ``Ref`` gives answers with them, as in AWS); the root's
  own ``DescribeStacks`` shows them too, as ``<Application>.<Name>`` (local only).

The one difference left: the child's logical ids share the root stack's namespace, so a logical id
used in two of the files is refused with both names (CloudFormation would accept it).
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "NESTED_TYPE",
    "Child",
    "NestedStackError",
    "bind_parameters",
    "inline",
    "literal",
    "local_template",
    "nested_stack_name",
    "nested_stack_suffix",
    "passed_parameters",
    "publish_outputs",
    "split_outputs",
    "use_outputs",
]

NESTED_TYPE = "AWS::CloudFormation::Stack"
NESTED_OUTPUT = "."
"""Separates a nested stack's logical id from its output's name in the root's outputs (local only)."""
_SUB_REF = re.compile(r"\$\{([^!}][^}]*)\}")


class NestedStackError(ValueError):
    """A nested application the local runtime cannot deploy as CloudFormation would (or CloudFormation
    would refuse it)."""


@dataclass
class Child:
    """What a nested template became: CloudFormation resources in the child's own terms, plus what the
    runtime keeps beside them."""

    resources: dict[str, Any]
    outputs: dict[str, Any]
    parameters: dict[str, Any]
    """The child's declared parameters (``Type``, ``Default``)."""
    emulated: dict[str, dict[str, Any]] = field(default_factory=dict)
    local_rates: dict[str, str] = field(default_factory=dict)
    code_dirs: dict[str, Path] = field(default_factory=dict)
    artifacts: dict[str, bytes] = field(default_factory=dict)


TranslateChild = Callable[[Path, dict[str, str], frozenset[str], str], Child]
"""(template path, literal parameter values, parameters passed as expressions, artifact key prefix)."""


def local_template(resource: dict[str, Any]) -> str | None:
    """The nested stack's template path when it is a local file (before ``sam package``), else None."""
    if resource.get("Type") != NESTED_TYPE:
        return None
    url = resource.get("Properties", {}).get("TemplateURL")
    if isinstance(url, str) and not re.match(r"^(https?|s3)://", url):
        return url
    return None


def nested_stack_suffix(logical_id: str) -> str:
    """``<LogicalId>-<12 characters>``: what CloudFormation appends to the parent's name (its 12 are
    random; these are fixed, so a local stack's names are the same at every deploy)."""
    digest = hashlib.sha256(logical_id.encode()).hexdigest().upper()[:12]
    return f"{logical_id}-{digest}"


def literal(expr: Any, values: dict[str, Any]) -> str | None:  # noqa: PLR0911 - one per function
    """The text CloudFormation passes for ``expr`` when it is known before any resource exists (a
    literal, a parameter, a pseudo parameter, a ``Fn::Join`` or ``Fn::Sub`` of those), else None."""
    if isinstance(expr, bool):
        return str(expr).lower()
    if isinstance(expr, (str, int, float)):
        return str(expr)
    if not isinstance(expr, dict) or len(expr) != 1:
        return None
    [(key, arg)] = expr.items()
    if key == "Ref":
        value = values.get(str(arg))
        return ",".join(map(str, value)) if isinstance(value, list) else value
    if key == "Fn::Join" and isinstance(arg, list) and len(arg) == 2:
        sep, parts = arg
        if isinstance(parts, dict):
            joined = literal(parts, values)
            return None if joined is None else joined.replace(",", str(sep))
        texts = [literal(p, values) for p in parts] if isinstance(parts, list) else [None]
        return None if any(t is None for t in texts) else str(sep).join(str(t) for t in texts)
    if key == "Fn::Sub" and isinstance(arg, str):
        names = _SUB_REF.findall(arg)
        found = {n: literal({"Ref": n}, values) for n in names}
        if any(v is None for v in found.values()):
            return None
        return _SUB_REF.sub(lambda m: str(found[m.group(1)]), arg)
    return None


def _is_list(spec: dict[str, Any]) -> bool:
    kind = str(spec.get("Type", "String"))
    return kind == "CommaDelimitedList" or kind.startswith("List<")


def passed_parameters(declared: dict[str, Any], given: dict[str, Any], app: str) -> dict[str, Any]:
    """What each of the child's ``Ref``\\s yields, as expressions in the parent's terms."""
    unknown = sorted(set(given) - set(declared))
    if unknown:
        raise NestedStackError(f"{app}: parameters {unknown} are not declared by its template")
    missing = sorted(n for n, spec in declared.items() if n not in given and "Default" not in spec)
    if missing:
        raise NestedStackError(f"{app}: Parameters: {missing} must have values")
    bound: dict[str, Any] = {}
    for name, spec in declared.items():
        if name in given:
            value = given[name]
            value = value if isinstance(value, dict) else literal(value, {})
            bound[name] = {"Fn::Split": [",", value]} if _is_list(spec) else value
        else:
            default = spec["Default"]
            text = ",".join(map(str, default)) if isinstance(default, list) else literal(default, {})
            bound[name] = [s.strip() for s in str(text).split(",")] if _is_list(spec) else text
    return bound


def bind_parameters(node: Any, params: dict[str, Any], suffix: str) -> Any:  # noqa: PLR0911 - one per form
    """``node`` with the child's parameters and ``AWS::StackName`` replaced by the parent's terms."""
    if isinstance(node, list):
        return [bind_parameters(v, params, suffix) for v in node]
    if not isinstance(node, dict):
        return node
    if set(node) == {"Ref"}:
        name = node["Ref"]
        if name in params:
            return copy.deepcopy(params[name])
        if name == "AWS::StackName":
            return {"Fn::Join": ["-", [{"Ref": "AWS::StackName"}, suffix]]}
        return node
    if set(node) == {"Fn::Sub"}:
        text, variables = _sub_parts(node["Fn::Sub"])
        variables = {k: bind_parameters(v, params, suffix) for k, v in variables.items()}
        # the child's own stack name first: a parameter's value may name the parent's
        text = text.replace("${AWS::StackName}", "${AWS::StackName}-" + suffix)
        for name in dict.fromkeys(_SUB_REF.findall(text)):
            if name in params and name not in variables:
                inline = _in_sub(params[name])
                if inline is None:
                    variables[name] = copy.deepcopy(params[name])
                else:
                    text = text.replace("${" + name + "}", inline)
        return {"Fn::Sub": [text, variables] if variables else text}
    return {k: bind_parameters(v, params, suffix) for k, v in node.items()}


def _in_sub(value: Any) -> str | None:
    """How a ``Fn::Sub`` text writes ``value`` itself, where it can: a literal, ``${Name}`` for a
    ``Ref``, ``${Resource.Attribute}`` for a ``Fn::GetAtt``; else None (it becomes a variable)."""
    if isinstance(value, str) and "${" not in value:
        return value
    if isinstance(value, dict) and set(value) == {"Ref"} and isinstance(value["Ref"], str):
        return "${" + value["Ref"] + "}"
    if isinstance(value, dict) and set(value) == {"Fn::GetAtt"}:
        target = value["Fn::GetAtt"]
        parts = target if isinstance(target, list) else str(target).split(".", 1)
        if all(isinstance(p, str) for p in parts):
            return "${" + ".".join(parts) + "}"
    return None


def _sub_parts(arg: Any) -> tuple[str, dict[str, Any]]:
    if isinstance(arg, list):
        return str(arg[0]), dict(arg[1]) if len(arg) > 1 else {}
    return str(arg), {}


def use_outputs(node: Any, app: str, outputs: dict[str, Any]) -> Any:
    """``node`` with every ``Fn::GetAtt [app, Outputs.X]`` (and ``${app.Outputs.X}``) resolved."""
    if isinstance(node, list):
        return [use_outputs(v, app, outputs) for v in node]
    if not isinstance(node, dict):
        return node
    if set(node) == {"Fn::GetAtt"}:
        target = node["Fn::GetAtt"]
        logical, attr = target if isinstance(target, list) else str(target).split(".", 1)
        if logical == app:
            return copy.deepcopy(_output(outputs, app, str(attr)))
    if set(node) == {"Fn::Sub"}:
        text, variables = _sub_parts(node["Fn::Sub"])
        variables = {k: use_outputs(v, app, outputs) for k, v in variables.items()}
        for name in dict.fromkeys(_SUB_REF.findall(text)):
            if name.startswith(app + ".") and name not in variables:
                var = re.sub(r"[^A-Za-z0-9]", "", name)
                variables[var] = copy.deepcopy(_output(outputs, app, name.split(".", 1)[1]))
                text = text.replace("${" + name + "}", "${" + var + "}")
        return {"Fn::Sub": [text, variables] if variables else text}
    return {k: use_outputs(v, app, outputs) for k, v in node.items()}


def _output(outputs: dict[str, Any], app: str, attr: str) -> Any:
    name = attr.removeprefix("Outputs.")
    if not attr.startswith("Outputs.") or name not in outputs:
        raise NestedStackError(f"Fn::GetAtt {app}.{attr}: its template has no output {name}")
    return outputs[name]


def _without_dependency(resource: dict[str, Any], app: str) -> dict[str, Any]:
    depends = resource.get("DependsOn")
    if depends is None:
        return resource
    kept = [d for d in ([depends] if isinstance(depends, str) else depends) if d != app]
    out = {k: v for k, v in resource.items() if k != "DependsOn"}
    return {**out, "DependsOn": kept} if kept else out


@dataclass
class Inlined:
    """The parent's template with its nested stacks inlined, and what their children keep beside."""

    template: dict[str, Any]
    emulated: dict[str, dict[str, Any]] = field(default_factory=dict)
    local_rates: dict[str, str] = field(default_factory=dict)
    code_dirs: dict[str, Path] = field(default_factory=dict)
    artifacts: dict[str, bytes] = field(default_factory=dict)


def inline(
    cfn: dict[str, Any],
    base: Path,
    values: dict[str, Any],
    conditions: dict[str, bool],
    translate_child: TranslateChild,
    *,
    key_prefix: str = "",
) -> Inlined:
    """``cfn`` (translated by SAM) with each nested stack whose template is a local file inlined.

    ``values`` are the parent's parameter values (text; a list's items joined), ``conditions`` its
    evaluated conditions: a nested stack whose condition is false is left out, as CloudFormation does.
    """
    result = Inlined(copy.deepcopy(cfn))
    resources: dict[str, Any] = result.template.get("Resources", {})
    for app, resource in list(resources.items()):
        path = local_template(resource)
        if path is None:
            continue
        del resources[app]
        if "Condition" in resource and not conditions.get(str(resource["Condition"]), False):
            continue
        given = dict(resource.get("Properties", {}).get("Parameters", {}))
        literals = {k: t for k, v in given.items() if (t := literal(v, values)) is not None}
        deferred = frozenset(given) - set(literals)
        child = translate_child((base / path).resolve(), literals, deferred, f"{key_prefix}{app}/")
        params = passed_parameters(child.parameters, given, app)
        suffix = nested_stack_suffix(app)

        def bind(node: Any, params: dict[str, Any] = params, suffix: str = suffix) -> Any:
            return bind_parameters(node, params, suffix)

        outputs = {name: bind(value) for name, value in child.outputs.items()}
        for lid, res in child.resources.items():
            if lid in resources:
                raise NestedStackError(
                    f"{app}: resource {lid} is also in the parent template: the local runtime deploys "
                    "a nested stack's resources beside its parent's, so their logical ids must differ"
                )
            resources[lid] = bind(res)
        for lid, res in child.emulated.items():
            if lid in result.emulated:
                raise NestedStackError(f"{app}: resource {lid} is also in another nested template")
            result.emulated[lid] = bind(res)
        result.local_rates.update(child.local_rates)
        result.code_dirs.update(child.code_dirs)
        result.artifacts.update(child.artifacts)
        # what the parent reads of the child's outputs; a resource or output whose condition is false
        # is not evaluated (CloudFormation leaves it out), so it may read an output the child lacks
        name = {"Fn::Join": ["-", [{"Ref": "AWS::StackName"}, suffix]]}
        for section in (resources, result.emulated, result.template.get("Outputs", {})):
            for lid, item in section.items():
                if conditions.get(str(item.get("Condition")), True) or "Condition" not in item:
                    read = use_outputs(_replace_ref(item, app, name), app, outputs)
                    section[lid] = _without_dependency(read, app)
        # the child's own outputs, for its stack of outputs (NESTED_OUTPUT): "<app>.<output>"
        result.template.setdefault("Outputs", {}).update(
            {f"{app}{NESTED_OUTPUT}{key}": {"Value": value} for key, value in outputs.items()}
        )
    return result


def _replace_ref(node: Any, logical_id: str, value: Any) -> Any:
    """``node`` with each ``Ref`` to ``logical_id`` (a nested stack: its name, as the local runtime names
    it; CloudFormation gives its ARN, which ``DescribeStacks`` takes alike) replaced by ``value``."""
    if isinstance(node, list):
        return [_replace_ref(v, logical_id, value) for v in node]
    if not isinstance(node, dict):
        return node
    if node == {"Ref": logical_id}:
        return copy.deepcopy(value)
    return {k: _replace_ref(v, logical_id, value) for k, v in node.items()}


def split_outputs(outputs: dict[str, str]) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """A deployed root's outputs: its own, and each nested stack's (by its path of logical ids, e.g.
    ``WorkloadStack``) that :func:`inline` carried up as ``<path>.<output>``."""
    own: dict[str, str] = {}
    nested: dict[str, dict[str, str]] = {}
    for key, value in outputs.items():
        path, dot, name = key.rpartition(NESTED_OUTPUT)
        if dot:
            nested.setdefault(path, {})[name] = value
        else:
            own[key] = value
    return own, nested


def nested_stack_name(root: str, path: str) -> str:
    """The name of the nested stack at ``path`` (logical ids joined by dots) under the root stack."""
    return "-".join([root, *(nested_stack_suffix(part) for part in path.split(NESTED_OUTPUT))])


def publish_outputs(cloudformation: Any, root: str, outputs: dict[str, str]) -> dict[str, str]:
    """After the root stack ``root`` is created with ``outputs``: each nested stack's outputs in a stack
    of its own name (``DescribeStacks`` on the name the parent's ``Ref`` gives answers with them, as in
    AWS). Returns every stack's outputs in one mapping, for the local tools."""
    own, nested = split_outputs(outputs)
    for path, values in nested.items():
        cloudformation.create_stack(
            StackName=nested_stack_name(root, path),
            TemplateBody=json.dumps(
                {
                    "Description": f"{path} of {root}: its resources are deployed in {root} by the local "
                    "runtime; its outputs are here",
                    "Resources": {},
                    "Outputs": {key: {"Value": value} for key, value in values.items()},
                }
            ),
        )
    return {**own, **{key: value for values in nested.values() for key, value in values.items()}}
