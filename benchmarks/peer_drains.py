"""One drain of N no-op jobs by W worker processes of a Python PostgreSQL job queue, PgQueuer or
Procrastinate (benchmarks/jobs.py's peers), measured as benchmarks/job_drains.py measures sluice's.

Run by benchmarks/jobs.py with the interpreter of the peers' own virtualenv (``.bench-venv-peers/``,
built from benchmarks/peers-requirements.txt), never the dev venv: it prints one JSON line, the drain.

Each drain gets a database of its own (created, the system's schema installed, N jobs enqueued, dropped
at the end), so the systems never share a table. Each worker is a process (multiprocessing spawn) with
its system's recommended setup and one connection: PgQueuer's ``QueueManager`` on an asyncpg connection
(its README's setup; defaults: batch size 10, its LISTEN on the same connection) run in drain mode;
Procrastinate's ``App`` on its ``PsycopgConnector`` (a pool held at one connection) and its worker with
its defaults (concurrency 1), ``wait=False`` so that it ends when no job is left. The handlers are
``async`` no-ops that count their calls. The clock starts at the barrier all workers reach connected and
stops when the last one's drain ends.

CPU per drain: each worker's own user + sys time (``getrusage``) and that of every PostgreSQL server
process serving its ``application_name`` (``/proc/<pid>/stat``, read only when the pid is a ``postgres``
process of this machine; else null with the reason).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import queue
import resource
import time
import traceback
import uuid
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

SYSTEMS = ("pgqueuer", "procrastinate")
READY_SECONDS = 300.0
TASK = "noop"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--system", choices=SYSTEMS, required=True)
    parser.add_argument("--url", required=True, help="a PostgreSQL DSN whose user may create databases")
    parser.add_argument("--jobs", type=int, required=True)
    parser.add_argument("--workers", type=int, required=True)
    args = parser.parse_args()
    database = f"sluice_bench_{args.system}_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(args.url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
    url = make_conninfo(args.url, dbname=database)
    try:
        asyncio.run(_fill(args.system, url, args.jobs))
        drain = _drain(args.system, url, args.workers)
        left = _left(args.system, url)
        if drain["completed"] != args.jobs or left:
            raise SystemExit(f"{args.system}: ran {drain['completed']} of {args.jobs} jobs, {left} left")
        print(json.dumps(drain))
    finally:
        with psycopg.connect(args.url, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(database)))
    return 0


# --- the systems ----------------------------------------------------------------------------------


def _pgqueuer(url: str, name: str) -> tuple[Any, Any]:
    """PgQueuer as its README sets it up (``PgQueuer`` over an asyncpg connection); its queue manager
    runs the jobs."""
    import asyncpg  # type: ignore[import-not-found]  # noqa: PLC0415 - the peers' venv only
    from pgqueuer import PgQueuer  # type: ignore[import-not-found]  # noqa: PLC0415
    from pgqueuer.domain.types import QueueExecutionMode  # type: ignore[import-not-found]  # noqa: PLC0415

    async def connect() -> tuple[Any, Any]:
        conn = await asyncpg.connect(**_asyncpg(url), server_settings={"application_name": name})
        qm = PgQueuer.from_asyncpg_connection(conn).qm

        @qm.entrypoint(TASK)  # type: ignore[untyped-decorator]
        async def noop(job: Any) -> None:
            _COUNT[0] += 1

        async def run() -> None:
            await qm.run(mode=QueueExecutionMode.drain)  # every other setting its default

        return conn, run

    return connect, None


def _procrastinate(url: str, name: str) -> tuple[Any, Any]:
    """Procrastinate as its docs set it up: an App on a PsycopgConnector (one connection), its worker."""
    import procrastinate  # type: ignore[import-not-found]  # noqa: PLC0415 - the peers' venv only

    app = procrastinate.App(
        connector=procrastinate.PsycopgConnector(
            conninfo=url, kwargs={"application_name": name}, min_size=1, max_size=1
        )
    )

    @app.task(name=TASK)  # type: ignore[untyped-decorator]
    async def noop() -> None:
        _COUNT[0] += 1

    async def connect() -> tuple[Any, Any]:
        await app.open_async()

        async def run() -> None:
            # its defaults (concurrency 1, listen_notify) but wait=False: end once no job is left
            await app.run_worker_async(wait=False, install_signal_handlers=False)

        return app, run

    return connect, app


_COUNT = [0]
"""Jobs the handler ran in this process."""


async def _fill(system: str, url: str, n: int) -> None:
    """The system's schema installed and ``n`` no-op jobs enqueued in one go, then analyzed."""
    if system == "pgqueuer":
        import asyncpg  # noqa: PLC0415
        from pgqueuer.adapters.persistence.queries import Queries  # type: ignore[import-not-found]  # noqa: PLC0415

        conn = await asyncpg.connect(**_asyncpg(url))
        try:
            queries = Queries.from_asyncpg_connection(conn)
            await queries.install()
            await queries.enqueue([TASK] * n, [None] * n, [0] * n)
        finally:
            await conn.close()
    else:
        connect, app = _procrastinate(url, "bench-fill")
        await connect()
        try:
            await app.schema_manager.apply_schema_async()
            await app.tasks[TASK].batch_defer_async(*({} for _ in range(n)))
        finally:
            await app.close_async()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ANALYZE")


