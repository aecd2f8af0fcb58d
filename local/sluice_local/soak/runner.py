"""Seeded fault schedules through the real wiring, checked on the whole history (issue 11).

For each seed: a workload of orders goes through the deployed template (consumer, long delays,
dead-lettering and redrive) while :mod:`sluice_local.emulation.faults` breaks AWS calls and invocations as the
seed decides; the run drains to quiescence; the checker then reads the ledger (every side effect the
example processor performed, one item per performance) and the queues, and reports, like Jepsen's
total-queue checker and one step beyond it:

- **lost**: sent, never processed, not in the poison queue or a dead-letter queue;
- **duplicated side effects**: more than one ledger item for one order's guarded effect, except where
  the injector saw the invocation that performed it die, or its guard's commit fail, right after it
  (the at-least-once window no guard can close: reported apart, as ``at_least_once``);
- **unexpected**: processed but never sent;
- the conservation line ``sent = processed + poison + dead-lettered``.

With a PostgreSQL (``SLUICE_DATABASE_URL``, else 127.0.0.1:5432) the stack has the job store and each
seed also creates job rows (two-phase charges, one sent twice, a single-UPDATE thumbnail, a charge that
fails once, an invalid one) and sends their ids, while the injector also drops the job store's
connection before statements and after them (committed, response lost). Checked on the rows and the
ledger: every job ends completed or dead (``jobs sent = completed + dead``), a charge is performed once
(outside the at-least-once window), a completed charge was performed, an invalid one never. Without a
PostgreSQL the job part is skipped and the report says why.

Seeds run one after another on one stack per process (a seed's business ids are ``s<seed>-<n>``);
``python -m sluice_local soak`` runs a range of them in worker processes, one per RedriveMode.

Time scale: the work, delay and job queues' visibility timeouts are set to :data:`VISIBILITY_SECONDS` after
deploy (the consumer's ``SLUICE_VISIBILITY_TIMEOUT_SECONDS`` with it), so a batch lost with a failed
invocation is back in seconds instead of minutes; everything else is the ``--fast`` stack.
"""

from __future__ import annotations

import builtins
import json
import logging
import os
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sluice import claimcheck
from sluice.delay import send_delayed
from sluice.envelope import split
from sluice.jobs import job_message
from sluice.redrive.runner import LOG_MESSAGE_REDRIVEN
from sluice.redrive.steps import LOG_REDRIVE_PLANNED
from sluice_local.app import messages, postgres
from sluice_local.app.fast import FAST
from sluice_local.app.observer import Stack
from sluice_local.app.stack import local_cloud
from sluice_local.emulation import faults
from sluice_local.emulation.cloud import LocalCloud
from sluice_local.emulation.pollers import SqsPoller
from sluice_local.soak.db_faults import install_database_boundary

VISIBILITY_SECONDS = 6
SEED_DEADLINE_SECONDS = 420.0
"""A deadline for one seed to drain, only reached when something is stuck. Longer than the redrive state
machine's DLQ receive visibility (300 s, not compressed by the soak): a batch its failed execution left
in flight comes back by itself (seed 213 of the 500-seed run was reported stuck at 240 s so)."""
POLL_SECONDS = 0.3
IDLE_POLLS = 2
ZOMBIE_SECONDS = 60.0  # timed-out handler threads still running after the drain: they end at their next call
EFFECTS = ("charge", "reward", "notify")
CRASH_POINTS = (("RedriverFunction", "DeleteMessageBatch"),)
"""Where half of a function's crashes land instead of after a random number of calls: points a random
count rarely reaches (the redriver between its send and its delete: it seldom has messages in hand)."""
KINDS = (
    "normal", "normal", "duplicate", "permanent", "transient", "exhausts-retries",
    "claim-check", "delay-direct", "delay-parked",
)  # fmt: skip
ORDERS_PER_SEED = 8
JOB_KINDS = ("job-charge", "job-charge", "job-duplicate", "job-thumbnail", "job-flaky", "job-invalid")
JOBS_PER_SEED = 3
WORKLOADS = ("all", "orders", "jobs")
"""What each seed sends: orders and job rows (the default), or only one of them."""
SABOTAGE = {
    "ledger": "every ledger write loses its response: a side effect that happened but reported an error is "
    "performed again when its record is retried (unguarded by design): the checker must report duplicated "
    "side effects",
    "delete-failed": "the event source mapping deletes records the batch reported failed: the checker "
    "must report them lost",
}


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


