"""CloudWatch's embedded metric format (EMF), turned into metrics as CloudWatch Logs does in AWS.

In Lambda, a function's stdout goes to CloudWatch Logs, which extracts every line in the embedded metric
format into metric datapoints. Locally the functions' stdout is a file or a console, so the runtime
takes each EMF document where Powertools prints it (:func:`install_capture`: its metrics provider and
``single_metric``) and hands its datapoints to the stacks' alarms (:mod:`sluice_local.emulation.alarms`),
beside what state machines put with ``PutMetricData``. They are not stored in the embedded CloudWatch:
``GetMetricStatistics`` does not return them locally.

The document's rules, from AWS's specification of the format (read, not taken from Powertools): a JSON
object (no ``NaN`` or ``Infinity``) with a root ``_aws`` object holding a ``Timestamp`` (epoch
milliseconds) and ``CloudWatchMetrics``, a list of directives, each a ``Namespace``, ``Dimensions`` (a
list of dimension sets, each a list of at most 30 member names) and ``Metrics`` (objects with a
``Name``); every member named is a root member, a dimension's value text, a metric's value a number or
a list of numbers. A document that breaks them is not extracted (CloudWatch Logs keeps it as a log line
only): it is logged here, never raised into the function that printed it.
"""

from __future__ import annotations

import builtins
import json
import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from sluice_local.emulation.moto_adapter.attributes import Undo, replace, undo_all

log = logging.getLogger("sluice_local")

MAX_DIMENSIONS = 30
"""Dimensions in one dimension set: CloudWatch takes at most 30."""


@dataclass(frozen=True)
class Datapoint:
    namespace: str
    name: str
    dimensions: tuple[tuple[str, str], ...]
    """(name, value) pairs, sorted: CloudWatch matches a metric by its exact set of dimensions."""
    values: tuple[float, ...]
    unit: str | None


class EmfError(ValueError):
    """The document is not in the embedded metric format: nothing is extracted from it."""


def datapoints(document: Any) -> list[Datapoint]:
    """Every datapoint an EMF document carries: one per directive, dimension set and metric."""
    if not isinstance(document, dict):
        raise EmfError("not a JSON object")
    meta = document.get("_aws")
    if not isinstance(meta, dict) or not isinstance(meta.get("CloudWatchMetrics"), list):
        raise EmfError("no _aws.CloudWatchMetrics list")
    stamp = meta.get("Timestamp")
    if isinstance(stamp, bool) or not isinstance(stamp, int | float):
        raise EmfError(f"_aws.Timestamp {stamp!r} is not epoch milliseconds")
    return [point for directive in meta["CloudWatchMetrics"] for point in _directive(document, directive)]


def _directive(document: dict[str, Any], directive: Any) -> Iterator[Datapoint]:
    if not isinstance(directive, dict):
        raise EmfError(f"a directive is {type(directive).__name__}, not an object")
    namespace = directive.get("Namespace")
    if not isinstance(namespace, str) or not namespace:
        raise EmfError(f"directive namespace {namespace!r}")
    sets = directive.get("Dimensions")
    metrics = directive.get("Metrics")
    if not isinstance(sets, list) or not isinstance(metrics, list):
        raise EmfError("a directive's Dimensions and Metrics must be lists")
    for dimension_set in sets:
        dims = _dimensions(document, dimension_set)
        for metric in metrics:
            name = metric.get("Name") if isinstance(metric, dict) else None
            if not isinstance(name, str) or name not in document:
                raise EmfError(f"metric {name!r} has no root member")
            yield Datapoint(namespace, name, dims, _values(name, document[name]), metric.get("Unit"))


def _dimensions(document: dict[str, Any], names: Any) -> tuple[tuple[str, str], ...]:
    if not isinstance(names, list) or len(names) > MAX_DIMENSIONS:
        raise EmfError(f"dimension set {names!r}: a list of at most {MAX_DIMENSIONS} names")
    pairs = []
    for name in names:
        value = document.get(name) if isinstance(name, str) else None
        if not isinstance(value, str):
            raise EmfError(f"dimension {name!r} has no text root member")
        pairs.append((name, value))
    return tuple(sorted(pairs))


