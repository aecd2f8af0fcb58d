"""A soak's report: every worker's seed results gathered, totalled, and the fault points that were hit."""

from __future__ import annotations

import json
import subprocess
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sluice_local.app.messages import ORDERS
from sluice_local.emulation import faults


def _site(apis: tuple[str, ...], kinds: tuple[str, ...], caller: str = "") -> Any:
    def hit(site: str) -> bool:
        who, api, kind = [*site.split(" ", 2), "", ""][:3]
        return api in apis and kind.startswith(kinds) and who.startswith(caller)

    return hit


LOST = (faults.LOST_RESPONSE,)  # and lost-response-every-attempt
DB_SITES = tuple(
    f"db:{statement}"
    for statement in (
        "start", "commit", "complete_if_pending", "fail", "fail_if_pending", "state", "get",
        "expired_claims", "reap", "due_for_retry", "orphans", "migrate",
    )
)  # fmt: skip
DIED = (faults.CRASH,)
NAMED_POINTS: tuple[tuple[str, Any], ...] = (
    ("DeleteMessage(Batch): response lost", _site(("DeleteMessage", "DeleteMessageBatch"), LOST)),
    ("SendMessage(Batch): response lost", _site(("SendMessage", "SendMessageBatch"), LOST)),
    ("PutObject/DeleteObject: response lost", _site(("PutObject", "DeleteObject"), LOST)),
    ("StartExecution: response lost", _site(("StartExecution",), LOST)),
    ("DynamoDB writes: response lost", _site(("PutItem", "UpdateItem", "DeleteItem"), LOST)),
    (
        "SendMessageBatch/DeleteMessageBatch: partial",
        _site(("SendMessageBatch", "DeleteMessageBatch"), ("partial",)),
    ),
    (
        "claim-check GetObject: NoSuchKey",
        _site(("GetObject",), ("no-such-key",), ORDERS + "ConsumerFunction"),
    ),
    ("consumer died before a guard's commit", _site(("UpdateItem",), DIED, ORDERS + "ConsumerFunction")),
    (
        "rehydrator died part-way through an object",
        _site(("SendMessageBatch", "PutObject", "DeleteObject"), DIED, "Rehydrator"),
    ),
    (
        "redriver died between its send and its delete",
        _site(("DeleteMessageBatch",), DIED, ORDERS + "RedriverFunction"),
    ),
    ("job store: connection dropped before a statement", _site(DB_SITES, (faults.DB_DROPPED,))),
    ("job store: statement committed, response lost", _site(DB_SITES, (faults.DB_LOST_RESPONSE,))),
    (
        "job consumer died between its side effect and its commit",
        _site(("db:commit", "db:complete_if_pending"), DIED, "JobConsumerFunction"),
    ),
)
"""(what, does a fault site ``"<caller> <API> <kind>"`` count for it)"""


