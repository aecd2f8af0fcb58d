"""``AWS::LanguageExtensions`` for the embedded cloud: ``Fn::ForEach`` expanded before SAM's transform.

CloudFormation applies the transforms a template lists in order; a SAM template that loops with
``Fn::ForEach`` lists ``AWS::LanguageExtensions`` before ``AWS::Serverless-2016-10-31``. moto knows
neither, and samtranslator only the second, so the emulation expands the loops first with the code
SAM CLI runs for ``sam build --language-extensions`` (``samcli.lib.cfn_language_extensions``), then
hands samtranslator a plain SAM template.

Only the loops are expanded here (each copy with its loop variable substituted, ``Ref`` and
``${Name}`` alike); every other intrinsic is left for the steps that already resolve it the way
CloudFormation does (``Fn::FindInMap``, its ``DefaultValue`` included, and ``Fn::If`` in
:mod:`sluice_local.emulation.template`; the rest in moto). ``Fn::Length`` and ``Fn::ToJsonString``,
which nothing here resolves, are refused with a message that names them rather than deployed wrong.
"""

from __future__ import annotations

import copy
import os
import re
from pathlib import Path
from typing import Any

__all__ = [
    "LANGUAGE_EXTENSIONS",
    "LanguageExtensionError",
    "MappingError",
    "expand",
    "resolve_find_in_map",
    "uses_language_extensions",
]

LANGUAGE_EXTENSIONS = "AWS::LanguageExtensions"
UNSUPPORTED = ("Fn::Length", "Fn::ToJsonString")


class LanguageExtensionError(ValueError):
    """The template's language extensions cannot be expanded (CloudFormation's transform failure)."""


class MappingError(ValueError):
    """``Fn::FindInMap`` names an entry its Mappings lack, with no ``DefaultValue``: the deploy fails."""


def resolve_find_in_map(node: Any, mappings: dict[str, Any], params: dict[str, Any]) -> Any:
    """``node`` with every ``Fn::FindInMap`` whose keys resolve here (literals, ``Ref`` to a parameter,
    another ``Fn::FindInMap``) replaced by its value, or by its ``DefaultValue`` when a key is missing
    (AWS::LanguageExtensions); one whose keys do not resolve is left for CloudFormation."""
    if isinstance(node, list):
        return [resolve_find_in_map(v, mappings, params) for v in node]
    if not isinstance(node, dict):
        return node
    if set(node) != {"Fn::FindInMap"}:
        return {k: resolve_find_in_map(v, mappings, params) for k, v in node.items()}
    args = node["Fn::FindInMap"]
    options = args[3] if len(args) > 3 and isinstance(args[3], dict) else {}
    keys: list[str] = []
    for part in args[:3]:
        value = resolve_find_in_map(part, mappings, params)
        if isinstance(value, dict) and set(value) == {"Ref"} and value["Ref"] in params:
            value = params[value["Ref"]]
        if not isinstance(value, str | int):
            return node  # not resolvable here; leave it to CloudFormation
        keys.append(str(value))
    try:
        return copy.deepcopy(mappings[keys[0]][keys[1]][keys[2]])
    except KeyError as exc:
        if "DefaultValue" in options:  # AWS::LanguageExtensions: the value when any key is missing
            return resolve_find_in_map(options["DefaultValue"], mappings, params)
        raise MappingError(f"Fn::FindInMap {keys}: no such entry {exc} in Mappings") from None


def _transforms(template: dict[str, Any]) -> list[Any]:
    declared = template.get("Transform", [])
    return list(declared) if isinstance(declared, list) else [declared]


def uses_language_extensions(template: dict[str, Any]) -> bool:
    return LANGUAGE_EXTENSIONS in _transforms(template)


