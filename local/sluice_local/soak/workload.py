"""What a seed sends: its orders (:data:`KINDS`), its refunds (:data:`REFUND_KINDS`) and its job rows
(:data:`JOB_KINDS`), as its plan picks them; and the claim-check objects of its transient kinds, held back
until their receives were seen failing.

The refunds go to the second example workload (``Refunds``, examples/refunds/) on the same stack, under
the same fault schedule: :data:`REFUNDS_PER_SEED` of them, whose refund ids take the values of the seed's
first order ids (``s<seed>-<n>``), so the checker also shows that the two workloads' idempotency keys,
guards, queues and ledger items never meet although their ids do.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from sluice import claimcheck
from sluice.delay import send_delayed
from sluice.jobs import job_message
from sluice.logevents import EVENT, LogEvent
from sluice_local.app import messages
from sluice_local.app.messages import ORDERS, REFUNDS
from sluice_local.app.observer import Stack
from sluice_local.app.principals import PRODUCER
from sluice_local.emulation import faults

KINDS = (
    "normal", "normal", "duplicate", "permanent", "transient", "exhausts-retries",
    "claim-check", "delay-direct", "delay-parked",
)  # fmt: skip
ORDERS_PER_SEED = 7
"""8 before the refunds joined; one fewer pays for them in ``make test`` (REFUNDS_PER_SEED). Seed 5104's
regression (its order 6) and seed 212's held objects (orders 0, 1, 3, 4) are still sent."""
REFUND_KINDS = ("normal", "duplicate", "permanent", "transient", "delay-direct")
"""The refunds' kinds: each a path the refunds' own functions take differently from the orders' ones, at
a cost that fits the short soak in ``make test`` (each seed's drain waits for its slowest message):

- ``normal``, ``duplicate`` (sent twice: the refunds' consumer keys its idempotency on ``refund_id``),
  ``permanent`` (``reason: fraud``, a ``PermanentError``: the shared poison queue, from the refunds'
  queue) cost nothing to wait for;
- ``transient`` is a claim-check pointer whose object appears once a receive of it was seen failing
  (1-4 s): the refunds' consumer's retry and backoff, on their own queue;
- ``delay-direct`` goes through the shared delay pipeline to the refunds' queue (2 s).

Left out, as the orders cover the shared code they take and each would lengthen the seed: the 300 KB
claim-check payload (the same resolution), the parked delay (8 s, the same bucket and state machine) and
``exhausts-retries`` (6-10 s, then a redrive: the refunds' DLQ and redrive still run whenever the faults
exhaust a refund's receives, and the checker counts what they re-drive)."""
REFUNDS_PER_SEED = 3
"""Refunds ``s<seed>-0`` … ``s<seed>-2``. The short soak in ``make test`` (then 50 seeds, 8 workers, 2 cores)
measured 229, 225 and 236 s with 8 orders and no refund; with 8 orders and 4 refunds 258 and 280 s (+12
to +24 %, beyond the +15 % it may grow), 8 and 3 285 s; with 7 orders and 3 refunds 221 and 214 s."""
PERMANENT: dict[str, dict[str, Any]] = {ORDERS: {"amount_cents": 99_000_000}, REFUNDS: {"reason": "fraud"}}
"""What makes each workload's processor raise a ``PermanentError``: an order over its limit, a fraud
refund."""
PLANS = {ORDERS: (KINDS, ORDERS_PER_SEED, "workload"), REFUNDS: (REFUND_KINDS, REFUNDS_PER_SEED, REFUNDS)}
"""Per queue workload: its kinds, how many a seed sends, and the plan's key its picks are made under (the
orders' is the one they were always picked under: a seed replays the orders it always sent)."""
DELAY_DIRECT_SECONDS, DELAY_PARKED_SECONDS = 2.0, 8.0  # --fast: parked beyond 6 s
JOB_KINDS = ("job-charge", "job-charge", "job-duplicate", "job-thumbnail", "job-flaky", "job-invalid")
JOBS_PER_SEED = 3


@dataclass
class Sent:
    business_id: str
    """The order id, or the refund id (:attr:`workload`)."""
    kind: str
    message_ids: list[str] = field(default_factory=list)
    upload_at: float | None = None
    """Monotonic time from which its claim-check object may appear (the transient kinds'); None once it
    was uploaded. It appears only once :meth:`due` too."""
    key: str = ""
    failed: bool = False
    """A receive of it was seen failing, in the functions' log (see :func:`observe`)."""
    dead_lettered: bool = False
    """It was seen leaving the work queue for its DLQ: its receives ran out."""
    send_seconds: float = 0.0
    """How long its send took, by the producer's clock: a delay request whose send took longer than its
    delay plus the stack's grace may reach SQS past its due time by more than the grace, and is then
    refused as too late (:data:`DELAY_DIRECT_SECONDS`)."""
    workload: str = ORDERS
    """The queue workload it was sent to: ``Orders`` or ``Refunds``."""

    def __str__(self) -> str:
        """How the reports name it: ``s3-1`` for an order (as always), ``refund s3-1`` for a refund."""
        return self.business_id if self.workload == ORDERS else f"refund {self.business_id}"

    def body(self, **extra: Any) -> dict[str, Any]:
        """A valid body of its workload for it, with ``extra`` fields."""
        make = messages.order if self.workload == ORDERS else messages.refund
        return make(self.business_id, **extra)

    def may_be_refused_late(self, grace_seconds: float) -> bool:
        """Whether its due time may have been past the grace when SQS stamped it (a stalled producer)."""
        delay = DELAY_DIRECT_SECONDS if self.kind == "delay-direct" else DELAY_PARKED_SECONDS
        return self.kind.startswith("delay-") and self.send_seconds > delay + grace_seconds

    def due(self, now: float) -> bool:
        """Whether its claim-check object may appear now: its time has come, and what its kind waits for
        was seen, whatever the machine's load made of the timing: a failed receive (transient), its
        receives run out (exhausts-retries)."""
        if self.upload_at is None or now < self.upload_at:
            return False
        return self.dead_lettered if self.kind == "exhausts-retries" else self.failed


