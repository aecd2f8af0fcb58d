"""``make demo``: deploy the real template into embedded AWS and drive every scenario, live."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from sluice_local.app import postgres
from sluice_local.app.fast import FAST
from sluice_local.app.messages import ORDERS
from sluice_local.app.observer import SENT_BACK, Stack
from sluice_local.app.stack import acting_credentials, local_cloud
from sluice_local.demo import report
from sluice_local.demo.scenarios.consumer import consumer_scenarios
from sluice_local.demo.scenarios.delay import delay_scenarios
from sluice_local.demo.scenarios.jobs import job_scenarios
from sluice_local.demo.scenarios.redrive import exclusive_redrive_scenarios, redrive_scenarios
from sluice_local.demo.scenarios.runner import Outcome, run
from sluice_local.emulation.iam import report as iam_report
from sluice_local.emulation.up import function_output

QUEUES = (
    ("work", ORDERS + "QueueUrl"),
    ("dead-letter", ORDERS + "DeadLetterQueueUrl"),
    ("poison", "PoisonPillQueueUrl"),
    ("delay", "DelayQueueUrl"),
    ("delay dead-letter", "DelayDeadLetterQueueUrl"),
)
REPORT = Path(".sluice-local/demo-report.html")
IAM_USAGE = Path(".sluice-local/iam/demo.json")


def run_demo(log_file: Path, overrides: dict[str, str], only: frozenset[str] = frozenset()) -> int:
    """Deploy, drive every scenario (those named in ``only``, if any), print expected vs observed."""
    stream = sys.__stdout__ or sys.stderr
    # Piped (CI, logs): wide enough that the observed figures (lags, counts) are never cut.
    console = Console(file=stream, width=None if stream.isatty() else 160)
    log_file.parent.mkdir(parents=True, exist_ok=True)
    log_file.unlink(missing_ok=True)
    with function_output(log_file):
        return _run(console, log_file, overrides, only)


def _run(console: Console, log_file: Path, overrides: dict[str, str], only: frozenset[str]) -> int:
    params = {**FAST, **overrides}
    started = time.monotonic()
    settings = ", ".join(f"{k}={v}" for k, v in params.items())
    console.print(f"[bold]sluice demo[/]: deploying template.yaml into embedded AWS ({settings})")
    database, skipped = _database()
    if database is not None:
        console.print(
            f"job store: PostgreSQL at {postgres.redacted(database)} (own schema, dropped at the end)"
        )
    with local_cloud(params, stack_name="sluice-demo", database_url=database, examples=True) as cloud:
        console.print(
            f"stack up at {cloud.endpoint} in {time.monotonic() - started:.1f} s; function logs → {log_file}"
        )
        stack = Stack(cloud.endpoint, cloud.outputs, log_file, cloud.region, acting_credentials(cloud))
        recording = report.Recording()
        if cloud.alarms is not None:  # printed as the runtime evaluates them, and kept for the report

            def alarm_changed(name: str, old: str, new: str, why: str) -> None:
                recording.alarm(name, old, new, why)
                console.print(f"[bold]alarm[/] {name}: {old} → {new} ({why})")

            cloud.alarms.listeners.append(alarm_changed)
        # Everything that can share the stack runs at once; velocity (it times every redrive) and the
        # open breaker (it stops every redrive) each have the stack's redrive to themselves, afterwards.
        phases = [
            [
                *consumer_scenarios(),
                *(job_scenarios() if database is not None else []),
                *delay_scenarios(
                    float(params["DirectSendThresholdSeconds"]), str(params.get("DelayOrchestrator"))
                ),
                *redrive_scenarios(params),
            ],
            *exclusive_redrive_scenarios(params),
        ]
        if only:
            named = {s.name for phase in phases for s in phase} | {s.name for s in skipped}
            if unknown := sorted(only - named):
                raise SystemExit(
                    f"no scenario named {', '.join(unknown)}; there are: {', '.join(sorted(named))}"
                )
            phases = [kept for phase in phases if (kept := [s for s in phase if s.name in only])]
            skipped = [s for s in skipped if s.name in only]
        progress = Progress(
            TextColumn("scenarios"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
        )
        task = progress.add_task("scenarios", total=sum(len(p) for p in phases))
        results: list[Outcome] = list(skipped)

        def render(current: list[Outcome | None]) -> Group:
            queues = Table(title="queues", expand=False)
            for column in ("queue", "visible", "in flight"):
                queues.add_column(column, justify="right" if column != "queue" else "left")
            depths = {label: stack.queue_depths(output) for label, output in QUEUES}
            recording.sample(depths)
            for label, (visible, in_flight) in depths.items():
                queues.add_row(label, str(visible), str(in_flight))
            processed = sum(p.deleted for p in cloud.pollers)
            failed = sum(p.failed for p in cloud.pollers)
            isolated = stack.queue_depths("PoisonPillQueueUrl")[0]
            redriven = sum(1 for d in stack.redrive_decisions() if d.action in SENT_BACK)
            counters = (
                f"records done (deleted by the mapping): {processed}   "
                f"failed (retried): {failed}   re-driven from the DLQ: {redriven}   isolated: {isolated}"
            )
            progress.update(task, completed=len(results) + sum(r is not None for r in current))
            return Group(queues, counters, progress)

        with Live(render([]), console=console, refresh_per_second=4, transient=False) as live:
            for phase in phases:
                results += run(stack, phase, on_tick=lambda r: live.update(render(r)))
        uses = iam_report.usage(
            cloud.iam,
            iam_report.stack_policies(cloud.iam, cloud.stack_name, [cloud.region]),
            cloud.stack_name,
        )
        iam_report.dump(uses, IAM_USAGE)
        for line in iam_report.summary(cloud.iam, uses):
            console.print(line, markup=False)
        console.print(f"IAM usage (statements and what they granted): {IAM_USAGE}")
        if cloud.iam.record.denials:  # no scenario asks for a refusal: one is a missing permission
            results.append(
                Outcome(
                    "iam",
                    "every call allowed by the stack's policies",
                    f"{len(cloud.iam.record.denials)} denied",
                    False,
                )
            )
    return _conclude(console, results, recording, log_file, started)


def _conclude(
    console: Console, results: list[Outcome], recording: report.Recording, log_file: Path, started: float
) -> int:
    """The expected-vs-observed table, the summary line and the report; the exit code."""
    table = Table(title="sluice demo: expected vs observed")
    for column in ("scenario", "expected", "observed", "s", "result"):
        table.add_column(column)
    for r in results:
        verdict = "[yellow]SKIP[/]" if r.skipped else "[green]PASS[/]" if r.ok else "[red]FAIL[/]"
        table.add_row(r.name, r.expected, r.observed, f"{r.seconds:.1f}", verdict)
        recording.span(r.name, r.started_at, r.seconds, "SKIP" if r.skipped else "PASS" if r.ok else "FAIL")
    console.print(table)
    recording.lags = report.delivery_lags(_json_lines(log_file))
    console.print(f"report: {report.write(recording, REPORT).resolve()} (open it in a browser)")
    failed = [r.name for r in results if not r.ok and not r.skipped]
    passed = sum(1 for r in results if r.ok and not r.skipped)
    summary = f"[bold]{passed} passed, {len(failed)} failed, {len(results) - passed - len(failed)} skipped[/]"
    console.print(
        f"{summary} in {time.monotonic() - started:.1f} s"
        + (f" — failed: {', '.join(failed)}" if failed else "")
    )
    return 1 if failed else 0


def _database() -> tuple[str | None, list[Outcome]]:
    """The PostgreSQL for the job scenarios, or the scenarios as skipped with the reason."""
    url = postgres.database_url()
    reason = postgres.unreachable_reason(url)
    if reason is None:
        return url, []
    return None, [
        Outcome(s.name, s.expected, f"skipped: {reason}", ok=False, skipped=True) for s in job_scenarios()
    ]


def _json_lines(path: Path) -> list[dict[str, Any]]:
    """The log file's JSON lines (function logs and EMF metrics); anything else is skipped."""
    out: list[dict[str, Any]] = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                out.append(value)
    return out
