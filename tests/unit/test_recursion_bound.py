"""Lambda's recursive loop detection never stops one of sluice's paths: the hop count of each path at
the template's maximum parameter values stays under AWS's limit (docs/observability.md, "Recursive loop
detection"), and the lineage the local runtime models behaves as AWS documents."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from samtranslator.yaml_helper import yaml_parse

from sluice_local.emulation import recursion

ROOT = Path(__file__).resolve().parents[2]
BOUNDING = ("MaxReceiveCount", "RedriveMaxAttempts", "JobMaxAttempts")
HEADER = "Root=1-6746a1b2-0123456789abcdef01234567;Parent=89abcdef01234567;Sampled=1"
CONSUMER = "arn:aws:lambda:us-east-1:123456789012:function:sluice-orders-consumer"


def maxima() -> dict[str, int]:
    """The largest value each bounding parameter of template.yaml may take (MaxValue)."""
    template: dict[str, Any] = yaml_parse((ROOT / "template.yaml").read_text(encoding="utf-8"))
    parameters = template["Parameters"]
    return {name: int(parameters[name]["MaxValue"]) for name in BOUNDING}


def test_every_bounding_parameter_has_a_maximum():
    assert maxima() == {"MaxReceiveCount": 10, "RedriveMaxAttempts": 100, "JobMaxAttempts": 1000}


@pytest.mark.parametrize("path", recursion.PATHS, ids=lambda p: p.name)
def test_no_path_reaches_the_limit_at_the_maximum_settings(path):
    counted, _ = recursion.path_counts(path, maxima())
    assert counted < recursion.LIMIT
    assert path.hops() < recursion.LIMIT


def test_the_paths_that_repeat_beyond_the_limit_are_the_ones_that_restart_their_lineage():
    # a path going round more often than the limit must start each round on a new lineage (or the
    # message's frozen first-hop header); this pins which ones rely on it
    relying = {p.name for p in recursion.PATHS if recursion.path_counts(p, maxima())[1] >= recursion.LIMIT}
    assert relying == {
        "DLQ -> redriver -> work queue",
        "redrive backoff beyond DirectSendThresholdSeconds (through the delay pipeline)",
        "job sweeper and reaper",
    }
    assert all(p.restarts for p in recursion.PATHS if p.name in relying)


def test_no_function_of_the_template_sets_recursive_loop():
    # every path stays under the limit with AWS's default (Terminate): a loop sluice did not plan for
    # is still stopped
    for template in ("template.yaml", "workloads.yaml", "stacks/delays.yaml", "stacks/jobs.yaml"):
        assert "RecursiveLoop" not in (ROOT / template).read_text(encoding="utf-8"), template


def test_the_table_in_the_observability_doc_is_the_computed_one():
    doc = (ROOT / "docs" / "observability.md").read_text(encoding="utf-8")
    for path in recursion.PATHS:
        counted, carried = recursion.path_counts(path, maxima())
        assert f"| {path.name} | {path.hops()} | {counted} | {carried} |" in doc, path.name


# --- the lineage ---------------------------------------------------------------------------------------


def test_each_invocation_on_a_chain_raises_its_functions_count_until_the_limit():
    header = HEADER
    for count in range(1, recursion.LIMIT + 1):
        verdict = recursion.admit(header, CONSUMER)
        assert (verdict.count, verdict.stopped) == (count, False)
        header = verdict.header
    stopped = recursion.admit(header, CONSUMER)
    assert (stopped.count, stopped.stopped) == (recursion.LIMIT + 1, True)
    assert not recursion.admit(header, CONSUMER, "Allow").stopped


def test_functions_are_counted_apart_and_the_rest_of_the_header_is_kept():
    other = "arn:aws:lambda:us-east-1:123456789012:function:sluice-batch-delay"
    header = recursion.admit(recursion.admit(HEADER, CONSUMER).header, other).header
    assert header.startswith(HEADER + ";Lineage=")
    assert sorted(recursion.lineage_of(header).values()) == [1, 1]


def test_the_lineage_lambda_writes_is_read():
    assert recursion.lineage_of(HEADER + ";Lineage=a87bd80c:1|68fd508a:5") == {"a87bd80c": 1, "68fd508a": 5}
    assert recursion.lineage_of(HEADER + ";Lineage=1:fe460cdd:3") == {"fe460cdd": 3}
    assert recursion.lineage_of(HEADER) == {}
    assert recursion.lineage_of(None) == {}