def parameter_values(declared: dict[str, Any], given: dict[str, str]) -> dict[str, Any]:
    """What ``Ref`` to each parameter yields, as CloudFormation gives it: text (a ``Number`` too), a
    list for a ``CommaDelimitedList``; the given value, else the ``Default``."""
    values: dict[str, Any] = {}
    for name, spec in declared.items():
        if name in given:
            raw: Any = given[name]
        elif "Default" in spec:
            raw = spec["Default"]
        else:
            continue
        text = str(raw).lower() if isinstance(raw, bool) else raw
        if spec.get("Type") == "CommaDelimitedList":
            items = text if isinstance(text, list) else str(text).split(",") if str(text) else []
            values[name] = [str(item).strip() for item in items]
        else:
            values[name] = ",".join(map(str, text)) if isinstance(text, list) else str(text)
    return values


def expand(
    template: dict[str, Any], given: dict[str, str], *, resolve_mappings: bool = True
) -> dict[str, Any]:
    """``template`` with every ``Fn::ForEach`` expanded, every ``Fn::FindInMap`` that resolves here
    resolved (``resolve_mappings=False`` keeps them, for a reader of the template's expressions) and
    ``AWS::LanguageExtensions`` dropped from its ``Transform``; a template that does not declare the
    transform is returned as it is."""
    if not uses_language_extensions(template):
        return template
    from samcli.lib.cfn_language_extensions.exceptions import InvalidTemplateException  # noqa: PLC0415
    from samcli.lib.cfn_language_extensions.models import (  # noqa: PLC0415
        ResolutionMode,
        TemplateProcessingContext,
    )
    from samcli.lib.cfn_language_extensions.pipeline import ProcessingPipeline  # noqa: PLC0415
    from samcli.lib.cfn_language_extensions.processors import (  # noqa: PLC0415
        ForEachProcessor,
        TemplateParsingProcessor,
    )
    from samcli.lib.cfn_language_extensions.resolvers import (  # noqa: PLC0415
        FnFindInMapResolver,
        FnJoinResolver,
        FnRefResolver,
        FnSelectResolver,
        FnSplitResolver,
        IntrinsicResolver,
    )

    context = TemplateProcessingContext(
        fragment=copy.deepcopy(template),
        parameter_values=parameter_values(template.get("Parameters", {}), given),
        resolution_mode=ResolutionMode.PARTIAL,
    )
    # what a loop's collection may be written with (e.g. !Ref to a CommaDelimitedList, !Split): the
    # loops' bodies are copied with their loop variable substituted, nothing else resolved
    collections = IntrinsicResolver(context)
    for resolver in (FnRefResolver, FnFindInMapResolver, FnSplitResolver, FnJoinResolver, FnSelectResolver):
        collections.register_resolver(resolver)
    pipeline = ProcessingPipeline(
        [TemplateParsingProcessor(), ForEachProcessor(intrinsic_resolver=collections)]
    )
    try:
        expanded: dict[str, Any] = pipeline.process_template(context)
    except InvalidTemplateException as exc:
        raise LanguageExtensionError(f"{LANGUAGE_EXTENSIONS}: {exc}") from None
    found = sorted(_unsupported(expanded))
    if found:
        raise LanguageExtensionError(
            f"{LANGUAGE_EXTENSIONS}: {', '.join(found)} is not resolved by the local runtime "
            "(only Fn::ForEach and Fn::FindInMap's DefaultValue are)"
        )
    expanded["Transform"] = [t for t in _transforms(expanded) if t != LANGUAGE_EXTENSIONS]
    # the transform resolves Fn::FindInMap too (its DefaultValue, nested keys): a workload's CodeUri
    # is a folder again before SAM's transform reads it
    values = parameter_values(expanded.get("Parameters", {}), given)
    mappings = expanded.get("Mappings", {})
    for section in ("Resources", "Outputs", "Conditions") if resolve_mappings else ():
        if section in expanded:
            expanded[section] = resolve_find_in_map(expanded[section], mappings, values)
    return dict(_literal_subs(expanded))


def _literal_subs(node: Any) -> Any:
    """``Fn::Sub`` of a string with no ``${`` left (a loop variable substituted into it) is that
    string, as CloudFormation evaluates it: ``CodeUri: !Sub src/${Name}`` is a folder again, and
    ``!GetAtt [!Sub ${Name}Queue, Arn]`` names its resource."""
    if isinstance(node, list):
        return [_literal_subs(v) for v in node]
    if not isinstance(node, dict):
        return node
    if set(node) == {"Fn::Sub"} and isinstance(node["Fn::Sub"], str) and "${" not in node["Fn::Sub"]:
        return node["Fn::Sub"]
    return {k: _literal_subs(v) for k, v in node.items()}


