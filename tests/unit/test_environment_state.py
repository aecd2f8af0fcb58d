"""Each local execution environment keeps its own Powertools metrics, as a process of its own does in
Lambda: one invocation's flush never emits, loses or trips over another's pending metrics."""

from __future__ import annotations

import json
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from aws_lambda_powertools.metrics.metrics import Metrics

from sluice_local.emulation.environment_state import SHARED_METRIC_STATE
from sluice_local.emulation.functions import FunctionHost, FunctionSpec

HANDLER = """\
from aws_lambda_powertools import Metrics

metrics = Metrics(namespace="Shipping", service="shipments")


def lambda_handler(event, context):
    metrics.add_metric(name=event["name"], unit="Count", value=1)
    if event.get("flush"):
        metrics.flush_metrics()
"""


@pytest.fixture(autouse=True)
def _forget_the_handlers() -> Iterator[None]:
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        if name.startswith("_sluice_fn_"):
            del sys.modules[name]


def host(folder: Path) -> FunctionHost:
    folder.mkdir(parents=True)
    (folder / "app.py").write_text(HANDLER)
    spec = FunctionSpec(
        logical_id=folder.name, name=folder.name, arn=f"arn:aws:lambda:us-east-1:1:function:{folder.name}",
        code_dir=folder, handler="app.lambda_handler", environment={}, timeout=30, memory=128,
    )  # fmt: skip
    return FunctionHost(spec)


def emitted(output: str) -> Counter[str]:
    counts: Counter[str] = Counter()
    for line in output.splitlines():
        document = json.loads(line)
        for directive in document["_aws"]["CloudWatchMetrics"]:
            for metric in directive["Metrics"]:
                value = document[metric["Name"]]
                counts[metric["Name"]] += int(sum(value) if isinstance(value, list) else value)
    return counts


def test_given_a_metric_pending_in_one_function_when_another_flushes_then_it_stays_with_its_own(
    tmp_path, capsys
):
    # Given two functions, the first with a metric added and not flushed yet
    first, second = host(tmp_path / "dispatch"), host(tmp_path / "refunds")
    first.invoke({"name": "Dispatched"})
    capsys.readouterr()

    # When the second adds one and flushes
    second.invoke({"name": "Refunded", "flush": True})

    # Then only its own metric is emitted, and the first's is still there for its own flush
    assert emitted(capsys.readouterr().out) == Counter({"Refunded": 1})
    first.invoke({"name": "Dispatched", "flush": True})
    assert emitted(capsys.readouterr().out) == Counter({"Dispatched": 2})


def test_given_invocations_of_two_functions_at_once_then_every_flush_succeeds_and_counts_add_up(
    tmp_path, capsys
):
    # Given two functions invoked from two threads at once, each adding a metric and flushing, many times
    # (with one set of metrics for the process, flushes failed and metrics were emitted twice)
    hosts = {"Dispatched": host(tmp_path / "dispatch"), "Refunded": host(tmp_path / "refunds")}
    rounds = 300
    errors: list[BaseException] = []

    def run(name: str) -> None:
        try:
            for _ in range(rounds):
                hosts[name].invoke({"name": name, "flush": True})
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(name,)) for name in hosts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    # Then no invocation failed, and each metric was emitted exactly once per invocation
    assert errors == []
    assert emitted(capsys.readouterr().out) == Counter({name: rounds for name in hosts})


def test_the_process_wide_metric_state_is_restored_after_a_cold_start(tmp_path):
    # Given the process's own Metrics state
    before = {name: vars(Metrics)[name] for name in SHARED_METRIC_STATE}

    # When a function cold-starts
    host(tmp_path / "dispatch").invoke({"name": "Dispatched"})

    # Then a Metrics made outside any environment still gets the process's state
    assert {name: vars(Metrics)[name] for name in SHARED_METRIC_STATE} == before
    assert all(vars(Metrics)[name] is before[name] for name in SHARED_METRIC_STATE)
