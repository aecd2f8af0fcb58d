"""The job store against a real PostgreSQL (never a mock: the locks are Postgres's).

Skipped, with the reason printed, when no PostgreSQL answers (``SLUICE_DATABASE_URL``, else
127.0.0.1:5432).
"""

from __future__ import annotations

import queue
import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
import pytest
from psycopg import sql

from sluice.errors import (
    AlreadyHandled,
    JobContention,
    JobNotFound,
    JobStoreUnavailable,
    LostClaim,
    PermanentError,
    RetryAfter,
    TransientError,
)
from sluice.jobs import (
    Connector,
    JobKinds,
    JobStore,
    JobWorker,
    Outcome,
    Reaped,
    Requeue,
    migrate,
    migrations,
)

JOIN_SECONDS = 90  # generous: a loaded 2-core machine


def ids(jobs: list[Requeue]) -> list[uuid.UUID]:
    """The job ids of what the sweeper takes (each also carries its trace)."""
    return [job.id for job in jobs]


TEST_CONNECT_TIMEOUT_SECONDS = 30
"""The tests' connect timeout: 16 threads connecting at once to a PostgreSQL on a loaded 2-core machine
took longer than the deployed default's 5 s (a CI run: JobStoreUnavailable, 'connection timeout
expired'). What these tests race is claims, not connections."""


def store_for(url: str, schema: str, *, worker: str = "w", **kw) -> JobStore:
    connector = Connector(
        lambda _refresh: url, application_name=worker, connect_timeout_seconds=TEST_CONNECT_TIMEOUT_SECONDS
    )
    return JobStore(connector, schema=schema, worker=worker, **kw)


def run_threads(n: int, target: Callable[[int], None]) -> None:
    errors: list[BaseException] = []

    def guarded(i: int) -> None:
        try:
            target(i)
        except BaseException as exc:  # noqa: BLE001 - reported to the test below
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(JOIN_SECONDS)
        assert not t.is_alive(), "a worker thread hung"
    assert not errors, errors


def table(schema: str) -> sql.Composed:
    return sql.SQL("{}").format(sql.Identifier(schema, "jobs"))


# --- schema ------------------------------------------------------------------------------------------


def test_migrations_apply_once_even_when_raced(pg_url):
    # Given a schema nobody has migrated
    schema = f"sluice_t_{uuid.uuid4().hex[:12]}"
    applied: list[list[int]] = []
    try:
        # When eight cold starts migrate it at once
        def one(_i: int) -> None:
            with psycopg.connect(pg_url, autocommit=True) as conn:
                applied.append(migrate(conn, schema))

        run_threads(8, one)
        # Then exactly one of them applied every version, and running it again applies nothing
        assert sorted(map(tuple, applied)) == [()] * 7 + [tuple(m.version for m in migrations())]
        assert len(migrations()) >= 3
        with psycopg.connect(pg_url, autocommit=True) as conn:
            assert migrate(conn, schema) == []
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def test_the_claim_reaper_and_sweeper_queries_use_their_indexes(pg_url, jobs_schema):
    # Given 20 000 finished jobs and a handful in each working state, analyzed
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                "INSERT INTO {} (id, kind, status, completed_at)"
                " SELECT gen_random_uuid(), 'k', 'completed', now()"
                " FROM generate_series(1, 20000)"
            ).format(table(jobs_schema))
        )
        store = store_for(pg_url, jobs_schema)
        for _ in range(5):
            store.claim(store.create("k").id)
        conn.execute(sql.SQL("ANALYZE {}").format(table(jobs_schema)))

        def plan(query: str) -> str:
            rows = conn.execute(sql.SQL("EXPLAIN " + query).format(jobs=table(jobs_schema))).fetchall()
            return "\n".join(r[0] for r in rows)

        # Then each maintenance query reads its partial index, and a claim reads an index (never the table)
        assert "jobs_claimed_at" in plan(
            "SELECT id, claim_token FROM {jobs} WHERE status IN ('processing', 'pending')"
            " AND claimed_at IS NOT NULL AND claimed_at < now() - interval '15 minutes'"
            " ORDER BY claimed_at LIMIT 500"
        )
        assert "jobs_error_next_attempt_at" in plan(
            "SELECT id FROM {jobs} WHERE status = 'error' AND next_attempt_at <= now()"
            " ORDER BY next_attempt_at LIMIT 500 FOR UPDATE SKIP LOCKED"
        )
        assert "jobs_pending_updated_at" in plan(
            "SELECT id FROM {jobs} WHERE status = 'pending' AND updated_at < now() - interval '15 minutes'"
            " ORDER BY updated_at LIMIT 500 FOR UPDATE SKIP LOCKED"
        )
        claim_plan = plan(
            "UPDATE {jobs} SET status = 'processing'"
            " WHERE id = '00000000-0000-4000-8000-000000000000' AND status = 'pending'"
        )
        assert "Index Scan" in claim_plan
        assert "Seq Scan" not in claim_plan


# --- create ------------------------------------------------------------------------------------------


def test_create_is_idempotent_on_the_unique_key(pg_url, jobs_schema):
    store = store_for(pg_url, jobs_schema)
    first = store.create("email", {"to": "a@example.com"}, unique_key="order-42:email")
    again = store.create("email", {"to": "a@example.com"}, unique_key="order-42:email")
    assert first.created
    assert not again.created
    assert again.id == first.id
    job = store.get(first.id)
    assert job is not None
    assert job.status == "pending"
    assert job.attempt == 0
    assert job.max_attempts == 5


# --- the races ---------------------------------------------------------------------------------------


def test_16_workers_racing_on_one_two_phase_job_run_its_side_effect_once(pg_url, jobs_schema):
    # Given one two-phase job whose side effect must not repeat
    job_id = store_for(pg_url, jobs_schema).create("charge", {"cents": 500}).id
    charges: list[str] = []
    kinds = JobKinds()

    losers_done = threading.Event()
    outcomes: list[Outcome] = []
    lock = threading.Lock()

    @kinds.register("charge", mode="two_phase")
    def charge(job):
        charges.append(str(job.id))
        # The winner holds its claim until all 15 others were turned away: they really overlapped it.
        assert losers_done.wait(JOIN_SECONDS), "the other workers never finished while the claim was held"
        return {"charged": job.payload["cents"]}

    start = threading.Barrier(16, timeout=JOIN_SECONDS)

    # When 16 workers, each with its own (already open) connection, deliver the same job at once
    def worker(i: int) -> None:
        store = store_for(pg_url, jobs_schema, worker=f"w{i}")
        store.get(job_id)  # connected before the start line
        w = JobWorker(store, kinds)
        start.wait()
        outcome = w.run(job_id)
        with lock:
            outcomes.append(outcome)
            if outcomes.count(Outcome.ALREADY_HANDLED) == 15:
                losers_done.set()

    run_threads(16, worker)

    # Then the side effect ran exactly once, one worker completed and 15 were already handled
    assert charges == [str(job_id)]
    assert Counter(outcomes) == {Outcome.COMPLETED: 1, Outcome.ALREADY_HANDLED: 15}
    job = store_for(pg_url, jobs_schema).get(job_id)
    assert job is not None
    assert job.status == "completed"
    assert job.attempt == 1
    assert job.result == {"charged": 500}


