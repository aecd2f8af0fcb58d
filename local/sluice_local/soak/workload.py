"""What a seed sends: its orders (:data:`KINDS`) and job rows (:data:`JOB_KINDS`), as its plan picks them."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from sluice import claimcheck
from sluice.delay import send_delayed
from sluice.jobs import job_message
from sluice_local.app import messages
from sluice_local.app.observer import Stack
from sluice_local.emulation import faults

KINDS = (
    "normal", "normal", "duplicate", "permanent", "transient", "exhausts-retries",
    "claim-check", "delay-direct", "delay-parked",
)  # fmt: skip
ORDERS_PER_SEED = 8
JOB_KINDS = ("job-charge", "job-charge", "job-duplicate", "job-thumbnail", "job-flaky", "job-invalid")
JOBS_PER_SEED = 3


@dataclass
class Sent:
    order_id: str
    kind: str
    message_ids: list[str] = field(default_factory=list)
    upload_at: float | None = None  # monotonic time its claim-check object appears (transient kinds)
    key: str = ""


@dataclass
class SentJob:
    job_id: str
    kind: str
    business_id: str


def send_orders(stack: Stack, plan: faults.FaultPlan) -> list[Sent]:
    """The seed's orders, sent (of :data:`KINDS`, as the seed picks them)."""
    outputs, sqs = stack.outputs, stack.client("sqs")
    work, bucket = outputs["WorkQueueUrl"], outputs["ClaimCheckBucketName"]
    out: list[Sent] = []
    for n in range(ORDERS_PER_SEED):
        kind = plan.pick(KINDS, "workload", n)
        s = Sent(f"s{plan.seed}-{n}", kind)
        body = json.dumps(messages.order(s.order_id))
        if kind == "permanent":
            body = json.dumps(messages.order(s.order_id, amount_cents=99_000_000))
        if kind in ("transient", "exhausts-retries"):
            s.key = f"soak/{s.order_id}-{uuid.uuid4().hex[:6]}"
            # transient: back within the consumer's retries; exhausts-retries: after its third receive
            # (--fast: 3 receives, backoff 1-2 s), so it is dead-lettered and re-driven first
            low, spread = (1, 3) if kind == "transient" else (6, 4)
            wait = low + spread * plan.roll("upload", n)
            s.upload_at = time.monotonic() + wait
            body = messages.claim_check(bucket, s.key)
        if kind == "claim-check":
            big = json.dumps(messages.order(s.order_id, reward_points=5, note="x" * 300_000))
            s.message_ids.append(
                claimcheck.send(sqs, stack.client("s3"), queue_url=work, body=big, bucket=bucket, prefix="")
            )
        elif kind.startswith("delay-"):
            seconds = 2.0 if kind == "delay-direct" else 8.0  # --fast: parked beyond 6 s
            s.message_ids.append(
                send_delayed(
                    sqs,
                    delay_queue_url=outputs["DelayQueueUrl"],
                    target=work,
                    body=body,
                    delay_seconds=seconds,
                )
            )
        else:
            copies = 2 if kind == "duplicate" else 1
            for _ in range(copies):
                s.message_ids.append(sqs.send_message(QueueUrl=work, MessageBody=body)["MessageId"])
        out.append(s)
    return out


def send_jobs(stack: Stack, plan: faults.FaultPlan) -> list[SentJob]:
    """The seed's job rows, created and their ids sent (of :data:`JOB_KINDS`)."""
    store, sqs = stack.job_store(), stack.client("sqs")
    out: list[SentJob] = []
    for n in range(JOBS_PER_SEED):
        kind = plan.pick(JOB_KINDS, "jobs", n)
        business = f"s{plan.seed}-j{n}"
        payload: dict[str, Any] = {"order_id": business, "amount_cents": 1999}
        if kind == "job-flaky":
            payload["fail_attempts"] = 1
        if kind == "job-invalid":
            payload["amount_cents"] = 0
        job_kind = "thumbnail" if kind == "job-thumbnail" else "charge"
        job_id = store.create(job_kind, payload).id
        for _ in range(2 if kind == "job-duplicate" else 1):
            sqs.send_message(QueueUrl=stack.outputs["JobQueueUrl"], MessageBody=job_message(job_id))
        out.append(SentJob(str(job_id), kind, business))
    return out


def upload_due(stack: Stack, sent: list[Sent]) -> None:
    """Upload the claim-check objects whose time has come (the transient kinds')."""
    for s in sent:
        if s.upload_at is not None and time.monotonic() >= s.upload_at:
            body = json.dumps(messages.order(s.order_id)).encode()
            stack.client("s3").put_object(Bucket=stack.outputs["ClaimCheckBucketName"], Key=s.key, Body=body)
            s.upload_at = None