@dataclass
class SeedResult:
    seed: int
    mode: str
    sent: int
    processed: int
    poison: int
    dead_lettered: int
    lost: list[str]
    duplicated: list[str]
    at_least_once: list[str]
    unexpected: list[str]
    faults: dict[str, int]
    faults_at: dict[str, int]
    seconds: float
    stuck: str = ""
    misrouted: list[str] = field(default_factory=list)
    """Orders that ended somewhere their kind must not: a valid order poisoned as permanently bad or
    after an error no fault produces (:func:`_a_bug`), a permanent failure processed, an order processed
    without all its side effects and not isolated (deleted part-way)."""
    exhausted: list[str] = field(default_factory=list)
    """Valid orders isolated, or left in the delay DLQ, because their retries and redrives ran out under
    the faults (allowed, and reported), some part-way through their side effects: their last error is a
    fault's (an AWS error, a timeout, a transient one) or none (their invocations died)."""
    redriven: list[str] = field(default_factory=list)
    """Orders whose message went from the work DLQ back to the work queue (re-driven or re-delayed by the
    redriver, or planned so by the redrive state machine): the redrive path ran under the faults."""
    overlaps: list[str] = field(default_factory=list)
    """Orders found in more than one place (processed and a copy isolated or dead-lettered): a redelivered
    copy, reported; each order is counted once in the conservation line, in the first of its places."""
    jobs_sent: int = 0
    jobs_completed: int = 0
    jobs_dead: int = 0
    jobs_skipped: str = ""
    """Why the seed created no jobs (no PostgreSQL answered), else ''."""

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.unexpected or self.stuck or self.misrouted) and (
            self.sent == self.processed + self.poison + self.dead_lettered
            and self.jobs_sent == self.jobs_completed + self.jobs_dead
        )

    def to_json(self) -> str:
        return json.dumps({**self.__dict__, "ok": self.ok})


@dataclass(frozen=True)
class Options:
    """How a soak breaks things: the same for every seed of a run, and part of a seed's replay."""

    aws_rate: float = 0.05
    lambda_rate: float = 0.08
    sabotage: str = ""
    """'' (the real thing), or something the checker must catch (:data:`SABOTAGE`)."""
    only: tuple[str, ...] = ()
    """Fault kinds to inject (all when empty): a targeted run."""
    workload: str = "all"
    """:data:`WORKLOADS`: orders and jobs, or only one of them."""

    def argv(self) -> list[str]:
        """The command-line options that differ from the defaults."""
        out: list[str] = []
        default = Options()
        for name in ("aws_rate", "lambda_rate", "sabotage", "workload"):
            if getattr(self, name) != getattr(default, name):
                out += [f"--{name.replace('_', '-')}", str(getattr(self, name))]
        if self.only:
            out += ["--only", ",".join(self.only)]
        return out


