"""Shapes of JSON data: from TypedDicts, from botocore's models, from constants in a definition;
and whether one fits another (what a Task is given against what its function takes)."""

from __future__ import annotations

import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

# --- shapes ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Leaf:
    kinds: frozenset[str]
    """str, number, bool, null, or any."""
    values: frozenset[Any] | None = None
    """The only values it can take (a Literal, or a constant written in the definition)."""


ANY = Leaf(frozenset({"any"}))


@dataclass(frozen=True)
class Obj:
    name: str
    fields: tuple[tuple[str, Shape, bool], ...]
    """(key, shape, required)."""
    closed: bool = False
    """Written key by key in the definition: a key its receiver does not know is a mistake."""

    def get(self, key: str) -> tuple[Shape, bool] | None:
        for name, shape, required in self.fields:
            if name == key:
                return shape, required
        return None

    def names(self) -> list[str]:
        return [name for name, _, _ in self.fields]

    def with_field(self, key: str, shape: Shape) -> Obj:
        rest = tuple(f for f in self.fields if f[0] != key)
        return Obj(self.name, (*rest, (key, shape, True)), self.closed)


@dataclass(frozen=True)
class Arr:
    item: Shape


@dataclass(frozen=True)
class Dict:
    value: Shape


@dataclass(frozen=True)
class Union:
    options: tuple[Shape, ...]


Shape = Leaf | Obj | Arr | Dict | Union


def union(shapes: Iterable[Shape]) -> Shape:
    out: list[Shape] = []
    for shape in shapes:
        for option in shape.options if isinstance(shape, Union) else (shape,):
            if option not in out:
                out.append(option)
    if any(o == ANY for o in out):
        return ANY
    return out[0] if len(out) == 1 else Union(tuple(out))


def alternatives(shape: Shape) -> tuple[Shape, ...]:
    return shape.options if isinstance(shape, Union) else (shape,)


def describe(shape: Shape) -> str:
    if isinstance(shape, Obj):
        return shape.name
    if isinstance(shape, Arr):
        return f"list[{describe(shape.item)}]"
    if isinstance(shape, Dict):
        return f"dict[str, {describe(shape.value)}]"
    if isinstance(shape, Union):
        return " | ".join(describe(o) for o in shape.options)
    if shape.values is not None:
        return "Literal[" + ", ".join(repr(v) for v in sorted(shape.values, key=repr)) + "]"
    return "|".join(sorted(shape.kinds))


_PRIMITIVES = {str: "str", int: "number", float: "number", bool: "bool", type(None): "null", bytes: "str"}


def from_type(tp: Any, replace: Mapping[Any, Any] | None = None) -> Shape:  # noqa: PLR0911 - one per kind
    """The shape of a Python annotation (``TypedDict``s, lists, dicts, unions, literals, primitives).

    ``replace`` swaps a contract for another wherever it appears (a test renames a field that way).
    """
    replace = replace or {}
    tp = replace.get(tp, tp)
    if typing.is_typeddict(tp):
        hints = typing.get_type_hints(tp)
        required = tp.__required_keys__
        return Obj(tp.__name__, tuple((k, from_type(v, replace), k in required) for k, v in hints.items()))
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return union(from_type(a, replace) for a in args)
    if origin is typing.Literal:
        return Leaf(frozenset(_PRIMITIVES[type(a)] for a in args), frozenset(args))
    if origin in (list, Sequence, tuple):
        return Arr(from_type(args[0], replace) if args else ANY)
    if origin in (dict, Mapping):
        return Dict(from_type(args[1], replace) if args else ANY)
    if tp in _PRIMITIVES:
        return Leaf(frozenset({_PRIMITIVES[tp]}))
    if tp in (Any, object) or tp is dict:
        return ANY if tp is not dict else Dict(ANY)
    raise TypeError(f"no shape for {tp!r}")


def from_value(value: Any) -> Shape:
    """A constant written in the definition."""
    if isinstance(value, dict):
        return Obj("{...}", tuple((k, from_value(v), True) for k, v in value.items()), closed=True)
    if isinstance(value, list):
        return Arr(union(from_value(v) for v in value) if value else ANY)
    if isinstance(value, str) and "${" in value:
        return Leaf(frozenset({"str"}))  # a substitution placeholder
    return Leaf(frozenset({_PRIMITIVES[type(value)]}), frozenset({value}))


# --- AWS API shapes (botocore's service models) --------------------------------------------------