def test_16_workers_claiming_one_job_directly_one_claim_15_already_handled(pg_url, jobs_schema):
    job_id = store_for(pg_url, jobs_schema).create("charge").id
    start = threading.Barrier(16, timeout=JOIN_SECONDS)
    won: list[int] = []
    lost: list[str] = []

    def worker(i: int) -> None:
        store = store_for(pg_url, jobs_schema, worker=f"w{i}")
        store.get(job_id)  # connected before the start line
        start.wait()
        try:
            claim = store.claim(job_id)
        except AlreadyHandled as exc:
            lost.append(str(exc))
        else:
            won.append(i)
            store.commit(claim, {"by": i})

    run_threads(16, worker)
    assert len(won) == 1
    assert len(lost) == 15
    assert all("not pending" in reason for reason in lost)


def test_16_workers_racing_in_single_update_mode_complete_the_row_once(pg_url, jobs_schema):
    # Given a single-UPDATE job (its side effect tolerates a repeat), and a handler every worker enters
    # before any may finish: all 16 really race to the UPDATE
    job_id = store_for(pg_url, jobs_schema).create("thumbnail").id
    inside = threading.Barrier(16, timeout=JOIN_SECONDS)
    kinds = JobKinds()
    runs: list[int] = []

    @kinds.register("thumbnail", mode="single")
    def thumbnail(job):
        runs.append(1)
        inside.wait()
        return {"ok": True}

    outcomes: list[Outcome] = []

    def worker(i: int) -> None:
        outcomes.append(JobWorker(store_for(pg_url, jobs_schema, worker=f"w{i}"), kinds).run(job_id))

    run_threads(16, worker)

    # Then the tolerated side effect ran 16 times, but exactly one UPDATE completed the row
    assert len(runs) == 16
    assert Counter(outcomes) == {Outcome.COMPLETED: 1, Outcome.ALREADY_HANDLED: 15}
    job = store_for(pg_url, jobs_schema).get(job_id)
    assert job is not None
    assert job.status == "completed"
    assert job.attempt == 1


@pytest.mark.parametrize("workers", [1, 4, 16])
@pytest.mark.parametrize("mode", ["two_phase", "single"])
def test_workers_draining_duplicated_deliveries_complete_every_job_exactly_once(
    pg_url, jobs_schema, workers, mode
):
    # Given 150 jobs, each delivered twice in random order (at-least-once delivery)
    n = 150
    creator = store_for(pg_url, jobs_schema)
    ids = [creator.create("work", {"n": i}).id for i in range(n)]
    deliveries: queue.Queue[uuid.UUID] = queue.Queue()
    for job_id in random.Random(workers).sample(ids * 2, 2 * n):
        deliveries.put(job_id)
    completions: Counter[str] = Counter()
    lock = threading.Lock()
    kinds = JobKinds()

    @kinds.register("work", mode=mode)
    def work(job):
        return {"n": job.payload["n"]}

    outcomes: Counter[Outcome] = Counter()

    # When 1, 4 or 16 workers drain the deliveries
    def worker(i: int) -> None:
        w = JobWorker(store_for(pg_url, jobs_schema, worker=f"w{i}"), kinds)
        while True:
            try:
                job_id = deliveries.get_nowait()
            except queue.Empty:
                return
            outcome = w.run(job_id)
            with lock:
                outcomes[outcome] += 1
                if outcome is Outcome.COMPLETED:
                    completions[str(job_id)] += 1

    run_threads(workers, worker)

    # Then every job completed exactly once: none lost, none completed twice
    assert set(completions) == {str(i) for i in ids}
    assert max(completions.values()) == 1
    assert outcomes == {Outcome.COMPLETED: n, Outcome.ALREADY_HANDLED: n}
    with psycopg.connect(pg_url) as conn:
        rows = conn.execute(
            sql.SQL("SELECT status, attempt, count(*) FROM {} GROUP BY 1, 2").format(table(jobs_schema))
        ).fetchall()
    assert rows == [("completed", 1, n)]


# --- crash, reaper, fencing --------------------------------------------------------------------------


def test_a_claimed_then_crashed_job_is_reaped_and_completed_later(pg_url, jobs_schema):
    store = store_for(pg_url, jobs_schema)
    job_id = store.create("charge").id
    # Given a worker that claimed the job and crashed before committing
    store_for(pg_url, jobs_schema, worker="crashed").claim(job_id)
    kinds = JobKinds()
    kinds.register("charge")(lambda job: {"ok": job.attempt})
    # When a redelivery arrives, it finds the job taken
    assert JobWorker(store, kinds).run(job_id) is Outcome.ALREADY_HANDLED
    # When the lease has passed and the reaper runs
    reaped = store.reap(lease_seconds=0)
    # Then the job is pending again, with the expired claim in its history, and completes on the next try
    assert reaped.pending == [job_id]
    assert reaped.dead == []
    job = store.get(job_id)
    assert job is not None
    assert job.status == "pending"
    assert [e["attempt"] for e in job.errors] == [1]
    assert "claim expired" in job.errors[0]["error"]
    assert job.errors[0]["worker"] == "crashed"
    assert JobWorker(store, kinds).run(job_id) is Outcome.COMPLETED
    done = store.get(job_id)
    assert done is not None
    assert done.status == "completed"
    assert done.attempt == 2
    assert done.result == {"ok": 2}


