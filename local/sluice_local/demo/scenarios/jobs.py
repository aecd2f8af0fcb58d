"""The job store's scenarios: job rows in the real PostgreSQL → job messages → the job consumer,
the reaper and the retry sweeper (docs/jobs.md). Judged from the rows and the example's ledger."""

from __future__ import annotations

import uuid
from typing import Any

from sluice.jobs import Job, job_message
from sluice_local.app.observer import Stack, envelope_of
from sluice_local.app.principals import PRODUCER
from sluice_local.demo.scenarios.runner import Scenario

CENTS = 1999


class _JobScenario(Scenario):
    timeout = 90.0

    def create(self, stack: Stack, kind: str, suffix: str, **payload: Any) -> uuid.UUID:
        created = stack.job_store().create(kind, {"order_id": f"{self.prefix}{suffix}", **payload})
        return created.id  # type: ignore[no-any-return]

    def enqueue(self, stack: Stack, job_id: uuid.UUID | str) -> str:
        response = stack.client("sqs", PRODUCER).send_message(
            QueueUrl=stack.outputs["JobQueueUrl"], MessageBody=job_message(job_id)
        )
        return str(response["MessageId"])

    def jobs(self, stack: Stack, ids: list[uuid.UUID]) -> list[Job]:
        store = stack.job_store()
        return [job for job in (store.get(i) for i in ids) if job is not None]


class JobsExactlyOnce(_JobScenario):
    name = "jobs-exactly-once"
    count = 8
    expected = (
        f"{count} charge jobs (two-phase) + 4 thumbnails (single-UPDATE), every message sent twice → "
        "all rows completed on attempt 1, each card charged once"
    )

    def start(self, stack: Stack) -> None:
        self.charges = [self.create(stack, "charge", str(i), amount_cents=CENTS) for i in range(self.count)]
        self.thumbs = [self.create(stack, "thumbnail", f"t{i}") for i in range(4)]
        for _ in range(2):
            for job_id in self.charges + self.thumbs:
                self.enqueue(stack, job_id)

    def observe(self, stack: Stack) -> tuple[bool, str]:
        jobs = self.jobs(stack, self.charges + self.thumbs)
        done = [j for j in jobs if j.status == "completed"]
        charged = stack.charges(self.prefix)
        ok = (
            len(done) == len(self.charges) + len(self.thumbs)
            and all(j.attempt == 1 for j in done)
            and len(charged) == self.count
            and set(charged.values()) == {1}
        )
        return ok, (
            f"{len(done)}/{len(jobs)} rows completed (attempts {sorted({j.attempt for j in done})}), "
            f"{len(charged)} cards charged, max {max(charged.values(), default=0)}x"
        )


class JobCrashRecovered(_JobScenario):
    name = "jobs-crash-reaped"
    expected = (
        "a worker claimed a charge and died before committing; its message is redelivered → already "
        "handled; after the lease the reaper takes the claim back → completed on attempt 2, charged once"
    )

    def start(self, stack: Stack) -> None:
        self.job_id = self.create(stack, "charge", "crash", amount_cents=CENTS)
        stack.job_store().claim(self.job_id)  # the worker that crashed between claim and commit
        self.enqueue(stack, self.job_id)  # SQS redelivers its message

    def observe(self, stack: Stack) -> tuple[bool, str]:
        job = stack.job_store().get(self.job_id)
        charged = stack.charges(self.prefix)
        reaped = [e for e in job.errors if "claim expired" in e["error"]] if job else []
        ok = job is not None and job.status == "completed" and job.attempt == 2 and reaped != []
        ok = ok and list(charged.values()) == [1]
        status = f"{job.status}, attempt {job.attempt}" if job else "missing"
        return (
            ok,
            f"row {status}, {len(reaped)} expired claim(s) in its history, charged {sum(charged.values())}x",
        )


class JobRetried(_JobScenario):
    name = "jobs-retried"
    expected = (
        "a charge whose provider fails twice → error rows re-enqueued by the sweeper with backoff → "
        "completed on attempt 3 with 2 errors in its history, charged once"
    )

    def start(self, stack: Stack) -> None:
        self.job_id = self.create(stack, "charge", "flaky", amount_cents=CENTS, fail_attempts=2)
        self.enqueue(stack, self.job_id)

    def observe(self, stack: Stack) -> tuple[bool, str]:
        job = stack.job_store().get(self.job_id)
        charged = stack.charges(self.prefix)
        ok = job is not None and job.status == "completed" and job.attempt == 3 and len(job.errors) == 2
        ok = ok and list(charged.values()) == [1]
        if job is None:
            return False, "row missing"
        return (
            ok,
            f"row {job.status}, attempt {job.attempt}, {len(job.errors)} error(s), "
            f"charged {sum(charged.values())}x",
        )


class JobDead(_JobScenario):
    name = "jobs-dead"
    expected = (
        "an invalid charge → dead at once; a charge failing every time (2 attempts) → dead after 2 "
        "with both errors; neither charged"
    )

    def start(self, stack: Stack) -> None:
        self.invalid = self.create(stack, "charge", "invalid", amount_cents=0)
        store = stack.job_store()
        created = store.create(
            "charge",
            {"order_id": f"{self.prefix}down", "amount_cents": CENTS, "fail_attempts": 99},
            max_attempts=2,
        )
        self.exhausted = created.id
        self.enqueue(stack, self.invalid)
        self.enqueue(stack, self.exhausted)

    def observe(self, stack: Stack) -> tuple[bool, str]:
        invalid, exhausted = self.jobs(stack, [self.invalid, self.exhausted])
        charged = stack.charges(self.prefix)
        ok = (
            invalid.status == "dead"
            and len(invalid.errors) == 1
            and exhausted.status == "dead"
            and [e["attempt"] for e in exhausted.errors] == [1, 2]
            and not charged
        )
        return ok, (
            f"invalid: {invalid.status} ({len(invalid.errors)} error), exhausted: {exhausted.status} "
            f"({len(exhausted.errors)} errors), {len(charged)} charged"
        )


class JobForged(_JobScenario):
    name = "jobs-forged"
    expected = "a message naming no job and one that is not a job message → PoisonPillQueue with reasons"

    def start(self, stack: Stack) -> None:
        self.sent = {
            self.enqueue(stack, uuid.uuid4()),
            str(
                stack.client("sqs", PRODUCER).send_message(
                    QueueUrl=stack.outputs["JobQueueUrl"], MessageBody='{"job": "' + self.prefix + '"}'
                )["MessageId"]
            ),
        }

    def observe(self, stack: Stack) -> tuple[bool, str]:
        reasons = []
        for m in stack.every_message("PoisonPillQueueUrl"):
            env = envelope_of(m)
            if env is not None and env.origin_id in self.sent and env.last_error is not None:
                reasons.append(env.last_error.type)
        return len(reasons) == 2, f"{len(reasons)} in PoisonPillQueue ({', '.join(sorted(reasons)) or '-'})"


def job_scenarios() -> list[Scenario]:
    return [JobsExactlyOnce(), JobCrashRecovered(), JobRetried(), JobDead(), JobForged()]


JOB_SCENARIO_NAMES = tuple(s.name for s in job_scenarios())
