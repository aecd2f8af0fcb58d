"""Job store throughput and database round trips per job, against a plain SKIP LOCKED loop.

Three ways to drain N pending jobs with W workers (threads, one connection each) on a real PostgreSQL:

- ``single``: sluice's single-UPDATE mode, ``JobWorker.run`` per job id (read the row, run the no-op
  handler, ``complete_if_pending``);
- ``two_phase``: sluice's two-phase mode, ``JobWorker.run`` per job id (read, ``claim``, no-op handler,
  ``commit`` under the claim token);
- ``anchor``: the textbook queue loop, no SQS, no fencing: ``BEGIN; SELECT … WHERE status = 'pending'
  LIMIT 1 FOR UPDATE SKIP LOCKED; UPDATE … SET status = 'completed'; COMMIT``.

The sluice modes get each job id as a queue message would deliver it (a shared in-memory queue, each id
once); the anchor finds its own work in the table. Throughput = N / wall time of the drain (job
creation not included). Each (mode, workers) cell runs ``--repeats`` times on a fresh table, the
modes' order rotating each round, and reports the median.

Round trips are counted on the wire, not in sluice's code: a second pass runs through a small TCP
proxy that parses the PostgreSQL protocol and counts what makes the client wait for the server — each
Sync (extended protocol) and each simple Query — divided by the jobs drained.

Targets (docs/jobs.md): two-phase ≤ 3 round trips per job and ≥ 0.7x the anchor's jobs/s.

    .venv/bin/python benchmarks/jobs.py                 # 2000 jobs, 1/4/16 workers, 3 repeats
    .venv/bin/python benchmarks/jobs.py --jobs 500 --repeats 1
"""

from __future__ import annotations

import argparse
import contextlib
import os
import queue
import socket
import statistics
import struct
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "layers" / "common"), str(ROOT / "local")]

import psycopg  # noqa: E402
from psycopg import sql  # noqa: E402

from sluice.jobs import Connector, Job, JobKinds, JobStore, JobWorker, Outcome  # noqa: E402
from sluice_local.app import postgres  # noqa: E402

MODES = ("single", "two_phase", "anchor")
TARGET_ROUND_TRIPS = 3.0
TARGET_RATIO = 0.7


# --- the wire counter ------------------------------------------------------------------------------


class RoundTripProxy:
    """Loopback TCP proxy to PostgreSQL counting client messages that end a request (Sync 'S', Query 'Q')."""

    def __init__(self, host: str, port: int) -> None:
        self._upstream = (host, port)
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._server.getsockname()[1])
        self._lock = threading.Lock()
        self.round_trips = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def reset(self) -> None:
        with self._lock:
            self.round_trips = 0

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self._upstream)
            threading.Thread(target=self._client_to_server, args=(client, upstream), daemon=True).start()
            threading.Thread(target=_pump, args=(upstream, client), daemon=True).start()

    def _client_to_server(self, client: socket.socket, upstream: socket.socket) -> None:
        buffer = b""
        started = False  # the startup packet has no type byte
        while True:
            try:
                chunk = client.recv(65536)
            except OSError:
                chunk = b""
            if not chunk:
                _close(client, upstream)
                return
            buffer += chunk
            while True:
                if not started:
                    if len(buffer) < 4:
                        break
                    (length,) = struct.unpack("!I", buffer[:4])
                    if len(buffer) < length:
                        break
                    buffer, started = buffer[length:], True
                    continue
                if len(buffer) < 5:
                    break
                kind = buffer[:1]
                (length,) = struct.unpack("!I", buffer[1:5])
                if len(buffer) < 1 + length:
                    break
                buffer = buffer[1 + length :]
                if kind in (b"S", b"Q"):
                    with self._lock:
                        self.round_trips += 1
            # Forwarded only once counted: a request counts before its answer can come back, so a reset
            # made after an answer arrived never sees that request counted late (on a loaded machine the
            # warm-up's Sync was counted after the reset: 81 round trips for 80).
            upstream.sendall(chunk)