def test_the_reaper_leaves_a_job_that_commits_between_its_read_and_its_update_completed(pg_url, jobs_schema):
    store = store_for(pg_url, jobs_schema)
    job_id = store.create("charge").id
    slow = store_for(pg_url, jobs_schema, worker="slow")
    claim = slow.claim(job_id)
    seen: list[list[tuple[uuid.UUID, uuid.UUID]]] = []

    # Given the reaper has read the claim as expired, when the slow worker commits right then
    def commit_in_between(read):
        seen.append(read)
        slow.commit(claim, {"done": "by the slow worker"})

    reaped = store_for(pg_url, jobs_schema, worker="reaper").reap(lease_seconds=0, between=commit_in_between)

    # Then the reaper read the claim but changed nothing: the job stays completed (River #1302)
    assert seen == [[(job_id, claim.token)]]
    assert reaped.pending == []
    assert reaped.dead == []
    job = store.get(job_id)
    assert job is not None
    assert job.status == "completed"
    assert job.result == {"done": "by the slow worker"}
    assert job.errors == []


def test_a_reaper_racing_a_new_claim_leaves_the_new_claim_alone(pg_url, jobs_schema):
    store = store_for(pg_url, jobs_schema)
    job_id = store.create("charge").id
    first = store_for(pg_url, jobs_schema, worker="first").claim(job_id)

    # Given the reaper read the first claim; meanwhile another reaper took it back and a worker claimed
    def reclaimed_in_between(_read):
        assert store_for(pg_url, jobs_schema, worker="reaper-2").reap(lease_seconds=0).pending == [job_id]
        store_for(pg_url, jobs_schema, worker="second").claim(job_id)

    reaped = store.reap(lease_seconds=0, between=reclaimed_in_between)

    # Then the second claim is untouched (Procrastinate #1585: recovery must not take running jobs)
    assert reaped.pending == []
    job = store.get(job_id)
    assert job is not None
    assert job.status == "processing"
    assert job.claimed_by == "second"
    assert job.claim_token != first.token


def test_a_worker_whose_claim_was_reaped_gets_lost_claim_and_changes_nothing(pg_url, jobs_schema):
    store = store_for(pg_url, jobs_schema)
    job_id = store.create("charge").id
    stale = store_for(pg_url, jobs_schema, worker="stale")
    old = stale.claim(job_id)
    store.reap(lease_seconds=0)

    # The reaped worker cannot commit while the job waits to be claimed again ...
    with pytest.raises(LostClaim, match="its claim was reaped"):
        stale.commit(old, {"late": True})
    # ... nor once a new worker holds it: neither commit nor fail touches the new claim
    fresh = store_for(pg_url, jobs_schema, worker="fresh")
    new = fresh.claim(job_id)
    with pytest.raises(LostClaim, match="under another claim"):
        stale.commit(old, {"late": True})
    with pytest.raises(LostClaim):
        stale.fail(old, "late failure")
    fresh.commit(new, {"by": "fresh"})
    job = store.get(job_id)
    assert job is not None
    assert job.status == "completed"
    assert job.result == {"by": "fresh"}
    assert job.claim_token == new.token
    assert job.attempt == 2


def test_a_claim_reaped_on_its_last_attempt_is_dead(pg_url, jobs_schema):
    store = store_for(pg_url, jobs_schema)
    job_id = store.create("charge", max_attempts=1).id
    store.claim(job_id)
    reaped = store.reap(lease_seconds=0)
    assert reaped.dead == [job_id]
    assert reaped.pending == []
    job = store.get(job_id)
    assert job is not None
    assert job.status == "dead"
    assert len(job.errors) == 1


def test_a_live_claim_is_not_reaped(pg_url, jobs_schema):
    store = store_for(pg_url, jobs_schema)
    job_id = store.create("charge").id
    store.claim(job_id)
    assert store.reap(lease_seconds=3600).pending == []
    job = store.get(job_id)
    assert job is not None
    assert job.status == "processing"


# --- failures and retries ----------------------------------------------------------------------------


