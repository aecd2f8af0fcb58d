"""Job store throughput, CPU and database round trips per job, against an index-served SKIP LOCKED queue
loop and two Python PostgreSQL job queues, PgQueuer and Procrastinate, in the same run.

N pending no-op jobs drained by W workers on a real PostgreSQL. Each worker is a process with one
connection (as a Lambda environment is), connected before the clock starts; the clock runs from the
barrier they all reach to the end of the last one's drain (benchmarks/job_drains.py says how):

- ``sluice two-phase``: the job consumer's path in two-phase mode: job ids delivered in batches of the
  job queue's event-source BatchSize (stacks/jobs.yaml), each batch run by ``JobWorker.run_batch`` (one
  statement claims the batch, each row under its own token; the no-op handlers; one statement commits
  the successes, each row matched on its own token);
- ``sluice single``: the same in single-UPDATE mode (the batch's runs marked in one statement, each
  completed by its own ``complete_if_pending``);
- ``anchor``: the textbook queue loop, no SQS, no fencing: ``BEGIN; SELECT … WHERE status = 'pending'
  ORDER BY updated_at LIMIT 1 FOR UPDATE SKIP LOCKED; UPDATE … SET status = 'completed'; COMMIT``, its
  pick served by the partial index ``jobs_pending_updated_at`` (its plain EXPLAIN is printed);
- ``pgqueuer default`` and ``procrastinate``: PgQueuer and Procrastinate as their docs set them up,
  in their own virtualenv (``.bench-venv-peers/``, built from benchmarks/peers-requirements.txt when
  missing) and a database of their own per drain (benchmarks/peer_drains.py). When that virtualenv
  cannot be built (no package index) the report says "peers: NOT RUN" and why.

Throughput = N / wall time of the drain (job creation not included). Each (system, workers) cell runs
``--repeats`` times on a fresh table, the systems' order rotating each round, and reports the median,
with the median CPU per job: the worker processes' own user + sys time, and their PostgreSQL server
processes' (``/proc/<pid>/stat``; "n/a" when the server is not on this machine).

Round trips are counted on the wire for sluice and the anchor: a second pass runs through a small TCP
proxy that parses the PostgreSQL protocol and counts what makes the client wait for the server — each
Sync (extended protocol) and each simple Query — divided by the jobs drained.

Targets (docs/jobs.md): two-phase ≤ 3 round trips per job, ≥ 0.9x the anchor's jobs/s and ≥ 1x
PgQueuer's with its defaults.

    .venv/bin/python benchmarks/jobs.py                 # 5000 jobs, 1/4/8 worker processes, 3 repeats
    .venv/bin/python benchmarks/jobs.py --jobs 500 --repeats 1 --workers 8 --json jobs.json
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import socket
import statistics
import struct
import subprocess
import sys
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# benchmarks/ too: the spawned workers import job_drains by name, whoever loaded this file and how
sys.path[:0] = [str(ROOT / "layers" / "common"), str(ROOT / "local"), str(ROOT / "benchmarks")]

import psycopg  # noqa: E402
from job_drains import KINDS, Drain, Task, anchor_pick, drain  # noqa: E402
from psycopg import sql  # noqa: E402

from sluice_local.app import postgres  # noqa: E402

TARGET_ROUND_TRIPS = 3.0
TARGET_RATIO = 0.9
TARGET_PEER = 1.0
"""sluice two-phase's jobs/s against PgQueuer's with its defaults."""
RT_WORKERS = 4
TWO_PHASE, PGQUEUER = "sluice two-phase", "pgqueuer default"
SLUICE = {TWO_PHASE: "two_phase", "sluice single": "single"}
"""The sluice systems and their benchmarks/job_drains.py modes."""
PEERS = {PGQUEUER: "pgqueuer", "procrastinate": "procrastinate"}
"""The peers and their benchmarks/peer_drains.py systems."""
PEER_VENV = ROOT / ".bench-venv-peers"
PEER_REQUIREMENTS = ROOT / "benchmarks" / "peers-requirements.txt"
PEER_BUILD_SECONDS = 600
PEER_DRAIN_SECONDS = 900


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


# --- the systems -----------------------------------------------------------------------------------


def template_batch_size() -> int:
    """The job consumer's SQS batch size: its event source's BatchSize in stacks/jobs.yaml."""
    # here, not at the top: the local runtime's package needs samtranslator, which the library's own
    # environment (scripts/library_ends.py runs a test that loads this file) does not have
    from sluice_local.emulation import cfn_yaml  # noqa: PLC0415

    template = cfn_yaml.parse((ROOT / "stacks" / "jobs.yaml").read_text(encoding="utf-8"))
    for resource in template["Resources"].values():
        events = resource.get("Properties", {}).get("Events") if isinstance(resource, dict) else None
        for event in (events or {}).values():
            source = event.get("Properties", {})
            if event.get("Type") == "SQS" and source.get("Queue") == {"Fn::GetAtt": ["JobQueue", "Arn"]}:
                return int(source["BatchSize"])
    raise SystemExit("stacks/jobs.yaml: no SQS event source on JobQueue")


def peer_python() -> tuple[Path | None, str]:
    """The peers' own virtualenv's interpreter, built from peers-requirements.txt when it is missing or
    was built from other pins; ``(None, why)`` when it cannot be built (no package index reachable)."""
    python, stamp = PEER_VENV / "bin" / "python", PEER_VENV / "peers-requirements.txt"
    pins = PEER_REQUIREMENTS.read_text(encoding="utf-8")
    if python.exists() and stamp.exists() and stamp.read_text(encoding="utf-8") == pins:
        return python, f"{PEER_VENV.name}/ (reused)"
    steps = (
        [sys.executable, "-m", "venv", "--clear", str(PEER_VENV)],
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "-r",
            str(PEER_REQUIREMENTS),
        ],
    )
    for step in steps:
        done = subprocess.run(step, capture_output=True, text=True, check=False, timeout=PEER_BUILD_SECONDS)
        if done.returncode != 0:
            tail = [line for line in (done.stderr or done.stdout).splitlines() if "WARNING" not in line][-2:]
            return None, f"{PEER_VENV.name}/ could not be built ({' / '.join(tail)[:300]})"
    stamp.write_text(pins, encoding="utf-8")
    return python, f"{PEER_VENV.name}/ (built from {PEER_REQUIREMENTS.name})"


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


@dataclass(frozen=True)
class Bench:
    """What every drain of a run shares."""

    url: str
    schema: str
    jobs: int
    batch: int
    peers: Path | None  # the peers' interpreter; None: the peers are not run


def _drain(bench: Bench, system: str, workers: int) -> Drain:
    if system in PEERS:
        return _peer_drain(bench, PEERS[system], workers)
    mode = SLUICE.get(system, "anchor")
    ids = _fill(bench.url, bench.schema, KINDS[mode], bench.jobs)
    return drain(Task(mode, bench.url, bench.schema, () if mode == "anchor" else ids, bench.batch), workers)


def _peer_drain(bench: Bench, peer: str, workers: int) -> Drain:
    """One drain of a peer, in its own virtualenv and a database of its own (benchmarks/peer_drains.py)."""
    assert bench.peers is not None  # noqa: S101 - only run when built
    argv = [str(bench.peers), str(ROOT / "benchmarks" / "peer_drains.py"), "--system", peer]
    argv += ["--url", bench.url, "--jobs", str(bench.jobs), "--workers", str(workers)]
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=PEER_DRAIN_SECONDS)
    if done.returncode != 0:
        raise SystemExit(f"{peer} x{workers} failed:\n{done.stdout[-2000:]}{done.stderr[-4000:]}")
    got = json.loads(done.stdout.strip().splitlines()[-1])
    return Drain(
        seconds=float(got["seconds"]),
        completed=int(got["completed"]),
        client_cpu=float(got["client_cpu"]),
        backend_cpu=None if got["backend_cpu"] is None else float(got["backend_cpu"]),
        note=str(got["note"]),
        processes=int(got["processes"]),
        backends=int(got["backends"]),
    )


def _explain_pick(url: str, schema: str, n: int) -> list[str]:
    """The anchor's pick, planned (plain EXPLAIN: nothing runs, nothing is locked) on ``n`` pending jobs."""
    _fill(url, schema, KINDS["anchor"], n)
    with psycopg.connect(url, autocommit=True) as conn:
        return [str(row[0]) for row in conn.execute(sql.SQL("EXPLAIN ") + anchor_pick(schema))]


