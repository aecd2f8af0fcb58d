"""A job consumer's SQS batch against a real PostgreSQL: one statement starts the batch (each job claimed
under a token of its own), one fenced statement commits its successes (each row matched on its own
token), failures are recorded one by one.

Skipped, with the reason printed, when no PostgreSQL answers (``SLUICE_DATABASE_URL``, else
127.0.0.1:5432).
"""

from __future__ import annotations

import io
import json
import time
import uuid
from typing import Any

import psycopg
from aws_lambda_powertools import Logger
from psycopg import sql

from sluice.errors import JobNotFound, PermanentError, TransientError
from sluice.jobs import Delivery, Job, JobKinds, JobStore, JobWorker, Outcome
from sluice.jobs.worker import OutOfTime
from tests.functional.test_job_store import store_for


def _row(url: str, schema: str, job_id: uuid.UUID) -> dict[str, Any]:
    with psycopg.connect(url, autocommit=True, row_factory=psycopg.rows.dict_row) as conn:
        row = conn.execute(
            sql.SQL(
                "SELECT status, attempt, claim_token, claimed_by, errors, result FROM {} WHERE id = %s"
            ).format(sql.Identifier(schema, "jobs")),
            (job_id,),
        ).fetchone()
    assert row is not None
    return row


def _age_claim(url: str, schema: str, job_id: uuid.UUID) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            sql.SQL("UPDATE {} SET claimed_at = now() - interval '1 hour' WHERE id = %s").format(
                sql.Identifier(schema, "jobs")
            ),
            (job_id,),
        )


def _worker(store: JobStore, handler: Any, *, log: io.StringIO | None = None) -> JobWorker:
    kinds = JobKinds()
    kinds.register("charge", mode="two_phase")(handler)
    logger = Logger(service=f"sluice-test-{uuid.uuid4().hex}", stream=log) if log is not None else None
    return JobWorker(store, kinds, logger=logger)


def test_a_stale_commit_in_a_batch_is_refused(pg_url, jobs_schema):
    # Given a batch of three jobs claimed by one worker, and a second worker on the same table
    store, other = (
        store_for(pg_url, jobs_schema, worker="first"),
        store_for(pg_url, jobs_schema, worker="second"),
    )
    a, b, c = (store.create("charge", {"n": i}).id for i in range(3))
    tokens: dict[uuid.UUID, uuid.UUID | None] = {}
    taken: list[uuid.UUID] = []

    def handler(job: Job) -> dict[str, int]:
        tokens[job.id] = job.claim_token
        if job.id == c:  # while the batch still runs: b's claim expires, is reaped and claimed again
            _age_claim(pg_url, jobs_schema, b)
            assert other.reap(900).pending == [b]
            taken.append(other.claim(b).token)
        return {"n": job.payload["n"]}

    log = io.StringIO()
    # When the batch runs and commits its three successes in one statement
    outcomes = _worker(store, handler, log=log).run_batch([Delivery(a), Delivery(b), Delivery(c)])

    # Then each job was claimed under a token of its own
    assert len(set(tokens.values())) == 3
    # ... the commit refused exactly the re-claimed row and committed the other two
    assert outcomes == [Outcome.COMPLETED, Outcome.LOST_CLAIM, Outcome.COMPLETED]
    assert _row(pg_url, jobs_schema, a)["status"] == "completed"
    assert _row(pg_url, jobs_schema, c)["result"] == {"n": 2}
    # ... the re-claimed row is the second worker's, untouched
    row_b = _row(pg_url, jobs_schema, b)
    assert (row_b["status"], row_b["claim_token"], row_b["claimed_by"]) == ("processing", taken[0], "second")
    assert row_b["result"] is None
    # ... and the refusal is reported, naming the job
    lost = [json.loads(line) for line in log.getvalue().splitlines() if "claim lost" in line]
    assert [line["job_id"] for line in lost] == [str(b)]