def _make_due(url: str, schema: str, job_id: uuid.UUID) -> None:
    """Move the retry time into the past (instead of waiting for it)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            sql.SQL("UPDATE {} SET next_attempt_at = now() - interval '1 second' WHERE id = %s").format(
                table(schema)
            ),
            (job_id,),
        )


def _retry_gap(url: str, schema: str, job_id: uuid.UUID) -> float:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            sql.SQL("SELECT extract(epoch FROM next_attempt_at - updated_at) FROM {} WHERE id = %s").format(
                table(schema)
            ),
            (job_id,),
        ).fetchone()
    assert row is not None
    return float(row[0])


@pytest.mark.parametrize("mode", ["two_phase", "single"])
def test_failed_jobs_retry_with_growing_delays_then_die_with_their_error_history(pg_url, jobs_schema, mode):
    # Given a job that always fails transiently, 4 attempts, backoff base 10 s (jitter at its ceiling)
    store = store_for(
        pg_url, jobs_schema, backoff_base_seconds=10, backoff_cap_seconds=1000, uniform=lambda _lo, hi: hi
    )
    job_id = store.create("flaky", max_attempts=4).id
    kinds = JobKinds()

    @kinds.register("flaky", mode=mode)
    def flaky(job):
        raise TransientError(f"downstream unavailable (attempt {job.attempt})")

    worker = JobWorker(store, kinds)
    gaps = []
    # When it runs, and the sweeper re-enqueues it each time its retry is due
    for _ in range(3):
        assert worker.run(job_id) is Outcome.FAILED
        job = store.get(job_id)
        assert job is not None
        assert job.status == "error"
        assert ids(store.due_for_retry()) == []  # not due yet
        gaps.append(_retry_gap(pg_url, jobs_schema, job_id))
        _make_due(pg_url, jobs_schema, job_id)
        assert ids(store.due_for_retry()) == [job_id]
    assert worker.run(job_id) is Outcome.DEAD

    # Then next_attempt_at grew 10 s, 20 s, 40 s, and the dead job keeps every attempt's error
    assert gaps == pytest.approx([10, 20, 40], abs=0.01)
    job = store.get(job_id)
    assert job is not None
    assert job.status == "dead"
    assert job.attempt == 4
    assert job.next_attempt_at is None
    assert [e["attempt"] for e in job.errors] == [1, 2, 3, 4]
    assert all("TransientError: downstream unavailable" in e["error"] for e in job.errors)
    assert ids(store.due_for_retry()) == []


def test_a_permanent_error_is_dead_at_once_and_retry_after_sets_the_exact_delay(pg_url, jobs_schema):
    store = store_for(pg_url, jobs_schema)
    kinds = JobKinds()

    @kinds.register("bad")
    def bad(job):
        raise PermanentError("card number is invalid")

    @kinds.register("later")
    def later(job):
        raise RetryAfter(7, "429 from the provider")

    bad_id, later_id = store.create("bad").id, store.create("later").id
    worker = JobWorker(store, kinds)
    assert worker.run(bad_id) is Outcome.DEAD
    assert worker.run(later_id) is Outcome.FAILED
    assert _retry_gap(pg_url, jobs_schema, later_id) == pytest.approx(7, abs=0.01)
    dead = store.get(bad_id)
    assert dead is not None
    assert dead.attempt == 1
    assert "card number is invalid" in dead.errors[0]["error"]


def test_a_job_of_an_unknown_kind_is_dead_with_the_reason(pg_url, jobs_schema):
    store = store_for(pg_url, jobs_schema)
    job_id = store.create("nobody-handles-this").id
    assert JobWorker(store, JobKinds()).run(job_id) is Outcome.DEAD
    job = store.get(job_id)
    assert job is not None
    assert "no handler is registered" in job.errors[0]["error"]


def test_a_message_for_a_job_that_does_not_exist_raises_job_not_found(pg_url, jobs_schema):
    with pytest.raises(JobNotFound):
        JobWorker(store_for(pg_url, jobs_schema), JobKinds()).run(uuid.uuid4())
    with pytest.raises(JobNotFound):
        store_for(pg_url, jobs_schema).claim(uuid.uuid4())


def test_pending_rows_nobody_touched_are_found_as_orphans_once_per_age(pg_url, jobs_schema):
    store = store_for(pg_url, jobs_schema)
    job_id = store.create("lost-message").id
    assert ids(store.orphans(3600)) == []
    assert ids(store.orphans(0)) == [job_id]


# --- 40001 under SERIALIZABLE ------------------------------------------------------------------------


def _wait_until_blocked(
    url: str, application_name: str, thread: threading.Thread, result: Sequence[object]
) -> None:
    """Poll until the named session waits on a row lock (a condition, not a fixed sleep); fail at once,
    saying how, when the step ended without ever waiting (a loaded CI run once waited out 90 s here)."""
    deadline = time.monotonic() + JOIN_SECONDS
    with psycopg.connect(url, autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE application_name = %s AND wait_event_type = 'Lock'",
                (application_name,),
            ).fetchone()
            if row and row[0]:
                return
            if not thread.is_alive():
                raise AssertionError(f"{application_name} ended without waiting on the row: {result!r}")
            time.sleep(0.01)
    raise AssertionError(f"{application_name} never waited on a lock in {JOIN_SECONDS} s")


def _race_a_concurrent_update(
    url: str, schema: str, job_id: uuid.UUID, name: str, step: Callable[[], object]
):
    """Hold the row in another transaction, start ``step`` (it blocks on the row), then commit the other
    transaction: under SERIALIZABLE the step's statement fails with 40001."""
    result: list[object] = []
    with psycopg.connect(url) as blocker:
        blocker.execute(
            sql.SQL("UPDATE {} SET updated_at = now() WHERE id = %s").format(table(schema)), (job_id,)
        )
        thread = threading.Thread(target=lambda: result.append(_capture(step)), daemon=True)
        thread.start()
        _wait_until_blocked(url, name, thread, result)
        blocker.commit()
    thread.join(JOIN_SECONDS)
    assert not thread.is_alive()
    return result[0]


def _capture(step: Callable[[], object]) -> object:
    try:
        return step()
    except Exception as exc:  # noqa: BLE001 - handed to the test
        return exc


def test_40001_under_serializable_is_retried_on_claim_and_on_commit(pg_url, jobs_schema):
    name = f"ser-{uuid.uuid4().hex[:8]}"
    store = store_for(pg_url, jobs_schema, worker=name, isolation="serializable")
    job_id = store.create("charge").id

    # When a concurrent transaction updates the row while the claim waits for it
    claim = _race_a_concurrent_update(pg_url, jobs_schema, job_id, name, lambda: store.claim(job_id))
    # Then the claim's serialization failure was retried and the claim holds
    assert not isinstance(claim, Exception), claim
    assert store.contention_retries == 1

    # And the same on commit
    outcome = _race_a_concurrent_update(
        pg_url, jobs_schema, job_id, name, lambda: store.commit(claim, {"ok": 1})
    )
    assert not isinstance(outcome, Exception), outcome
    assert store.contention_retries == 2
    job = store.get(job_id)
    assert job is not None
    assert job.status == "completed"
    assert job.result == {"ok": 1}


def test_40001_beyond_the_retry_budget_is_a_clear_error_not_a_crash(pg_url, jobs_schema):
    name = f"ser-{uuid.uuid4().hex[:8]}"
    store = store_for(pg_url, jobs_schema, worker=name, isolation="serializable", serialization_retries=0)
    job_id = store.create("charge").id
    outcome = _race_a_concurrent_update(pg_url, jobs_schema, job_id, name, lambda: store.claim(job_id))
    assert isinstance(outcome, JobContention)
    assert "40001" in str(outcome)
    assert "0 retries" in str(outcome)
    assert isinstance(outcome, JobStoreUnavailable)  # so a job consumer sends the message back to SQS
    job = store.get(job_id)
    assert job is not None
    assert job.status == "pending"


# --- connections -------------------------------------------------------------------------------------


def test_a_broken_connection_is_replaced_and_the_transition_still_lands(pg_url, jobs_schema):
    store = store_for(pg_url, jobs_schema, worker="reconnect")
    job_id = store.create("charge").id
    # Given the server dropped the environment's connection while it was idle (proxy, failover)
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'reconnect'"
        )
    # When the next transition runs, it reconnects and lands, once
    claim = store.claim(job_id)
    store.commit(claim, {"ok": True})
    job = store.get(job_id)
    assert job is not None
    assert job.status == "completed"
    assert job.attempt == 1


def test_an_unreachable_database_is_job_store_unavailable():
    store = JobStore(
        Connector(lambda _r: "postgresql://postgres@127.0.0.1:1/test", connect_timeout_seconds=2)
    )
    with pytest.raises(JobStoreUnavailable, match="cannot connect"):
        store.get(uuid.uuid4())


def test_statement_timeouts_are_set_on_a_direct_connection(pg_url):
    conn = Connector(lambda _r: pg_url, statement_timeout_ms=4321, lock_timeout_ms=1234).connection()
    try:
        assert conn.execute("SHOW statement_timeout").fetchone() == ("4321ms",)
        assert conn.execute("SHOW lock_timeout").fetchone() == ("1234ms",)
    finally:
        conn.close()


PREPARED = "SELECT count(*) FROM pg_prepared_statements"


