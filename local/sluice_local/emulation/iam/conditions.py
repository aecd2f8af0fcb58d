"""IAM condition operators and policy variables, as AWS's IAM User Guide documents them.

Parsed once (:meth:`Condition.parse`, :class:`Patterns`), evaluated many times: a pattern without policy
variables is compiled when the policy is parsed; one with variables is resolved against the request
context at evaluation and its regular expression taken from a cache, so evaluating a policy compiles
nothing for a request it has seen before.

What AWS documents and the runtime follows ("IAM JSON policy elements: Condition operators",
"Conditions with multiple context keys or values", "Single-valued vs. multivalued context keys",
"IAM policy elements: Variables and tags"):

- condition key names are case-insensitive (the context's keys are lower-cased); values compare as the
  operator says: ``String*`` (``...IgnoreCase``, ``StringLike`` with ``*`` and ``?``), ``Numeric*``,
  ``Date*`` (W3C ISO 8601 or epoch seconds), ``Bool`` (``"true"``/``"false"``), ``BinaryEquals``
  (base64), ``IpAddress``/``NotIpAddress`` (CIDR, a bare address being ``/32``), ``Arn*`` (each of the
  six colon-delimited parts of the ARN matched on its own; ``ArnEquals`` and ``ArnLike`` alike) and
  ``Null`` (whether the key is absent);
- several operators, and several keys under one operator: AND; several values for one key: OR, and
  NOR for a negated operator (``StringNotEquals``, ``NotIpAddress``, ``ArnNotLike``, ...);
- a key absent from the request: the condition is false, true for a negated operator, true with
  ``...IfExists``;
- ``ForAnyValue:``/``ForAllValues:`` test each of the request's values; a key that is absent or
  empty (no value, or the empty string) makes ``ForAllValues`` true and ``ForAnyValue`` false;
- policy variables (policy ``Version`` ``2012-10-17`` only; otherwise ``${...}`` is literal text) in
  ``Resource`` and in string, ARN and ``Bool`` condition values: ``${aws:username}``, a default
  ``${aws:username, 'anonymous'}``, and ``${*}`` ``${?}`` ``${$}`` for a literal ``*`` ``?`` ``$``.

Where AWS leaves it open, the runtime chooses (each choice named in the docstring that makes it): an
unresolved variable with no default matches nothing; an unqualified operator given a multivalued
request key tests each value (any match; a negated operator: no match); a string of digits is epoch
seconds; ``ArnLike`` ``"*"`` matches any value.
"""

from __future__ import annotations

import base64
import binascii
import functools
import ipaddress
import operator
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

__all__ = ["Condition", "Context", "Mode", "Patterns", "PolicyError", "Template", "parse_date"]

Context = Mapping[str, tuple[str, ...]]
"""The request context as the evaluator holds it: lower-cased key → its values (one for most keys)."""

Mode = Literal["exact", "glob", "arn"]
"""How a policy string matches: ``exact`` (``*`` is a character), ``glob`` (``*`` and ``?`` match
anything, across ``/`` and ``:``) or ``arn`` (``glob`` within each of the six colon-delimited parts)."""


class PolicyError(ValueError):
    """A policy document AWS would refuse: not JSON, a missing or unknown element, a malformed value."""


@dataclass(frozen=True)
class _Var:
    key: str  # lower-cased: variable names are case-insensitive as condition keys are
    default: str | None


@dataclass(frozen=True)
class _Wild:
    char: str


_STAR, _QMARK = _Wild("*"), _Wild("?")
_Token = str | _Var | _Wild
_VARIABLE = re.compile(r"\$\{([^}]*)\}")
_WITH_DEFAULT = re.compile(r"\s*([^,\s]+)\s*,\s*'([^']*)'\s*")
_ESCAPES = {"*": "*", "?": "?", "$": "$"}


