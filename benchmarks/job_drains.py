"""One drain of the jobs table by W worker processes, one connection each (benchmarks/jobs.py's workers).

A Lambda environment is a process holding one connection, so each worker here is a process too, started
with ``spawn`` (a fresh interpreter: nothing inherited from the parent's threads, such as the counting
proxy's). Each connects and runs one query first (warm, as a warm Lambda is), then waits at a barrier;
the clock starts when every worker has reached it and stops when the last one finishes its drain.

The sluice modes get job ids as the job queue's event source would deliver them: handed out a batch at a
time (``Task.batch`` ids, the template's BatchSize), each once, to whichever process asks next, through a
shared counter into the id list every process holds; a worker runs each batch as the job consumer does,
``JobWorker.run_batch`` (one statement starts the batch, the handlers run, one fenced statement commits).
Not fixed per-process shares: a share ends the drain with the slowest process's share (on 2 cores some
process is always descheduled longest) while the anchor balances itself through the table, and an SQS
event source hands the next message to whichever environment polls. Not a ``multiprocessing.Queue``
either: it would pickle each id through a pipe, client CPU that belongs to neither sluice nor the
anchor. The anchor finds
its own work in the table (``FOR UPDATE SKIP LOCKED``).

CPU is measured per process over its drain alone: the worker's own user + sys time
(``getrusage(RUSAGE_SELF)``) and its PostgreSQL server process's utime + stime (``/proc/<pid>/stat`` of
``pg_backend_pid()``, read only when that process is on this machine and its title names this
connection's client port; otherwise "n/a" with the reason, never a guess).
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import resource
import socket
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from sluice.jobs import Connector, Delivery, Job, JobKinds, JobStore, JobWorker, Outcome

if TYPE_CHECKING:
    from multiprocessing.queues import Queue
    from multiprocessing.sharedctypes import Synchronized
    from multiprocessing.synchronize import Barrier, Event

MODES = ("single", "two_phase", "anchor")
KINDS = {"single": "bench-single", "two_phase": "bench-two-phase", "anchor": "bench-two-phase"}
"""The kind each mode's jobs are created with (the anchor reads no kind)."""
READY_SECONDS = 300.0
"""How long workers may take to start, connect and warm up (a loaded 2-core machine is slow to spawn)."""


def anchor_pick(schema: str) -> sql.Composed:
    """The anchor's pick: the oldest pending row nobody holds. ``updated_at``, not ``created_at``: the
    partial index ``jobs_pending_updated_at (updated_at) WHERE status = 'pending'`` (migrations/001)
    serves it, so a pick is an Index Scan of pending rows, not a scan and sort of the whole table."""
    return sql.SQL(
        "SELECT id, payload FROM {} WHERE status = 'pending' ORDER BY updated_at LIMIT 1"
        " FOR UPDATE SKIP LOCKED"
    ).format(sql.Identifier(schema, "jobs"))


def anchor_done(schema: str) -> sql.Composed:
    """The anchor's completion: what sluice's ``commit`` writes, without the claim token to match."""
    return sql.SQL(
        "UPDATE {} SET status = 'completed', result = %s, completed_at = now(), updated_at = now()"
        " WHERE id = %s"
    ).format(sql.Identifier(schema, "jobs"))


@dataclass(frozen=True)
class Task:
    """What every worker of one drain is given (pickled into each spawned process)."""

    mode: str
    url: str
    schema: str
    ids: Sequence[uuid.UUID] = ()  # the sluice modes' deliveries; the anchor reads the table
    batch: int = 1  # ids per delivery to a sluice worker (an SQS batch)


@dataclass(frozen=True)
class Report:
    """One worker's drain."""

    pid: int
    backend_pid: int
    completed: int
    ended: float  # time.monotonic(): CLOCK_MONOTONIC, one clock for every process of the machine
    client_cpu: float  # seconds
    backend_cpu: float | None  # seconds; None when the server process cannot be read (see note)
    note: str


@dataclass(frozen=True)
class Failure:
    pid: int
    text: str


@dataclass(frozen=True)
class Drain:
    """A whole drain: its wall time from the barrier to the last worker's end, and its workers' sums."""

    seconds: float
    completed: int
    client_cpu: float
    backend_cpu: float | None
    note: str  # why backend_cpu is None ("" when it is not)
    processes: int  # distinct worker pids
    backends: int  # distinct server pids