def test_a_direct_connection_prepares_each_statement_of_the_store_on_the_server(pg_url, jobs_schema):
    # Given a store on a direct connection (not behind a proxy)
    connector = Connector(lambda _r: pg_url)
    store = JobStore(connector, schema=jobs_schema)
    try:
        # When it runs a transition statement twice
        store.get(uuid.uuid4())
        store.get(uuid.uuid4())
        # Then the statement was prepared once, at its first use, and reused
        conn = connector.connection()
        assert conn.prepare_threshold == 0
        [(statements,)] = conn.execute("SELECT array_agg(statement) FROM pg_prepared_statements").fetchall()
        assert len([text for text in statements if f"{jobs_schema}" in text and "WHERE id" in text]) == 1
    finally:
        connector.discard()


def test_behind_a_proxy_no_startup_options_are_sent_and_nothing_is_prepared(pg_url, jobs_schema):
    connector = Connector(lambda _r: pg_url, statement_timeout_ms=4321, behind_proxy=True)
    store = JobStore(connector, schema=jobs_schema)
    conn = connector.connection()
    try:
        assert conn.execute("SHOW statement_timeout").fetchone() != ("4321ms",)
        assert "options" not in conn.info.get_parameters()
        # no server-side prepared statements: RDS Proxy pins a session that prepares, and a
        # transaction-pooling PgBouncer sends the next statement to a connection that never prepared it
        store.get(uuid.uuid4())
        store.get(uuid.uuid4())
        assert conn.prepare_threshold is None
        assert conn.execute(PREPARED, prepare=False).fetchone() == (0,)
    finally:
        connector.discard()


def test_the_migrations_run_on_a_connection_that_prepares(pg_url):
    from sluice_local.app import postgres  # noqa: PLC0415 - as the jobs_schema fixture does

    # Given a fresh schema and a direct connection, which prepares what it runs
    schema = f"sluice_prep_{uuid.uuid4().hex[:10]}"
    connector = Connector(lambda _r: pg_url)
    store = JobStore(connector, schema=schema)
    try:
        # When the migrations are applied (several statements each, which the server cannot prepare)
        assert store.migrate() != []
        assert store.migrate() == []
        # Then they ran, none of them was prepared, and the store works
        assert connector.connection().execute(PREPARED, prepare=False).fetchone() == (0,)
        assert store.get(store.create("charge").id) is not None
    finally:
        connector.discard()
        postgres.drop_schema(pg_url, schema)


# --- one round trip per delivery ---------------------------------------------------------------------


def test_start_claims_a_two_phase_kind_counts_a_single_run_and_only_reads_the_rest(pg_url, jobs_schema):
    store = store_for(pg_url, jobs_schema)
    charge, thumb, other = store.create("charge").id, store.create("thumbnail").id, store.create("other").id
    kinds: dict[str, Any] = {"two_phase": ["charge"], "single": ["thumbnail"]}
    # A pending two-phase kind is claimed in the same statement that reads it
    job, started, claim = store.start(charge, **kinds)
    assert started
    assert claim is not None
    assert job.status == "processing"
    assert job.attempt == 1
    assert claim.token == job.claim_token
    # Delivered again, it is read, not claimed: the caller treats it as already handled
    again, started_again, none = store.start(charge, **kinds)
    assert (started_again, none) == (False, None)
    assert again.claim_token == claim.token
    # A single-UPDATE kind stays pending, its run marked in flight (for the reaper, should it never end)
    read, marked, not_claimed = store.start(thumb, **kinds)
    assert marked
    assert not_claimed is None
    assert read.status == "pending"
    assert read.attempt == 0
    assert read.claimed_at is not None
    # A kind nobody handles is only read
    unknown, started_unknown, _ = store.start(other, **kinds)
    assert not started_unknown
    assert unknown.attempt == 0
    with pytest.raises(JobNotFound):
        store.start(uuid.uuid4(), **kinds)


@pytest.mark.subprocess  # the drain's workers are processes (spawned interpreters), as in the benchmark
def test_a_delivery_costs_two_round_trips_on_the_wire_in_either_mode_and_so_does_a_batch(pg_url, jobs_schema):
    """Counted by benchmarks/jobs.py's protocol-parsing proxy (Sync + Query messages), not by sluice."""
    import importlib.util  # noqa: PLC0415
    import sys  # noqa: PLC0415

    from tests.conftest import ROOT  # noqa: PLC0415

    spec = importlib.util.spec_from_file_location("bench_jobs", ROOT / "benchmarks" / "jobs.py")
    assert spec is not None
    assert spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench  # its dataclasses look their module up while they are defined
    spec.loader.exec_module(bench)
    info = psycopg.conninfo.conninfo_to_dict(pg_url)
    proxy = bench.RoundTripProxy(str(info.get("host") or "127.0.0.1"), int(info.get("port") or 5432))
    proxied = bench._via_proxy(pg_url, proxy.port)
    # one job per delivery: its start and its commit
    for mode in ("single", "two_phase"):
        ids = bench._fill(pg_url, jobs_schema, bench.KINDS[mode], 40)
        done = bench.drain(bench.Task(mode, proxied, jobs_schema, ids), 2, on_ready=proxy.reset)
        assert (done.completed, done.processes) == (40, 2)
        assert proxy.round_trips == 80, mode
    # an SQS batch of ten two-phase jobs: one start for the ten, one commit for the ten
    ids = bench._fill(pg_url, jobs_schema, bench.KINDS["two_phase"], 40)
    done = bench.drain(bench.Task("two_phase", proxied, jobs_schema, ids, 10), 2, on_ready=proxy.reset)
    assert (done.completed, done.processes) == (40, 2)
    assert proxy.round_trips == 8


# --- hostile values ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "result",
    [float("nan"), {"note": "a\x00b"}, {"s": "\ud800"}, object()],
    ids=["nan", "nul", "surrogate", "object"],
)
@pytest.mark.parametrize("mode", ["two_phase", "single"])
def test_a_result_jsonb_refuses_still_completes_the_job_once_with_a_note(pg_url, jobs_schema, mode, result):
    # Given a handler whose side effect ran but whose result PostgreSQL cannot store
    store = store_for(pg_url, jobs_schema)
    job_id = store.create("odd").id
    runs: list[int] = []
    kinds = JobKinds()

    @kinds.register("odd", mode=mode)
    def odd(job):
        runs.append(1)
        return result

    # When it runs, then is delivered again
    assert JobWorker(store, kinds).run(job_id) is Outcome.COMPLETED
    assert JobWorker(store, kinds).run(job_id) is Outcome.ALREADY_HANDLED
    # Then it completed once, with a note instead of the result: never stuck in processing to be re-run
    job = store.get(job_id)
    assert job is not None
    assert job.status == "completed"
    assert "unstorable_result" in job.result
    assert runs == [1]


