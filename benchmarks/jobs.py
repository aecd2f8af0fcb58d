"""Job store throughput, CPU and database round trips per job, against a plain SKIP LOCKED queue loop.

Three ways to drain N pending jobs with W workers on a real PostgreSQL. Each worker is a process with one
connection (as a Lambda environment is), connected and warm before the clock starts; the clock runs from
the barrier they all reach to the end of the last one's drain (benchmarks/job_drains.py says how):

- ``single``: sluice's single-UPDATE mode, ``JobWorker.run`` per job id (``start`` marks the run in
  flight, the no-op handler, ``complete_if_pending``);
- ``two_phase``: sluice's two-phase mode, ``JobWorker.run`` per job id (``start`` claims, the no-op
  handler, ``commit`` under the claim token);
- ``anchor``: the textbook queue loop, no SQS, no fencing: ``BEGIN; SELECT … WHERE status = 'pending'
  ORDER BY updated_at LIMIT 1 FOR UPDATE SKIP LOCKED; UPDATE … SET status = 'completed'; COMMIT``, its
  pick served by the partial index ``jobs_pending_updated_at`` (its plain EXPLAIN is printed).

The sluice modes get each job id as a queue message would deliver it (handed out once each, to whichever
process asks next); the anchor finds its own work in the table. Throughput = N / wall time of the drain
(job creation not included). Each (mode, workers) cell runs ``--repeats`` times on a fresh table, the
modes' order rotating each round, and reports the median, with the median CPU per job: the worker
processes' own user + sys time, and their PostgreSQL server processes' (``/proc/<pid>/stat``; "n/a"
when the server is not on this machine).

Round trips are counted on the wire, not in sluice's code: a second pass runs through a small TCP
proxy that parses the PostgreSQL protocol and counts what makes the client wait for the server — each
Sync (extended protocol) and each simple Query — divided by the jobs drained.

Targets (docs/jobs.md): two-phase ≤ 3 round trips per job and ≥ 0.9x the anchor's jobs/s.

    .venv/bin/python benchmarks/jobs.py                 # 5000 jobs, 1/4/8 worker processes, 3 repeats
    .venv/bin/python benchmarks/jobs.py --jobs 500 --repeats 1 --workers 8
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import socket
import statistics
import struct
import sys
import threading
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# benchmarks/ too: the spawned workers import job_drains by name, whoever loaded this file and how
sys.path[:0] = [str(ROOT / "layers" / "common"), str(ROOT / "local"), str(ROOT / "benchmarks")]

import psycopg  # noqa: E402
from job_drains import KINDS, MODES, Drain, Task, anchor_pick, drain  # noqa: E402
from psycopg import sql  # noqa: E402

from sluice_local.app import postgres  # noqa: E402

TARGET_ROUND_TRIPS = 3.0
TARGET_RATIO = 0.9
RT_WORKERS = 4


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


def _fill(url: str, schema: str, kind: str, n: int) -> list[uuid.UUID]:
    """A fresh table of ``n`` pending jobs, created a microsecond apart (a queue's rows are not all of one
    instant), analyzed."""
    ids = [uuid.uuid4() for _ in range(n)]
    first = datetime.datetime.now(datetime.UTC) - datetime.timedelta(microseconds=n)
    with psycopg.connect(url, autocommit=True) as conn, conn.cursor() as cur:
        table = sql.Identifier(schema, "jobs")
        cur.execute(sql.SQL("TRUNCATE {}").format(table))
        columns = sql.SQL("COPY {} (id, kind, payload, created_at, updated_at) FROM STDIN").format(table)
        with cur.copy(columns) as copy:
            for i, job_id in enumerate(ids):
                at = first + datetime.timedelta(microseconds=i)
                copy.write_row((job_id, kind, f'{{"n": {i}}}', at, at))
        cur.execute(sql.SQL("ANALYZE {}").format(table))
    return ids


def _drain(url: str, schema: str, mode: str, n: int, workers: int) -> Drain:
    ids = _fill(url, schema, KINDS[mode], n)
    return drain(Task(mode, url, schema, () if mode == "anchor" else ids), workers)


def _explain_pick(url: str, schema: str, n: int) -> list[str]:
    """The anchor's pick, planned (plain EXPLAIN: nothing runs, nothing is locked) on ``n`` pending jobs."""
    _fill(url, schema, KINDS["anchor"], n)
    with psycopg.connect(url, autocommit=True) as conn:
        return [str(row[0]) for row in conn.execute(sql.SQL("EXPLAIN ") + anchor_pick(schema))]