class Soak:
    """One deployed stack, seeds run on it one after another."""

    def __init__(
        self, cloud: LocalCloud, log_path: Path, *, mode: str, options: Options, no_jobs: str = ""
    ) -> None:
        """``no_jobs``: why the stack has no job store ('' when it has one)."""
        self.cloud = cloud
        self.mode = mode
        self.options = options
        self.no_jobs = no_jobs
        self.stack = Stack(cloud.endpoint, cloud.outputs, log_path)
        self._log_path = log_path
        self._log_offset = 0
        self._known: set[str] = set()
        """Every id this stack was sent (orders, job ids, job business ids), over all its seeds."""
        self._reported: set[str] = set()
        self._checked: dict[str, int] = {}
        """Per guarded effect (ledger ``effect_key``) of the seeds run so far: its performances when its
        seed was checked. Every later seed's check re-reads them: a performance written afterwards (by
        anything still running) is reported then, as a duplicate."""
        self._compress_time()

    def _compress_time(self) -> None:
        sqs = self.stack.client("sqs")
        for output in ("WorkQueueUrl", "DelayQueueUrl", "JobQueueUrl"):
            if output not in self.stack.outputs:  # no job store without a PostgreSQL
                continue
            sqs.set_queue_attributes(
                QueueUrl=self.stack.outputs[output], Attributes={"VisibilityTimeout": str(VISIBILITY_SECONDS)}
            )
        for host in self.cloud.functions.values():
            if "SLUICE_VISIBILITY_TIMEOUT_SECONDS" in host.spec.environment:
                host.spec.environment["SLUICE_VISIBILITY_TIMEOUT_SECONDS"] = str(VISIBILITY_SECONDS)
        for poller in self.cloud.pollers:  # as AWS requires of an SQS trigger: timeout ≤ visibility
            spec = poller.spec.function.spec
            spec.timeout = min(spec.timeout, VISIBILITY_SECONDS - 1)

    # --- one seed ------------------------------------------------------------------------------

    def run(self, seed: int) -> SeedResult:
        o = self.options
        plan = faults.FaultPlan(
            seed, aws_rate=o.aws_rate, lambda_rate=o.lambda_rate, only=o.only,
            ledger_table=self.stack.outputs["LedgerTableName"],
            guard_table=self.stack.outputs["IdempotencyTableName"],
            sabotage_ledger=o.sabotage == "ledger", crash_points=CRASH_POINTS,
        )  # fmt: skip
        injector = faults.Injector(plan)
        started = time.monotonic()
        undo = faults.install(injector, install_database_boundary)
        if o.sabotage == "delete-failed":  # the mapping deletes records the batch reported failed
            original = SqsPoller._failures
            SqsPoller._failures = staticmethod(lambda result, ids: set())  # type: ignore[method-assign]
        jobs: list[SentJob] = []
        sent: list[Sent] = []
        try:
            if o.workload != "jobs":
                sent = self._send(plan)
            if o.workload != "orders":
                jobs = self._send_jobs(plan)
            stuck = self._drain(sent, jobs) or self._zombies_gone()
        finally:
            undo()
            if o.sabotage == "delete-failed":
                SqsPoller._failures = original  # type: ignore[method-assign]
        self._known |= {s.order_id for s in sent} | {i for j in jobs for i in (j.job_id, j.business_id)}
        checked_before = set(self._checked)
        result = self._check(seed, sent, injector, time.monotonic() - started, stuck)
        self._check_jobs(result, jobs, injector)
        if stuck:  # still running at its check (the seed fails): what it performs later is not re-counted
            for key in set(self._checked) - checked_before:
                del self._checked[key]
        result.unexpected, late = self._whole_ledger()
        result.duplicated += late
        self._clean_up()
        return result

    def _send(self, plan: faults.FaultPlan) -> list[Sent]:
        outputs, sqs = self.stack.outputs, self.stack.client("sqs")
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
                    claimcheck.send(
                        sqs, self.stack.client("s3"), queue_url=work, body=big, bucket=bucket, prefix=""
                    )
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

    def _send_jobs(self, plan: faults.FaultPlan) -> list[SentJob]:
        if self.no_jobs:
            return []
        store, sqs = self.stack.job_store(), self.stack.client("sqs")
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
                sqs.send_message(QueueUrl=self.stack.outputs["JobQueueUrl"], MessageBody=job_message(job_id))
            out.append(SentJob(str(job_id), kind, business))
        return out

    def _upload_due(self, sent: list[Sent]) -> None:
        for s in sent:
            if s.upload_at is not None and time.monotonic() >= s.upload_at:
                body = json.dumps(messages.order(s.order_id)).encode()
                self.stack.client("s3").put_object(
                    Bucket=self.stack.outputs["ClaimCheckBucketName"], Key=s.key, Body=body
                )
                s.upload_at = None

    def _drain(self, sent: list[Sent], jobs: list[SentJob]) -> str:
        """Wait for quiescence; '' when reached, else what is still moving at the deadline."""
        deadline = time.monotonic() + SEED_DEADLINE_SECONDS
        busy = "not polled"
        idle = 0
        while time.monotonic() < deadline:
            self._upload_due(sent)
            busy = self._busy(sent) or self._jobs_busy(jobs)
            idle = 0 if busy else idle + 1
            if idle >= IDLE_POLLS:  # each poll reads the queues one after another: agree twice
                return ""
            time.sleep(POLL_SECONDS)  # between polls of the quiescence condition
        return busy

    def _zombies_gone(self) -> str:
        """Wait (while the injector is still installed) for the threads of timed-out invocations: each
        dies at its next call, and must not write the ledger after the check."""
        deadline = time.monotonic() + ZOMBIE_SECONDS
        for host in self.cloud.functions.values():
            for thread in list(host.timed_out):
                thread.join(max(0.0, deadline - time.monotonic()))
                if thread.is_alive():
                    return f"timed-out thread {thread.name} still running {ZOMBIE_SECONDS:.0f} s on"
        return ""

    def _busy(self, sent: list[Sent]) -> str:
        if any(s.upload_at is not None for s in sent):
            return "claim-check objects not uploaded yet"
        sqs = self.stack.client("sqs")
        names = [
            "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible",
            "ApproximateNumberOfMessagesDelayed",
        ]  # fmt: skip
        # The delay DLQ is an end (alarmed; drained by an operator): what lands there counts as dead-lettered.
        for output in ("WorkQueueUrl", "DelayQueueUrl", "WorkDeadLetterQueueUrl"):
            attributes = sqs.get_queue_attributes(QueueUrl=self.stack.outputs[output], AttributeNames=names)
            depth = {k: int(v) for k, v in attributes["Attributes"].items()}
            if any(depth.values()):
                return f"{output}: {depth}"
        parked = self.stack.client("s3").list_objects_v2(
            Bucket=self.stack.outputs["DelayBucketName"], Prefix="delayed/"
        )
        pending = [o["Key"] for o in parked.get("Contents", []) if "/quarantine/" not in o["Key"]]
        if pending:
            return f"parked objects: {pending[:3]}"
        sfn = self.stack.client("stepfunctions")
        for output in ("DelayStateMachineArn", "RedriveStateMachineArn"):
            arn = self.stack.outputs.get(output)
            if arn and sfn.list_executions(stateMachineArn=arn, statusFilter="RUNNING").get("executions"):
                return f"{output}: executions running"
        return ""

    def _jobs_busy(self, jobs: list[SentJob]) -> str:
        """Rows are the truth: busy while one is not terminal, or a job message is still around."""
        if not jobs:
            return ""
        store = self.stack.job_store()
        open_rows = Counter(
            job.status
            for job in (store.get(uuid.UUID(j.job_id)) for j in jobs)
            if job is not None and job.status not in ("completed", "dead")
        )
        if open_rows:
            return f"jobs: {dict(open_rows)}"
        attributes = self.stack.client("sqs").get_queue_attributes(
            QueueUrl=self.stack.outputs["JobQueueUrl"],
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        depth = {k: int(v) for k, v in attributes.items()}
        return f"JobQueueUrl: {depth}" if any(depth.values()) else ""

    # --- the checker ---------------------------------------------------------------------------

    def _ledger(self, order_id: str, effect: str) -> int:
        response = self.stack.client("dynamodb").query(
            TableName=self.stack.outputs["LedgerTableName"],
            KeyConditionExpression="effect_key = :k",
            ExpressionAttributeValues={":k": {"S": f"{order_id}#{effect}"}},
            ConsistentRead=True,
        )
        return int(response["Count"])

    def _in_queue(self, output: str, by_message: dict[str, str]) -> dict[str, str]:
        """Order ids of the seed found on a queue (by origin id, or the message id it was sent with),
        each with the type of its envelope's last error ('' when none)."""
        found: dict[str, str] = {}
        for message in self.stack.every_message(output):
            attributes = {k: dict(v) for k, v in message.get("MessageAttributes", {}).items()}
            _, env, _ = split(attributes, body=message["Body"], seal=self.stack.seal())
            origin = env.origin_id if env is not None else None
            error = env.last_error.type if env is not None and env.last_error is not None else ""
            for key in (origin, message["MessageId"]):
                if key in by_message:
                    found.setdefault(by_message[key], error)
                    break
        return found

    def _check(
        self, seed: int, sent: list[Sent], injector: faults.Injector, seconds: float, stuck: str
    ) -> SeedResult:
        by_message = {mid: s.order_id for s in sent for mid in s.message_ids}
        ids = {s.order_id for s in sent}
        processed: set[str] = set()
        duplicated: list[str] = []
        window: list[str] = []
        misrouted: list[str] = []
        exhausted: list[str] = []
        poisoned = self._in_queue("PoisonPillQueueUrl", by_message)
        delay_dead = self._in_queue("DelayDeadLetterQueueUrl", by_message)
        work_dead = self._in_queue("WorkDeadLetterQueueUrl", by_message)
        isolated = {**work_dead, **delay_dead, **poisoned}
        for s in sent:
            performed = {effect: self._ledger(s.order_id, effect) for effect in EFFECTS}
            self._checked.update({f"{s.order_id}#{effect}": n for effect, n in performed.items()})
            for effect, n in performed.items():
                if n > 1:  # each time the window opened for it excuses one more performance, no more
                    key = f"{s.order_id}#{effect}"
                    (window if n <= 1 + injector.in_window[key] else duplicated).append(f"{key} x{n}")
            if performed["charge"]:
                processed.add(s.order_id)
                expected = {"charge", "notify"} | ({"reward"} if s.kind == "claim-check" else set())
                missing = sorted(e for e in expected if not performed[e])
                error = isolated.get(s.order_id)
                if missing and s.kind != "permanent" and _a_fault(error):
                    # part-way, then its retries ran out: isolated where an operator re-drives it (the
                    # guards keep what was done from being done again); deleted part-way would be a loss
                    exhausted.append(f"{s.order_id} ({s.kind}): isolated part-way, {missing} not performed "
                                     f"({error or 'no error'})")  # fmt: skip
                elif missing or s.kind == "permanent":
                    where = ", and deleted" if error is None else f", isolated ({error})"
                    where = "" if s.kind == "permanent" else where
                    misrouted.append(f"{s.order_id} ({s.kind}) processed, missing {missing}{where}")
        for s in sent:
            error = poisoned.get(s.order_id)
            if error is None or s.order_id in processed or s.kind == "permanent":
                continue
            if error == "PermanentError":  # a valid order refused as permanently bad
                misrouted.append(f"{s.order_id} ({s.kind}) poisoned with a PermanentError")
            elif _a_bug(error):  # retries cannot cure it, and no injected fault raises it
                misrouted.append(f"{s.order_id} ({s.kind}) poisoned after a {error}: a bug, not a fault")
            else:
                exhausted.append(f"{s.order_id} ({s.kind}): {error or 'no error'}")
        poison = set(poisoned)
        dead = set(work_dead) | set(delay_dead)
        exhausted += [
            f"{s.order_id} ({s.kind}): in the delay DLQ ({delay_dead[s.order_id] or 'no error'})"
            for s in sent
            if s.order_id in delay_dead and s.order_id not in processed | poison and s.kind != "permanent"
        ]
        places = {"processed": processed, "poison": poison, "dead-lettered": dead}
        overlaps = [
            f"{order} {'+'.join(name for name, where in places.items() if order in where)}"
            for order in sorted(ids)
            if sum(order in where for where in places.values()) > 1
        ]
        origins = self._redriven_origins()
        redriven = sorted({order for mid, order in by_message.items() if mid in origins})
        # each order counted once, in the first of its places: the line balances exactly when none is lost
        return SeedResult(
            seed=seed, mode=self.mode, sent=len(ids), processed=len(processed),
            poison=len(poison - processed),
            dead_lettered=len(dead - processed - poison),
            lost=sorted(ids - processed - poison - dead), duplicated=duplicated, at_least_once=window,
            unexpected=[], faults=dict(injector.counts),
            faults_at=dict(injector.where), seconds=round(seconds, 1), stuck=stuck,
            misrouted=misrouted, exhausted=exhausted, overlaps=overlaps, redriven=redriven,
        )  # fmt: skip

    def _whole_ledger(self) -> tuple[list[str], list[str]]:
        """Read the whole ledger (every effect, every seed this stack ran): the ids of side effects never
        sent (**unexpected**), each reported once, by the seed whose check first sees it; and the effects
        of earlier seeds performed again since their seed's check (a late duplicate), each reported once."""
        table = self.stack.outputs["LedgerTableName"]
        kwargs: dict[str, Any] = {"TableName": table, "ConsistentRead": True}
        kwargs["ProjectionExpression"] = "order_id, effect_key"
        ids: set[str] = set()
        performed: Counter[str] = Counter()
        while True:
            page = self.stack.client("dynamodb").scan(**kwargs)
            for item in page.get("Items", []):
                ids.add(item["order_id"]["S"])
                performed[item["effect_key"]["S"]] += 1
            if "LastEvaluatedKey" not in page:
                break
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        new = sorted(ids - self._known - self._reported)
        self._reported.update(new)
        late: list[str] = []
        for key, checked in self._checked.items():
            if performed[key] > checked:
                late.append(f"{key} x{performed[key]} (performed again after its seed's check: {checked})")
                self._checked[key] = performed[key]
        return new, late

    def _check_jobs(self, result: SeedResult, jobs: list[SentJob], injector: faults.Injector) -> None:
        result.jobs_skipped = self.no_jobs
        store = self.stack.job_store() if jobs else None
        for j in jobs:
            job = store.get(uuid.UUID(j.job_id)) if store is not None else None
            result.jobs_sent += 1
            charges = self._ledger(j.job_id, "charge")
            self._checked[f"{j.job_id}#charge"] = charges
            label = f"job {j.business_id} ({j.kind}, {j.job_id})"
            if job is None or job.status not in ("completed", "dead"):
                result.lost.append(f"{label}: {job.status if job else 'row missing'}")
                continue
            result.jobs_completed += job.status == "completed"
            result.jobs_dead += job.status == "dead"
            if charges > 1:
                key = f"{j.job_id}#charge"
                excused = charges <= 1 + injector.in_window[key]
                (result.at_least_once if excused else result.duplicated).append(f"{label} charged x{charges}")
            never_finished = [e for e in job.errors if "never finished" in str(e.get("error"))]
            if j.kind == "job-invalid" and (job.status != "dead" or charges):
                result.misrouted.append(f"{label}: {job.status}, charged {charges}x")
            elif job.kind == "charge" and never_finished:  # that message is for single-UPDATE runs only
                result.misrouted.append(f"{label}: a two-phase job reaped as a single-UPDATE run")
            elif j.kind != "job-invalid" and job.status == "dead":
                result.exhausted.append(f"{label}: dead after {job.attempt} attempts")
            elif job.kind == "charge" and job.status == "completed" and not charges:
                result.misrouted.append(f"{label}: completed, never charged")
            elif (
                job.kind == "thumbnail"
                and job.status == "completed"
                and not self._ledger(j.job_id, "thumbnail")
            ):
                result.misrouted.append(f"{label}: completed, never rendered")

    def _redriven_origins(self) -> set[str]:
        """Origin ids of the messages sent back from the work DLQ since the last call, from the functions'
        log lines (the redriver's re-driven lines; the redrive state machine's Plan step's)."""
        try:
            with self._log_path.open("rb") as f:
                f.seek(self._log_offset)
                chunk = f.read()
        except FileNotFoundError:
            return set()
        end = chunk.rfind(b"\n") + 1  # whole lines only: the rest is read next time
        self._log_offset += end
        out: set[str] = set()
        for raw in chunk[:end].split(b"\n"):
            if LOG_MESSAGE_REDRIVEN.encode() not in raw and LOG_REDRIVE_PLANNED.encode() not in raw:
                continue
            try:
                entry = json.loads(raw)
            except ValueError:
                continue
            planned = entry.get("message") == LOG_REDRIVE_PLANNED and entry.get("action") != "poison"
            if (entry.get("message") == LOG_MESSAGE_REDRIVEN or planned) and entry.get("origin_id"):
                out.add(str(entry["origin_id"]))
        return out

    def _clean_up(self) -> None:
        sqs = self.stack.client("sqs")
        for output in ("PoisonPillQueueUrl",):
            for message in self.stack.every_message(output):
                sqs.delete_message(
                    QueueUrl=self.stack.outputs[output], ReceiptHandle=message["ReceiptHandle"]
                )


def _a_bug(error: str) -> bool:
    """Whether an order's last error is one no injected fault produces: a built-in exception other than
    an OS or connection error (a TypeError, KeyError, ... in the code that handled it)."""
    kind = getattr(builtins, error, None) if error else None
    return isinstance(kind, type) and issubclass(kind, Exception) and not issubclass(kind, OSError)


def _a_fault(error: str | None) -> bool:
    """Whether an order isolated with this last error (None: not isolated) may have run out of retries
    under the faults: neither a verdict (``PermanentError``) nor a bug (:func:`_a_bug`)."""
    return error is not None and error != "PermanentError" and not _a_bug(error)


def mode_of(seed: int) -> str:
    """Even seeds run with RedriveMode=lambda, odd ones with stepfunctions."""
    return "lambda" if seed % 2 == 0 else "stepfunctions"


def run_worker(seeds: list[int], *, mode: str, log_dir: Path, options: Options) -> int:
    """Run ``seeds`` on one stack; one JSON line per seed on stdout. Exit 1 when any seed failed."""
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"soak-{mode}-{seeds[0] if seeds else 0}.functions.log"
    console = sys.stdout
    sys.stdout = log_path.open("a", buffering=1, encoding="utf-8")  # the functions' JSON logs and EMF
    faults_log = logging.FileHandler(log_path.with_suffix(".faults.log"), encoding="utf-8")
    faults_log.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    logging.getLogger("sluice_local.emulation.faults").addHandler(faults_log)  # every fault, with its seed
    logging.getLogger("sluice_local.emulation.faults").setLevel(logging.INFO)
    failed = 0
    params = {**FAST, "RedriveMode": mode}
    database = postgres.database_url()
    no_jobs = (
        "not in this workload"
        if options.workload == "orders"
        else postgres.unreachable_reason(database) or ""
    )
    stack_name = f"sluice-soak-{mode}"
    with local_cloud(
        parameters=params, stack_name=stack_name, database_url=None if no_jobs else database
    ) as cloud:
        soak = Soak(cloud, log_path, mode=mode, options=options, no_jobs=no_jobs)
        for seed in seeds:
            result = soak.run(seed)
            failed += not result.ok
            print(result.to_json(), file=console, flush=True)
    return 1 if failed else 0


def _site(apis: tuple[str, ...], kinds: tuple[str, ...], caller: str = "") -> Any:
    def hit(site: str) -> bool:
        who, api, kind = [*site.split(" ", 2), "", ""][:3]
        return api in apis and kind.startswith(kinds) and who.startswith(caller)

    return hit


LOST = (faults.LOST_RESPONSE,)  # and lost-response-every-attempt
DB_SITES = tuple(
    f"db:{statement}"
    for statement in (
        "start", "commit", "complete_if_pending", "fail", "fail_if_pending", "state", "get",
        "expired_claims", "reap", "due_for_retry", "orphans", "migrate",
    )
)  # fmt: skip
DIED = (faults.CRASH,)
NAMED_POINTS: tuple[tuple[str, Any], ...] = (
    ("DeleteMessage(Batch): response lost", _site(("DeleteMessage", "DeleteMessageBatch"), LOST)),
    ("SendMessage(Batch): response lost", _site(("SendMessage", "SendMessageBatch"), LOST)),
    ("PutObject/DeleteObject: response lost", _site(("PutObject", "DeleteObject"), LOST)),
    ("StartExecution: response lost", _site(("StartExecution",), LOST)),
    ("DynamoDB writes: response lost", _site(("PutItem", "UpdateItem", "DeleteItem"), LOST)),
    (
        "SendMessageBatch/DeleteMessageBatch: partial",
        _site(("SendMessageBatch", "DeleteMessageBatch"), ("partial",)),
    ),
    ("claim-check GetObject: NoSuchKey", _site(("GetObject",), ("no-such-key",), "ConsumerFunction")),
    ("consumer died before a guard's commit", _site(("UpdateItem",), DIED, "ConsumerFunction")),
    (
        "rehydrator died part-way through an object",
        _site(("SendMessageBatch", "PutObject", "DeleteObject"), DIED, "Rehydrator"),
    ),
    (
        "redriver died between its send and its delete",
        _site(("DeleteMessageBatch",), DIED, "RedriverFunction"),
    ),
    ("job store: connection dropped before a statement", _site(DB_SITES, (faults.DB_DROPPED,))),
    ("job store: statement committed, response lost", _site(DB_SITES, (faults.DB_LOST_RESPONSE,))),
    (
        "job consumer died between its side effect and its commit",
        _site(("db:commit", "db:complete_if_pending"), DIED, "JobConsumerFunction"),
    ),
)
"""(what, does a fault site ``"<caller> <API> <kind>"`` count for it)"""


@dataclass
class Summary:
    results: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    expected: list[int] | None = None
    """The seeds asked for (None: whatever results came): a seed without a result fails the run."""
    jobs_required: bool = False
    """The workload includes the jobs: a seed that skipped them (no PostgreSQL answered) fails the run,
    which would otherwise pass without the job store having been soaked at all."""

    @property
    def jobs_skipped(self) -> list[str]:
        return sorted({r["jobs_skipped"] for r in self.results if r.get("jobs_skipped")})

    @property
    def missing(self) -> list[int]:
        """Seeds asked for that reported no result (their worker died before them)."""
        return sorted(set(self.expected or ()) - {int(r["seed"]) for r in self.results})

    def add(self, line: str) -> None:
        try:
            self.results.append(json.loads(line))
        except ValueError:
            self.errors.append(line)

    def lines(self, *, rates: str, flags: str = "") -> list[str]:
        """The report; ``flags`` are the options a replay needs besides the seed (rates, sabotage)."""
        faults_by_kind: Counter[str] = Counter()
        for r in self.results:
            faults_by_kind.update(r["faults"])
        total = {k: sum(r[k] for r in self.results) for k in ("sent", "processed", "poison", "dead_lettered")}
        jobs = {
            k: sum(r.get(k, 0) for r in self.results) for k in ("jobs_sent", "jobs_completed", "jobs_dead")
        }
        no_jobs = self.jobs_skipped
        lost = sum(len(r["lost"]) for r in self.results)
        duplicated = sum(len(r["duplicated"]) for r in self.results)
        unexpected = sum(len(r["unexpected"]) for r in self.results)
        misrouted = sum(len(r.get("misrouted", [])) for r in self.results)
        exhausted = sum(len(r.get("exhausted", [])) for r in self.results)
        redriven: Counter[str] = Counter({"lambda": 0, "stepfunctions": 0})
        for r in self.results:
            redriven[r["mode"]] += len(r.get("redriven", []))
        out = [
            f"seeds run: {len(self.results)} ({rates})"
            + (f"; MISSING {len(self.missing)}: {self.missing[:20]}" if self.missing else ""),
            f"messages: {total['sent']} orders, {jobs['jobs_sent']} jobs"
            + (f" (job store skipped: {no_jobs[0]})" if no_jobs else ""),
            f"faults injected: {sum(faults_by_kind.values())} — "
            + ", ".join(f"{k} {v}" for k, v in sorted(faults_by_kind.items())),
            f"lost = {lost}, duplicated side effects = {duplicated}, unexpected = {unexpected}, "
            f"misrouted = {misrouted}",
            f"valid orders isolated after their retries and redrives ran out under the faults: {exhausted}",
            "orders re-driven from the work DLQ: "
            + ", ".join(f"{mode} {n}" for mode, n in sorted(redriven.items())),
            f"orders also found in a second place (a redelivered copy isolated or dead-lettered): "
            f"{sum(len(r.get('overlaps', [])) for r in self.results)}",
            f"performed again inside the at-least-once window (a fault between an effect and its guard's "
            f"commit; not a violation): {sum(len(r['at_least_once']) for r in self.results)}",
            f"conservation: sent {total['sent']} = processed {total['processed']} + poison {total['poison']}"
            f" + dead-lettered {total['dead_lettered']}"
            + (
                " ✓"
                if total["sent"] == total["processed"] + total["poison"] + total["dead_lettered"]
                else " ✗"
            ),
            f"jobs: sent {jobs['jobs_sent']} = completed {jobs['jobs_completed']} + dead {jobs['jobs_dead']}"
            + (" ✓" if jobs["jobs_sent"] == jobs["jobs_completed"] + jobs["jobs_dead"] else " ✗"),
        ]
        for r in self.results:
            if not r["ok"]:
                out.append(
                    f"FAILED seed {r['seed']} ({r['mode']}): lost {r['lost']} duplicated {r['duplicated']} "
                    f"unexpected {r['unexpected']} misrouted {r.get('misrouted', [])} stuck {r['stuck']!r}; "
                    "replay it alone: "
                    f"python -m sluice_local soak --seed {r['seed']}{flags}"
                )
        where: Counter[str] = Counter()
        for r in self.results:
            where.update(r["faults_at"])
        out.append("the fault points issue 11 names, hits:")
        out += [
            f"  {sum(n for site, n in where.items() if hit(site)):5d}  {name}" for name, hit in NAMED_POINTS
        ]
        out.append(f"faults by call site ({len(where)} sites), most hit first:")
        out += [f"  {n:5d}  {site}" for site, n in where.most_common(25)]
        out += [f"worker error: {e}" for e in self.errors]
        if self.jobs_required and no_jobs:
            out.append(
                f"FAILED: the job store was not soaked ({no_jobs[0]}); point SLUICE_DATABASE_URL at a "
                "PostgreSQL, or run --workload orders to soak without the jobs"
            )
        return out

    @property
    def ok(self) -> bool:
        return (
            bool(self.results)
            and not self.errors
            and not self.missing
            and not (self.jobs_required and self.jobs_skipped)
            and all(r["ok"] for r in self.results)
        )


def gather(processes: list[tuple[str, subprocess.Popen[str]]], summary: Summary, log_dir: Path) -> None:
    """Every worker's result lines into ``summary``, all workers read at once: read one after another,
    a worker whose pipe filled (64 KiB, about 40 seeds' lines) blocked between seeds until every worker
    before it had finished, and a 500-seed run stalled three of its four stacks."""
    lock = threading.Lock()

    def read(command: str, process: subprocess.Popen[str]) -> None:
        for line in process.stdout or ():
            with lock:
                summary.add(line.strip())
        if process.wait() not in (0, 1):
            with lock:
                summary.errors.append(f"{command} exited {process.returncode} (see its .stderr in {log_dir})")

    readers = [threading.Thread(target=read, args=pair, daemon=True) for pair in processes]
    for reader in readers:
        reader.start()
    for reader in readers:
        reader.join()


def run(seeds: list[int], *, workers: int, log_dir: Path, options: Options) -> Summary:
    """Run ``seeds`` in ``workers`` processes (each its own stack, one RedriveMode) and gather them."""
    by_mode: dict[str, list[int]] = {"lambda": [], "stepfunctions": []}
    for seed in seeds:
        by_mode[mode_of(seed)].append(seed)
    jobs: list[tuple[str, list[int]]] = []
    per_mode = max(1, workers // 2)
    for mode, mode_seeds in by_mode.items():
        for i in range(per_mode):
            chunk = mode_seeds[i::per_mode]
            if chunk:
                jobs.append((mode, chunk))
    processes: list[tuple[str, subprocess.Popen[str]]] = []
    for mode, chunk in jobs:
        cmd = [
            sys.executable, "-m", "sluice_local", "soak-worker", "--mode", mode,
            "--seeds", ",".join(map(str, chunk)), "--log-dir", str(log_dir),
            *options.argv(),
        ]  # fmt: skip
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "SLUICE_", "MOTO_"))}
        if "SLUICE_DATABASE_URL" in os.environ:  # the job store's PostgreSQL, when not the default
            env["SLUICE_DATABASE_URL"] = os.environ["SLUICE_DATABASE_URL"]
        log_dir.mkdir(parents=True, exist_ok=True)
        with (log_dir / f"worker-{mode}-{chunk[0]}.stderr").open("wb") as stderr:
            processes.append(
                (
                    " ".join(cmd[1:]),
                    subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=stderr, text=True, env=env),
                )
            )
    summary = Summary(expected=list(seeds), jobs_required=options.workload != "orders")
    gather(processes, summary, log_dir)
    summary.results.sort(key=lambda r: r["seed"])
    (log_dir / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in summary.results))
    return summary


__all__ = ["KINDS", "Options", "SeedResult", "Soak", "Summary", "gather", "mode_of", "run", "run_worker"]