def _via_proxy(url: str, port: int) -> str:
    info = psycopg.conninfo.conninfo_to_dict(url)
    info.update(host="127.0.0.1", port=str(port), sslmode="disable", gssencmode="disable")
    return psycopg.conninfo.make_conninfo(**{k: str(v) for k, v in info.items() if v is not None})


@dataclass
class Cell:
    """A (system, workers) cell's drains."""

    drains: list[Drain] = field(default_factory=list)

    def rate(self, n: int) -> float:
        return statistics.median(n / d.seconds for d in self.drains)

    def client_us(self, n: int) -> float:
        return statistics.median(d.client_cpu for d in self.drains) / n * 1e6

    def backend_us(self, n: int) -> float | None:
        backends = [d.backend_cpu for d in self.drains if d.backend_cpu is not None]
        return None if len(backends) < len(self.drains) else statistics.median(backends) / n * 1e6

    def cpu_line(self, n: int) -> str:
        first = self.drains[0]
        backend = self.backend_us(n)
        if backend is None:
            note = next(d.note for d in self.drains if d.backend_cpu is None)
            server = f"backend CPU n/a ({note})"
        else:
            server = f"backend {backend:.0f} µs/job"
        who = f"({first.processes} processes, {first.backends} backends)"
        return f"{who}: client {self.client_us(n):.0f} µs/job, {server}"


