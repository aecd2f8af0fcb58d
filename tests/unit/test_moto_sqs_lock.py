"""Concurrent deletes, sends and receives on one moto queue neither resurrect a deleted message nor lose
a sent or moved one (moto_adapter.sqs_lock; every test runs with it: tests/conftest.py). Without the
locks the first test fails in most runs; the second holds the invariant the receive's lock keeps, a race
it does not reliably bring about."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

ROUNDS = 200


@pytest.fixture(autouse=True)
def _switch_threads_often() -> Iterator[None]:
    """Threads switch every 10 µs instead of 5 ms: the interleavings the locks rule out come up often
    (without the locks, these tests failed in most runs)."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(before)


def counts(sqs: Any, url: str) -> tuple[int, int]:
    attributes = sqs.get_queue_attributes(
        QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    )["Attributes"]
    return int(attributes["ApproximateNumberOfMessages"]), int(
        attributes["ApproximateNumberOfMessagesNotVisible"]
    )


def send_many(sqs: Any, url: str, count: int) -> None:
    for start in range(0, count, 10):
        entries: list[Any] = [{"Id": str(i), "MessageBody": f"m-{i}"} for i in range(start, start + 10)]
        sqs.send_message_batch(QueueUrl=url, Entries=entries)


def receive_each_once(sqs: Any, url: str, count: int, visibility: int) -> dict[str, str]:
    """Message id → receipt handle of ``count`` messages, each received once."""
    handles: dict[str, str] = {}
    while len(handles) < count:
        got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=visibility)
        handles |= {m["MessageId"]: m["ReceiptHandle"] for m in got.get("Messages", [])}
    return handles


def every_id(sqs: Any, url: str) -> set[str]:
    found: set[str] = set()
    while got := sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=600).get(
        "Messages"
    ):
        found |= {m["MessageId"] for m in got}
    return found


@mock_aws
def test_given_deletes_and_sends_at_once_then_exactly_the_undeleted_messages_remain() -> None:
    # Given a queue holding ROUNDS received messages
    sqs = boto3.client("sqs", region_name="us-east-1")
    url = sqs.create_queue(QueueName="busy")["QueueUrl"]
    send_many(sqs, url, ROUNDS)
    handles = list(receive_each_once(sqs, url, ROUNDS, 600).values())

    # When four threads delete them while two others send new ones
    def delete(part: list[str]) -> None:
        for handle in part:
            sqs.delete_message(QueueUrl=url, ReceiptHandle=handle)

    def send(tag: str) -> None:
        for i in range(ROUNDS // 4):
            sqs.send_message(QueueUrl=url, MessageBody=f"{tag}-{i}")

    threads = [threading.Thread(target=delete, args=(handles[i::4],)) for i in range(4)]
    threads += [threading.Thread(target=send, args=(tag,)) for tag in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    # Then no deleted message is back (in flight) and every new one is there
    assert counts(sqs, url) == (ROUNDS // 2, 0)


@mock_aws
def test_given_deletes_beside_receives_that_dead_letter_then_every_message_is_in_exactly_one_place() -> None:
    # Given ROUNDS messages received once each, on a queue whose redrive policy moves a message on its
    # next receive (maxReceiveCount 1), and the receipt handles of half of them
    sqs = boto3.client("sqs", region_name="us-east-1")
    dlq = sqs.create_queue(QueueName="moved-dlq")["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    policy = json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 1})
    url = sqs.create_queue(QueueName="moving", Attributes={"RedrivePolicy": policy})["QueueUrl"]
    send_many(sqs, url, ROUNDS)
    handles = receive_each_once(sqs, url, ROUNDS, 0)
    doomed = sorted(handles)[: ROUNDS // 2]

    # When two threads delete those while two others receive (each receive moves what it finds)
    deleted: set[str] = set()

    def delete(part: list[str]) -> None:
        for message_id in part:
            try:
                sqs.delete_message(QueueUrl=url, ReceiptHandle=handles[message_id])
                deleted.add(message_id)
            except sqs.exceptions.ReceiptHandleIsInvalid:
                pass  # moved to the DLQ before its delete: it is there

    stop = threading.Event()

    def receive() -> None:
        while not stop.is_set():
            sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)

    receivers = [threading.Thread(target=receive) for _ in range(2)]
    deleters = [threading.Thread(target=delete, args=(doomed[i::2],)) for i in range(2)]
    for thread in receivers + deleters:
        thread.start()
    for thread in deleters:
        thread.join()
    while counts(sqs, url)[0]:  # what is still visible is moved by the next receives
        sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)
    stop.set()
    for thread in receivers:
        thread.join()

    # Then the source holds nothing, and each message is either deleted or in the DLQ, never both
    source = sqs.get_queue_attributes(
        QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    )["Attributes"]
    assert (source["ApproximateNumberOfMessages"], source["ApproximateNumberOfMessagesNotVisible"]) == (
        "0",
        "0",
    )
    moved: set[str] = set()
    while got := sqs.receive_message(QueueUrl=dlq, MaxNumberOfMessages=10, VisibilityTimeout=600).get(
        "Messages"
    ):
        moved |= {m["MessageId"] for m in got}
    assert moved.isdisjoint(deleted)
    assert moved | deleted == set(handles)