def _tokens(text: str, *, wildcards: bool, variables: bool) -> tuple[_Token, ...]:
    """``text`` as literal runs, wildcards and variables (adjacent literal characters joined)."""
    out: list[_Token] = []

    def literal(chunk: str) -> None:
        if out and isinstance(out[-1], str):
            out[-1] += chunk
        elif chunk:
            out.append(chunk)

    def plain(chunk: str) -> None:
        for char in chunk:
            if wildcards and char in "*?":
                out.append(_STAR if char == "*" else _QMARK)
            else:
                literal(char)

    pos = 0
    for found in _VARIABLE.finditer(text) if variables else ():
        plain(text[pos : found.start()])
        pos = found.end()
        inner = found.group(1)
        if inner in _ESCAPES:
            literal(_ESCAPES[inner])
        elif (default := _WITH_DEFAULT.fullmatch(inner)) is not None:
            out.append(_Var(default.group(1).lower(), default.group(2)))
        elif inner.strip() and "," not in inner:
            out.append(_Var(inner.strip().lower(), None))
        else:
            raise PolicyError(f"malformed policy variable ${{{inner}}} in {text!r}")
    plain(text[pos:])
    return tuple(out)


def _resolve(var: _Var, context: Context) -> str | None:
    """A variable's value: the key's single value in the request, else its default (None: unresolved).
    A multivalued key is no policy variable ("Single-valued vs. multivalued context keys")."""
    values = context.get(var.key)
    if values is not None and len(values) == 1:
        return values[0]
    return var.default


@functools.lru_cache(maxsize=4096)
def _compile(source: str, flags: int) -> re.Pattern[str]:
    return re.compile(source, flags)


def _source(tokens: Iterable[_Token], mode: Mode, context: Context | None) -> str | None:
    """The regular expression (``exact``: the text) ``tokens`` stand for; None if a variable is
    unresolved. In ``arn`` mode a wildcard in the first five parts stays within its part."""
    parts: list[str] = []
    segment = 0
    for token in tokens:
        if isinstance(token, _Wild):
            within = mode == "arn" and segment < 5
            parts.append(("[^:]*" if within else ".*") if token is _STAR else ("[^:]" if within else "."))
            continue
        if isinstance(token, _Var):
            value = _resolve(token, context) if context is not None else None
            if value is None:
                return None
            parts.append(value if mode == "exact" else re.escape(value))
            continue
        segment += token.count(":")
        parts.append(token if mode == "exact" else re.escape(token))
    return "".join(parts)


class Template:
    """One policy string (a ``Resource`` entry, a condition value), matched against request values."""

    __slots__ = ("_any", "_fold", "_mode", "_regex", "_static", "_tokens", "text")

    def __init__(self, text: str, *, mode: Mode, variables: bool, ignore_case: bool = False) -> None:
        self.text = text
        self._mode: Mode = mode
        self._fold = ignore_case
        self._tokens = _tokens(text, wildcards=mode != "exact", variables=variables)
        dynamic = any(isinstance(t, _Var) for t in self._tokens)
        wild = any(isinstance(t, _Wild) for t in self._tokens)
        # ArnLike "*": any ARN (AWS documents per-part matching, not a lone "*"; the runtime's choice).
        self._any = not dynamic and self._tokens == (_STAR,)
        self._static: str | None = None
        self._regex: re.Pattern[str] | None = None
        if not dynamic and not wild:
            text_ = "".join(t for t in self._tokens if isinstance(t, str))
            self._static = text_.lower() if ignore_case else text_
        elif not dynamic:
            self._regex = _compile(_source(self._tokens, mode, None) or "", self._flags)

    @property
    def _flags(self) -> int:
        return re.DOTALL | (re.IGNORECASE if self._fold else 0)

    @property
    def static(self) -> str | None:
        """The text to compare for equality when the pattern has no wildcard and no variable."""
        return self._static

    @property
    def regex_source(self) -> str | None:
        """The compiled pattern's source when it has wildcards and no variable."""
        return self._regex.pattern if self._regex is not None else None

    @property
    def matches_anything(self) -> bool:
        return self._any

    def matches(self, value: str, context: Context) -> bool:
        if self._any:
            return True
        if self._static is not None:
            return (value.lower() if self._fold else value) == self._static
        if self._regex is not None:
            return self._regex.fullmatch(value) is not None
        source = _source(self._tokens, self._mode, context)
        if source is None:
            return False
        if self._mode == "exact":
            return (value.lower() == source.lower()) if self._fold else value == source
        return _compile(source, self._flags).fullmatch(value) is not None

    def __repr__(self) -> str:
        return f"Template({self.text!r}, mode={self._mode!r})"


