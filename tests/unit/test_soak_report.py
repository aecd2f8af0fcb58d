"""The soak's report per workload (``sluice_local.soak.summary``, ``.result``, ``.checker``): each workload
on its own line, a failure of one workload fails the run whatever the others did, and the shared ledger,
poison queue and fault sites attributed to the right workload."""

from __future__ import annotations

import json
import uuid

from sluice_local.app.messages import ORDERS, REFUNDS
from sluice_local.soak.checker import _namespace, _workload_of_body, effect_key
from sluice_local.soak.result import JOBS, SeedResult, Tally
from sluice_local.soak.summary import NAMED_POINTS, Summary


def seed(n: int, **tallies: Tally) -> str:
    """A worker's line for seed ``n`` with these tallies."""
    return SeedResult(
        seed=n, mode="lambda", workloads=dict(tallies), faults={}, faults_at={}, seconds=1.0
    ).to_json()


def clean(sent: int = 8, poison: int = 1) -> Tally:
    return Tally(sent=sent, processed=sent - poison, poison=poison)


def report(summary: Summary) -> list[str]:
    return summary.lines(rates="test")


def test_given_two_clean_workloads_then_each_has_its_balanced_line_and_the_run_passes():
    summary = Summary(expected=[0, 1], workloads="queues")
    summary.add(seed(0, Orders=clean(), Refunds=clean(4)))
    summary.add(seed(1, Orders=clean(), Refunds=clean(4, poison=2)))
    lines = report(summary)
    clean_end = ", lost 0, duplicated 0, unexpected 0, misrouted 0 ✓"
    assert "Orders: sent 16 = processed 14 + poison 2 + dead-lettered 0" + clean_end in lines
    assert "Refunds: sent 8 = processed 5 + poison 3 + dead-lettered 0" + clean_end in lines
    assert "messages: 16 orders, 8 refunds, 0 jobs" in lines
    assert summary.ok


def test_given_a_refund_duplicated_then_only_the_refunds_line_fails_and_so_does_the_run():
    summary = Summary(expected=[0], workloads="queues")
    summary.add(
        seed(0, Orders=clean(), Refunds=Tally(sent=4, processed=4, duplicated=["refund:s0-1#repay x2"]))
    )
    lines = report(summary)
    [orders] = [line for line in lines if line.startswith("Orders:")]
    [refunds] = [line for line in lines if line.startswith("Refunds:")]
    assert orders.endswith("✓")
    assert refunds.endswith("✗")
    assert "duplicated 1" in refunds
    assert "lost = 0, duplicated side effects = 1, unexpected = 0, misrouted = 0" in lines
    assert any(line.startswith("FAILED seed 0") and "Refunds: " in line for line in lines)
    assert not summary.ok


def test_given_a_workload_whose_line_does_not_balance_then_the_run_fails():
    summary = Summary(expected=[0], workloads="queues")
    summary.add(seed(0, Orders=clean(), Refunds=Tally(sent=4, processed=2, poison=1)))
    assert not summary.ok
    assert next(line for line in report(summary) if line.startswith("Refunds:")).endswith("✗")


def test_given_a_workload_asked_for_that_sent_nothing_then_the_run_fails():
    summary = Summary(expected=[0], workloads="queues")
    summary.add(seed(0, Orders=clean()))
    assert "FAILED: the Refunds workload sent nothing" in report(summary)
    assert not summary.ok


def test_given_only_the_orders_then_no_refunds_line_is_asked_for():
    summary = Summary(expected=[0], workloads="orders")
    summary.add(seed(0, Orders=clean()))
    assert not [line for line in report(summary) if line.startswith(("Refunds:", "Jobs:"))]
    assert summary.ok


def test_given_an_unexpected_refund_in_an_orders_run_then_its_own_line_shows_it():
    summary = Summary(expected=[0], workloads="orders")
    summary.add(seed(0, Orders=clean(), Refunds=Tally(unexpected=["s9-9"])))
    lines = report(summary)
    assert next(line for line in lines if line.startswith("Refunds:")).endswith("unexpected 1, misrouted 0 ✗")
    assert not summary.ok


def test_a_result_reads_back_as_it_was_written():
    line = seed(3, Orders=clean(), Refunds=Tally(sent=1, lost=["refund s3-0"]))
    result = SeedResult.of(json.loads(line))
    assert result.workloads[REFUNDS].lost == ["refund s3-0"]
    assert not result.ok
    assert "Refunds: lost ['refund s3-0']" in result.failures()


def test_the_ledger_keys_are_read_in_their_workloads_namespace():
    job = str(uuid.uuid4())
    assert _namespace(effect_key(REFUNDS, "s1-2", "repay")) == (REFUNDS, "s1-2")
    assert _namespace(effect_key(ORDERS, "s1-2", "charge")) == (ORDERS, "s1-2")
    assert _namespace(f"{job}#charge") == (JOBS, job)


def test_a_body_names_its_workload_and_a_pointer_none():
    assert _workload_of_body(json.dumps({"refund_id": "s1-0", "order_id": "s1-0"})) == REFUNDS
    assert _workload_of_body(json.dumps({"order_id": "s1-0", "customer_id": "c"})) == ORDERS
    assert _workload_of_body(json.dumps({"__type": "pointer", "s3_key": "k"})) == ""
    assert _workload_of_body("not json") == ""


def test_the_named_fault_points_count_the_refunds_functions_too():
    points = dict(NAMED_POINTS)
    died = points["consumer died before a guard's commit"]
    assert died(f"{REFUNDS}ConsumerFunction UpdateItem crash-mid-invocation (died before it)")
    assert died(f"{ORDERS}ConsumerFunction UpdateItem crash-mid-invocation (died before it)")
    assert points["redriver died between its send and its delete"](
        f"{REFUNDS}RedriverFunction DeleteMessageBatch crash-mid-invocation (died before it)"
    )
