"""A FIFO workload deployed locally: the examples with Orders switched to ``QueueType: fifo`` (with
``SkipGroupOnError`` or without) in workloads.yaml (docs/workloads.md "FIFO workloads", docs/consumer.md "FIFO
queues"). Per message group, the side effects happen in the order the messages were sent, a failing
message holds its own group's later messages back, and the other group flows meanwhile."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from sluice_local.app.fast import FAST
from sluice_local.app.messages import ORDERS, claim_check, order
from sluice_local.app.observer import Stack
from sluice_local.emulation.cloud import ROOT, LocalCloud
from sluice_local.testing.project import EXAMPLES, copy_project, examples_only
from tests.waiting import wait_for

FIFO_ORDERS = EXAMPLES[ORDERS] + '      QueueType: fifo\n      ContentBasedDeduplication: "true"\n'


@pytest.fixture(params=["skip-group", "stop-at-first-failure"])
def cloud(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LocalCloud]:
    """The examples with Orders a FIFO workload, with SkipGroupOnError or Lambda's default rule."""
    block = FIFO_ORDERS + ('      SkipGroupOnError: "true"\n' if request.param == "skip-group" else "")
    text = (ROOT / "workloads.yaml").read_text(encoding="utf-8")
    copy_project(ROOT / "template.yaml", tmp_path, workloads=examples_only(text, {ORDERS: block}))
    # five receives (the stack's default): the failing message is fixed long before its last one
    parameters = {**FAST, "MaxReceiveCount": "5"}
    stack = LocalCloud(
        template=tmp_path / "template.yaml", parameters=parameters, stack_name=f"fifo-{uuid.uuid4().hex[:6]}"
    )
    stack.start()
    try:
        yield stack
    finally:
        stack.stop()


def test_a_fifo_workload_keeps_each_groups_order_through_a_failure_and_other_groups_flow(
    cloud: LocalCloud, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sqs, outputs = cloud.client("sqs"), cloud.outputs
    url = outputs[f"{ORDERS}QueueUrl"]
    assert url.endswith(f"-{ORDERS}-work.fifo")
    assert sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["FifoQueue"])["Attributes"] == {
        "FifoQueue": "true"
    }
    bucket, prefix = outputs["ClaimCheckBucketName"], outputs["ClaimCheckPrefix"]
    seen = Stack(cloud.endpoint, outputs, tmp_path / "no-log", cloud.region)
    # Given two groups sent interleaved, the second message of group a pointing at a payload not there
    # yet (the consumer fails it as transient, and retries it after its backoff)
    sent = {"a": ["fa-1", "fa-2", "fa-3"], "b": ["fb-1", "fb-2", "fb-3"]}
    for a, b in zip(sent["a"], sent["b"], strict=True):
        for group, order_id in (("a", a), ("b", b)):
            body = (
                claim_check(bucket, f"{prefix}{order_id}")
                if order_id == "fa-2"
                else json.dumps(order(order_id))
            )
            sqs.send_message(QueueUrl=url, MessageBody=body, MessageGroupId=group)

    def retried() -> bool:
        return any(
            r.getMessage() == "record failed; will be retried" and r.name.endswith(ORDERS)
            for r in caplog.records
        )

    # When group a's second message has failed, group b is done while group a's third waits behind it
    # (without SkipGroupOnError, group b's records after the failure in a batch are handed back and come
    # again in the next: SQS returns none of group a while its failed message is in flight)
    wait_for(lambda: retried() and len(seen.side_effects("fb-")) == 3, "group b done, fa-2 failed once")
    assert {e.order_id for e in seen.side_effects("fa-")} == {"fa-1"}
    # ... and once the payload is there, group a finishes
    cloud.client("s3").put_object(Bucket=bucket, Key=f"{prefix}fa-2", Body=json.dumps(order("fa-2")).encode())
    wait_for(lambda: len(seen.side_effects("fa-")) == 3, "group a done after its failure", timeout=120)
    # Then per group, the charges happened in the order sent, each once
    for group, order_ids in sent.items():
        charged = sorted(seen.side_effects(f"f{group}-"), key=lambda e: e.at)
        assert [e.order_id for e in charged] == order_ids, group
    assert set(seen.charges("f").values()) == {1}