class Patterns:
    """A list of policy strings (``Action``, ``Resource``, a condition's values), OR-ed: equality by a
    set lookup, static wildcards by one combined expression, variables resolved per request."""

    __slots__ = ("_any", "_exact", "_fold", "_regex", "_templates", "texts")

    def __init__(
        self, texts: Sequence[str], *, mode: Mode, variables: bool, ignore_case: bool = False
    ) -> None:
        self.texts = tuple(texts)
        templates = [Template(t, mode=mode, variables=variables, ignore_case=ignore_case) for t in texts]
        self._fold = ignore_case
        self._any = any(t.matches_anything for t in templates)
        self._exact = frozenset(t.static for t in templates if t.static is not None)
        sources = [s for t in templates if (s := t.regex_source) is not None]
        flags = re.DOTALL | (re.IGNORECASE if ignore_case else 0)
        self._regex = _compile("|".join(f"(?:{s})" for s in sources), flags) if sources else None
        self._templates = tuple(
            t for t in templates if t.static is None and t.regex_source is None and not t.matches_anything
        )

    def matches(self, value: str, context: Context) -> bool:
        if self._any:
            return True
        if self._exact and (value.lower() if self._fold else value) in self._exact:
            return True
        if self._regex is not None and self._regex.fullmatch(value) is not None:
            return True
        return any(t.matches(value, context) for t in self._templates)


_W3C = re.compile(
    r"(\d{4})(?:-(\d{2})(?:-(\d{2})(?:T(\d{2}):(\d{2})(?::(\d{2})(?:\.(\d+))?)?(Z|[+-]\d{2}:\d{2})?)?)?)?"
)
_EPOCH = re.compile(r"-?\d+(?:\.\d+)?")


@functools.lru_cache(maxsize=1024)
def parse_date(text: str) -> float | None:
    """A date condition value as epoch seconds: W3C ISO 8601 (``2020-01-01T00:00:01Z``, down to ``YYYY``;
    no zone: UTC) or epoch seconds. A string of digits is read as epoch seconds (the runtime's choice
    where the two overlap: ``"2020"``). None if neither."""
    if _EPOCH.fullmatch(text):
        return float(text)
    found = _W3C.fullmatch(text)
    if found is None:
        return None
    year, month, day, hour, minute, second, fraction, zone = found.groups()
    try:
        when = datetime(
            int(year), int(month or 1), int(day or 1), int(hour or 0), int(minute or 0), int(second or 0),
            tzinfo=UTC,
        )  # fmt: skip
    except ValueError:
        return None
    offset = 0
    if zone and zone != "Z":
        offset = (1 if zone[0] == "+" else -1) * (int(zone[1:3]) * 3600 + int(zone[4:6]) * 60)
    return when.timestamp() - offset + (float(f"0.{fraction}") if fraction else 0.0)


@functools.lru_cache(maxsize=1024)
def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


@functools.lru_cache(maxsize=1024)
def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _bytes(text: str) -> bytes | None:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None


