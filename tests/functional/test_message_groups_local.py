"""The local runtime's message-group fidelity (sluice_local.emulation.moto_adapter.message_groups), on
in-process moto: a standard queue's group id delivered, FIFO's 5-minute deduplication window, and the
fair-queue order that serves a quiet tenant while a noisy tenant's backlog drains. The clock is injected:
nothing sleeps."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import pytest
from moto import mock_aws

from sluice_local.emulation import moto_adapter
from sluice_local.emulation.moto_adapter.message_groups import (
    DEDUPLICATION_WINDOW_SECONDS,
    NOISY_MIN_DELIVERIES,
    MessageGroups,
)
from sluice_local.emulation.sqs_events import receive_event

REGION = "us-east-1"
START = 1_800_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> float:
        return self.now


@dataclass
class Sqs:
    client: Any
    clock: Clock
    groups: MessageGroups

    def queue(self, name: str, **attributes: str) -> str:
        return str(self.client.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"])

    def receive(self, url: str, count: int = 10) -> list[dict[str, Any]]:
        return list(
            self.client.receive_message(
                QueueUrl=url,
                MaxNumberOfMessages=count,
                MessageSystemAttributeNames=["All"],
                WaitTimeSeconds=0,
            ).get("Messages", [])
        )

    def delete(self, url: str, messages: list[dict[str, Any]]) -> None:
        for m in messages:
            self.client.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])


@pytest.fixture
def sqs() -> Iterator[Sqs]:
    with mock_aws():
        clock = Clock()
        groups, undo = moto_adapter.install_message_groups(MessageGroups(clock))
        try:
            yield Sqs(boto3.client("sqs", region_name=REGION), clock, groups)
        finally:
            undo()


# --- a standard queue's group id ------------------------------------------------------------------


def test_given_a_standard_queue_message_with_a_group_when_received_then_receive_and_the_lambda_event_say_it(
    sqs,
):
    url = sqs.queue("tenants")
    arn = sqs.client.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    sqs.client.send_message(QueueUrl=url, MessageBody="a", MessageGroupId="tenant-1")
    event = receive_event(sqs.client, url, arn, 1)  # what the local runtime's pollers hand a function
    [record] = event["Records"]
    assert record["attributes"]["MessageGroupId"] == "tenant-1"
    sqs.client.change_message_visibility(
        QueueUrl=url, ReceiptHandle=record["receiptHandle"], VisibilityTimeout=0
    )
    [message] = sqs.receive(url)
    assert message["Attributes"]["MessageGroupId"] == "tenant-1"


# --- FIFO deduplication window --------------------------------------------------------------------


def test_given_a_deleted_fifo_message_when_its_dedup_id_comes_again_within_5_minutes_then_it_is_dropped(
    sqs,
):
    url = sqs.queue("orders.fifo", FifoQueue="true")
    sqs.client.send_message(
        QueueUrl=url, MessageBody="first", MessageGroupId="g", MessageDeduplicationId="d-1"
    )
    first = sqs.receive(url)
    assert [m["Body"] for m in first] == ["first"]
    sqs.delete(url, first)  # moto alone forgets the id here

    sqs.clock.now = START + DEDUPLICATION_WINDOW_SECONDS - 1  # inside the window of the FIRST send
    sqs.client.send_message(
        QueueUrl=url, MessageBody="repeat", MessageGroupId="g", MessageDeduplicationId="d-1"
    )
    assert sqs.receive(url) == []  # accepted, never delivered

    sqs.clock.now = START + DEDUPLICATION_WINDOW_SECONDS  # the window runs from the first send
    sqs.client.send_message(
        QueueUrl=url, MessageBody="later", MessageGroupId="g", MessageDeduplicationId="d-1"
    )
    assert [m["Body"] for m in sqs.receive(url)] == ["later"]


def test_given_content_based_deduplication_when_the_same_body_comes_again_then_the_window_applies_to_it(sqs):
    url = sqs.queue("events.fifo", FifoQueue="true", ContentBasedDeduplication="true")
    sqs.client.send_message(QueueUrl=url, MessageBody="same", MessageGroupId="g")
    sqs.delete(url, sqs.receive(url))
    sqs.client.send_message(QueueUrl=url, MessageBody="same", MessageGroupId="g")
    sqs.client.send_message(QueueUrl=url, MessageBody="other", MessageGroupId="g")
    assert [m["Body"] for m in sqs.receive(url)] == ["other"]


# --- fair queues ----------------------------------------------------------------------------------


def _run(
    sqs: Sqs, *, fair: bool, steps: int = 5, noisy_rate: int = 100, capacity: int = 50
) -> dict[str, Any]:
    """Each step (1 s): the noisy tenant sends ``noisy_rate`` messages, the quiet one 1 (a hundredth); the
    consumers take ``capacity`` messages (10 per receive) and delete them. Then the backlog drains."""
    url = sqs.queue(f"shared-{fair}")
    sent_at: dict[str, int] = {}
    quiet_waits: list[int] = []
    backlog_when_quiet_served: list[int] = []
    noisy_left = peak = 0
    step = 0
    while step < steps or noisy_left or len(quiet_waits) < steps:
        if step < steps:
            for start in range(0, noisy_rate, 10):
                entries = [
                    {"Id": str(i), "MessageBody": f"n-{step}-{i}", "MessageGroupId": "noisy"}
                    for i in range(start, min(noisy_rate, start + 10))
                ]
                sqs.client.send_message_batch(QueueUrl=url, Entries=entries)
            body = sqs.client.send_message(QueueUrl=url, MessageBody=f"q-{step}", MessageGroupId="quiet")
            sent_at[body["MessageId"]] = step
            noisy_left += noisy_rate
            peak = max(peak, noisy_left)
        for _ in range(capacity // 10):
            got = sqs.receive(url)
            for m in got:
                if m["Attributes"]["MessageGroupId"] == "quiet":
                    quiet_waits.append(step - sent_at[m["MessageId"]])
                    backlog_when_quiet_served.append(noisy_left)
                else:
                    noisy_left -= 1
            sqs.delete(url, got)
        step += 1
        sqs.clock.now = START + step
        if not fair and step > 10 * steps:  # plain moto serves oldest first: bounded, whatever happens
            break
    return {
        "fair": fair,
        "quiet_max_wait_steps": max(quiet_waits),
        "quiet_served": len(quiet_waits),
        "drain_steps": step,
        "noisy_backlog_peak": peak,
        "min_backlog_when_quiet_served": min(backlog_when_quiet_served),
        "noisy_now": sorted(sqs.groups.noisy(_arn(sqs, url))),
    }


def _arn(sqs: Sqs, url: str) -> str:
    return str(
        sqs.client.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    )


def test_given_a_noisy_tenant_at_100x_a_quiet_one_when_consumed_then_the_quiet_one_is_served_in_the_backlog(
    sqs, monkeypatch
):
    # Given one tenant sending 100 messages a second and another 1, consumers taking 50 a second
    fair = _run(sqs, fair=True)
    print(f"fair queue emulation: {fair}")
    # Then every quiet message is delivered in the second it was sent, while a noisy backlog waits
    assert fair["quiet_served"] == 5
    assert fair["quiet_max_wait_steps"] == 0
    assert fair["min_backlog_when_quiet_served"] > NOISY_MIN_DELIVERIES
    assert fair["noisy_backlog_peak"] >= 250
    assert fair["drain_steps"] >= 10  # the noisy backlog (500 messages at 50 a second) still drains

    # ... where without the emulation (moto's order: oldest first) the quiet tenant waits behind it
    monkeypatch.setattr(sqs.groups, "delivered", lambda *_: None)  # nobody is ever flagged noisy
    plain = _run(sqs, fair=False)
    print(f"without it (moto's order): {plain}")
    assert plain["quiet_max_wait_steps"] >= 2