@dataclass
class Summary:
    results: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    expected: list[int] | None = None
    """The seeds asked for (None: whatever results came): a seed without a result fails the run."""
    jobs_required: bool = False
    """The workload includes the jobs: a seed that skipped them (no PostgreSQL answered) fails the run,
    which would otherwise pass without the job store having been soaked at all."""

    @property
    def jobs_skipped(self) -> list[str]:
        return sorted({r["jobs_skipped"] for r in self.results if r.get("jobs_skipped")})

    @property
    def missing(self) -> list[int]:
        """Seeds asked for that reported no result (their worker died before them)."""
        return sorted(set(self.expected or ()) - {int(r["seed"]) for r in self.results})

    def add(self, line: str) -> None:
        """One line a worker printed: a seed's result, else an error naming the line."""
        try:
            result = json.loads(line)
        except ValueError:
            result = None
        if isinstance(result, dict) and isinstance(result.get("seed"), int):
            self.results.append(result)
        else:
            self.errors.append(f"not a seed's result: {line[:300]}")

    def lines(self, *, rates: str, flags: str = "") -> list[str]:
        """The report; ``flags`` are the options a replay needs besides the seed (rates, sabotage)."""
        faults_by_kind: Counter[str] = Counter()
        for r in self.results:
            faults_by_kind.update(r["faults"])
        total = {k: sum(r[k] for r in self.results) for k in ("sent", "processed", "poison", "dead_lettered")}
        jobs = {
            k: sum(r.get(k, 0) for r in self.results) for k in ("jobs_sent", "jobs_completed", "jobs_dead")
        }
        no_jobs = self.jobs_skipped
        lost = sum(len(r["lost"]) for r in self.results)
        duplicated = sum(len(r["duplicated"]) for r in self.results)
        unexpected = sum(len(r["unexpected"]) for r in self.results)
        misrouted = sum(len(r.get("misrouted", [])) for r in self.results)
        exhausted = sum(len(r.get("exhausted", [])) for r in self.results)
        redriven: Counter[str] = Counter({"lambda": 0, "stepfunctions": 0})
        for r in self.results:
            redriven[r["mode"]] += len(r.get("redriven", []))
        out = [
            f"seeds run: {len(self.results)} ({rates})"
            + (f"; MISSING {len(self.missing)}: {self.missing[:20]}" if self.missing else ""),
            f"messages: {total['sent']} orders, {jobs['jobs_sent']} jobs"
            + (f" (job store skipped: {no_jobs[0]})" if no_jobs else ""),
            f"faults injected: {sum(faults_by_kind.values())} — "
            + ", ".join(f"{k} {v}" for k, v in sorted(faults_by_kind.items())),
            f"lost = {lost}, duplicated side effects = {duplicated}, unexpected = {unexpected}, "
            f"misrouted = {misrouted}",
            f"valid orders isolated after their retries and redrives ran out under the faults: {exhausted}",
            "orders re-driven from the work DLQ: "
            + ", ".join(f"{mode} {n}" for mode, n in sorted(redriven.items())),
            f"orders also found in a second place (a redelivered copy isolated or dead-lettered): "
            f"{sum(len(r.get('overlaps', [])) for r in self.results)}",
            f"performed again inside the at-least-once window (a fault between an effect and its guard's "
            f"commit; not a violation): {sum(len(r['at_least_once']) for r in self.results)}",
            f"conservation: sent {total['sent']} = processed {total['processed']} + poison {total['poison']}"
            f" + dead-lettered {total['dead_lettered']}"
            + (
                " ✓"
                if total["sent"] == total["processed"] + total["poison"] + total["dead_lettered"]
                else " ✗"
            ),
            f"jobs: sent {jobs['jobs_sent']} = completed {jobs['jobs_completed']} + dead {jobs['jobs_dead']}"
            + (" ✓" if jobs["jobs_sent"] == jobs["jobs_completed"] + jobs["jobs_dead"] else " ✗"),
        ]
        for r in self.results:
            if not r["ok"]:
                out.append(
                    f"FAILED seed {r['seed']} ({r['mode']}): lost {r['lost']} duplicated {r['duplicated']} "
                    f"unexpected {r['unexpected']} misrouted {r.get('misrouted', [])} stuck {r['stuck']!r}; "
                    "replay it alone: "
                    f"python -m sluice_local soak --seed {r['seed']}{flags}"
                )
        where: Counter[str] = Counter()
        for r in self.results:
            where.update(r["faults_at"])
        out.append("the fault points issue 11 names, hits:")
        out += [
            f"  {sum(n for site, n in where.items() if hit(site)):5d}  {name}" for name, hit in NAMED_POINTS
        ]
        out.append(f"faults by call site ({len(where)} sites), most hit first:")
        out += [f"  {n:5d}  {site}" for site, n in where.most_common(25)]
        out += [f"worker error: {e}" for e in self.errors]
        if self.jobs_required and no_jobs:
            out.append(
                f"FAILED: the job store was not soaked ({no_jobs[0]}); point SLUICE_DATABASE_URL at a "
                "PostgreSQL, or run --workload orders to soak without the jobs"
            )
        return out

    @property
    def ok(self) -> bool:
        return (
            bool(self.results)
            and not self.errors
            and not self.missing
            and not (self.jobs_required and self.jobs_skipped)
            and all(r["ok"] for r in self.results)
        )


def gather(processes: list[tuple[str, subprocess.Popen[str]]], summary: Summary, log_dir: Path) -> None:
    """Every worker's result lines into ``summary``, all workers read at once: read one after another,
    a worker whose pipe filled (64 KiB, about 40 seeds' lines) blocked between seeds until every worker
    before it had finished, and a 500-seed run stalled three of its four stacks."""
    lock = threading.Lock()

    def read(command: str, process: subprocess.Popen[str]) -> None:
        for line in process.stdout or ():
            with lock:
                summary.add(line.strip())
        if process.wait() not in (0, 1):
            with lock:
                summary.errors.append(f"{command} exited {process.returncode} (see its .stderr in {log_dir})")

    readers = [threading.Thread(target=read, args=pair, daemon=True) for pair in processes]
    for reader in readers:
        reader.start()
    for reader in readers:
        reader.join()