def _timed_cells(
    bench: Bench, systems: tuple[str, ...], workers: list[int], repeats: int
) -> dict[tuple[str, int], Cell]:
    """Each (system, workers) cell drained ``repeats`` times, the systems' order rotating each round."""
    cells = {(s, w): Cell() for s in systems for w in workers}
    print(f"\n{'system':18} {'workers':>7} {'jobs/s':>9}  samples (jobs/s)")
    for w in workers:
        for r in range(repeats):
            for system in systems[r % len(systems) :] + systems[: r % len(systems)]:  # rotate: no order bias
                done = _drain(bench, system, w)
                if done.completed != bench.jobs:
                    raise SystemExit(f"{system} x{w}: completed {done.completed} of {bench.jobs} jobs")
                if done.processes != w:
                    raise SystemExit(f"{system} x{w}: {done.processes} worker processes, not {w}")
                cells[(system, w)].drains.append(done)
        for system in systems:
            cell = cells[(system, w)]
            samples = ", ".join(f"{bench.jobs / d.seconds:.0f}" for d in cell.drains)
            print(f"{system:18} {w:>7} {cell.rate(bench.jobs):>9.0f}  {samples}")
    return cells


def _round_trips(bench: Bench, n: int) -> dict[str, float]:
    """Round trips per job of sluice's modes and the anchor, counted by the proxy over a drain of ``n``."""
    host_port = psycopg.conninfo.conninfo_to_dict(bench.url)
    proxy = RoundTripProxy(str(host_port.get("host") or "127.0.0.1"), int(host_port.get("port") or 5432))
    proxied = _via_proxy(bench.url, proxy.port)
    trips: dict[str, float] = {}
    for system in (*SLUICE, "anchor"):
        mode = SLUICE.get(system, "anchor")
        ids = _fill(bench.url, bench.schema, KINDS[mode], n)
        task = Task(mode, proxied, bench.schema, () if mode == "anchor" else ids, bench.batch)
        done = drain(task, RT_WORKERS, on_ready=proxy.reset)
        trips[system] = proxy.round_trips / done.completed
    return trips


def _verdict(ratio: float, target: float) -> str:
    return f"{ratio:.2f} (target >= {target:g}) {'PASS' if ratio >= target else 'BELOW TARGET'}"