def test_error_text_with_nul_and_surrogates_is_recorded_escaped(pg_url, jobs_schema):
    store = store_for(pg_url, jobs_schema)
    job_id = store.create("nasty").id
    kinds = JobKinds()

    @kinds.register("nasty")
    def nasty(job):
        raise TransientError("bad \x00 byte and \ud800 half a pair")

    assert JobWorker(store, kinds).run(job_id) is Outcome.FAILED
    job = store.get(job_id)
    assert job is not None
    assert job.status == "error"
    assert "bad \\x00 byte and \\ud800 half a pair" in job.errors[0]["error"]


def test_a_payload_jsonb_refuses_is_refused_at_create_with_the_reason(pg_url, jobs_schema):
    store = store_for(pg_url, jobs_schema)
    with pytest.raises(ValueError, match="jsonb"):
        store.create("k", {"x": "a\x00b"})
    with pytest.raises(ValueError, match="1 to 128"):
        store.create("k" * 129)


# --- lost responses, timeouts, crashes in single-UPDATE mode -----------------------------------------


def _lose_response_of(store: JobStore, statement: str, times: int = 1) -> list[str]:
    """The next ``times`` runs of ``statement`` take effect, then the connection dies before the answer."""
    original = store._run
    lost: list[str] = []

    def run(name, fn, *, isolated=True):
        def then_drop(conn):
            result = fn(conn)
            if name == statement and len(lost) < times:
                lost.append(name)
                conn.close()
                raise psycopg.OperationalError("server closed the connection unexpectedly (test)")
            return result

        return original(name, then_drop, isolated=isolated)

    store._run = run  # type: ignore[method-assign]
    return lost


def test_a_lost_response_on_start_commit_and_fail_is_told_apart_from_a_lost_claim(pg_url, jobs_schema):
    store = store_for(pg_url, jobs_schema)
    job_id = store.create("charge").id
    # The claim took effect, its answer was lost: the store's retry sees its own token and keeps the claim
    lost = _lose_response_of(store, "start")
    job, started, claim = store.start(job_id, two_phase=["charge"], single=[])
    assert lost == ["start"]
    assert started
    assert claim is not None
    assert job.attempt == 1
    # The commit took effect, its answer was lost: not a LostClaim, and nothing changes
    lost = _lose_response_of(store, "commit")
    store.commit(claim, {"ok": True})
    assert lost == ["commit"]
    done = store.get(job_id)
    assert done is not None
    assert (done.status, done.attempt, done.result) == ("completed", 1, {"ok": True})
    # The same for fail
    other = store.create("charge").id
    failing = store.claim(other)
    lost = _lose_response_of(store, "fail")
    failed = store.fail(failing, "provider down", retry_in=30)
    assert lost == ["fail"]
    assert failed.status == "error"
    row = store.get(other)
    assert row is not None
    assert len(row.errors) == 1


def test_a_commit_the_database_refuses_for_a_while_is_retried_not_rerun(pg_url, jobs_schema):
    # Given a job whose row another transaction holds while the handler runs (lock_timeout 200 ms)
    store = JobStore(
        Connector(lambda _r: pg_url, lock_timeout_ms=200, application_name="patient"), schema=jobs_schema
    )
    job_id = store.create("charge").id
    blocker = psycopg.connect(pg_url)
    charges: list[int] = []
    kinds = JobKinds()

    @kinds.register("charge")
    def charge(job):
        charges.append(job.attempt)
        blocker.execute(
            sql.SQL("SELECT 1 FROM {} WHERE id = %s FOR UPDATE").format(table(jobs_schema)), (job_id,)
        )
        return {"ok": True}

    pauses: list[float] = []

    def pause(seconds: float) -> None:  # the worker's backoff: the other transaction ends meanwhile
        pauses.append(seconds)
        blocker.commit()

    # When its commit times out on the lock, then the lock goes
    outcome = JobWorker(store, kinds, sleep=pause).run(job_id, deadline=time.monotonic() + JOIN_SECONDS)
    blocker.close()
    # Then the commit was retried and landed: the side effect ran once, the claim was never left to the reaper
    assert outcome is Outcome.COMPLETED
    assert charges == [1]
    assert len(pauses) >= 1
    job = store.get(job_id)
    assert job is not None
    assert (job.status, job.attempt) == ("completed", 1)


def test_a_single_update_job_whose_runs_never_finish_is_dead_after_max_attempts(pg_url, jobs_schema):
    # Given a single-UPDATE job whose every run dies with the runtime (OOM, timeout): started, never ended
    store = store_for(pg_url, jobs_schema)
    job_id = store.create("thumbnail", max_attempts=3).id
    for attempt in (1, 2, 3):
        _job, started, _claim = store.start(job_id, two_phase=[], single=["thumbnail"])
        assert started
        # When the reaper finds the run older than the lease
        reaped = store.reap(lease_seconds=0)
        # Then it counts as an attempt, and the last one makes the job dead
        if attempt < 3:
            assert reaped.pending == [job_id]
        else:
            assert reaped.dead == [job_id]
    job = store.get(job_id)
    assert job is not None
    assert (job.status, job.attempt) == ("dead", 3)
    assert all("run never finished" in e["error"] for e in job.errors)


def test_a_single_update_run_in_flight_is_not_reaped_and_its_completion_clears_it(pg_url, jobs_schema):
    store = store_for(pg_url, jobs_schema)
    job_id = store.create("thumbnail").id
    store.start(job_id, two_phase=[], single=["thumbnail"])
    assert store.reap(lease_seconds=3600) == Reaped()
    store.complete_if_pending(job_id, {"ok": True})
    assert store.reap(lease_seconds=0) == Reaped()
    job = store.get(job_id)
    assert job is not None
    assert (job.status, job.attempt) == ("completed", 1)


def test_a_stale_fail_after_the_reaper_made_the_job_dead_is_a_lost_claim(pg_url, jobs_schema):
    store = store_for(pg_url, jobs_schema)
    job_id = store.create("charge", max_attempts=1).id
    stale = store_for(pg_url, jobs_schema, worker="stale")
    claim = stale.claim(job_id)
    assert store.reap(lease_seconds=0).dead == [job_id]
    with pytest.raises(LostClaim, match="its claim was reaped"):
        stale.fail(claim, "too late")


