"""Where the contracts come from: the template names the function a Task invokes, and its handler's
annotations name the contracts it takes and returns."""

from __future__ import annotations

import ast
import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sluice_local.emulation.language_extensions import with_nested

ROOT = Path(__file__).resolve().parents[2]

# --- the template: which function a Task invokes, and its handler's contracts --------------------


@dataclass(frozen=True)
class Handler:
    function: str
    """The template's logical id."""
    event: Any
    result: Any


def load_template(path: Path = ROOT / "template.yaml") -> dict[str, Any]:
    """The application as CloudFormation reads it after AWS::LanguageExtensions, its nested templates
    (workloads.yaml) in it (each workload's redrive state machine and its functions are a loop's copies)."""
    return with_nested(path, {})


def handler_contracts(code_uri: str, handler: str) -> tuple[Any, Any]:
    """(event annotation, return annotation) of ``handler`` (``app.lambda_handler``) in ``code_uri``,
    read from its source: the names it imports from ``sluice`` and ``typing`` are resolved, nothing
    of the function's cold start runs."""
    module, function = handler.rsplit(".", 1)
    tree = ast.parse((ROOT / code_uri / f"{module}.py").read_text(encoding="utf-8"))
    imported = {
        alias.asname or alias.name: (node.module, alias.name)
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and node.module
        for alias in node.names
    }
    [definition] = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == function]

    def resolve(annotation: ast.expr | None) -> Any:
        if annotation is None:
            return Any
        namespace: dict[str, Any] = {}
        for name in {n.id for n in ast.walk(annotation) if isinstance(n, ast.Name)}:
            if name in imported and imported[name][0].split(".")[0] in ("sluice", "typing"):
                module_name, attr = imported[name]
                namespace[name] = getattr(importlib.import_module(module_name), attr)
        return eval(compile(ast.Expression(annotation), code_uri, "eval"), namespace)  # noqa: S307

    return resolve(definition.args.args[0].annotation), resolve(definition.returns)


def handlers(template: Mapping[str, Any], machine: str) -> dict[str, Handler]:
    """``${Placeholder}`` → the function it names, for the state machine whose DefinitionUri ends
    with ``machine``."""
    resources = template["Resources"]
    for resource in resources.values():
        props = resource.get("Properties", {})
        if resource["Type"] == "AWS::Serverless::StateMachine" and str(props.get("DefinitionUri")).endswith(
            machine
        ):
            break
    else:
        raise LookupError(f"no state machine with DefinitionUri {machine} in the template")
    out = {}
    for placeholder, value in props.get("DefinitionSubstitutions", {}).items():
        target = value.get("Fn::GetAtt") if isinstance(value, dict) else None
        if not target or resources.get(target[0], {}).get("Type") != "AWS::Serverless::Function":
            continue
        function = resources[target[0]]["Properties"]
        event, result = handler_contracts(function["CodeUri"], function["Handler"])
        out[placeholder] = Handler(target[0], event, result)
    return out