def _report(
    bench: Bench,
    systems: tuple[str, ...],
    workers: list[int],
    cells: dict[tuple[str, int], Cell],
    trips: dict[str, float],
) -> None:
    n = bench.jobs
    print(
        "\nCPU per job, median of the drains (client: the worker processes' user + sys; backend: their"
        " PostgreSQL server processes' utime + stime, /proc/<pid>/stat):"
    )
    for w in workers:
        for system in systems:
            print(f"  {system:18} {w:>2} workers {cells[(system, w)].cpu_line(n)}")
    print(f"\nround trips per job (on the wire: Sync + Query messages; {RT_WORKERS} warm connections):")
    for system, value in trips.items():
        print(f"  {system:18} {value:.2f}")
    print("\nfigures:")
    trip, verdict = trips[TWO_PHASE], "PASS" if trips[TWO_PHASE] <= TARGET_ROUND_TRIPS else "ABOVE TARGET"
    print(f"  two-phase round trips per job = {trip:.2f} (target <= {TARGET_ROUND_TRIPS:g}) {verdict}")
    for w in workers:
        sluice, anchor = cells[(TWO_PHASE, w)].rate(n), cells[("anchor", w)].rate(n)
        line = f"  {w:>2} workers: two-phase/anchor = {_verdict(sluice / anchor, TARGET_RATIO)}"
        if bench.peers is not None:
            pgqueuer = cells[(PGQUEUER, w)].rate(n)
            line += f"; two-phase/pgqueuer default = {_verdict(sluice / pgqueuer, TARGET_PEER)}"
            line += f"; two-phase/procrastinate = {sluice / cells[('procrastinate', w)].rate(n):.2f}"
        line += f"; single/anchor = {cells[('sluice single', w)].rate(n) / anchor:.2f}"
        print(line)


def _json(
    bench: Bench,
    systems: tuple[str, ...],
    workers: list[int],
    cells: dict[tuple[str, int], Cell],
    trips: dict[str, float],
) -> dict[str, Any]:
    n = bench.jobs
    return {
        "workers": workers,
        "batch_size": bench.batch,
        "systems": {
            system: {
                "jobs_per_s": [cells[(system, w)].rate(n) for w in workers],
                "client_cpu_us_per_job": [cells[(system, w)].client_us(n) for w in workers],
                "server_cpu_us_per_job": [cells[(system, w)].backend_us(n) for w in workers],
                "round_trips_per_job": [trips[system] for _ in workers] if system in trips else None,
            }
            for system in systems
        },
    }


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
    parser.add_argument("--json", type=Path, help="also write the figures to this file (JSON)")
    args = parser.parse_args()
    workers = [int(w) for w in args.workers.split(",") if w]

    url = postgres.database_url()
    reason = postgres.unreachable_reason(url)
    if reason is not None:
        print(f"SKIPPED: {reason}")
        return 0
    batch = template_batch_size()
    peers, peer_note = peer_python()
    systems = (*SLUICE, "anchor", *(PEERS if peers is not None else ()))
    schema = postgres.new_schema(url, prefix="sluice_bench_")
    bench = Bench(url, schema, args.jobs, batch, peers)
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
        print(
            f"sluice: job ids delivered {batch} at a time (stacks/jobs.yaml's BatchSize for the job queue),"
            " each batch run by JobWorker.run_batch as the job consumer runs it"
        )
        if peers is not None:
            print(
                f"peers: {', '.join(PEERS)} in their own virtualenv, {peer_note};"
                " a database of their own per drain"
            )
        else:
            print(f"peers: NOT RUN: {peer_note}")
        print(f"\nthe anchor's pick, EXPLAIN on {args.jobs} pending jobs:")
        for line in _explain_pick(url, schema, args.jobs):
            print(f"  {line}")

        cells = _timed_cells(bench, systems, workers, args.repeats)
        trips = _round_trips(bench, args.rt_jobs)
        _report(bench, systems, workers, cells, trips)
        if args.json is not None:
            args.json.write_text(
                json.dumps(_json(bench, systems, workers, cells, trips), indent=2) + "\n", encoding="utf-8"
            )
            print(f"\nfigures written to {args.json}")
    finally:
        postgres.drop_schema(url, schema)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