def _pump(source: socket.socket, sink: socket.socket) -> None:
    while True:
        try:
            chunk = source.recv(65536)
        except OSError:
            chunk = b""
        if not chunk:
            _close(source, sink)
            return
        try:
            sink.sendall(chunk)
        except OSError:
            _close(source, sink)
            return


def _close(*sockets: socket.socket) -> None:
    for s in sockets:
        with contextlib.suppress(OSError):
            s.close()


# --- the runs --------------------------------------------------------------------------------------


def _kinds() -> JobKinds:
    kinds = JobKinds()

    def noop(job: Job) -> dict[str, Any]:
        return {"n": job.payload["n"]}

    kinds.register("bench-single", mode="single")(noop)
    kinds.register("bench-two-phase", mode="two_phase")(noop)
    return kinds


def _fill(url: str, schema: str, kind: str, n: int) -> list[uuid.UUID]:
    ids = [uuid.uuid4() for _ in range(n)]
    with psycopg.connect(url, autocommit=True) as conn, conn.cursor() as cur:
        table = sql.Identifier(schema, "jobs")
        cur.execute(sql.SQL("TRUNCATE {}").format(table))
        with cur.copy(sql.SQL("COPY {} (id, kind, payload) FROM STDIN").format(table)) as copy:
            for i, job_id in enumerate(ids):
                copy.write_row((job_id, kind, f'{{"n": {i}}}'))
        cur.execute(sql.SQL("ANALYZE {}").format(table))
    return ids


def _drain_sluice(
    url: str, schema: str, ids: list[uuid.UUID], workers: int, ready: Callable[[], None] = lambda: None
) -> tuple[float, int]:
    deliveries: queue.SimpleQueue[uuid.UUID] = queue.SimpleQueue()
    for job_id in ids:
        deliveries.put(job_id)
    kinds = _kinds()
    stores = [
        JobStore(Connector(lambda _r: url, application_name=f"bench-{i}"), schema=schema, worker=f"w{i}")
        for i in range(workers)
    ]
    for store in stores:  # connected before the clock starts, as a warm Lambda is
        store.get(uuid.uuid4())
    ready()
    completed = [0] * workers

    def work(i: int) -> None:
        runner = JobWorker(stores[i], kinds)
        while True:
            try:
                job_id = deliveries.get_nowait()
            except queue.Empty:
                return
            if runner.run(job_id) is Outcome.COMPLETED:
                completed[i] += 1

    seconds = _timed(workers, work)
    for store in stores:
        store.close()
    return seconds, sum(completed)


def _drain_anchor(
    url: str, schema: str, workers: int, ready: Callable[[], None] = lambda: None
) -> tuple[float, int]:
    table = sql.Identifier(schema, "jobs")
    pick = sql.SQL(
        "SELECT id, payload FROM {} WHERE status = 'pending' ORDER BY created_at LIMIT 1"
        " FOR UPDATE SKIP LOCKED"
    ).format(table)
    done = sql.SQL(
        "UPDATE {} SET status = 'completed', result = %s, completed_at = now() WHERE id = %s"
    ).format(table)
    conns = [
        psycopg.connect(url, prepare_threshold=None, application_name=f"anchor-{i}") for i in range(workers)
    ]
    ready()
    completed = [0] * workers

    def work(i: int) -> None:
        conn = conns[i]
        while True:
            with conn.transaction():
                row = conn.execute(pick).fetchone()
                if row is None:
                    return
                conn.execute(done, (psycopg.types.json.Jsonb({"n": row[1]["n"]}), row[0]))
            completed[i] += 1

    seconds = _timed(workers, work)
    for conn in conns:
        conn.close()
    return seconds, sum(completed)