_Match = Callable[[str, Context], bool]
_Kind = Literal["string", "numeric", "date", "bool", "binary", "ip", "arn", "null"]
_COMPARE: dict[str, Callable[[float, float], bool]] = {
    "equals": operator.eq,
    "lessthan": operator.lt,
    "lessthanequals": operator.le,
    "greaterthan": operator.gt,
    "greaterthanequals": operator.ge,
}
_STRING: dict[str, tuple[Mode, bool, bool]] = {  # name → (mode, ignore case, negated)
    "stringequals": ("exact", False, False),
    "stringnotequals": ("exact", False, True),
    "stringequalsignorecase": ("exact", True, False),
    "stringnotequalsignorecase": ("exact", True, True),
    "stringlike": ("glob", False, False),
    "stringnotlike": ("glob", False, True),
    "arnequals": ("arn", False, False),
    "arnlike": ("arn", False, False),
    "arnnotequals": ("arn", False, True),
    "arnnotlike": ("arn", False, True),
}


def _operator_table() -> dict[str, tuple[_Kind, str, bool]]:
    """Operator name (lower-cased, no ``ForAnyValue:`` prefix, no ``IfExists`` suffix) → its kind, its
    comparison and whether it is negated."""
    table: dict[str, tuple[_Kind, str, bool]] = {
        "binaryequals": ("binary", "equals", False),
        "ipaddress": ("ip", "in", False),
        "notipaddress": ("ip", "in", True),
        "null": ("null", "null", False),
        "bool": ("bool", "bool", False),
    }
    for name, (_mode, _fold, negated) in _STRING.items():
        table.setdefault(name, ("arn" if name.startswith("arn") else "string", name, negated))
    ordered: tuple[_Kind, ...] = ("numeric", "date")
    for kind in ordered:
        table[f"{kind}notequals"] = (kind, "equals", True)
        for how in _COMPARE:
            table[f"{kind}{how}"] = (kind, how, False)
    return table


_OPERATORS = _operator_table()


def _values(raw: object, where: str) -> tuple[str, ...]:
    """A condition's policy values as strings (JSON booleans and numbers as AWS reads them)."""
    items = raw if isinstance(raw, list) else [raw]
    out: list[str] = []
    for item in items:
        if isinstance(item, bool):
            out.append("true" if item else "false")
        elif isinstance(item, int | float | str):
            out.append(str(item))
        else:
            raise PolicyError(f"{where}: a condition value must be a string, number or boolean, not {item!r}")
    if not out:
        raise PolicyError(f"{where}: a condition needs at least one value")
    return tuple(out)


def _matcher(kind: _Kind, how: str, values: tuple[str, ...], variables: bool, where: str) -> _Match:
    """Whether one request value matches any of the policy's values (the operator's positive sense)."""
    if kind in ("string", "arn", "bool"):
        mode, fold, _ = _STRING[how] if kind != "bool" else ("exact", True, False)
        if kind == "bool" and any(v.lower() not in ("true", "false") and "${" not in v for v in values):
            raise PolicyError(f"{where}: Bool takes 'true' or 'false', not {values!r}")
        patterns = Patterns(values, mode=mode, variables=variables, ignore_case=fold)
        return patterns.matches
    if kind in ("numeric", "date"):
        parse = _number if kind == "numeric" else parse_date
        limits = [parse(v) for v in values]
        if any(limit is None for limit in limits):
            raise PolicyError(f"{where}: not a {'number' if kind == 'numeric' else 'date'}: {values!r}")
        compare, bounds = _COMPARE[how], [b for b in limits if b is not None]

        def ordered(value: str, _context: Context) -> bool:
            got = parse(value)
            return got is not None and any(compare(got, bound) for bound in bounds)

        return ordered
    if kind == "ip":
        try:
            networks = [ipaddress.ip_network(v, strict=False) for v in values]
        except ValueError as error:
            raise PolicyError(f"{where}: not an IP address or CIDR range: {error}") from error

        def within(value: str, _context: Context) -> bool:
            address = _address(value)
            return address is not None and any(address in net for net in networks)

        return within
    wanted = [_bytes(v) for v in values]
    if any(w is None for w in wanted):
        raise PolicyError(f"{where}: BinaryEquals takes base64 values, not {values!r}")
    return lambda value, _context: _bytes(value) in wanted


