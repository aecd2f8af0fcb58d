"""Every benchmark runs, at smoke size: each script of `make bench` as a subprocess with the smallest
arguments that still take it through its whole path, exit 0 and a report of the expected shape (the
figures are numbers; none is held to a value: at this size they mean nothing).

Every command the docs state for a benchmark is run here with its options at a smaller size, except
``cold_start.py --lean``, which builds a virtualenv with pip from the package index (network, ~20 s).
`make bench` stays the full-size run.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.bench  # not in make check: the scripts take about a minute together

BENCHMARKS = ROOT / "benchmarks"
NUMBER = r"\d[\d,]*(?:\.\d+)?"
"""A printed figure: digits, thousands separators, decimals."""


@dataclass(frozen=True)
class Smoke:
    """One smoke run: a script, its smoke-size arguments, and what its report must show."""

    script: str
    args: tuple[str, ...]  # "{name}": the test's value of name
    shape: tuple[str, ...]  # regular expressions (multiline) the output must match


COLD_IMPORT = Smoke(
    "cold_start.py",
    ("--smoke", "--runs", "1", "--anchor", "--importtime"),
    (
        r"envelope key: arn:aws:secretsmanager:\S+ on a moto server at http://127\.0\.0\.1:\d+$",
        rf"^baseline .* median +{NUMBER} ms +samples \[{NUMBER}\]$",
        rf"^handler .* median +{NUMBER} ms +samples \[{NUMBER}\]$",
        rf"^ratio handler/baseline = {NUMBER} +\(target <= {NUMBER}\) +(PASS|ABOVE TARGET)$",
        rf"^ratio anchor/baseline += {NUMBER} +handler/anchor = {NUMBER}",
        rf"^ratio handler/anchor app = {NUMBER}",
        rf"15 heaviest by self time:\n(?: +{NUMBER} +{NUMBER} +\S+\n){{15}}",
    ),
)
COLD_INVOKE = Smoke(
    "cold_start.py",
    ("--smoke", "--runs", "1", "--invoke", "--importtime", "--profile"),
    (
        r"^  anchor's copies of processor\.py checked identical: Order",
        r"^work per run \(both\): 10 new records, no failures; items written \{'idempotency': \{",
        rf"^  sluice \(examples/orders\) +{NUMBER} +{NUMBER} +{NUMBER} +\[{NUMBER}\]$",
        rf"^  anchor \(benchmarks/anchor\) +{NUMBER} +{NUMBER} +{NUMBER} +\[{NUMBER}\]$",
        rf"^ratio sluice/anchor, whole cold invocation .* = {NUMBER} +\(target <= {NUMBER}\) +(PASS|FAIL)$",
        rf"^  informational, the children's CPU time .*: sluice {NUMBER} ms, anchor {NUMBER} ms,"
        rf" ratio {NUMBER}$",
        rf"^  modules only sluice imports: {NUMBER}, {NUMBER} ms self in total",
        rf"^  import: own time \(tottime\) by package, ms +sluice {NUMBER} +anchor {NUMBER}$",
        rf"^    calls \(sluice vs anchor\): API calls {NUMBER} vs {NUMBER};",
        rf"heaviest functions of the sluice layer and handler .*\n +{NUMBER} +\S+",
    ),
)
CONSUMER = Smoke(
    "consumer_overhead.py",
    ("--batches", "1", "--warmup", "1", "--json", "{json}"),
    (
        r"^1 batches x 10 records per consumer \(1 warm-up batches each\)",
        *(rf"^  \({s}\) {n}, {k} +{NUMBER} +{NUMBER} +{NUMBER} +{NUMBER}$"
          for s, n in (("a", "anchor"), ("b", "sluice")) for k in ("new", "duplicate")),
        rf"^ratio b/a \(new records, median per batch\) = {NUMBER} +\(target <= {NUMBER}\) +(PASS|FAIL)$",
        rf"^ratio b/a, CPU time \(new records, median per batch\) = {NUMBER} +\(target <= {NUMBER}\)"
        r" +(PASS|FAIL)$",
        rf"^  sluice +{NUMBER} +{NUMBER} +{NUMBER}$",
        r"^criteria:\n(?:  (?:PASS|FAIL) +.+\n)+",
    ),
)  # fmt: skip
REDRIVE = Smoke(
    "redrive_requests.py",
    ("--messages", "25", "--json", "{json}"),
    (
        rf"^redrive of 25 dead-lettered messages \(in-process moto; SQS \${NUMBER} per 1M requests\)$",
        *(rf"^{kind} +{NUMBER} +{NUMBER} +{NUMBER} +{NUMBER} +{NUMBER}$" for kind in ("sluice", "article")),
        rf"^sluice: {NUMBER} SQS requests per message; batching floor {NUMBER} = ",
        rf"^article: {NUMBER} per message, {NUMBER}x sluice's SQS requests$",
    ),
)
DELAY_ARGS: tuple[str, ...] = ("--messages", "400", "--sweeps", "4", "--jobs", "1", "--prices", "{prices}")
DELAY_ARGS += ("--base-ms", "100", "--per-call-ms", "30", "--memory-mb", "512")
DELAY_ARGS += ("--density-messages", "100", "--json", "{json}")  # issue 28: the rows per density
DENSITY_ROWS = (
    "1 per bucket",
    "10 per bucket",
    "100 per bucket",
    "1,000 per bucket",
    "1M over 30 days, window 1 s",
    "1M over 30 days, window 20 s",
    "1 per bucket, sent 1 a minute",
)
DELAY = Smoke(
    "delay_cost.py",
    DELAY_ARGS,
    (
        r"^assumed Lambda duration: 100 ms per invocation \+ 30 ms per AWS call it makes, 512 MB, arm64$",
        *(rf"^  run N={n} batch {b}(?: \+ 4 sweeps)?: {NUMBER} s; all {n} delivered once, "
          for n in (400, 100) for b in (10, 100)),
        *(rf"^=== event-source batch size {b}: 400 and 100 messages in {NUMBER} buckets" for b in (10, 100)),
        rf"^    orchestration \(S3 \+ Step Functions \+ Lambda\) +\${NUMBER}$",
        rf"^  apart, fixed: the sweep, 2,880 invocations per 30 days, {NUMBER} LIST counted in the last 4, "
        rf"scaled: \${NUMBER} per 30 days$",
        rf"^    \(a\) article: 1 execution per event-source batch +\${NUMBER} +{NUMBER}x"
        rf" +\${NUMBER} +{NUMBER}x$",
        rf"^    1M messages in the same buckets +\${NUMBER} +(PASS|ABOVE TARGET)$",
        *(rf"^  {re.escape(row)} +{path} +\${NUMBER} +\${NUMBER}  (PASS|ABOVE)"
          for row in DENSITY_ROWS for path in ("state-machine", "scheduler")),
        *(rf"^  {re.escape(row)} +anchor +\${NUMBER} +\${NUMBER}$" for row in DENSITY_ROWS),
        r"every message delivered once, S3 empty, in every simulated row$",
        *(rf"^  {path}: <= \$1\.00 in \d of 7 rows.*; <= \$0\.05 at 100 per bucket: "
          rf"(PASS|ABOVE) \(\${NUMBER}\)$" for path in ("state-machine", "scheduler")),
    ),
)  # fmt: skip
JOB_WORKERS = (1, 4)
JOB_SLUICE = ("sluice two-phase", "sluice single", "anchor")
JOB_PEERS = ("pgqueuer default", "procrastinate")
JOBS = Smoke(
    "jobs.py",
    ("--jobs", "40", "--repeats", "1", "--workers", ",".join(map(str, JOB_WORKERS)), "--rt-jobs", "20",
     "--json", "{json}"),
    (
        r"^PostgreSQL \S+ .*; 40 jobs per drain, median of 1$",
        r"^workers: one process each \(multiprocessing spawn\), one connection each; the clock starts at a"
        r" barrier",
        r"^sluice: job ids delivered 10 at a time \(stacks/jobs\.yaml's BatchSize for the job queue\)",
        # the peers ran, or the report says plainly that they did not and why
        r"^peers: (?:pgqueuer default, procrastinate in their own virtualenv|NOT RUN: .+)",
        # the anchor's pick is served by the pending rows' partial index, not a scan and a sort
        r"^the anchor's pick, EXPLAIN on 40 pending jobs:\n(?: .*\n)*? +->  Index Scan using"
        r" jobs_pending_updated_at on jobs ",
        *(rf"^{system} +{w} +{NUMBER} +{NUMBER}$" for system in JOB_SLUICE for w in JOB_WORKERS),
        # each worker a process of its own with a server process of its own (threads would share one pid)
        *(rf"^  {system} +{w} workers \({w} processes, {w} backends\): client {NUMBER} µs/job,"
          rf" backend (?:{NUMBER} µs/job|CPU n/a \(.+\))$" for system in JOB_SLUICE for w in JOB_WORKERS),
        r"^round trips per job \(on the wire: Sync \+ Query messages; 4 warm connections\):$",
        *(rf"^  {system} +{NUMBER}$" for system in JOB_SLUICE),
        rf"^  two-phase round trips per job = {NUMBER} \(target <= {NUMBER}\) (PASS|ABOVE TARGET)$",
        *(rf"^ +{w} workers: two-phase/anchor = {NUMBER} \(target >= {NUMBER}\) (PASS|BELOW TARGET);"
          for w in JOB_WORKERS),
    ),
)  # fmt: skip
JOB_PEER_SHAPE = (
    *(rf"^{system} +{w} +{NUMBER} +{NUMBER}$" for system in JOB_PEERS for w in JOB_WORKERS),
    *(rf"^  {system} +{w} workers \({w} processes, {w} backends\): client {NUMBER} µs/job,"
      rf" backend (?:{NUMBER} µs/job|CPU n/a \(.+\))$" for system in JOB_PEERS for w in JOB_WORKERS),
    *(rf"^ +{w} workers: two-phase/anchor = .*; two-phase/pgqueuer default = {NUMBER} \(target >= {NUMBER}\)"
      rf" (PASS|BELOW TARGET); two-phase/procrastinate = {NUMBER};" for w in JOB_WORKERS),
)  # fmt: skip
"""What the report shows of the peers when they ran."""
COST_ARGS = (
    "--smoke",
    "--prices",
    "{prices}",
    "--db-usd-per-hour",
    "0.2",
    "--db-vcpus",
    "2",
    "--jobs-workers",
    "1",
)
COST = Smoke(  # cost.py: every path priced beside its anchor, from the others' --json at their smoke size
    "cost.py",
    (*COST_ARGS, "--figures", "{figures}"),
    (
        r"^prices: \S+aws-prices\.md$",
        rf"^  total +\${NUMBER} +\${NUMBER}$",
        rf"^  sluice / anchor = {NUMBER}$",
        rf"^ +scheduler +\${NUMBER} +\${NUMBER}$",
        rf"^ +Scheduler/msg +\${NUMBER} +\${NUMBER}$",
        rf"^  anchor: SQS native redrive \(StartMessageMoveTask\) +{NUMBER}(?: +\${NUMBER}){{3}}$",
        rf"^  sluice two-phase +{NUMBER}(?: +\${NUMBER}(?: \(n/a\))?){{4}}$"
        r"|^  SKIPPED: jobs\.py found no PostgreSQL",
    ),
)  # fmt: skip
SMOKES = (COLD_IMPORT, COLD_INVOKE, CONSUMER, REDRIVE, DELAY, JOBS, COST)
NOT_SMOKED = {("cold_start.py", "--lean"): "builds a virtualenv with pip from the package index"}
"""Documented options no smoke run takes, and why."""
SCRIPT_TIMEOUT = 540
"""Seconds a smoke run may take on a loaded machine (about 15 s at most on an idle 2-core one)."""


def run(smoke: Smoke, env: dict[str, str] | None = None, **values: str) -> str:
    """Run the benchmark as the docs do (from the repository's root, the dev venv's interpreter); its
    output once it exited 0 and printed the expected shape."""
    args = [arg.format(**values) for arg in smoke.args]
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, str(Path("benchmarks") / smoke.script), *args],
        cwd=ROOT, env={**os.environ, **(env or {})}, capture_output=True, text=True, check=False,
        timeout=SCRIPT_TIMEOUT,
    )  # fmt: skip
    seconds = time.perf_counter() - started
    print(f"{smoke.script} {' '.join(args)}: exit {done.returncode} in {seconds:.1f} s")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    missing = [shape for shape in smoke.shape if not re.search(shape, done.stdout, flags=re.MULTILINE)]
    assert not missing, f"not in the output of {smoke.script}: {missing}\n{done.stdout}"
    return done.stdout


def benchmark_module(name: str) -> ModuleType:
    """benchmarks/<name>.py, loaded in this process."""
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCHMARKS / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # a dataclass looks its module up there while it is defined
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def price_table() -> Path:
    """The price table the cost benchmarks read (outside the repository); skips with the reason if absent."""
    env = benchmark_module("bench_env")
    path = Path(env.default_prices())
    if not path.is_file():
        pytest.skip(f"no price table at {path}: set {env.REFERENCE_DIR_VARIABLE} to the folder holding it")
    return path


# --- the runs ----------------------------------------------------------------------------------------


@pytest.mark.subprocess
@pytest.mark.slow
@pytest.mark.timeout(SCRIPT_TIMEOUT + 60)
@pytest.mark.parametrize("smoke", [COLD_IMPORT, COLD_INVOKE], ids=["import", "invoke"])
def test_cold_start_runs_both_modes_with_the_envelope_key_it_reads_at_import(smoke):
    # Given the consumer handler, which reads the stack's envelope key at import
    # When cold_start.py runs a mode at smoke size (a moto server holds the key for the import-only
    # children; the --invoke children create it in their mock_aws), with every optional report
    # Then it exits 0 and prints each part of its report with figures
    run(smoke)


@pytest.mark.subprocess
@pytest.mark.timeout(SCRIPT_TIMEOUT + 60)
def test_consumer_overhead_runs_a_batch_of_each_consumer(tmp_path):
    # Given in-process moto, When one warm-up and one measured batch run through each consumer
    # Then the times, the requests per record and the criteria are printed, and the figures written
    run(CONSUMER, json=str(tmp_path / "consumer.json"))
    figures = json.loads((tmp_path / "consumer.json").read_text(encoding="utf-8"))
    assert set(figures["consumers"]) == {"sluice", "anchor"}
    assert figures["consumers"]["sluice"]["ddb_requests_per_record"]["PutItem"] == 1


@pytest.mark.subprocess
@pytest.mark.slow
@pytest.mark.timeout(SCRIPT_TIMEOUT + 60)
def test_cost_prices_every_path_beside_its_anchor(price_table, tmp_path):
    # Given the other benchmarks' --json (cost.py reads what they counted; it prices no script without it)
    # When it runs every benchmark at its smoke size (no figures given: the folder is empty)
    out = run(COST, prices=str(price_table), figures=str(tmp_path))
    # Then the table has every path and its anchor, priced from the table it was given
    assert f"prices: {price_table.resolve()}" in out, out


@pytest.mark.subprocess
@pytest.mark.timeout(SCRIPT_TIMEOUT + 60)
@pytest.mark.usefixtures("price_table")
def test_redrive_requests_drains_the_dlq_both_ways(tmp_path):
    # Given the shared price table where the benchmark looks by default (no --prices)
    # When 25 dead-lettered messages are re-driven by sluice and by the article's redriver
    # Then both moved every message (else it exits non-zero) and each row has its figures, also written
    run(REDRIVE, json=str(tmp_path / "redrive.json"))
    figures = json.loads((tmp_path / "redrive.json").read_text(encoding="utf-8"))
    assert figures["redrivers"]["sluice"]["sqs_requests_per_message"] == 0.4  # 3 per 10 + 1 empty receive


@pytest.mark.subprocess
@pytest.mark.slow
@pytest.mark.timeout(SCRIPT_TIMEOUT + 60)
def test_delay_cost_simulates_the_four_runs_and_prices_them(price_table, tmp_path):
    # Given a price table passed with --prices
    # When 400 (and 100) messages are delayed 30 days at batch 10 and 100, with the last 4 sweeps, and
    # 100 messages per density row through each path
    written = tmp_path / "delay-cost.json"
    out = run(DELAY, prices=str(price_table), json=str(written))
    # Then every message was delivered once (else it exits 1), from the table it was given
    assert f"prices: {price_table.resolve()}" in out, out
    # and the rows are written as the cost script reads them: every row, every path
    report = json.loads(written.read_text(encoding="utf-8"))
    assert report["prices_file"] == str(price_table.resolve())
    assert {(r["label"], r["path"]) for r in report["rows"]} == {
        (row, path) for row in DENSITY_ROWS for path in ("state-machine", "scheduler", "anchor")
    }
    for row in report["rows"]:
        assert set(row) == {"label", "messages_per_bucket", "path", "orchestration_usd_per_million",
                            "total_usd_per_million"}  # fmt: skip
        assert 0 < row["orchestration_usd_per_million"] <= row["total_usd_per_million"]


@pytest.mark.subprocess
@pytest.mark.timeout(SCRIPT_TIMEOUT + 60)
def test_jobs_drains_each_system_and_counts_round_trips(pg_url, tmp_path):
    # Given a PostgreSQL that answers (pg_url skips with the reason when none does)
    # When 40 jobs are drained by 1 and 4 workers each way, then 20 through the counting proxy
    figures = tmp_path / "jobs.json"
    out = run(JOBS, env={"SLUICE_DATABASE_URL": pg_url}, json=str(figures))
    # Then each cell, its CPU per job and sluice's and the anchor's round trips were measured, the anchor's
    # pick planned
    assert "SKIPPED" not in out, out
    # ... the peers beside them, unless their virtualenv could not be built (the report says so: printed)
    ran_peers = "peers: NOT RUN" not in out
    print(next(line for line in out.splitlines() if line.startswith("peers: ")))
    if ran_peers:
        missing = [shape for shape in JOB_PEER_SHAPE if not re.search(shape, out, flags=re.MULTILINE)]
        assert not missing, f"not in the output of jobs.py: {missing}\n{out}"
    # ... and the figures written as the cost script reads them
    written = json.loads(figures.read_text(encoding="utf-8"))
    assert written["workers"] == list(JOB_WORKERS)
    assert written["batch_size"] == 10
    systems = (*JOB_SLUICE, *(JOB_PEERS if ran_peers else ()))
    assert set(written["systems"]) == set(systems)
    for name, figures_of in written["systems"].items():
        for key in ("jobs_per_s", "client_cpu_us_per_job", "server_cpu_us_per_job"):
            assert len(figures_of[key]) == len(JOB_WORKERS), (name, key)
        trips = figures_of["round_trips_per_job"]
        assert (trips is None) == (name in JOB_PEERS), name
    assert all(rate > 0 for rate in written["systems"]["sluice two-phase"]["jobs_per_s"])


def test_the_jobs_targets_docs_jobs_md_states_are_the_ones_jobs_py_judges_by():
    # Given the targets benchmarks/jobs.py prints its verdicts against
    bench = benchmark_module("jobs")
    doc = (ROOT / "docs" / "jobs.md").read_text(encoding="utf-8")
    # Then docs/jobs.md states the same ones
    times = "\N{MULTIPLICATION SIGN}"
    assert f"two-phase throughput ≥ {bench.TARGET_RATIO:g} {times} the anchor's and" in doc
    assert f"≥ {bench.TARGET_PEER:g} {times} PgQueuer's default drain rate" in doc
    assert f"two-phase 0.20 per job (target ≤ {bench.TARGET_ROUND_TRIPS:g})" in doc


class ExpiringDelays:
    """An SQS client whose queue holds ``visible`` + ``delayed`` messages; one delay runs out right after
    the first visible count, as moto's clock moves on between the counts (even those of one call)."""

    def __init__(self, visible: int, delayed: int) -> None:
        self.visible, self.delayed, self.ran_out = visible, delayed, False

    def get_queue_attributes(self, QueueUrl: str, AttributeNames: list[str]) -> dict[str, Any]:  # noqa: N803
        attributes = {}
        for name in ("ApproximateNumberOfMessages", "ApproximateNumberOfMessagesDelayed"):  # moto's order
            if name not in AttributeNames:
                continue
            visible = name == "ApproximateNumberOfMessages"
            attributes[name] = str(self.visible if visible else self.delayed)
            if visible and not self.ran_out:
                self.ran_out, self.visible, self.delayed = True, self.visible + 1, self.delayed - 1
        return {"Attributes": attributes}