def _left(system: str, url: str) -> int:
    table = "pgqueuer" if system == "pgqueuer" else "procrastinate_jobs"
    where = "" if system == "pgqueuer" else " WHERE status <> 'succeeded'"
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table)) + sql.SQL(where)
        ).fetchone()
    return int(row[0]) if row else -1


# --- the drain ------------------------------------------------------------------------------------


def _drain(system: str, url: str, workers: int) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    ready, go, results = ctx.Barrier(workers + 1), ctx.Event(), ctx.Queue()
    processes = [
        ctx.Process(target=_work, args=((system, url, i), ready, go, results)) for i in range(workers)
    ]
    for process in processes:
        process.start()
    try:
        ready.wait(READY_SECONDS)
        started = time.monotonic()
        go.set()
        reports = [_next(results, processes) for _ in processes]
    finally:
        for process in processes:
            process.join(READY_SECONDS)
            if process.is_alive():
                process.kill()
    backend = [r["backend_cpu"] for r in reports]
    return {
        "seconds": max(r["ended"] for r in reports) - started,
        "completed": sum(r["completed"] for r in reports),
        "client_cpu": sum(r["client_cpu"] for r in reports),
        "backend_cpu": None if None in backend else sum(backend),
        "note": next((r["note"] for r in reports if r["note"]), ""),
        "processes": len({r["pid"] for r in reports}),
        "backends": sum(r["backends"] for r in reports),
    }


def _next(results: Any, processes: list[Any]) -> dict[str, Any]:
    while True:
        try:
            got: dict[str, Any] = results.get(timeout=1.0)
        except queue.Empty:
            if all(not p.is_alive() for p in processes):
                raise SystemExit("every worker process exited without reporting its drain") from None
            continue
        if "failure" in got:
            raise SystemExit(f"worker process failed:\n{got['failure']}")
        return got


def _work(what: tuple[str, str, int], ready: Any, go: Any, results: Any) -> None:
    """A worker process: ``what`` is (system, url, index)."""
    try:
        results.put(asyncio.run(_run(*what, ready, go)))
    except Exception:  # noqa: BLE001 - the parent exits with it
        ready.abort()
        results.put({"failure": traceback.format_exc()})


async def _run(system: str, url: str, index: int, ready: Any, go: Any) -> dict[str, Any]:
    name = f"bench-{system}-{index}-{os.getpid()}"
    connect, _ = (_pgqueuer if system == "pgqueuer" else _procrastinate)(url, name)
    held, run = await connect()
    try:
        pids, note = _backends(url, name)
        backend_before = _cpu(pids, note)
        ready.wait(READY_SECONDS)  # connected: wait for the others (blocking is fine: nothing runs yet)
        if not go.wait(READY_SECONDS):
            raise TimeoutError("no start signal")
        client_before = _client_cpu()
        await run()
        ended = time.monotonic()
        client_cpu = _client_cpu() - client_before
        backend_after = _cpu(pids, note)
    finally:
        await (held.close() if system == "pgqueuer" else held.close_async())
    return {
        "pid": os.getpid(),
        "completed": _COUNT[0],
        "ended": ended,
        "client_cpu": client_cpu,
        "backend_cpu": None
        if backend_before is None or backend_after is None
        else backend_after - backend_before,
        "backends": len(pids),
        "note": note,
    }


def _backends(url: str, name: str) -> tuple[list[int], str]:
    """The server processes serving ``name`` (looked up on a connection of its own, closed at once)."""
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s AND pid <> pg_backend_pid()",
            (name,),
        ).fetchall()
    pids = [int(r[0]) for r in rows]
    for pid in pids:
        try:
            comm = Path(f"/proc/{pid}/stat").read_text(encoding="ascii").split("(", 1)[1].split(")", 1)[0]
        except (OSError, IndexError) as exc:
            return pids, f"server process {pid} not readable here ({exc}): the server runs elsewhere"
        if comm != "postgres":
            return pids, f"/proc/{pid} is {comm!r}, not this server's process"
    return pids, "" if pids else f"no server process found for {name}"


def _cpu(pids: list[int], note: str) -> float | None:
    if note:
        return None
    total = 0.0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text(encoding="ascii").rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def _asyncpg(url: str) -> dict[str, Any]:
    """asyncpg's connect arguments for a libpq DSN (asyncpg reads URLs only)."""
    info = conninfo_to_dict(url)
    names = {"host": "host", "port": "port", "user": "user", "password": "password", "dbname": "database"}
    return {names[k]: (int(v) if k == "port" else v) for k, v in info.items() if k in names and v is not None}


def _client_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


if __name__ == "__main__":
    raise SystemExit(main())