def _timed(workers: int, work: Callable[[int], None]) -> float:
    threads = [threading.Thread(target=work, args=(i,)) for i in range(workers)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - started


def _drain(url: str, schema: str, mode: str, n: int, workers: int) -> tuple[float, int]:
    kind = "bench-single" if mode == "single" else "bench-two-phase"
    ids = _fill(url, schema, kind, n)
    if mode == "anchor":
        return _drain_anchor(url, schema, workers)
    return _drain_sluice(url, schema, ids, workers)


def _via_proxy(url: str, port: int) -> str:
    info = psycopg.conninfo.conninfo_to_dict(url)
    info.update(host="127.0.0.1", port=str(port), sslmode="disable", gssencmode="disable")
    return psycopg.conninfo.make_conninfo(**{k: str(v) for k, v in info.items() if v is not None})


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=2000, help="jobs per drain (default 2000)")
    parser.add_argument("--workers", default="1,4,16", help="comma-separated worker counts (default 1,4,16)")
    parser.add_argument("--repeats", type=int, default=3, help="drains per cell; the median is reported")
    parser.add_argument("--rt-jobs", type=int, default=300, help="jobs per round-trip counting drain")
    args = parser.parse_args()
    workers = [int(w) for w in args.workers.split(",") if w]

    url = postgres.database_url()
    reason = postgres.unreachable_reason(url)
    if reason is not None:
        print(f"SKIPPED: {reason}")
        return 0
    schema = postgres.new_schema(url, prefix="sluice_bench_")
    try:
        with psycopg.connect(url) as conn:
            version = conn.execute("SHOW server_version").fetchone()
            sync = conn.execute("SHOW synchronous_commit").fetchone()
        print(
            f"PostgreSQL {version[0] if version else '?'} at {postgres.redacted(url)} (synchronous_commit="
            f"{sync[0] if sync else '?'}), {os.cpu_count()} CPUs; {args.jobs} jobs per drain, median of "
            f"{args.repeats}"
        )
        rates: dict[tuple[str, int], float] = {}
        print(f"\n{'mode':10} {'workers':>7} {'jobs/s':>9}  samples (jobs/s)")
        for w in workers:
            samples: dict[str, list[float]] = {mode: [] for mode in MODES}
            for r in range(args.repeats):
                for mode in MODES[r % len(MODES) :] + MODES[: r % len(MODES)]:  # rotate: no order bias
                    seconds, completed = _drain(url, schema, mode, args.jobs, w)
                    if completed != args.jobs:
                        raise SystemExit(f"{mode} x{w}: completed {completed} of {args.jobs} jobs")
                    samples[mode].append(args.jobs / seconds)
            for mode in MODES:
                rates[(mode, w)] = statistics.median(samples[mode])
                shown = ", ".join(f"{x:.0f}" for x in samples[mode])
                print(f"{mode:10} {w:>7} {rates[(mode, w)]:>9.0f}  {shown}")

        host_port = psycopg.conninfo.conninfo_to_dict(url)
        proxy = RoundTripProxy(str(host_port.get("host") or "127.0.0.1"), int(host_port.get("port") or 5432))
        proxied = _via_proxy(url, proxy.port)
        trips: dict[str, float] = {}
        for mode in MODES:
            kind = "bench-single" if mode == "single" else "bench-two-phase"
            ids = _fill(url, schema, kind, args.rt_jobs)
            if mode == "anchor":
                _, completed = _drain_anchor(proxied, schema, 4, ready=proxy.reset)
            else:
                _, completed = _drain_sluice(proxied, schema, ids, 4, ready=proxy.reset)
            trips[mode] = proxy.round_trips / completed

        print(
            "\nround trips per job (on the wire: Sync + Query messages;"
            f" {args.rt_jobs} jobs, 4 warm connections):"
        )
        for mode in MODES:
            print(f"  {mode:10} {trips[mode]:.2f}")
        print("\nfigures:")
        verdict = "PASS" if trips["two_phase"] <= TARGET_ROUND_TRIPS else "ABOVE TARGET"
        print(
            f"  two-phase round trips per job = {trips['two_phase']:.2f}"
            f" (target <= {TARGET_ROUND_TRIPS:g}) {verdict}"
        )
        for w in workers:
            ratio = rates[("two_phase", w)] / rates[("anchor", w)]
            single = rates[("single", w)] / rates[("anchor", w)]
            verdict = "PASS" if ratio >= TARGET_RATIO else "BELOW TARGET"
            print(
                f"  {w:>2} workers: two-phase/anchor = {ratio:.2f} (target >= {TARGET_RATIO:g}) {verdict};"
                f" single/anchor = {single:.2f}"
            )
    finally:
        postgres.drop_schema(url, schema)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