def drain(task: Task, workers: int, on_ready: Callable[[], None] = lambda: None) -> Drain:
    """Run one drain with ``workers`` processes; ``on_ready`` runs once all are connected and warm, just
    before the clock starts (the round-trip pass resets its counter there)."""
    ctx = multiprocessing.get_context("spawn")
    ready, go, next_id = ctx.Barrier(workers + 1), ctx.Event(), ctx.Value("q", 0)
    results: Queue[Report | Failure] = ctx.Queue()
    processes = [
        ctx.Process(
            target=work,
            args=(task, i),
            kwargs={"next_id": next_id, "ready": ready, "go": go, "results": results},
            name=f"{task.mode}-{i}",
        )
        for i in range(workers)
    ]
    for process in processes:
        process.start()
    try:
        try:
            ready.wait(READY_SECONDS)
        except threading.BrokenBarrierError:
            raise SystemExit(_why_broken(results, processes)) from None
        on_ready()
        started = time.monotonic()
        go.set()
        reports = [_next_report(results, processes) for _ in processes]
    except BaseException:  # a worker failed (or ^C): the others would wait at the barrier or for "go"
        for process in processes:
            process.kill()
        raise
    finally:
        for process in processes:
            process.join(READY_SECONDS)
            if process.is_alive():
                process.kill()
                process.join()
    backend = [r.backend_cpu for r in reports]
    return Drain(
        seconds=max(r.ended for r in reports) - started,
        completed=sum(r.completed for r in reports),
        client_cpu=sum(r.client_cpu for r in reports),
        backend_cpu=None if None in backend else sum(b for b in backend if b is not None),
        note=next((r.note for r in reports if r.note), ""),
        processes=len({r.pid for r in reports} - {os.getpid()}),
        backends=len({r.backend_pid for r in reports}),
    )


def _next_report(results: Queue[Report | Failure], processes: list[Any]) -> Report:
    while True:
        try:
            got = results.get(timeout=1.0)
        except queue.Empty:
            if all(not p.is_alive() for p in processes):
                raise SystemExit("every worker process exited without reporting its drain") from None
            continue
        if isinstance(got, Failure):
            raise SystemExit(f"worker process {got.pid} failed:\n{got.text}")
        return got


def _why_broken(results: Queue[Report | Failure], processes: list[Any]) -> str:
    try:
        got = results.get(timeout=5.0)
    except queue.Empty:
        codes = [p.exitcode for p in processes]
        return f"worker processes not ready within {READY_SECONDS:g} s (exit codes {codes})"
    return f"worker process {got.pid} failed:\n{got.text}" if isinstance(got, Failure) else "barrier broken"


# --- in each worker process --------------------------------------------------------------------------


def work(
    task: Task,
    index: int,
    *,
    next_id: Synchronized[int],
    ready: Barrier,
    go: Event,
    results: Queue[Report | Failure],
) -> None:
    """A worker process: connect, warm up, wait for the others, drain, report."""
    try:
        if task.mode == "anchor":
            conn, run = _anchor(task, index)
        else:
            conn, run = _sluice(task, index, next_id)
        with conn:
            backend = BackendClock(conn)
            backend_before = backend.seconds()
            _wait_for_start(ready, go)
            client_before = _client_cpu()
            completed = run()
            ended = time.monotonic()
            client_cpu = _client_cpu() - client_before
            backend_after = backend.seconds()
        backend_cpu = (
            None if backend_before is None or backend_after is None else backend_after - backend_before
        )
        results.put(Report(os.getpid(), backend.pid, completed, ended, client_cpu, backend_cpu, backend.note))
    except Exception:  # noqa: BLE001 - the parent exits with it; this process has nowhere else to say it
        ready.abort()
        results.put(Failure(os.getpid(), traceback.format_exc()))


def _wait_for_start(ready: Barrier, go: Event) -> None:
    ready.wait(READY_SECONDS)
    if not go.wait(READY_SECONDS):
        raise TimeoutError(f"no start signal within {READY_SECONDS:g} s of the barrier")


