"""A template's ``Rules`` section, checked as CloudFormation checks it before creating anything.

CloudFormation's own description (the rule functions reference,
https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/intrinsic-function-reference-rules.html):
a rule whose ``RuleCondition`` is true (or that has none) has each ``Assert`` evaluated with the rule
functions ``Fn::And``, ``Fn::Or``, ``Fn::Not``, ``Fn::Equals``, ``Fn::Contains``, ``Fn::EachMemberEquals``
and ``Fn::EachMemberIn`` over parameter values (``Ref``; a ``CommaDelimitedList`` is its list) and
literals; one that is false refuses the stack with its ``AssertDescription``. moto ignores the section.

An assertion that needs what the runtime does not know (``Fn::ValueOf``, ``Fn::RefAll``, a parameter a
parent passes only once its resources exist) is not checked.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

_UNKNOWN = object()


def rule_problems(
    template: Mapping[str, Any], given: Mapping[str, str], deferred: Collection[str] = ()
) -> list[str]:
    """One line per failed assertion: ``Rule '<name>': <AssertDescription>``."""
    declared = template.get("Parameters") or {}
    values: dict[str, Any] = {}
    for name, spec in declared.items():
        if name in deferred or (name not in given and "Default" not in spec):
            continue
        text = str(given[name]) if name in given else _text(spec["Default"])
        is_list = str(spec.get("Type", "String")).startswith(("CommaDelimitedList", "List<"))
        values[name] = [part.strip() for part in text.split(",")] if is_list else text
    problems = []
    for rule_name, rule in (template.get("Rules") or {}).items():
        if "RuleCondition" in rule and _evaluate(rule["RuleCondition"], values) is not True:
            continue
        for assertion in rule.get("Assertions", []):
            if _evaluate(assertion.get("Assert"), values) is False:
                described = assertion.get("AssertDescription", "Template validation error")
                problems.append(f"Rule '{rule_name}': {described}")
    return problems


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return ",".join(map(_text, value))
    return str(value)


def _evaluate(expression: Any, values: Mapping[str, Any]) -> Any:  # noqa: C901, PLR0911 - one per function
    """The value of a rule expression: True / False, a text, a list of texts, or _UNKNOWN."""
    if isinstance(expression, (str, int, float, bool)):
        return _text(expression)
    if isinstance(expression, list):
        items = [_evaluate(item, values) for item in expression]
        return _UNKNOWN if any(item is _UNKNOWN for item in items) else items
    if not isinstance(expression, dict) or len(expression) != 1:
        return _UNKNOWN
    ((function, argument),) = expression.items()
    if function == "Ref":
        return values.get(str(argument), _UNKNOWN)
    args: list[Any] = (
        [_evaluate(item, values) for item in argument] if isinstance(argument, list) else [_UNKNOWN]
    )
    if any(arg is _UNKNOWN for arg in args):
        return _UNKNOWN
    if function == "Fn::Not":
        return not args[0] if isinstance(args[0], bool) else _UNKNOWN
    if function == "Fn::And":
        return all(args)
    if function == "Fn::Or":
        return any(args)
    if function == "Fn::Equals":
        return args[0] == args[1]
    if function == "Fn::Contains":
        return args[1] in _members(args[0])
    if function == "Fn::EachMemberEquals":
        return all(member == args[1] for member in _members(args[0]))
    if function == "Fn::EachMemberIn":
        return all(member in _members(args[1]) for member in _members(args[0]))
    return _UNKNOWN


def _members(value: Any) -> list[Any]:
    """A list of strings as the rule functions take it: a String where a list belongs is one member (never
    the characters or substrings of it: ``Fn::Contains`` of "ab" and "a" is false)."""
    return list(value) if isinstance(value, list) else [value]
