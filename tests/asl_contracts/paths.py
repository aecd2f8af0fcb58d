"""JSONPath (the subset Step Functions takes) and intrinsic functions, resolved on shapes."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence

from tests.asl_contracts.shapes import (
    ANY,
    Arr,
    Dict,
    Leaf,
    Obj,
    Shape,
    Union,
    alternatives,
    describe,
    from_value,
    union,
)

# --- JSONPath and intrinsic functions -----------------------------------------------------------

_TOKEN = re.compile(r"\.([A-Za-z_][\w-]*)|\['([^']+)'\]|\[(\d+)\]|\[(\*)\]")


def parse_path(path: str) -> tuple[str, list[str | int | None]]:
    """(``$`` or ``$$``, steps): a field name, an index, or None for ``[*]``."""
    root = "$$" if path.startswith("$$") else "$"
    if not path.startswith("$"):
        raise ValueError(f"not a path: {path!r}")
    rest, steps, at = path[len(root) :], [], 0
    while at < len(rest):
        found = _TOKEN.match(rest, at)
        if found is None:
            raise ValueError(f"unsupported JSONPath {path!r} (at {rest[at:]!r})")
        name, quoted, index, _star = found.groups()
        steps.append(name or quoted if (name or quoted) else (int(index) if index else None))
        at = found.end()
    return root, steps


class ProblemError(Exception):
    """A path that does not resolve, and why."""


def resolve(shape: Shape, steps: Sequence[str | int | None], *, every: bool = True) -> Shape:
    """The shape at ``steps`` in ``shape``; :class:`ProblemError` when it does not resolve (in every
    alternative, or in none when ``every`` is false)."""
    if not steps or shape == ANY:
        return shape
    if isinstance(shape, Union):
        return _resolve_each(shape, steps, every=every)
    step, rest = steps[0], steps[1:]
    if isinstance(step, str):
        if isinstance(shape, Dict):
            return resolve(shape.value, rest, every=every)
        if isinstance(shape, Obj):
            field = shape.get(step)
            if field is None:
                raise ProblemError(
                    f"no field {step!r} in {shape.name} (it has {', '.join(shape.names()) or 'none'})"
                )
            return resolve(field[0], rest, every=every)
        raise ProblemError(f"{describe(shape)} has no field {step!r}")
    if not isinstance(shape, Arr):
        raise ProblemError(
            f"{describe(shape)} is not a list (indexed with [{'*' if step is None else step}])"
        )
    if step is None:  # an indefinite path: the matches, possibly none
        return Arr(resolve(shape.item, rest, every=False))
    return resolve(shape.item, rest, every=every)


def _resolve_each(shape: Union, steps: Sequence[str | int | None], *, every: bool) -> Shape:
    found, problems = [], []
    for option in shape.options:
        try:
            found.append(resolve(option, steps, every=every))
        except ProblemError as exc:
            problems.append(str(exc))
    if problems and (every or not found):
        raise ProblemError("; ".join(dict.fromkeys(problems)))
    return union(found)


NUMBER = Leaf(frozenset({"number"}))
STRING = Leaf(frozenset({"str"}))
_INTRINSIC = re.compile(r"States\.(\w+)\(")


def split_arguments(text: str) -> list[str]:
    out, depth, quoted, start = [], 0, False, 0
    for i, ch in enumerate(text):
        if ch == "'" and (i == 0 or text[i - 1] != "\\"):
            quoted = not quoted
        elif not quoted and ch == "(":
            depth += 1
        elif not quoted and ch == ")":
            depth -= 1
        elif not quoted and depth == 0 and ch == ",":
            out.append(text[start:i].strip())
            start = i + 1
    tail = text[start:].strip()
    return [*out, tail] if tail or out else out


def evaluate(expression: str, path_of: Callable[[str], Shape]) -> Shape:
    """The shape of a ``.$`` value: a path, or an intrinsic function of paths and constants."""
    expression = expression.strip()
    if expression.startswith("$"):
        return path_of(expression)
    if expression.startswith("'"):
        return STRING
    found = _INTRINSIC.match(expression)
    if found is None:
        try:
            return from_value(json.loads(expression))
        except ValueError:
            raise ProblemError(f"not a path or an intrinsic function: {expression!r}") from None
    if not expression.endswith(")"):
        raise ProblemError(f"malformed intrinsic function {expression!r}")
    name = found.group(1)
    args = [evaluate(a, path_of) for a in split_arguments(expression[found.end() : -1])]
    if name == "ArrayGetItem":
        array = args[0]
        items = [a.item for a in alternatives(array) if isinstance(a, Arr)]
        if array != ANY and len(items) != len(alternatives(array)):
            raise ProblemError(f"States.ArrayGetItem of {describe(array)}, not a list")
        return union(items) if items else ANY
    simple: dict[str, Shape] = {
        "ArrayLength": NUMBER,
        "MathAdd": NUMBER,
        "MathRandom": NUMBER,
        "StringToJson": ANY,
        "JsonToString": STRING,
        "Format": STRING,
        "UUID": STRING,
        "Hash": STRING,
        "Base64Encode": STRING,
        "Base64Decode": STRING,
        "ArrayContains": Leaf(frozenset({"bool"})),
        "StringSplit": Arr(STRING),
        "ArrayRange": Arr(NUMBER),
        "Array": Arr(union(args) if args else ANY),
        "ArrayUnique": args[0] if args else ANY,
        "ArrayPartition": Arr(args[0]) if args else ANY,
        "JsonMerge": ANY,
    }
    if name not in simple:
        raise ProblemError(f"unknown intrinsic function States.{name}")
    return simple[name]
