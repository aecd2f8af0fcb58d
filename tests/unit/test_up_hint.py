"""What ``python -m sluice_local up`` says once the stack runs: each workload's queue, and how to send to
one and use the operator CLI on it (a team's stack without the example's workloads too)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from sluice_local.__main__ import _send_an_order


def cloud(outputs: dict[str, str]) -> Any:
    return SimpleNamespace(endpoint="http://127.0.0.1:4566", stack_name="sluice-local", outputs=outputs)


def test_given_the_examples_stack_then_each_workloads_queue_is_listed_and_the_cli_names_one() -> None:
    said = _send_an_order(
        cloud(
            {
                "WorkloadNames": "Orders,Refunds",
                "OrdersQueueUrl": "http://q/orders",
                "RefundsQueueUrl": "http://q/r",
            }
        )
    )
    assert "  Orders: http://q/orders" in said
    assert "  Refunds: http://q/r" in said
    assert '--queue-url http://q/orders --message-body \'{"order_id":"o-1"' in said
    # the CLI where `make venv` installs it; the poison queue is every workload's, a DLQ one workload's
    assert ".venv/bin/sluice --stack-name sluice-local poison list" in said
    assert ".venv/bin/sluice --stack-name sluice-local --workload Orders dlq stats" in said


def test_given_a_teams_stack_of_one_workload_then_its_queue_is_the_target_and_no_workload_is_needed() -> None:
    said = _send_an_order(cloud({"WorkloadNames": "Shipments", "ShipmentsQueueUrl": "http://q/s"}))
    assert "--queue-url http://q/s --message-body '<your body>'" in said
    assert ".venv/bin/sluice --stack-name sluice-local poison list" in said
    assert ".venv/bin/sluice --stack-name sluice-local dlq stats" in said
    assert "None" not in said


def test_given_a_template_that_is_not_a_sluice_stack_then_its_queues_are_listed_and_no_sluice_command() -> (
    None
):
    # Given a team's own template (docs/library.md): no workloads, its own outputs
    said = _send_an_order(
        cloud({"HooksQueueUrl": "http://q/hooks", "HooksDeadLetterQueueUrl": "http://q/dlq"})
    )
    # Then its queues are named, the send goes to one of them, and no sluice command is suggested (the
    # operator CLI reads a sluice stack's outputs, which this one has not)
    assert "  HooksQueueUrl: http://q/hooks" in said
    assert "  HooksDeadLetterQueueUrl: http://q/dlq" in said
    assert "--queue-url http://q/" in said
    assert "sluice" not in said
    assert "None" not in said
