"""CloudWatch metric math, the part sluice's alarms use, evaluated on per-period series.

moto stores metric-math alarms but never evaluates them, and neither does the local runtime's alarm
emulation, so an alarm built from an expression (the work queue's time to drain and conservation, the
redrive state machine's failures with the breaker closed) would only be checked by reading it. This
evaluates such an alarm's ``Metrics`` on series a test gives, period by period, as CloudWatch does:

- a series is one value per period, ``None`` where the metric has no datapoint;
- ``+ - * /`` and comparisons (``< <= > >= ==  !=``, giving 1 or 0) work per period, a scalar on either
  side; a missing operand makes the result missing, as CloudWatch drops a timestamp one side lacks;
- ``FILL(m, v)`` fills the gaps, ``DIFF(m)`` is each value minus the one before (none for the first),
  ``PERIOD(m)`` is the period in seconds, ``IF(c, a, b)`` picks per period (a missing ``c`` gives none);
- an alarm is in ALARM when at least ``DatapointsToAlarm`` of its last ``EvaluationPeriods`` values
  breach; a missing value counts as ``TreatMissingData`` says (sluice's alarms: ``notBreaching``).
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Value = float | None
Series = list[Value]

_TOKEN = re.compile(
    r"\s*(?:(\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)|([A-Za-z_][A-Za-z0-9_]*)|(<=|>=|==|!=|[-+*/(),<>]))"
)
_COMPARE: dict[str, Callable[[float, float], bool]] = {
    "<": operator.lt, "<=": operator.le, ">": operator.gt,
    ">=": operator.ge, "==": operator.eq, "!=": operator.ne,
}  # fmt: skip
_ARITHMETIC: dict[str, Callable[[float, float], float]] = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
}  # fmt: skip
_ALARM_COMPARE = {
    "GreaterThanThreshold": operator.gt,
    "GreaterThanOrEqualToThreshold": operator.ge,
    "LessThanThreshold": operator.lt,
    "LessThanOrEqualToThreshold": operator.le,
}


class MetricMathError(ValueError):
    """An expression outside the supported part of metric math, or one naming an unknown id."""


def _tokens(expression: str) -> list[str]:
    out, at = [], 0
    expression = expression.strip()
    while at < len(expression):
        match = _TOKEN.match(expression, at)
        if match is None or match.end() == at:
            raise MetricMathError(f"cannot read {expression[at:]!r} in {expression!r}")
        out.append(match.group(match.lastindex or 0))
        at = match.end()
    return out


def _binary(op: Callable[[float, float], Any], left: Series, right: Series) -> Series:
    out: Series = []
    for a, b in zip(left, right, strict=True):
        if a is None or b is None:
            out.append(None)
        elif op is operator.truediv and b == 0:
            out.append(None)  # CloudWatch: no datapoint where a division is by zero
        else:
            out.append(float(op(a, b)))
    return out


@dataclass
class _Parser:
    tokens: list[str]
    series: Mapping[str, Series]
    periods: int
    period_seconds: float
    at: int = 0

    def parse(self) -> Series:
        value = self._comparison()
        if self.at != len(self.tokens):
            raise MetricMathError(f"unexpected {self.tokens[self.at]!r}")
        return value

    def _peek(self) -> str | None:
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def _take(self, want: str | None = None) -> str:
        token = self._peek()
        if token is None or (want is not None and token != want):
            raise MetricMathError(f"expected {want or 'more'}, found {token!r}")
        self.at += 1
        return token

    def _comparison(self) -> Series:
        left = self._sum()
        while self._peek() in _COMPARE:
            op = _COMPARE[self._take()]
            left = _binary(op, left, self._sum())
        return left

    def _sum(self) -> Series:
        left = self._product()
        while self._peek() in ("+", "-"):
            op = _ARITHMETIC[self._take()]
            left = _binary(op, left, self._product())
        return left

    def _product(self) -> Series:
        left = self._unary()
        while self._peek() in ("*", "/"):
            op = _ARITHMETIC[self._take()]
            left = _binary(op, left, self._unary())
        return left

    def _unary(self) -> Series:
        if self._peek() == "-":
            self._take()
            return [None if v is None else -v for v in self._unary()]
        return self._primary()

    def _primary(self) -> Series:
        token = self._take()
        if token == "(":
            value = self._comparison()
            self._take(")")
            return value
        if token[0].isdigit():
            return [float(token)] * self.periods
        if self._peek() == "(":
            return self._call(token.upper())
        if token not in self.series:
            raise MetricMathError(f"unknown id {token!r}")
        return list(self.series[token])

    def _arguments(self) -> list[Series]:
        self._take("(")
        args = [self._comparison()]
        while self._peek() == ",":
            self._take(",")
            args.append(self._comparison())
        self._take(")")
        return args

    def _call(self, name: str) -> Series:
        args = self._arguments()
        if name == "FILL" and len(args) == 2:
            return [f if v is None else v for v, f in zip(args[0], args[1], strict=True)]
        if name == "DIFF" and len(args) == 1:
            values = args[0]
            return [None, *_binary(operator.sub, values[1:], values[:-1])][: len(values)]
        if name == "PERIOD" and len(args) == 1:
            return [self.period_seconds] * self.periods
        if name == "IF" and len(args) == 3:
            return [
                None if c is None else (a if c else b)
                for c, a, b in zip(args[0], args[1], args[2], strict=True)
            ]
        raise MetricMathError(f"unsupported function {name} with {len(args)} argument(s)")


def evaluate(
    metrics: Sequence[Mapping[str, Any]], data: Mapping[str, Series], *, period_seconds: float = 300
) -> Series:
    """The series of the query an alarm returns (``ReturnData: true``), given the series of its
    ``MetricStat`` ids; expressions are evaluated in order, each may use the ids before it."""
    periods = {len(v) for v in data.values()}
    if len(periods) != 1:
        raise MetricMathError("every series needs the same number of periods")
    [count] = periods
    series: dict[str, Series] = {}
    returned = None
    for query in metrics:
        qid = str(query["Id"])
        if "MetricStat" in query:
            if qid not in data:
                raise MetricMathError(f"no series given for {qid}")
            series[qid] = list(data[qid])
        else:
            parser = _Parser(_tokens(str(query["Expression"])), series, count, period_seconds)
            series[qid] = parser.parse()
        if query.get("ReturnData", True):
            returned = qid
    if returned is None:
        raise MetricMathError("no query returns data")
    return series[returned]


def alarm_state(values: Series, alarm: Mapping[str, Any]) -> str:
    """``ALARM`` or ``OK`` for the last ``EvaluationPeriods`` values of an alarm's returned series."""
    periods = int(alarm["EvaluationPeriods"])
    needed = int(alarm.get("DatapointsToAlarm", periods))
    compare = _ALARM_COMPARE[str(alarm["ComparisonOperator"])]
    threshold = float(alarm["Threshold"])
    missing = str(alarm.get("TreatMissingData", "missing"))
    breaching = 0
    for value in values[-periods:]:
        if value is None:
            breaching += missing == "breaching"
        else:
            breaching += bool(compare(value, threshold))
    return "ALARM" if breaching >= needed else "OK"


__all__ = ["MetricMathError", "Series", "alarm_state", "evaluate"]