def test_a_batch_commit_refuses_a_reaped_row_at_the_store(pg_url, jobs_schema):
    # Given three claims of one batch, one of them reaped (no one claimed it again)
    store = store_for(pg_url, jobs_schema)
    ids = [store.create("charge").id for _ in range(3)]
    started = store.start_batch([(i, None) for i in ids], two_phase=["charge"], single=[])
    claims = [started[i][2] for i in ids]
    assert all(claims)
    _age_claim(pg_url, jobs_schema, ids[0])
    assert store.reap(900).pending == [ids[0]]

    # When the batch commits
    lost = store.commit_batch([(claim, '{"ok": true}') for claim in claims if claim is not None])

    # Then only the reaped row is refused, and it stays pending for its next delivery
    assert set(lost) == {ids[0]}
    assert "reaped" in str(lost[ids[0]])
    assert _row(pg_url, jobs_schema, ids[0])["status"] == "pending"
    assert [_row(pg_url, jobs_schema, i)["result"] for i in ids[1:]] == [{"ok": True}, {"ok": True}]
    # ... and committing the same batch again (a retry after a lost answer) reports the same, no more
    assert set(store.commit_batch([(claim, "{}") for claim in claims if claim is not None])) == {ids[0]}
    assert [_row(pg_url, jobs_schema, i)["result"] for i in ids[1:]] == [{"ok": True}, {"ok": True}]


def test_a_batch_with_a_repeated_an_unknown_and_a_finished_job(pg_url, jobs_schema):
    # Given a pending job, a finished one and an id with no row
    store = store_for(pg_url, jobs_schema)
    pending, done, unknown = store.create("charge").id, store.create("charge").id, uuid.uuid4()
    ran: list[uuid.UUID] = []
    worker = _worker(store, lambda job: ran.append(job.id))
    assert worker.run(done) is Outcome.COMPLETED
    ran.clear()

    # When one batch names the pending job twice, the unknown id and the finished job
    outcomes = worker.run_batch([Delivery(pending), Delivery(pending), Delivery(unknown), Delivery(done)])

    # Then the pending job ran once and completed, its repeat and the finished job are already handled,
    # and the unknown id is reported for the poison queue
    assert ran == [pending]
    assert outcomes[0] is Outcome.COMPLETED
    assert outcomes[1] is Outcome.ALREADY_HANDLED
    assert isinstance(outcomes[2], JobNotFound)
    assert outcomes[3] is Outcome.ALREADY_HANDLED
    assert _row(pg_url, jobs_schema, pending)["attempt"] == 1
    assert _row(pg_url, jobs_schema, done)["attempt"] == 1


def test_a_batch_mixing_successes_and_failures(pg_url, jobs_schema):
    # Given four jobs: two that succeed, one that fails transiently, one that fails for good
    store = store_for(pg_url, jobs_schema)
    plans = ["ok", "flaky", "bad", "ok"]
    ids = [store.create("charge", {"plan": plan}).id for plan in plans]

    def handler(job: Job) -> dict[str, str]:
        if job.payload["plan"] == "flaky":
            raise TransientError("provider down")
        if job.payload["plan"] == "bad":
            raise PermanentError("card refused for good")
        return {"charged": str(job.id)}

    # When they run as one batch
    outcomes = _worker(store, handler).run_batch([Delivery(i) for i in ids])

    # Then the successes are committed, the failures recorded each in its row
    assert outcomes == [Outcome.COMPLETED, Outcome.FAILED, Outcome.DEAD, Outcome.COMPLETED]
    rows = [_row(pg_url, jobs_schema, i) for i in ids]
    assert [r["status"] for r in rows] == ["completed", "error", "dead", "completed"]
    assert rows[0]["result"] == {"charged": str(ids[0])}
    assert rows[1]["errors"][0]["error"] == "TransientError: provider down"
    assert rows[2]["errors"][0]["error"] == "PermanentError: card refused for good"