def _via_proxy(url: str, port: int) -> str:
    info = psycopg.conninfo.conninfo_to_dict(url)
    info.update(host="127.0.0.1", port=str(port), sslmode="disable", gssencmode="disable")
    return psycopg.conninfo.make_conninfo(**{k: str(v) for k, v in info.items() if v is not None})


def _cpu(drains: list[Drain], n: int) -> str:
    """Median CPU per job over a cell's drains: the worker processes' and their server processes'."""
    client = statistics.median(d.client_cpu for d in drains) / n * 1e6
    backends = [d.backend_cpu for d in drains if d.backend_cpu is not None]
    if len(backends) < len(drains):
        note = next(d.note for d in drains if d.backend_cpu is None)
        return f"client {client:.0f} µs/job, backend CPU n/a ({note})"
    return f"client {client:.0f} µs/job, backend {statistics.median(backends) / n * 1e6:.0f} µs/job"


def _timed_cells(
    url: str, schema: str, n: int, workers: list[int], repeats: int
) -> tuple[dict[tuple[str, int], float], dict[tuple[str, int], str]]:
    """Each (mode, workers) cell drained ``repeats`` times, the modes' order rotating each round: the
    median jobs/s of each cell (printed with its samples) and its CPU per job, as printed."""
    rates: dict[tuple[str, int], float] = {}
    cpu: dict[tuple[str, int], str] = {}
    print(f"\n{'mode':10} {'workers':>7} {'jobs/s':>9}  samples (jobs/s)")
    for w in workers:
        drains: dict[str, list[Drain]] = {mode: [] for mode in MODES}
        for r in range(repeats):
            for mode in MODES[r % len(MODES) :] + MODES[: r % len(MODES)]:  # rotate: no order bias
                done = _drain(url, schema, mode, n, w)
                if done.completed != n:
                    raise SystemExit(f"{mode} x{w}: completed {done.completed} of {n} jobs")
                if done.processes != w:
                    raise SystemExit(f"{mode} x{w}: {done.processes} worker processes, not {w}")
                drains[mode].append(done)
        for mode in MODES:
            samples = [n / d.seconds for d in drains[mode]]
            rates[(mode, w)] = statistics.median(samples)
            first = drains[mode][0]
            cpu[(mode, w)] = f"({first.processes} processes, {first.backends} backends): " + _cpu(
                drains[mode], n
            )
            print(f"{mode:10} {w:>7} {rates[(mode, w)]:>9.0f}  {', '.join(f'{x:.0f}' for x in samples)}")
    return rates, cpu


def _round_trips(url: str, schema: str, n: int) -> dict[str, float]:
    """Round trips per job of each mode, counted by the proxy over a drain of ``n`` jobs."""
    host_port = psycopg.conninfo.conninfo_to_dict(url)
    proxy = RoundTripProxy(str(host_port.get("host") or "127.0.0.1"), int(host_port.get("port") or 5432))
    proxied = _via_proxy(url, proxy.port)
    trips: dict[str, float] = {}
    for mode in MODES:
        ids = _fill(url, schema, KINDS[mode], n)
        task = Task(mode, proxied, schema, () if mode == "anchor" else ids)
        done = drain(task, RT_WORKERS, on_ready=proxy.reset)
        trips[mode] = proxy.round_trips / done.completed
    return trips


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=5000, help="jobs per drain (default 5000)")
    parser.add_argument(
        "--workers", default="1,4,8", help="comma-separated worker process counts (default 1,4,8)"
    )
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
        print(
            "workers: one process each (multiprocessing spawn), one connection each; the clock starts at a"
            " barrier all reach connected and warm, stops when the last finishes"
        )
        print(f"\nthe anchor's pick, EXPLAIN on {args.jobs} pending jobs:")
        for line in _explain_pick(url, schema, args.jobs):
            print(f"  {line}")

        rates, cpu = _timed_cells(url, schema, args.jobs, workers, args.repeats)

        print(
            "\nCPU per job, median of the drains (client: the worker processes' user + sys; backend: their"
            " PostgreSQL server processes' utime + stime, /proc/<pid>/stat):"
        )
        for w in workers:
            for mode in MODES:
                print(f"  {mode:10} {w:>2} workers {cpu[(mode, w)]}")

        trips = _round_trips(url, schema, args.rt_jobs)
        print(
            "\nround trips per job (on the wire: Sync + Query messages;"
            f" {args.rt_jobs} jobs, {RT_WORKERS} warm connections):"
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
