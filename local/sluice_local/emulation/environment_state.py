"""Each execution environment's own Powertools metric state.

In Lambda an execution environment is a process of its own; here it is a thread of one process (see
:mod:`sluice_local.emulation.functions`). Powertools keeps the metrics not yet flushed in dicts that
every ``Metrics`` instance of a process shares (class attributes), so two invocations running at once —
another function's, or another environment of the same function — would add to, flush and clear one
set: metrics emitted twice or lost, and a flush failing with "dictionary changed size during iteration"
or "Must contain at least one metric", which fails the invocation and sends its whole batch back (seen:
four threads flushing 3,000 metrics each, 21 flushes failed and 57 metrics were emitted twice; under
load, delayed orders late and a battery row's metric missing). :func:`own_metric_state` gives the
instances an environment creates at its cold start dicts of their own, as a process of its own would.

``Metrics()`` made later, inside an invocation, still shares the process's dicts (not a pattern sluice or
its examples use); the functions' Powertools ``Logger`` state is shared too (docs/local.md).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["SHARED_METRIC_STATE", "own_metric_state"]

SHARED_METRIC_STATE = ("_metrics", "_dimensions", "_metadata", "_default_dimensions")
"""The class attributes of Powertools' ``Metrics`` that its instances take as theirs at construction."""


@contextmanager
def own_metric_state() -> Iterator[None]:
    """While a cold start imports the handler, every ``Metrics()`` made gets fresh dicts, shared by that
    environment's instances only. The class attributes are swapped: callers hold the cold-start lock."""
    from aws_lambda_powertools.metrics.metrics import Metrics  # noqa: PLC0415 - the functions' dependency

    saved = {name: vars(Metrics)[name] for name in SHARED_METRIC_STATE}  # KeyError if Powertools changed
    for name in SHARED_METRIC_STATE:
        setattr(Metrics, name, {})
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(Metrics, name, value)