@dataclass(frozen=True, eq=False)
class Clause:
    """One operator applied to one key: ``{"StringLike": {"s3:prefix": ["", "home/"]}}`` is one clause."""

    operator: str  # as written in the policy
    key: str  # lower-cased
    negated: bool
    if_exists: bool
    qualifier: Literal["", "any", "all"]
    match: _Match  # one request value against the policy's values, OR-ed (positive sense)
    null: frozenset[bool] | None = None  # Null: the values given, True meaning "the key is absent"

    def holds(self, context: Context) -> bool:
        values = context.get(self.key)
        if self.null is not None:
            return (not values) in self.null
        if not values or (self.qualifier and values == ("",)):
            return self._absent()
        if self.qualifier == "all":
            return all(self.match(v, context) != self.negated for v in values)
        if self.qualifier == "any":
            return any(self.match(v, context) != self.negated for v in values)
        # Unqualified, given several request values (the runtime's choice): any value matching; for a
        # negated operator, no value matching (NOR over all of them).
        found = any(self.match(v, context) for v in values)
        return found != self.negated

    def _absent(self) -> bool:
        """A key absent from the request (or, with a set operator, empty): ``...IfExists`` holds, a set
        operator holds for ``ForAllValues`` only, otherwise a negated operator holds and others do not."""
        if self.if_exists:
            return True
        if self.qualifier:
            return self.qualifier == "all"
        return self.negated


@dataclass(frozen=True, eq=False)
class Condition:
    """A statement's ``Condition`` block: every clause must hold (AND)."""

    clauses: tuple[Clause, ...]

    @classmethod
    def parse(cls, block: object, *, variables: bool, where: str = "Condition") -> Condition:
        if not isinstance(block, Mapping) or not block:
            raise PolicyError(f"{where} must be a non-empty object of operator → {{key: value(s)}}")
        clauses: list[Clause] = []
        for written, keys in block.items():
            clauses.extend(_clauses(str(written), keys, variables=variables, where=f"{where}.{written}"))
        return cls(tuple(clauses))

    def holds(self, context: Context) -> bool:
        return all(clause.holds(context) for clause in self.clauses)


def _clauses(written: str, keys: object, *, variables: bool, where: str) -> list[Clause]:
    name = written.lower()
    qualifier: Literal["", "any", "all"] = ""
    for prefix, which in (("foranyvalue:", "any"), ("forallvalues:", "all")):
        if name.startswith(prefix):
            name, qualifier = name.removeprefix(prefix), which  # type: ignore[assignment]
    if_exists = name.endswith("ifexists") and name != "ifexists"
    name = name.removesuffix("ifexists") if if_exists else name
    if name not in _OPERATORS:
        raise PolicyError(f"{where}: unknown condition operator {written!r}")
    kind, how, negated = _OPERATORS[name]
    if kind == "null" and if_exists:
        raise PolicyError(f"{where}: IfExists cannot be added to the Null operator")
    if not isinstance(keys, Mapping) or not keys:
        raise PolicyError(f"{where} must be a non-empty object of condition key → value(s)")
    out: list[Clause] = []
    for key, raw in keys.items():
        values = _values(raw, f"{where}.{key}")
        if kind == "null":
            if any(v.lower() not in ("true", "false") for v in values):
                raise PolicyError(f"{where}.{key}: Null takes 'true' or 'false', not {values!r}")
            nulls = frozenset(v.lower() == "true" for v in values)
            out.append(Clause(written, str(key).lower(), False, False, qualifier, _never, nulls))
            continue
        takes_variables = variables and kind in ("string", "arn", "bool")
        match = _matcher(kind, how, values, takes_variables, f"{where}.{key}")
        out.append(Clause(written, str(key).lower(), negated, if_exists, qualifier, match))
    return out


def _never(_value: str, _context: Context) -> bool:
    return False