def _unsupported(node: Any) -> set[str]:
    if isinstance(node, list):
        return set().union(*(_unsupported(v) for v in node)) if node else set()
    if not isinstance(node, dict):
        return set()
    found = {key for key in node if key in UNSUPPORTED}
    for value in node.values():
        found |= _unsupported(value)
    return found


NESTED_TYPES = {"AWS::Serverless::Application": "Location", "AWS::CloudFormation::Stack": "TemplateURL"}


def nested_sources(
    path: Path, given: dict[str, str], *, every: bool = False
) -> list[tuple[str, Path, dict[str, str]]]:
    """Each nested application of the template at ``path`` whose template is a local file: its logical
    id, its template and the parameter values the parent passes that are known before deploying (what
    ``cfn-lint`` and ``checkov`` are given for it), for the parent's parameters ``given`` (else their
    defaults). One whose ``Condition`` is false is left out unless ``every``."""
    from sluice_local.emulation.cfn_yaml import parse as yaml_parse  # noqa: PLC0415
    from sluice_local.emulation.conditions import evaluate_conditions  # noqa: PLC0415
    from sluice_local.emulation.nested import literal  # noqa: PLC0415

    template = expand(yaml_parse(path.read_text(encoding="utf-8")), given)
    values = parameter_values(template.get("Parameters", {}), given)
    texts = {k: ",".join(v) if isinstance(v, list) else v for k, v in values.items()}
    conditions = evaluate_conditions(template.get("Conditions", {}), texts)
    found = []
    for logical_id, resource in template.get("Resources", {}).items():
        key = NESTED_TYPES.get(str(resource.get("Type")))
        location = resource.get("Properties", {}).get(key) if key else None
        if not isinstance(location, str) or re.match(r"^(https?|s3)://", location):
            continue
        if not every and not conditions.get(str(resource.get("Condition")), True):
            continue
        passed = resource["Properties"].get("Parameters", {})
        known = {k: t for k, v in passed.items() if (t := literal(v, values)) is not None}
        found.append((logical_id, (path.parent / location).resolve(), known))
    return found


def with_nested(path: Path, given: dict[str, str], *, resolve_mappings: bool = True) -> dict[str, Any]:
    """The template at ``path`` expanded, with each nested application's template in it as deployed
    (expanded for what the parent passes, its parameters bound to the parent's expressions as the local
    runtime binds them, its conditions, resources, mappings and outputs joined to the parent's): the
    whole application as one template, what checkov scans and what a template test reads. A nested
    application under a ``Condition`` is in it whatever the condition's value, its resources and outputs
    under that condition (as the parent's own conditional resources are)."""
    from sluice_local.emulation.cfn_yaml import parse as yaml_parse  # noqa: PLC0415
    from sluice_local.emulation.nested import (  # noqa: PLC0415
        bind_parameters,
        nested_stack_suffix,
        passed_parameters,
        use_outputs,
    )

    merged = expand(yaml_parse(path.read_text(encoding="utf-8")), given, resolve_mappings=resolve_mappings)
    for app, child_path, known in nested_sources(path, given, every=True):
        resource = merged["Resources"].pop(app)
        child = with_nested(child_path, known, resolve_mappings=resolve_mappings)
        passed = resource.get("Properties", {}).get("Parameters", {})
        params = passed_parameters(child.get("Parameters", {}), passed, app)
        bound = bind_parameters(
            {k: v for k, v in child.items() if k in ("Conditions", "Resources", "Outputs")},
            params,
            nested_stack_suffix(app),
        )
        for name in list(bound.get("Conditions", {})):  # each template has its own conditions
            theirs = merged.get("Conditions", {}).get(name)
            if theirs is not None and theirs != bound["Conditions"][name]:
                bound = _renamed_condition(bound, name, f"{app}{name}")
        if condition := resource.get("Condition"):
            _under_condition(bound, str(condition), app)
        _paths_from(bound.get("Resources", {}), child_path.parent, path.parent)
        outputs = {name: item["Value"] for name, item in bound.get("Outputs", {}).items()}
        for section in ("Resources", "Outputs"):  # what the parent reads of the child's outputs
            merged[section] = {k: use_outputs(v, app, outputs) for k, v in merged.get(section, {}).items()}
        for mapping, rows in child.get("Mappings", {}).items():
            ours = merged.setdefault("Mappings", {}).setdefault(mapping, {})
            for key, row in rows.items():
                if ours.setdefault(key, row) != row:
                    raise LanguageExtensionError(f"{app}: Mappings {mapping}.{key} differs from its parent's")
        for section in ("Conditions", "Resources", "Outputs"):
            ours = merged.setdefault(section, {})
            for name, item in bound.get(section, {}).items():
                if name in ours and ours[name] != item:
                    raise LanguageExtensionError(f"{app}: {section} {name} is also its parent's, differently")
                ours[name] = item
    return merged