def test_a_reap_waiting_on_a_commit_in_flight_leaves_the_job_completed(pg_url, jobs_schema):
    store = store_for(pg_url, jobs_schema)
    job_id = store.create("charge").id
    claim = store.claim(job_id)
    name = f"reaper-{uuid.uuid4().hex[:8]}"
    reaper = store_for(pg_url, jobs_schema, worker=name)
    reaped: list[Reaped] = []
    # Given the worker's commit is in flight (its transaction holds the row)
    with psycopg.connect(pg_url) as committing:
        committing.execute(
            sql.SQL(
                "UPDATE {} SET status = 'completed', completed_at = now() WHERE id = %s AND claim_token = %s"
            ).format(table(jobs_schema)),
            (job_id, claim.token),
        )
        # When the reaper's update reaches the row, it waits; then the commit lands
        thread = threading.Thread(target=lambda: reaped.append(reaper.reap(lease_seconds=0)), daemon=True)
        thread.start()
        _wait_until_blocked(pg_url, name, thread, reaped)
        committing.commit()
    thread.join(JOIN_SECONDS)
    # Then the reaper re-checked the row and left it completed
    assert reaped == [Reaped()]
    job = store.get(job_id)
    assert job is not None
    assert job.status == "completed"


def test_the_store_own_maintenance_queries_use_their_indexes(pg_url, jobs_schema):
    """EXPLAIN of the statements the store really sends (not copies), on 20 000 finished jobs."""
    store = store_for(pg_url, jobs_schema)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                "INSERT INTO {} (id, kind, status, completed_at)"
                " SELECT gen_random_uuid(), 'k', 'completed', now() FROM generate_series(1, 20000)"
            ).format(table(jobs_schema))
        )
        for _ in range(5):
            store.claim(store.create("k").id)
        conn.execute(sql.SQL("ANALYZE {}").format(table(jobs_schema)))
        cases: dict[str, tuple[dict[str, Any], str]] = {
            "expired_claims": ({"lease": 900.0, "limit": 500}, "jobs_claimed_at"),
            "due_for_retry": ({"limit": 500}, "jobs_error_next_attempt_at"),
            "orphans": ({"age": 900.0, "limit": 500}, "jobs_pending_updated_at"),
        }
        for name, (params, index) in cases.items():
            query = b"EXPLAIN " + store._sql[name]
            plan = "\n".join(r[0] for r in conn.execute(query, params).fetchall())
            assert index in plan, f"{name}:\n{plan}"


def test_redeliveries_of_a_single_update_run_that_keeps_dying_do_not_keep_it_young(pg_url, jobs_schema):
    # Given a single-UPDATE run that died an hour ago, and redeliveries since that die too
    store = store_for(pg_url, jobs_schema)
    job_id = store.create("thumbnail").id
    store.start(job_id, two_phase=[], single=["thumbnail"])
    _age(pg_url, jobs_schema, "claimed_at", job_id)
    _job, started, _ = store.start(job_id, two_phase=[], single=["thumbnail"])  # a redelivery
    assert started
    # Then the mark keeps the first run's time, the orphan sweep leaves the row to the reaper, and the
    # reaper (lease 15 min) counts the run that never finished
    assert ids(store.orphans(0)) == []
    assert store.reap(lease_seconds=900).pending == [job_id]
    job = store.get(job_id)
    assert job is not None
    assert (job.status, job.attempt, job.claimed_at) == ("pending", 1, None)


def test_a_two_phase_job_back_from_its_retry_is_not_mistaken_for_a_dead_run(pg_url, jobs_schema):
    store = store_for(pg_url, jobs_schema)
    job_id = store.create("charge", max_attempts=2).id
    store.fail(store.claim(job_id), "provider down", retry_in=0)
    assert ids(store.due_for_retry()) == [job_id]
    assert store.reap(lease_seconds=0) == Reaped()
    job = store.get(job_id)
    assert job is not None
    assert (job.status, job.attempt) == ("pending", 1)


def _age(url: str, schema: str, column: str, job_id: uuid.UUID) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            sql.SQL("UPDATE {} SET {} = now() - interval '1 hour' WHERE id = %s").format(
                table(schema), sql.Identifier(column)
            ),
            (job_id,),
        )


def test_an_exception_whose_message_cannot_be_read_is_still_recorded(pg_url, jobs_schema):
    class WeirdError(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no message for you")

    store = store_for(pg_url, jobs_schema)
    job_id = store.create("weird").id
    kinds = JobKinds()

    @kinds.register("weird")
    def weird(job):
        raise WeirdError

    assert JobWorker(store, kinds).run(job_id) is Outcome.FAILED
    job = store.get(job_id)
    assert job is not None
    assert job.errors[0]["error"] == "WeirdError: <WeirdError whose message cannot be read>"


# --- overlapping maintenance runs (the reaper and the sweeper have no reserved concurrency) -----------


def _claimed_jobs(store: JobStore, n: int) -> list[uuid.UUID]:
    job_ids = [store.create("charge").id for _ in range(n)]
    for job_id in job_ids:
        store.claim(job_id)
    return job_ids


def _due_jobs(store: JobStore, n: int) -> list[uuid.UUID]:
    job_ids = [store.create("charge").id for _ in range(n)]
    for job_id in job_ids:
        store.fail(store.claim(job_id), "boom", retry_in=0)
    return job_ids


ORPHAN_AGE = 60.0
"""The sweeps' orphan age in these tests: a row taken is touched (its age restarts), so no later run
takes it again within a minute (an age of 0 would make it an orphan again at once, by definition)."""


def _orphan_jobs(url: str, schema: str, store: JobStore, n: int) -> list[uuid.UUID]:
    job_ids = [store.create("k").id for _ in range(n)]
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            sql.SQL("UPDATE {} SET updated_at = now() - interval '1 hour' WHERE id = ANY(%s)").format(
                table(schema)
            ),
            (job_ids,),
        )
    return job_ids


def test_a_reaper_overlapping_another_between_its_read_and_its_update_takes_none_of_its_jobs(
    pg_url, jobs_schema
):
    # Given 6 claims past their lease
    store = store_for(pg_url, jobs_schema)
    job_ids = _claimed_jobs(store, 6)
    first, second = (
        store_for(pg_url, jobs_schema, worker="reaper-1"),
        store_for(pg_url, jobs_schema, worker="reaper-2"),
    )
    reaped_by_second: list[Reaped] = []
    # When a second reaper reads and reaps them all between the first one's read and its update
    reaped_by_first = first.reap(0, between=lambda read: reaped_by_second.append(second.reap(0)))
    # Then the second took every job, the first none (its update is fenced on the token it read)
    assert sorted(reaped_by_second[0].pending) == sorted(job_ids)
    assert reaped_by_first == Reaped()
    for job_id in job_ids:
        job = store.get(job_id)
        assert job is not None
        assert (job.status, len(job.errors)) == ("pending", 1)