@cache
def _service(name: str) -> Any:
    from botocore.loaders import Loader  # noqa: PLC0415 - only the definitions with AWS SDK tasks
    from botocore.model import ServiceModel  # noqa: PLC0415

    service = {"sfn": "stepfunctions", "states": "stepfunctions"}.get(name, name)
    return ServiceModel(Loader().load_service_model(service, "service-2"), service)


def from_botocore(shape: Any, *, pascal: bool) -> Shape:  # noqa: PLR0911 - one return per shape kind
    """An API shape as Step Functions passes it (``pascal``: the aws-sdk integrations capitalise every
    member name, even of APIs that are camelCase on the wire)."""
    if shape is None:
        return Obj("(empty response)", ())
    kind = shape.type_name
    if kind == "structure":
        required = set(shape.required_members)
        return Obj(
            shape.name,
            tuple(
                (k[:1].upper() + k[1:] if pascal else k, from_botocore(m, pascal=pascal), k in required)
                for k, m in shape.members.items()
            ),
        )
    if kind == "list":
        return Arr(from_botocore(shape.member, pascal=pascal))
    if kind == "map":
        return Dict(from_botocore(shape.value, pascal=pascal))
    if kind == "string":
        enum = shape.enum
        return Leaf(frozenset({"str"}), frozenset(enum) if enum else None)
    if kind in ("integer", "long", "float", "double"):
        return Leaf(frozenset({"number"}))
    if kind == "boolean":
        return Leaf(frozenset({"bool"}))
    return ANY  # blob, timestamp: text or numbers in Step Functions


def aws_api(service: str, action: str, *, pascal: bool) -> tuple[Shape, Shape]:
    """(request, response) of ``service:action`` (an ``arn:aws:states:::…`` resource)."""
    model = _service(service)
    operation = model.operation_model(action[:1].upper() + action[1:])
    request = from_botocore(operation.input_shape, pascal=pascal)
    if isinstance(request, Obj):
        request = Obj(request.name, request.fields, closed=True)
    return request, from_botocore(operation.output_shape, pascal=pascal)


TASK_ERROR = Obj("Catch error output", (("Error", Leaf(frozenset({"str"})), True), ("Cause", ANY, True)))
"""What a Catch puts at its ResultPath."""


# --- conformance: what a Task is given against what its function takes -------------------------


def mismatches(given: Shape, wanted: Shape, where: str = "") -> list[str]:  # noqa: PLR0911 - one per shape kind
    """Why ``given`` does not fit ``wanted`` (empty when it does)."""
    if ANY in (given, wanted):
        return []
    if isinstance(given, Union):
        return [m for option in given.options for m in mismatches(option, wanted, where)]
    if isinstance(wanted, Union):
        each = [mismatches(given, option, where) for option in wanted.options]
        if any(not m for m in each):
            return []
        detail = " / ".join(
            f"{describe(option)}: {'; '.join(m)}" for option, m in zip(wanted.options, each, strict=True)
        )
        return [f"{where or 'it'} matches none of {describe(wanted)} ({detail})"]
    if isinstance(wanted, Obj):
        return _object_mismatches(given, wanted, where)
    if isinstance(wanted, Dict):
        if isinstance(given, Obj):
            return [
                m for key, shape, _ in given.fields for m in mismatches(shape, wanted.value, _at(where, key))
            ]
        if isinstance(given, Dict):
            return mismatches(given.value, wanted.value, _at(where, "*"))
    elif isinstance(wanted, Arr):
        if isinstance(given, Arr):
            return mismatches(given.item, wanted.item, f"{where}[]")
    elif (
        isinstance(given, Leaf)
        and given.kinds <= wanted.kinds
        and (wanted.values is None or given.values is None or given.values <= wanted.values)
    ):
        return []
    return [f"{where or 'it'} is {describe(given)}, not {describe(wanted)}"]


def _at(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _object_mismatches(given: Shape, wanted: Obj, where: str) -> list[str]:
    if isinstance(given, Dict):
        return []
    if not isinstance(given, Obj):
        return [f"{where or 'it'} is {describe(given)}, not {wanted.name}"]
    out = [f"{_at(where, key)} missing" for key, _, req in wanted.fields if req and given.get(key) is None]
    if given.closed:
        out += [
            f"{_at(where, key)} is not a field of {wanted.name}"
            for key in given.names()
            if wanted.get(key) is None
        ]
    for key, shape, _ in given.fields:
        expected = wanted.get(key)
        if expected is not None:
            out += mismatches(shape, expected[0], _at(where, key))
    return out