@dataclass
class SentJob:
    job_id: str
    kind: str
    business_id: str


def send_messages(stack: Stack, plan: faults.FaultPlan, workload: str = ORDERS) -> list[Sent]:
    """The seed's messages to ``workload``'s queue, sent (of its kinds, :data:`PLANS`, as the seed picks
    them): its orders, or its refunds."""
    outputs, sqs = stack.outputs, stack.client("sqs", PRODUCER)  # the producer: a trusted sender
    work, bucket = outputs[workload + "QueueUrl"], outputs["ClaimCheckBucketName"]
    kinds, count, label = PLANS[workload]
    out: list[Sent] = []
    for n in range(count):
        kind = plan.pick(kinds, label, n)
        s = Sent(f"s{plan.seed}-{n}", kind, workload=workload)
        body = json.dumps(s.body(**(PERMANENT[workload] if kind == "permanent" else {})))
        if kind in ("transient", "exhausts-retries"):
            prefix = "" if workload == ORDERS else "refund-"
            s.key = f"soak/{prefix}{s.business_id}-{uuid.uuid4().hex[:6]}"
            # transient: back within the consumer's retries; exhausts-retries: after its third receive
            # (--fast: 3 receives, backoff 1-2 s), so it is dead-lettered and re-driven first. Not before
            # that was seen either (Sent.due): a loaded machine may receive it first after its time.
            low, spread = (1, 3) if kind == "transient" else (6, 4)
            wait = low + spread * plan.roll("upload", *([] if workload == ORDERS else [workload]), n)
            s.upload_at = time.monotonic() + wait
            body = messages.claim_check(bucket, s.key)
        if kind == "claim-check":
            big = json.dumps(s.body(reward_points=5, note="x" * 300_000))
            s.message_ids.append(
                claimcheck.send(
                    sqs, stack.client("s3", PRODUCER), queue_url=work, body=big, bucket=bucket, prefix=""
                )
            )
        elif kind.startswith("delay-"):
            seconds = DELAY_DIRECT_SECONDS if kind == "delay-direct" else DELAY_PARKED_SECONDS
            started = time.time()
            s.message_ids.append(
                send_delayed(
                    sqs,
                    delay_queue_url=outputs["DelayQueueUrl"],
                    target=work,
                    body=body,
                    delay_seconds=seconds,
                )
            )
            s.send_seconds = time.time() - started
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


OBSERVED = (
    LogEvent.RECORD_RETRIED, LogEvent.RECORD_DEAD_LETTERED,
    LogEvent.MESSAGE_REDRIVEN, LogEvent.MESSAGE_ISOLATED, LogEvent.REDRIVE_PLANNED,
)  # fmt: skip
"""The log lines :func:`observe` reads: the consumer's failed receives, the redrive's DLQ messages."""


def observe(sent: list[Sent], lines: list[dict[str, Any]], *, max_receives: int) -> None:
    """Mark the messages still holding their object back that ``lines`` (of :data:`OBSERVED`) show failing.

    A consumer's retried or dead-lettered line whose error names the message's missing key is a failed
    receive; dead-lettered too when the consumer moved it, or SQS will (its ``max_receives``-th receive).
    The redrive's line for its origin id shows it was in the DLQ, whatever its receives logged (an
    invocation that crashed or timed out logs nothing).
    """
    held = [s for s in sent if s.upload_at is not None]
    by_origin = {mid: s for s in held for mid in s.message_ids}
    for line in lines:
        event = line.get(EVENT)
        if event in (LogEvent.RECORD_RETRIED, LogEvent.RECORD_DEAD_LETTERED):
            error = str(line.get("error"))
            last = (
                event == LogEvent.RECORD_DEAD_LETTERED or int(line.get("receive_count") or 0) >= max_receives
            )
            for s in held:
                if s.key in error:
                    s.failed = True
                    s.dead_lettered |= last
        elif (redriven := by_origin.get(str(line.get("origin_id")))) is not None:
            redriven.failed = redriven.dead_lettered = True


def upload_due(s3: Any, bucket: str, sent: list[Sent], *, now: float | None = None) -> None:
    """Upload the claim-check objects that are :meth:`Sent.due` (the transient kinds')."""
    now = time.monotonic() if now is None else now
    release(s3, bucket, [s for s in sent if s.due(now)])


def release(s3: Any, bucket: str, sent: list[Sent]) -> None:
    """Upload the claim-check objects ``sent`` still holds back, due or not."""
    for s in sent:
        if s.upload_at is not None:
            body = json.dumps(s.body()).encode()
            s3.put_object(Bucket=bucket, Key=s.key, Body=body)
            s.upload_at = None
