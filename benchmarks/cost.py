"""What every sluice path costs per million messages, beside its anchor, from the other benchmarks' counts.

Runs four benchmarks with ``--json`` (at their full size, or their smoke size with ``--smoke``) and prices
what they counted with the unit prices of ``aws-prices.md`` (``--prices``; the file used is printed):

- consumer (benchmarks/consumer_overhead.py): per message, the event source mapping's receive and delete
  share (at most 10 messages a call, the batch of 10), one Lambda request per batch, Lambda GB-seconds at
  the measured median ms per record and the consumer's memory in workloads.yaml, and the DynamoDB writes
  counted per new record. Anchor: the Powertools-only consumer of the same script.
- delays (benchmarks/delay_cost.py): its rows per density, each path beside the anchor, one EventBridge
  Scheduler schedule per message.
- redrive (benchmarks/redrive_requests.py): SQS and DynamoDB requests counted per re-driven message, for
  sluice and the reference article. Anchor: SQS's native redrive (StartMessageMoveTask), which AWS bills
  as the SQS requests it makes on your behalf: it receives each message from the dead-letter queue, sends
  it to its destination and deletes it (modelled at 10 messages a request, the floor; 1 a request is
  printed as its ceiling).
- jobs (benchmarks/jobs.py): per job at one worker count, sluice's SQS (the submit's SendMessage, the
  receive and delete share at the job queue's batch size), one Lambda request per batch and GB-seconds at
  the measured time per job per worker, and the database's share: its server CPU per job at an assumed
  instance price (``--db-usd-per-hour``, ``--db-vcpus``: not in the price table, printed as an
  assumption). Anchors: the index-served SKIP LOCKED loop and the Postgres queues jobs.py runs beside it
  (PgQueuer, Procrastinate), whose workers' CPU is priced at the same assumed instance's rate.

    .venv/bin/python benchmarks/cost.py             # every benchmark at full size (about 10 minutes)
    .venv/bin/python benchmarks/cost.py --smoke     # smoke sizes: the figures' shape, not their values

Exits 1 when a benchmark it needs cannot give its figures (a script without ``--json``, a failed run);
jobs are priced only where a PostgreSQL answers (jobs.py prints SKIPPED otherwise, and so does this).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench_env import ROOT, default_prices, unit_prices

BENCH = Path(__file__).resolve().parent
MILLION = 1_000_000
ESM_MESSAGES_PER_CALL = 10  # ReceiveMessage and DeleteMessageBatch take at most 10 messages
DB_USD_PER_HOUR = 0.16  # assumption (--db-usd-per-hour): a 2-vCPU database instance; not in the price table
DB_VCPUS = 2
PRICE_ROWS = {  # name: (service, start of the unit column), as the table spells them
    "sqs": ("SQS standard", "request"),
    "scheduler": ("EventBridge Scheduler", "invocation"),
    "ddb_write": ("DynamoDB on-demand", "write request unit"),
    "ddb_read": ("DynamoDB on-demand", "read request unit"),
    "lambda_request": ("Lambda", "request"),
    "lambda_gb_s": ("Lambda arm64", "GB-second"),
}
DDB_WRITES = ("PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems")
DDB_READS = ("GetItem", "Query", "Scan", "BatchGetItem", "TransactGetItems")
# (script, full-size arguments, smoke-size arguments); each gets --json PATH, the cost ones --prices PATH
RUNS: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {
    "consumer": ("consumer_overhead.py", ("--batches", "60"), ("--batches", "1", "--warmup", "1")),
    "delays": ("delay_cost.py", (), ("--messages", "400", "--sweeps", "4", "--jobs", "1",
                                     "--density-messages", "100")),
    "redrive": ("redrive_requests.py", (), ("--messages", "25")),
    "jobs": ("jobs.py", (), ("--jobs", "40", "--repeats", "1", "--workers", "1", "--rt-jobs", "20")),
}  # fmt: skip
PRICED = ("delays", "redrive")  # the scripts that take --prices
JOB_ANCHORS = {"anchor": "SKIP LOCKED loop, index-served"}  # jobs.py's names, where they need saying


@dataclass(frozen=True)
class Prices:
    source: Path
    usd: dict[str, float]  # per unit: one request, one GB-second

    def __getitem__(self, name: str) -> float:
        return self.usd[name]


def load_prices(path: Path) -> Prices:
    usd = unit_prices(path, PRICE_ROWS)
    return Prices(path.resolve(), usd)


def memory_mb(path: Path, pattern: str) -> int:
    """The memory of a function as its template states it (the first match of ``pattern``)."""
    match = re.search(pattern, path.read_text(encoding="utf-8"))
    if match is None:
        raise SystemExit(f"{path}: no memory size matching {pattern!r}")
    return int(match.group(1))


def run_benchmark(
    name: str, smoke: bool, prices: Path, out: Path, given: Path | None
) -> dict[str, Any] | None:
    """Runs one benchmark with --json; its figures, or None when it printed SKIPPED (no database).
    ``given``: a folder of figures written before (``<name>.json``), read instead when it holds them."""
    script, full, small = RUNS[name]
    if given is not None and (given / f"{name}.json").exists():
        print(f"  read {given / f'{name}.json'} (benchmarks/{script}'s figures, not run again)")
        read: dict[str, Any] = json.loads((given / f"{name}.json").read_text(encoding="utf-8"))
        return read
    path = BENCH / script
    help_text = subprocess.run(
        [sys.executable, str(path), "--help"], capture_output=True, text=True, check=False, timeout=120
    ).stdout
    if "--json" not in help_text:
        raise SystemExit(f"{name}: benchmarks/{script} has no --json option, so its figures cannot be priced")
    target = out / f"{name}.json"
    args = [
        *(small if smoke else full),
        *(("--prices", str(prices)) if name in PRICED else ()),
        "--json",
        str(target),
    ]
    started = time.perf_counter()
    done = subprocess.run([sys.executable, str(path), *args], capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    print(f"  ran {script} {' '.join(args[:-2])}: exit {done.returncode}, {seconds:.0f} s")
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise SystemExit(f"{name}: benchmarks/{script} failed (exit {done.returncode}):\n{tail}")
    if not target.exists():
        skipped = [line for line in done.stdout.splitlines() if line.startswith("SKIPPED")]
        if skipped:
            return None
        raise SystemExit(f"{name}: benchmarks/{script} exited 0 without writing {target}")
    figures: dict[str, Any] = json.loads(target.read_text(encoding="utf-8"))
    return figures


def money(usd: float) -> str:
    return f"${usd:,.4f}"


def row(label: str, *values: str) -> None:
    print(f"  {label:<52}" + "".join(f"{v:>14}" for v in values))


# --- the paths ---------------------------------------------------------------------------------------


def consumer(figures: dict[str, Any], prices: Prices) -> None:
    memory = memory_mb(
        ROOT / "workloads.yaml",
        r"MemorySize: !FindInMap \[Workloads, !Ref Name, MemorySize, \{DefaultValue: (\d+)\}\]",
    )
    batch = int(figures["batch_size"])
    print(
        f"\nconsumer: $ per 1M messages, batches of {batch}, {memory} MB (workloads.yaml's consumer), arm64;"
        f" {figures['records']} records measured per consumer"
    )
    row("", "sluice", "anchor")
    costs: dict[str, float] = {}
    parts: dict[str, list[float]] = {}
    for name in ("sluice", "anchor"):
        c = figures["consumers"][name]
        ms = float(c["ms_per_record"])
        writes = sum(float(c["ddb_requests_per_record"].get(op, 0.0)) for op in DDB_WRITES)
        reads = sum(float(c["ddb_requests_per_record"].get(op, 0.0)) for op in DDB_READS)
        per_message = [
            2 / min(batch, ESM_MESSAGES_PER_CALL) * prices["sqs"],
            prices["lambda_request"] / batch,
            ms / 1000 * memory / 1024 * prices["lambda_gb_s"],
            writes * prices["ddb_write"] + reads * prices["ddb_read"],
        ]
        parts[name] = [p * MILLION for p in per_message]
        costs[name] = sum(parts[name])
        parts[name].extend([ms, writes, reads])
    labels = (
        "SQS: the mapping's receive + delete share (model)",
        "Lambda requests (1 per batch)",
        "Lambda GB-s at the measured duration",
        "DynamoDB (writes, reads as counted; items < 1 KB)",
    )
    for i, label in enumerate(labels):
        row(label, money(parts["sluice"][i]), money(parts["anchor"][i]))
    row("total", money(costs["sluice"]), money(costs["anchor"]))
    row(
        "  measured: ms per record (median, moto's DynamoDB)",
        *(f"{parts[n][4]:.3f}" for n in ("sluice", "anchor")),
    )
    row(
        "  counted: DynamoDB writes / reads per new record",
        *(f"{parts[n][5]:.2f} / {parts[n][6]:.2f}" for n in ("sluice", "anchor")),
    )
    print(f"  sluice / anchor = {costs['sluice'] / costs['anchor']:.3f}")


def delays(figures: dict[str, Any], prices: Prices) -> None:
    print(
        "\ndelays: $ per 1M messages delayed 30 days (benchmarks/delay_cost.py;"
        f" its table: {figures['prices_file']})"
    )
    row("density", "path", "orchestration", "total")
    by_label: dict[str, list[dict[str, Any]]] = {}
    for r in figures["rows"]:
        by_label.setdefault(str(r["label"]), []).append(r)
    for label, rows in by_label.items():
        for r in sorted(rows, key=lambda r: r["path"] == "anchor"):
            path = "Scheduler/msg" if r["path"] == "anchor" else str(r["path"])
            row(
                label if r is rows[0] else "",
                path,
                money(r["orchestration_usd_per_million"]),
                money(r["total_usd_per_million"]),
            )
    print(
        "  anchor: one EventBridge Scheduler schedule per message"
        f" ({money(prices['scheduler'] * MILLION)} per 1M invocations)"
    )


def redrive(figures: dict[str, Any], prices: Prices) -> None:
    n, kinds = figures["messages"], figures["redrivers"]
    print(f"\nredrive: $ per 1M re-driven messages ({n:,} dead-lettered messages counted per redriver)")
    row("", "SQS req/msg", "SQS", "DynamoDB", "total")
    for kind, label in (("sluice", "sluice (Redriver.run)"), ("article", "the reference article's redriver")):
        r = kinds[kind]
        ops = r["dynamodb_operations"]
        ddb = (
            sum(c for op, c in ops.items() if op in DDB_WRITES) * prices["ddb_write"]
            + sum(c for op, c in ops.items() if op in DDB_READS) * prices["ddb_read"]
        )
        sqs = r["sqs_requests_per_message"] * prices["sqs"] * MILLION
        ddb_per_million = ddb / n * MILLION
        row(
            label,
            f"{r['sqs_requests_per_message']:.4f}",
            money(sqs),
            money(ddb_per_million),
            money(sqs + ddb_per_million),
        )
    floor = 3 / ESM_MESSAGES_PER_CALL
    row(
        "anchor: SQS native redrive (StartMessageMoveTask)",
        f"{floor:.4f}",
        money(floor * prices["sqs"] * MILLION),
        money(0),
        money(floor * prices["sqs"] * MILLION),
    )
    row("  its ceiling, one message a request", "3.0000", money(3 * prices["sqs"] * MILLION))
    print(
        "  native redrive: the receive, send and delete of each message billed as SQS requests"
        " (model, not counted)"
    )


def jobs(
    figures: dict[str, Any] | None, prices: Prices, workers: int | None, db_usd_per_hour: float, vcpus: int
) -> None:
    print("\njobs: $ per 1M jobs (benchmarks/jobs.py)")
    if figures is None:
        print("  SKIPPED: jobs.py found no PostgreSQL (SLUICE_DATABASE_URL, else 127.0.0.1:5432)")
        return
    counts = list(figures["workers"])
    w = workers if workers is not None else max(counts)
    if w not in counts:
        raise SystemExit(f"jobs: no cell at {w} workers (measured: {counts})")
    at = counts.index(w)
    batch = int(figures["batch_size"])
    memory = memory_mb(ROOT / "stacks" / "jobs.yaml", r"MemorySize: (\d+)")
    usd_per_cpu_s = db_usd_per_hour / 3600 / vcpus
    print(
        f"  at {w} worker(s); ASSUMED (not from the price table): the database and the peers' workers on"
        f" {vcpus}-vCPU instances at ${db_usd_per_hour:.3f}/h, CPU priced at full use (a lower bound);"
        f" the job consumer {memory} MB (stacks/jobs.yaml), batches of {batch}"
    )
    row("", "jobs/s", "SQS+Lambda", "workers' CPU", "database", "total")
    for system, s in figures["systems"].items():
        rate = s["jobs_per_s"][at]
        client, server = s["client_cpu_us_per_job"][at] or 0.0, s["server_cpu_us_per_job"][at]
        database = (server or 0.0) / 1e6 * usd_per_cpu_s * MILLION
        if system.startswith("sluice"):
            seconds_per_job = w / rate  # each worker busy for the whole drain: its Lambda duration per job
            aws = (1 + 2 / min(batch, ESM_MESSAGES_PER_CALL)) * prices["sqs"] + prices[
                "lambda_request"
            ] / batch
            aws += seconds_per_job * memory / 1024 * prices["lambda_gb_s"]
            workers_cpu = 0.0
        else:
            aws, workers_cpu = 0.0, client / 1e6 * usd_per_cpu_s * MILLION
        total = aws * MILLION + workers_cpu + database
        label = system if system.startswith("sluice") else "anchor: " + JOB_ANCHORS.get(system, system)
        row(
            label,
            f"{rate:,.0f}",
            money(aws * MILLION),
            money(workers_cpu),
            money(database) + ("" if server is not None else " (n/a)"),
            money(total),
        )
    print(
        "  sluice: SQS = the submit's SendMessage + the mapping's receive and delete share (model), Lambda at"
        " workers / jobs/s per job; database = server CPU per job as measured"
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--prices", type=Path, default=default_prices(), help="the price table (markdown)")
    parser.add_argument("--smoke", action="store_true", help="run each benchmark at its smoke size")
    parser.add_argument(
        "--db-usd-per-hour", type=float, default=DB_USD_PER_HOUR, help="assumed database instance price"
    )
    parser.add_argument("--db-vcpus", type=int, default=DB_VCPUS, help="assumed database instance vCPUs")
    parser.add_argument(
        "--jobs-workers", type=int, help="the jobs.py cell priced (default: its most workers)"
    )
    parser.add_argument(
        "--figures",
        type=Path,
        help="a folder of figures the benchmarks wrote with --json (<name>.json: consumer,"
        " delays, redrive, jobs); those found are read instead of running the benchmark again",
    )
    args = parser.parse_args()
    prices = load_prices(args.prices)
    print(f"prices: {prices.source}")
    print("  " + ", ".join(f"{name} ${value:.10g}" for name, value in prices.usd.items()))
    print(f"benchmarks at {'smoke' if args.smoke else 'full'} size, each with --json:")
    with tempfile.TemporaryDirectory(prefix="sluice-cost-") as tmp:
        figures = {
            name: run_benchmark(name, args.smoke, prices.source, Path(tmp), args.figures) for name in RUNS
        }
    for name in ("consumer", "delays", "redrive"):
        if figures[name] is None:
            raise SystemExit(f"{name}: the benchmark printed SKIPPED")
    consumer(figures["consumer"], prices)  # type: ignore[arg-type]
    delays(figures["delays"], prices)  # type: ignore[arg-type]
    redrive(figures["redrive"], prices)  # type: ignore[arg-type]
    jobs(figures["jobs"], prices, args.jobs_workers, args.db_usd_per_hour, args.db_vcpus)
    return 0


if __name__ == "__main__":
    sys.exit(main())