def _values(name: str, value: Any) -> tuple[float, ...]:
    values = value if isinstance(value, list) else [value]
    if not values or any(isinstance(v, bool) or not isinstance(v, int | float) for v in values):
        raise EmfError(f"metric {name}: {value!r} is not a number or a list of numbers")
    return tuple(float(v) for v in values)


class Feed:
    """The datapoints extracted in this process, handed to each subscriber (a stack's alarms) once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[int, list[Datapoint]] = {}

    def put(self, points: list[Datapoint]) -> None:
        with self._lock:
            for pending in self._pending.values():
                pending.extend(points)

    def subscribe(self) -> Subscription:
        """From now on, every datapoint put is kept for the subscription until it drains it."""
        subscription = Subscription(self)
        with self._lock:
            self._pending[id(subscription)] = []
        return subscription

    def _drain(self, subscription: Subscription) -> list[Datapoint]:
        with self._lock:
            pending = self._pending.get(id(subscription), [])
            taken = pending.copy()
            pending.clear()
        return taken

    def _close(self, subscription: Subscription) -> None:
        with self._lock:
            self._pending.pop(id(subscription), None)


class Subscription:
    def __init__(self, feed: Feed) -> None:
        self._feed = feed

    def drain(self) -> list[Datapoint]:
        """The datapoints put since the last call."""
        return self._feed._drain(self)

    def close(self) -> None:
        self._feed._close(self)


def _not_json(constant: str) -> float:
    raise EmfError(f"{constant} is not JSON")


def extract(line: str, put: Callable[[list[Datapoint]], None]) -> None:
    """Put the datapoints of ``line`` if it is an EMF document; anything else is only a log line."""
    if '"_aws"' not in line:
        return
    try:
        points = datapoints(json.loads(line, parse_constant=_not_json))
    except ValueError as exc:  # EmfError too
        log.warning("an EMF document was not extracted (%s): %.200s", exc, line)
        return
    put(points)


def _printing_modules() -> list[Any]:
    """Powertools' modules that print EMF documents: its metrics provider (``Metrics``, the cold-start
    metric) and its base module (``single_metric``)."""
    from aws_lambda_powertools.metrics import base  # noqa: PLC0415
    from aws_lambda_powertools.metrics.provider.cloudwatch_emf import cloudwatch  # noqa: PLC0415

    return [cloudwatch, base]


def install_capture(put: Callable[[list[Datapoint]], None]) -> Undo:
    """Every EMF document Powertools prints also reaches ``put``, as Lambda's log ingestion extracts it
    (the line is still printed where stdout goes)."""

    def captured(*args: Any, **kwargs: Any) -> None:
        builtins.print(*args, **kwargs)
        if len(args) == 1 and isinstance(args[0], str):
            extract(args[0], put)

    return undo_all([replace(module, "print", captured) for module in _printing_modules()])


def capture_problem() -> str | None:
    """Why :func:`install_capture` would miss documents with the installed Powertools, or None."""
    try:
        cloudwatch, base = _printing_modules()
    except ImportError as exc:
        return f"Powertools' metrics cannot be imported: {exc}"
    printers = {
        "AmazonCloudWatchEMFProvider.flush_metrics": getattr(
            getattr(cloudwatch, "AmazonCloudWatchEMFProvider", None), "flush_metrics", None
        ),
        "single_metric": getattr(base, "single_metric", None),
    }
    gone = [name for name, fn in printers.items() if fn is None or not _prints(fn)]
    return f"Powertools' {', '.join(gone)} no longer print(s) EMF documents" if gone else None


def _prints(fn: Any) -> bool:
    code = getattr(getattr(fn, "__wrapped__", fn), "__code__", None)
    return code is not None and "print" in code.co_names