def test_a_reaper_waiting_on_another_reapers_update_in_flight_takes_none_of_its_jobs(pg_url, jobs_schema):
    # Given 4 claims past their lease, and another reaper's update of them in flight (its transaction
    # holds the rows)
    store = store_for(pg_url, jobs_schema)
    job_ids = _claimed_jobs(store, 4)
    tokens = [store.get(job_id).claim_token for job_id in job_ids]  # type: ignore[union-attr]
    name = f"reaper-{uuid.uuid4().hex[:8]}"
    reaper = store_for(pg_url, jobs_schema, worker=name)
    reaped: list[Reaped] = []
    with psycopg.connect(pg_url) as other:
        params = {"ids": job_ids, "tokens": tokens, "lease": 0.0}
        assert len(other.execute(store._sql["reap"], params).fetchall()) == 4
        # When this reaper reads the same claims and its update reaches the rows, it waits; then the
        # other one commits
        thread = threading.Thread(target=lambda: reaped.append(reaper.reap(lease_seconds=0)), daemon=True)
        thread.start()
        _wait_until_blocked(pg_url, name, thread, reaped)
        other.commit()
    thread.join(JOIN_SECONDS)
    # Then it re-checked each row (the token it read is gone) and took none
    assert reaped == [Reaped()]
    for job_id in job_ids:
        job = store.get(job_id)
        assert job is not None
        assert (job.status, len(job.errors)) == ("pending", 1)


_SWEPT = {
    # what each sweep statement writes to a row it takes (statements.py), for a run held in flight
    "due_for_retry": sql.SQL(
        "status = 'pending', next_attempt_at = NULL, updated_at = now(), claimed_at = NULL"
    ),
    "orphans": sql.SQL("updated_at = now()"),
}


@pytest.mark.parametrize("statement", ["due_for_retry", "orphans"])
def test_a_sweeper_beside_another_sweepers_run_in_flight_skips_its_rows_without_waiting(
    pg_url, jobs_schema, statement
):
    # Given 12 rows due (error rows past their retry time, or pending rows nobody touched for an hour)
    store = store_for(pg_url, jobs_schema)
    if statement == "due_for_retry":
        job_ids = _due_jobs(store, 12)
    else:
        job_ids = _orphan_jobs(pg_url, jobs_schema, store, 12)
    held = job_ids[:5]
    sweeper = store_for(pg_url, jobs_schema, worker="sweeper-2")

    def sweep() -> list[uuid.UUID]:
        return ids(sweeper.due_for_retry() if statement == "due_for_retry" else sweeper.orphans(ORPHAN_AGE))

    taken: list[list[uuid.UUID]] = []
    with psycopg.connect(pg_url) as other:
        # And another sweeper's run in flight that has taken 5 of them (its transaction holds the rows)
        update = sql.SQL("UPDATE {} SET {} WHERE id = ANY(%s)").format(table(jobs_schema), _SWEPT[statement])
        other.execute(update, (held,))
        # When this sweeper runs meanwhile, Then it takes the 7 others at once (not waiting on the 5)
        thread = threading.Thread(target=lambda: taken.append(sweep()), daemon=True)
        thread.start()
        thread.join(JOIN_SECONDS)
        assert not thread.is_alive(), "the sweeper waited on the rows another sweeper holds"
        other.commit()
    assert sorted(taken[0]) == sorted(job_ids[5:])
    # And once the other has committed, its 5 are no longer due: nobody takes them again
    assert sweep() == []


@pytest.mark.parametrize("step", ["reap", "due_for_retry", "orphans"])
def test_8_overlapping_maintenance_runs_take_every_job_exactly_once(pg_url, jobs_schema, step):
    # Given 40 jobs due for the step (claims past their lease, due retries, orphans)
    store = store_for(pg_url, jobs_schema)
    if step == "reap":
        job_ids = _claimed_jobs(store, 40)
    elif step == "due_for_retry":
        job_ids = _due_jobs(store, 40)
    else:
        job_ids = _orphan_jobs(pg_url, jobs_schema, store, 40)
    start = threading.Barrier(8, timeout=JOIN_SECONDS)
    taken: list[uuid.UUID] = []
    lock = threading.Lock()

    # When 8 runs start at once, each taking 3 at a time until nothing is left
    def run(i: int) -> None:
        runner = store_for(pg_url, jobs_schema, worker=f"m{i}")
        runner.get(job_ids[0])  # connected before the start line
        start.wait()
        while True:
            if step == "reap":
                got = runner.reap(0, limit=3).pending
            elif step == "due_for_retry":
                got = ids(runner.due_for_retry(limit=3))
            else:
                got = ids(runner.orphans(ORPHAN_AGE, limit=3))
            with lock:
                taken.extend(got)
            if not got:
                return

    run_threads(8, run)
    # Then every job was taken by exactly one run
    assert Counter(taken) == Counter(job_ids)


@pytest.mark.parametrize("step", ["due_for_retry", "orphans"])
@pytest.mark.parametrize("due", [10, 200])
def test_a_sweep_takes_at_most_its_limit_however_many_are_due(pg_url, jobs_schema, step, due):
    """A limit bounds a sweep's work (and the messages it enqueues) even when many more rows are due: the
    rows are picked once, then updated (a picking subquery under ``IN`` may be run again per row)."""
    # Given many more jobs due for the step than one sweep may take
    store = store_for(pg_url, jobs_schema)
    job_ids = (
        _due_jobs(store, due) if step == "due_for_retry" else _orphan_jobs(pg_url, jobs_schema, store, due)
    )
    # When one sweep runs with a limit of 3, then the next ones until nothing is left
    sweep = (
        (lambda: store.due_for_retry(limit=3))
        if step == "due_for_retry"
        else (lambda: store.orphans(ORPHAN_AGE, limit=3))
    )
    rounds = []
    while got := ids(sweep()):
        rounds.append(got)
    # Then each took at most 3, and together every job exactly once
    assert max(map(len, rounds)) == 3, [len(r) for r in rounds]
    assert Counter(i for r in rounds for i in r) == Counter(job_ids)