def _sluice(
    task: Task, index: int, next_id: Synchronized[int]
) -> tuple[psycopg.Connection[Any], Callable[[], int]]:
    connector = Connector(lambda _refresh: task.url, application_name=f"bench-{task.mode}-{index}")
    store = JobStore(connector, schema=task.schema, worker=f"w{index}")
    runner = JobWorker(store, _kinds())
    # Connected and warm before the clock starts, as a warm Lambda is: one batch of a job of its own (not
    # among the drain's), so the statements a batch runs are prepared on the server already.
    warm = runner.run_batch([Delivery(store.create(KINDS[task.mode], {"n": -1}).id)])
    if warm != [Outcome.COMPLETED]:
        raise RuntimeError(f"the warm-up batch came to {warm}")
    ids, size = task.ids, task.batch

    def run() -> int:
        completed = 0
        while (i := _take(next_id, size)) < len(ids):
            outcomes = runner.run_batch([Delivery(job_id) for job_id in ids[i : i + size]])
            completed += sum(1 for outcome in outcomes if outcome is Outcome.COMPLETED)
        return completed

    return connector.connection(), run


def _take(next_id: Synchronized[int], size: int) -> int:
    """The first of the next ``size`` ids, taken."""
    with next_id.get_lock():
        taken = int(next_id.value)
        next_id.value = taken + size
    return taken


def _anchor(task: Task, index: int) -> tuple[psycopg.Connection[Any], Callable[[], int]]:
    # Its statements prepared on the server from their first use, as sluice's are on a direct connection
    # (psycopg's default prepares a statement at its sixth run).
    conn = psycopg.connect(task.url, prepare_threshold=0, application_name=f"anchor-{index}")
    pick, done = anchor_pick(task.schema), anchor_done(task.schema)
    # Connected and warm, as sluice's workers are: its pick and its update run once, both prepared, no row
    # taken (the pick's lock ends with the commit, the update names no row), no transaction left open.
    # Committed, not rolled back: psycopg deallocates every prepared statement at a rollback.
    with conn.transaction():
        conn.execute(pick)
        conn.execute(done, (Jsonb({"n": -1}), uuid.uuid4()))

    def run() -> int:
        completed = 0
        while True:
            with conn.transaction():
                row = conn.execute(pick).fetchone()
                if row is None:
                    return completed
                conn.execute(done, (Jsonb({"n": row[1]["n"]}), row[0]))
            completed += 1

    return conn, run


def _kinds() -> JobKinds:
    kinds = JobKinds()

    def noop(job: Job) -> dict[str, Any]:
        return {"n": job.payload["n"]}

    kinds.register(KINDS["single"], mode="single")(noop)
    kinds.register(KINDS["two_phase"], mode="two_phase")(noop)
    return kinds


def _client_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class BackendClock:
    """The CPU time of one connection's PostgreSQL server process, from ``/proc/<pid>/stat``.

    Read only when ``/proc/<pid>`` is that process: a ``postgres`` whose title names this connection's
    client port (a server elsewhere, or in a container, has pids of its own namespace). Else ``seconds()``
    is None and ``note`` says why."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        with conn.transaction():  # committed at once: the anchor's connection is not in autocommit
            row = conn.execute("SELECT pg_backend_pid()").fetchone()
        if row is None:
            raise RuntimeError("SELECT pg_backend_pid() returned no row")
        self.pid = int(row[0])
        self.note = _not_ours(self.pid, _client_marker(conn))

    def seconds(self) -> float | None:
        if self.note:
            return None
        try:
            text = Path(f"/proc/{self.pid}/stat").read_text(encoding="ascii")
        except OSError as exc:
            self.note = f"/proc/{self.pid}/stat unreadable ({exc.strerror})"
            return None
        fields = text.rsplit(")", 1)[1].split()  # after "pid (comm)": field 3 (state) is fields[0]
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime (14, 15)


def _client_marker(conn: psycopg.Connection[Any]) -> str:
    """How the server's process title names this client: ``(port)`` over TCP, ``[local]`` on a socket."""
    with socket.socket(fileno=os.dup(conn.pgconn.socket)) as sock:
        if sock.family == socket.AF_UNIX:
            return "[local]"
        return f"({sock.getsockname()[1]})"


def _not_ours(pid: int, marker: str) -> str:
    """ "" when /proc/<pid> is this connection's server process, else why it is not known to be."""
    try:
        comm = Path(f"/proc/{pid}/stat").read_text(encoding="ascii").split("(", 1)[1].rsplit(")", 1)[0]
        title = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except (OSError, IndexError) as exc:
        return f"server process {pid} not readable here ({exc}): the server runs elsewhere"
    if comm != "postgres" or marker not in title:
        return f"/proc/{pid} ({comm}: {title.strip()[:80]!r}) is not known to serve this connection {marker}"
    return ""
