"""A team's own tests, written with sluice_local.testing only: a fresh pytest session, in a folder of its
own, that asks for ``sluice_stack``, sends messages and waits for where each ended (docs/testing.md)."""

from __future__ import annotations

from pathlib import Path

from sluice_local.emulation.cloud import ROOT
from sluice_local.testing.project import copy_project, examples_only
from tests.conftest import team_pytest

CONFTEST = 'pytest_plugins = ["sluice_local.testing.plugin"]\n'
INI = """\
[pytest]
sluice_template = ../../../template.yaml
sluice_workloads =
    Orders
sluice_parameters =
    LogLevel=DEBUG
"""
TESTS = """\
def order(order_id, **extra):
    return {"order_id": order_id, "customer_id": "c-1", "amount_cents": 1200, "currency": "EUR", **extra}


def test_an_order_is_processed_and_its_second_send_is_a_duplicate(sluice_stack):
    assert sluice_stack.workloads == ["Orders"]  # sluice_workloads: the stack runs this one alone
    first = sluice_stack.send(order("kit-1"))  # so no workload= is needed
    assert sluice_stack.outcome(first).kind == "processed"
    again = sluice_stack.send(order("kit-1"), workload="Orders")
    ended = sluice_stack.outcome(again)
    assert (ended.kind, ended.message_id) == ("duplicate", again)


def test_an_order_above_the_limit_is_poison_with_its_reason(sluice_stack):
    ended = sluice_stack.outcome(sluice_stack.send(order("kit-2", amount_cents=10**9), workload="Orders"))
    assert ended.kind == "poison"
    assert "exceeds the single-order limit" in ended.reason
    assert ended.error_type == "PermanentError"


def test_a_body_that_is_not_json_is_poison(sluice_stack):
    ended = sluice_stack.outcome(sluice_stack.send("{not json", workload="Orders"))
    assert ended.kind == "poison"
    assert "not valid JSON" in ended.reason


def test_a_handler_called_directly_gets_lambdas_shapes(sluice_context):
    from sluice_local.testing import sqs_event

    event = sqs_event(order("kit-3"))
    assert event["Records"][0]["eventSource"] == "aws:sqs"
    assert sluice_context.get_remaining_time_in_millis() > 0
"""


def test_given_a_teams_own_test_session_when_it_uses_the_kit_then_its_outcomes_are_seen(
    tmp_path: Path,
) -> None:
    # Given a clone of sluice (its pyproject.toml holds sluice's own pytest settings) where a team keeps its
    # tests in a folder of their own, as docs/testing.md says: the plugin in its conftest, the template
    # (relative to the folder), its workload and a parameter in its pytest.ini, tests using sluice_stack
    shipped = examples_only((ROOT / "workloads.yaml").read_text(encoding="utf-8"))  # a clone of sluice
    project = copy_project(ROOT / "template.yaml", tmp_path / "clone", workloads=shipped).parent
    tests = project / "team" / "orders" / "tests"
    tests.mkdir(parents=True)
    (tests / "conftest.py").write_text(CONFTEST)
    (tests / "pytest.ini").write_text(INI)
    (tests / "test_orders.py").write_text(TESTS)
    # When pytest runs them from the clone's root, as the page says
    done = team_pytest(project, "team/orders/tests", timeout=360)
    # Then every outcome it waited for was seen: processed, duplicate, poison with its reason
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert "4 passed" in done.stdout, done.stdout[-3000:]
    assert f"rootdir: {tests}" in done.stdout, "the folder's pytest.ini, not the clone's pyproject.toml"