def test_claims_whose_handler_never_started_are_released(pg_url, jobs_schema):
    # Given a batch whose invocation is out of time once its jobs are claimed
    store = store_for(pg_url, jobs_schema)
    ids = [store.create("charge").id for _ in range(2)]
    ran: list[uuid.UUID] = []

    # When it runs
    outcomes = _worker(store, lambda job: ran.append(job.id)).run_batch(
        [Delivery(i) for i in ids], deadline=time.monotonic() - 1
    )

    # Then no handler ran, each message goes back to SQS, and each row is pending as before its claim
    assert ran == []
    assert all(isinstance(o, OutOfTime) for o in outcomes)
    for job_id in ids:
        row = _row(pg_url, jobs_schema, job_id)
        assert (row["status"], row["attempt"], row["claim_token"]) == ("pending", 0, None)


def test_the_worker_lines_about_a_batch_job_carry_its_delivery_keys(pg_url, jobs_schema):
    # Given a batch of two jobs, one that fails for good, each delivered by its own message
    store = store_for(pg_url, jobs_schema)
    good, bad = store.create("charge", {"ok": True}).id, store.create("charge", {"ok": False}).id

    def handler(job: Job) -> None:
        if not job.payload["ok"]:
            raise PermanentError("card refused for good")

    log = io.StringIO()
    deliveries = [
        Delivery(good, log_keys={"message_id": "m-1", "correlation_id": "c-1"}),
        Delivery(bad, log_keys={"message_id": "m-2", "correlation_id": "c-2"}),
    ]
    # When the batch runs
    assert _worker(store, handler, log=log).run_batch(deliveries) == [Outcome.COMPLETED, Outcome.DEAD]

    # Then the line about the dead job carries its own message's keys, and none is left on later lines
    lines = [json.loads(line) for line in log.getvalue().splitlines()]
    [dead] = [line for line in lines if line.get("job_id") == str(bad)]
    assert (dead["message_id"], dead["correlation_id"]) == ("m-2", "c-2")
    assert all("message_id" not in line for line in lines if line is not dead)


def test_single_update_runs_whose_handler_never_started_leave_no_mark(pg_url, jobs_schema):
    # Given a batch of single-UPDATE jobs whose invocation is out of time once their runs are marked
    store = store_for(pg_url, jobs_schema)
    ids = [store.create("thumbnail").id for _ in range(2)]
    ran: list[uuid.UUID] = []
    kinds = JobKinds()
    kinds.register("thumbnail", mode="single")(lambda job: ran.append(job.id))

    # When it runs
    outcomes = JobWorker(store, kinds).run_batch([Delivery(i) for i in ids], deadline=time.monotonic() - 1)

    # Then no handler ran, each message goes back to SQS, and no run is left marked in flight (the reaper
    # would count it as an attempt that never finished)
    assert ran == []
    assert all(isinstance(o, OutOfTime) for o in outcomes)
    for job_id in ids:
        row = _row(pg_url, jobs_schema, job_id)
        assert (row["status"], row["attempt"], row["claim_token"]) == ("pending", 0, None)


def test_a_batch_mixing_modes_runs_each_in_its_own(pg_url, jobs_schema):
    # Given a two-phase job and a single-UPDATE job in one batch
    store = store_for(pg_url, jobs_schema)
    charge, thumbnail = store.create("charge").id, store.create("thumbnail").id
    kinds = JobKinds()
    kinds.register("charge", mode="two_phase")(lambda job: {"charged": True})
    kinds.register("thumbnail", mode="single")(lambda job: {"resized": True})

    # When the batch runs
    outcomes = JobWorker(store, kinds).run_batch([Delivery(charge), Delivery(thumbnail)])

    # Then both complete, each counted once
    assert outcomes == [Outcome.COMPLETED, Outcome.COMPLETED]
    assert [
        (_row(pg_url, jobs_schema, i)["status"], _row(pg_url, jobs_schema, i)["attempt"])
        for i in (charge, thumbnail)
    ] == [
        ("completed", 1),
        ("completed", 1),
    ]