def test_redrive_depth_counts_a_message_whose_delay_runs_out_between_the_counts():
    # Given 1,000 messages, 400 of them delayed, one of which becomes visible right after the first count
    sqs = ExpiringDelays(visible=600, delayed=400)
    # When redrive_requests.py counts the queue's messages
    before = dict(os.environ)
    counted = benchmark_module("redrive_requests").depth(sqs, "https://queue")
    # Then that message is counted once (visible, delayed, visible again until the visible count holds)
    assert counted == 1000
    # and importing the script left this process's environment alone (its LOG_LEVEL=WARNING, set at
    # import, once silenced every later test's INFO log lines in this worker)
    assert dict(os.environ) == before


# --- every documented command and every `make bench` script has its smoke run ------------------------

DOCUMENTED = re.compile(r"benchmarks/(\w+\.py)((?: +--?[A-Za-z][-A-Za-z]*(?: +[^\s#`-][^\s#`]*)?)*)")


def documented_commands() -> list[tuple[str, str, str]]:
    """(file, script, options) of every benchmark command the docs and the scripts' docstrings state."""
    sources = [ROOT / "README.md", BENCHMARKS / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    sources += sorted(BENCHMARKS.glob("*.py"))
    return [
        (str(path.relative_to(ROOT)), match.group(1), match.group(2).strip())
        for path in sources
        for match in DOCUMENTED.finditer(path.read_text(encoding="utf-8"))
    ]


def smoked_options(script: str) -> set[str]:
    return {arg for smoke in SMOKES if smoke.script == script for arg in smoke.args if arg.startswith("--")}


def test_every_documented_benchmark_command_is_run_at_smoke_size():
    # Given every benchmark command the docs state
    commands = documented_commands()
    assert len(commands) >= 10, commands
    # Then each option it uses is one a smoke run uses too (sizes aside), or is listed as not run and why
    uncovered = [
        (where, f"{script} {options}", option)
        for where, script, options in commands
        for option in re.findall(r"--[\w-]+", options)
        if option not in smoked_options(script) and (script, option) not in NOT_SMOKED
    ]
    assert not uncovered, uncovered


def test_every_script_of_make_bench_has_a_smoke_run():
    # Given the scripts `make bench` runs
    recipe = re.search(r"^bench:.*\n((?:\t.*\n)+)", (ROOT / "Makefile").read_text(encoding="utf-8"), re.M)
    assert recipe, "no bench recipe in the Makefile"
    scripts = set(re.findall(r"benchmarks/(\w+\.py)", recipe.group(1)))
    # Then they are the smoke runs' scripts, and every benchmark script with a main is among them
    assert scripts == {smoke.script for smoke in SMOKES}
    mains = {p.name for p in BENCHMARKS.glob("*.py") if "def main(" in p.read_text(encoding="utf-8")}
    helpers = {"invoke_child.py", "peer_drains.py"}  # run by cold_start.py and jobs.py, not by make bench
    assert mains - helpers == scripts
