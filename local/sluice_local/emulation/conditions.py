"""CloudFormation's conditions, evaluated with known parameter values, and ``Fn::If`` resolved by them
(the local runtime knows every condition before it deploys)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["evaluate_conditions", "resolve_if"]


def evaluate_conditions(conditions: dict[str, Any], params: dict[str, str]) -> dict[str, bool]:
    """The template's Conditions, evaluated with the parameter values (Equals/Not/And/Or/Condition)."""
    done: dict[str, bool] = {}

    def value(node: Any) -> Any:
        if isinstance(node, dict) and set(node) == {"Ref"}:
            return params.get(node["Ref"], "")
        if isinstance(node, dict) and set(node) == {"Fn::Join"}:
            sep, parts = node["Fn::Join"]
            # a list, or one expression yielding a list (a Ref to a CommaDelimitedList: its text)
            flat = [value(p) for p in parts] if isinstance(parts, list) else items(parts)
            return sep.join(",".join(v) if isinstance(v, list) else str(v) for v in flat)
        if isinstance(node, dict) and set(node) == {"Fn::Split"}:
            sep, text = node["Fn::Split"]
            return str(value(text)).split(sep)
        return node

    def items(node: Any) -> list[Any]:
        found = value(node)
        return found if isinstance(found, list) else str(found).split(",")

    def truth(node: Any) -> bool:
        if isinstance(node, dict) and len(node) == 1:
            [(operator, arg)] = node.items()
            if operator in operators:
                return operators[operator](arg)
        raise ValueError(f"condition not understood by the local runtime: {node!r}")

    def named(name: str) -> bool:
        if name not in done:
            done[name] = truth(conditions[name])
        return done[name]

    operators: dict[str, Callable[[Any], bool]] = {
        "Condition": named,
        "Fn::Equals": lambda arg: str(value(arg[0])) == str(value(arg[1])),
        "Fn::Not": lambda arg: not truth(arg[0]),
        "Fn::And": lambda arg: all(truth(n) for n in arg),
        "Fn::Or": lambda arg: any(truth(n) for n in arg),
    }

    for name in conditions:
        named(name)
    return done


def resolve_if(node: Any, conditions: dict[str, bool]) -> Any:
    """``Fn::If`` with known conditions; ``AWS::NoValue`` removes the key or list item."""
    if isinstance(node, list):
        items = [resolve_if(v, conditions) for v in node]
        return [v for v in items if v is not _NO_VALUE]
    if not isinstance(node, dict):
        return node
    if set(node) == {"Fn::If"}:
        name, yes, no = node["Fn::If"]
        return resolve_if(yes if conditions[name] else no, conditions)
    if node == {"Ref": "AWS::NoValue"}:
        return _NO_VALUE
    out = {k: resolve_if(v, conditions) for k, v in node.items()}
    return {k: v for k, v in out.items() if v is not _NO_VALUE}


_NO_VALUE = object()