_LOCAL_PATHS = {
    "AWS::Serverless::Function": "CodeUri",
    "AWS::Serverless::LayerVersion": "ContentUri",
    "AWS::Serverless::StateMachine": "DefinitionUri",
    "AWS::Serverless::Application": "Location",
}


def _paths_from(resources: dict[str, Any], child_dir: Path, parent_dir: Path) -> None:
    """A nested template's local paths (code folders, definitions), each relative to its own folder,
    rewritten relative to the parent's: the merged template reads as if it were the parent's."""
    for resource in resources.values():
        key = _LOCAL_PATHS.get(str(resource.get("Type")))
        props = resource.get("Properties", {})
        value = props.get(key) if key else None
        if isinstance(value, str) and not re.match(r"^(https?|s3)://", value):
            props[key] = os.path.relpath(child_dir / value, parent_dir) + ("/" if value.endswith("/") else "")


def _renamed_condition(node: Any, old: str, new: str) -> Any:
    """``node`` (a child template's sections) with its condition ``old`` named ``new``: its definition,
    each ``Condition`` naming it, each ``{"Condition": old}`` and each ``Fn::If`` on it."""
    if isinstance(node, list):
        return [_renamed_condition(v, old, new) for v in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "Condition" and value == old:
            out[key] = new
        elif key == "Fn::If" and isinstance(value, list) and value and value[0] == old:
            out[key] = [new, *_renamed_condition(value[1:], old, new)]
        elif key == "Conditions" and isinstance(value, dict) and old in value:
            out[key] = {(new if k == old else k): _renamed_condition(v, old, new) for k, v in value.items()}
        else:
            out[key] = _renamed_condition(value, old, new)
    return out


def _under_condition(child: dict[str, Any], condition: str, app: str) -> None:
    """The child's resources and outputs exist only where the application's ``condition`` holds: each
    gets it, or, where it has a condition of its own, a new one that is both (``<app><Own>``)."""
    conditions = child.setdefault("Conditions", {})
    for section in ("Resources", "Outputs"):
        for item in child.get(section, {}).values():
            own = item.get("Condition")
            if own is None:
                item["Condition"] = condition
                continue
            both = f"{app}{own}"
            conditions[both] = {"Fn::And": [{"Condition": condition}, {"Condition": own}]}
            item["Condition"] = both


def main(argv: list[str] | None = None) -> int:
    """``python -m sluice_local.emulation.language_extensions TEMPLATE [Name=Value ...]``: the template
    with its loops expanded and its nested applications' resources in it, as JSON on stdout (what
    scripts/security_scan.py hands checkov, which skips the resources of an ``Fn::ForEach`` and of a
    nested template without a word)."""
    import json  # noqa: PLC0415
    import sys  # noqa: PLC0415

    args = sys.argv[1:] if argv is None else argv
    if not args or any("=" not in a for a in args[1:]):
        print(main.__doc__, file=sys.stderr)
        return 2
    given = dict(a.split("=", 1) for a in args[1:])
    try:
        expanded = with_nested(Path(args[0]), given)
    except LanguageExtensionError as exc:
        print(exc, file=sys.stderr)
        return 1
    json.dump(expanded, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
