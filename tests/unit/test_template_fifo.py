"""A FIFO workload (workloads.yaml's QueueType: fifo, docs/workloads.md "FIFO workloads"): its queue and
its DLQ are FIFO and named .fifo, its event source has no batching window and at most 10 records, its
consumer runs records one at a time; a standard workload keeps exactly what it had."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.test_template_workload_settings import WORKLOADS, expanded, with_shipments

FIFO_BLOCK = """    Shipments:
      Code: examples/orders/
      KeyPath: order_id
      QueueType: fifo
      ContentBasedDeduplication: "true"
      SkipGroupOnError: "true"
"""
STANDARD_BLOCK = """    Shipments:
      Code: examples/orders/
      KeyPath: order_id
"""


@pytest.fixture(scope="module")
def fifo() -> dict[str, Any]:
    return expanded(with_shipments(WORKLOADS.read_text(encoding="utf-8"), FIFO_BLOCK))


@pytest.fixture(scope="module")
def standard() -> dict[str, Any]:
    return expanded(with_shipments(WORKLOADS.read_text(encoding="utf-8"), STANDARD_BLOCK))


def _name(value: dict[str, Any]) -> str:
    """An ``Fn::Sub [text, {Var: value}]`` with its variables put in (the stack's name left as it is)."""
    text, variables = value["Fn::Sub"]
    for key, val in variables.items():
        text = text.replace("${" + key + "}", val)
    return str(text)


def test_given_a_fifo_workload_then_its_queue_and_dlq_are_fifo_and_named_dot_fifo(
    fifo: dict[str, Any],
) -> None:
    queue = fifo["ShipmentsQueue"]["Properties"]
    dlq = fifo["ShipmentsDeadLetterQueue"]["Properties"]
    assert _name(queue["QueueName"]) == "${StackName}-Shipments-work.fifo"
    assert (queue["FifoQueue"], queue["ContentBasedDeduplication"]) == (True, "true")
    assert _name(dlq["QueueName"]) == "${StackName}-Shipments-dlq.fifo"
    assert dlq["FifoQueue"] is True  # SQS: a FIFO queue's dead-letter queue is FIFO
    assert "ContentBasedDeduplication" not in dlq
    [source_arn] = dlq["RedriveAllowPolicy"]["sourceQueueArns"]
    assert _name(source_arn).endswith(":${StackName}-Shipments-work.fifo")


def test_given_a_fifo_workload_then_its_event_source_has_no_window_and_ten_records_at_most(
    fifo: dict[str, Any],
) -> None:
    source = fifo["ShipmentsQueueSource"]["Properties"]
    assert "MaximumBatchingWindowInSeconds" not in source  # Lambda supports none on a FIFO queue
    assert source["BatchSize"] == 10  # not the stack's BatchSize (up to 10000): Lambda's most for FIFO
    assert source["FunctionResponseTypes"] == ["ReportBatchItemFailures"]


def test_given_a_fifo_workload_then_its_consumer_runs_in_order_and_knows_its_queue(
    fifo: dict[str, Any],
) -> None:
    variables = fifo["ShipmentsConsumerFunction"]["Properties"]["Environment"]["Variables"]
    assert variables["SLUICE_CONCURRENCY"] == 1
    assert variables["SLUICE_FIFO_SKIP_GROUP_ON_ERROR"] == "true"
    assert _name(variables["SLUICE_SOURCE_QUEUE_URL"]).endswith(":${StackName}-Shipments-work.fifo")
    # ... and the queue's alarms watch the .fifo queue
    assert "'Work': 'work.fifo'" in str(fifo["ShipmentsQueueAgeAlarm"]["Properties"]["Dimensions"])


def test_given_a_standard_workload_then_it_has_no_fifo_property_and_the_stacks_window(
    standard: dict[str, Any], fifo: dict[str, Any]
) -> None:
    queue, dlq = standard["ShipmentsQueue"]["Properties"], standard["ShipmentsDeadLetterQueue"]["Properties"]
    assert not {"FifoQueue", "ContentBasedDeduplication"} & (set(queue) | set(dlq))
    assert _name(queue["QueueName"]) == "${StackName}-Shipments-work"
    source = standard["ShipmentsQueueSource"]["Properties"]
    assert source["MaximumBatchingWindowInSeconds"] == {"Ref": "MaximumBatchingWindowInSeconds"}
    assert source["BatchSize"] == {"Ref": "BatchSize"}
    variables = standard["ShipmentsConsumerFunction"]["Properties"]["Environment"]["Variables"]
    assert variables["SLUICE_FIFO_SKIP_GROUP_ON_ERROR"] == "false"
    # ... and the examples' standard workloads are the same whether a FIFO workload sits beside them
    for lid in ("OrdersQueue", "OrdersDeadLetterQueue", "OrdersQueueSource", "OrdersConsumerFunction"):
        assert fifo[lid] == standard[lid], lid
