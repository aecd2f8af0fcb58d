"""A rehydrator that crashes part-way through an object: the rest is delivered, nothing is lost or repeated.

Runs the stack in-process (``LocalCloud``) so the test can reach into the warm rehydrator environment
and make SQS refuse some entries — as a throttled or briefly unavailable SQS would — for its first
calls. Everything else is the real wiring: delay queue → batch-delay → S3 + delay state machine →
rehydrator (failing, then retried by the state machine's Retry) → target queue.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from sluice.delay.schedule import send_delayed
from sluice_local.app.fast import FAST
from sluice_local.app.principals import PRODUCER
from sluice_local.app.stack import local_cloud, principals
from sluice_local.emulation.cloud import ACCOUNT

# Everything a queue holds: visible, received and not deleted, sent with a delay not yet over.
QUEUE_DEPTH = (
    "ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesNotVisible",
    "ApproximateNumberOfMessagesDelayed",
)


class RefusingSqs:
    """Refuses entries whose body contains 'flaky' (non-sender fault) in the first ``budget[0]`` batches
    that carry one (whatever object or batch the other messages arrive in). The budget is shared by
    every execution environment of the function."""

    def __init__(self, sqs: Any, budget: list[int]) -> None:
        self._sqs = sqs
        self._budget = budget

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sqs, name)

    def send_message_batch(self, QueueUrl: str, Entries: list[dict[str, Any]]) -> dict[str, Any]:  # noqa: N803
        if self._budget[0] <= 0 or not any("flaky" in e["MessageBody"] for e in Entries):
            return self._sqs.send_message_batch(QueueUrl=QueueUrl, Entries=Entries)
        self._budget[0] -= 1
        ok = [e for e in Entries if "flaky" not in e["MessageBody"]]
        sent = self._sqs.send_message_batch(QueueUrl=QueueUrl, Entries=ok) if ok else {}
        failed = [
            {"Id": e["Id"], "Code": "ServiceUnavailable", "Message": "try again", "SenderFault": False}
            for e in Entries
            if "flaky" in e["MessageBody"]
        ]
        return {"Successful": sent.get("Successful", []), "Failed": failed}


def test_a_rehydrator_crash_part_way_through_an_object_delivers_the_rest_exactly_once():
    target_arn = f"arn:aws:sqs:us-east-1:{ACCOUNT}:crash-target"
    # The smallest direct-send threshold the template takes (2 s, 1 s buckets): the messages, due in 24 s,
    # are parked unless batch delay reaches them more than 22 s late, however loaded the machine.
    params = {
        **FAST,
        "DirectSendThresholdSeconds": "2",
        "DelayBucketSeconds": "1",
        "DelaySweepRate": "rate(1 hour)",
        "ExtraDelayTargetArns": target_arn,
    }
    with local_cloud(params, stack_name="sluice-crash", examples=True) as cloud:
        sqs = cloud.client("sqs")
        producer = principals(cloud).client(PRODUCER, "sqs")  # listed in TrustedSenderArns
        target = sqs.create_queue(QueueName="crash-target")["QueueUrl"]
        # Make the rehydrator's SQS refuse the 'flaky' entry 4 times (4 tries per invocation inside
        # send_batch, so the first invocation fails after sending the others), in whichever execution
        # environment runs it: other invocations (the sweep) may have started more than one.
        host = cloud.functions["RehydratorFunction"]
        budget = [4]
        acquire = host._acquire

        def acquire_refusing() -> Any:
            handler = acquire()
            module = sys.modules[handler.__module__]  # the cold-started app.py of this environment
            if not isinstance(module.rehydrator._sqs, RefusingSqs):
                module.rehydrator._sqs = RefusingSqs(module.rehydrator._sqs, budget)
            return handler

        host._acquire = acquire_refusing  # type: ignore[method-assign]  # this host only, for this test

        due = datetime.now(UTC) + timedelta(seconds=24)
        for body in ("ok-1", "flaky-2", "ok-3"):
            send_delayed(
                producer,
                delay_queue_url=cloud.outputs["DelayQueueUrl"],
                target=target,
                body=body,
                deliver_at=due,
            )

        received: list[str] = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(received) < 3:
            for message in sqs.receive_message(QueueUrl=target, MaxNumberOfMessages=10).get("Messages", []):
                received.append(message["Body"])
                sqs.delete_message(QueueUrl=target, ReceiptHandle=message["ReceiptHandle"])
            time.sleep(0.2)

        # The bucket's execution is the only sender (the sweep runs hourly): once it has ended, anything
        # it sent twice is on the target queue, visible or still delayed (what arrived was deleted).
        sfn = cloud.client("stepfunctions")
        [execution] = sfn.list_executions(stateMachineArn=cloud.outputs["DelayStateMachineArn"])["executions"]
        while (
            status := sfn.describe_execution(executionArn=execution["executionArn"])["status"]
        ) == "RUNNING" and time.monotonic() < deadline:
            time.sleep(0.2)
        left = sqs.get_queue_attributes(QueueUrl=target, AttributeNames=list(QUEUE_DEPTH))["Attributes"]
        received += [
            m["Body"]
            for m in sqs.receive_message(QueueUrl=target, MaxNumberOfMessages=10).get("Messages", [])
        ]
        history = sfn.get_execution_history(executionArn=execution["executionArn"])["events"]
        objects = (
            cloud.client("s3").list_objects_v2(Bucket=cloud.outputs["DelayBucketName"]).get("Contents", [])
        )

    assert sorted(received) == ["flaky-2", "ok-1", "ok-3"]  # nothing lost, nothing repeated
    assert status == "SUCCEEDED"
    assert {name: int(left[name]) for name in QUEUE_DEPTH} == dict.fromkeys(QUEUE_DEPTH, 0), "sent twice"
    failures = [e for e in history if e["type"] == "TaskFailed"]
    assert failures, "the rehydrator should have failed once and been retried by the state machine"
    assert json.loads(failures[0]["taskFailedEventDetails"]["cause"])["errorType"] == "TransientError"
    assert objects == []  # the object was deleted once everything was accepted
