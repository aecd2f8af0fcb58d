"""Concurrent deletes and sends on one moto queue neither resurrect a deleted message nor lose a sent
one (moto_adapter.sqs_lock; every test runs with it: tests/conftest.py)."""

from __future__ import annotations

import threading
from typing import Any

import boto3
from moto import mock_aws

ROUNDS = 400


@mock_aws
def test_given_deletes_and_sends_at_once_then_exactly_the_undeleted_messages_remain() -> None:
    # Given a queue holding ROUNDS received messages
    sqs = boto3.client("sqs", region_name="us-east-1")
    url = sqs.create_queue(QueueName="busy")["QueueUrl"]
    for start in range(0, ROUNDS, 10):
        entries: list[Any] = [{"Id": str(i), "MessageBody": f"old-{i}"} for i in range(start, start + 10)]
        sqs.send_message_batch(QueueUrl=url, Entries=entries)
    handles: list[str] = []
    while len(handles) < ROUNDS:
        got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=600)
        handles += [m["ReceiptHandle"] for m in got.get("Messages", [])]

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
    attributes = sqs.get_queue_attributes(
        QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    )["Attributes"]
    assert int(attributes["ApproximateNumberOfMessagesNotVisible"]) == 0
    assert int(attributes["ApproximateNumberOfMessages"]) == ROUNDS // 2
