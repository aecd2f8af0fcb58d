"""A soak's report: every worker's seed results gathered, totalled, and the fault points that were hit."""

from __future__ import annotations

import json
import subprocess
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sluice_local.app.messages import ORDERS, REFUNDS
from sluice_local.emulation import faults
from sluice_local.soak.options import WORKLOADS
from sluice_local.soak.result import JOBS


def _site(apis: tuple[str, ...], kinds: tuple[str, ...], caller: str | tuple[str, ...] = "") -> Any:
    def hit(site: str) -> bool:
        who, api, kind = [*site.split(" ", 2), "", ""][:3]
        return api in apis and kind.startswith(kinds) and who.startswith(caller)

    return hit


LOST = (faults.LOST_RESPONSE,)  # and lost-response-every-attempt
DB_SITES = tuple(
    f"db:{statement}"
    for statement in (
        "start", "start_batch", "commit", "commit_batch", "complete_if_pending", "fail", "fail_if_pending",
        "state", "states", "release_batch", "get",
        "expired_claims", "reap", "due_for_retry", "orphans", "migrate",
    )
)  # fmt: skip
DIED = (faults.CRASH,)
CONSUMERS = (ORDERS + "ConsumerFunction", REFUNDS + "ConsumerFunction")
REDRIVERS = (ORDERS + "RedriverFunction", REFUNDS + "RedriverFunction")
"""Each example queue workload's functions of a kind: a named point counts the hits of both workloads'."""
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
        _site(("GetObject",), ("no-such-key",), CONSUMERS),
    ),
    ("consumer died before a guard's commit", _site(("UpdateItem",), DIED, CONSUMERS)),
    (
        "rehydrator died part-way through an object",
        _site(("SendMessageBatch", "PutObject", "DeleteObject"), DIED, "Rehydrator"),
    ),
    (
        "redriver died between its send and its delete",
        _site(("DeleteMessageBatch",), DIED, REDRIVERS),
    ),
    ("job store: connection dropped before a statement", _site(DB_SITES, (faults.DB_DROPPED,))),
    ("job store: statement committed, response lost", _site(DB_SITES, (faults.DB_LOST_RESPONSE,))),
    (
        "job consumer died between its side effect and its commit",
        _site(("db:commit", "db:commit_batch", "db:complete_if_pending"), DIED, "JobConsumerFunction"),
    ),
)
"""(what, does a fault site ``"<caller> <API> <kind>"`` count for it)"""


LABELS = {JOBS: ("completed", "dead")}
"""How a tally's ``processed`` and ``dead_lettered`` read on its line (the job rows' end states)."""
COUNTED = ("sent", "processed", "poison", "dead_lettered")
LISTED = (
    "lost", "duplicated", "unexpected", "misrouted", "exhausted", "redriven", "overlaps", "at_least_once",
)  # fmt: skip


@dataclass
class Summary:
    results: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    expected: list[int] | None = None
    """The seeds asked for (None: whatever results came): a seed without a result fails the run."""
    workloads: str = "all"
    """The run's ``--workload`` (:data:`~sluice_local.soak.options.WORKLOADS`): each queue workload it
    names must have sent messages, and when it names the jobs a seed that skipped them (no PostgreSQL
    answered) fails the run, which would otherwise pass without the job store having been soaked."""

    @property
    def names(self) -> list[str]:
        """The tallies the run reports, one line each: the queue workloads it sends to, the jobs when it
        creates them, and any other a seed reported something for (an unexpected effect)."""
        parts = WORKLOADS[self.workloads]
        out = [name for name in (ORDERS, REFUNDS, JOBS) if name.lower() in parts]
        return out + sorted({n for r in self.results for n in r["workloads"]} - set(out))

    @property
    def jobs_required(self) -> bool:
        return "jobs" in WORKLOADS[self.workloads]

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

    def total(self, name: str) -> dict[str, int]:
        """One workload's figures over every seed: its counts, and the length of each of its lists."""
        tallies = [r["workloads"][name] for r in self.results if name in r["workloads"]]
        return {k: sum(t[k] if k in COUNTED else len(t[k]) for t in tallies) for k in (*COUNTED, *LISTED)}

    def workload_line(self, name: str) -> str:
        """``Orders: sent 400 = processed 353 + poison 47 + dead-lettered 0, lost 0, duplicated 0, ...``"""
        t = self.total(name)
        done, dead = LABELS.get(name, ("processed", "dead-lettered"))
        poison = f" + poison {t['poison']}" if name != JOBS else ""
        return (
            f"{name}: sent {t['sent']} = {done} {t['processed']}{poison} + {dead} {t['dead_lettered']}, "
            f"lost {t['lost']}, duplicated {t['duplicated']}, unexpected {t['unexpected']}, "
            f"misrouted {t['misrouted']} " + ("✓" if self.workload_ok(name) else "✗")
        )

    def required(self, name: str) -> bool:
        """Whether the run's workload sends to ``name`` (so it must have sent something): the jobs only
        where a job store was there to soak (its absence fails the run on its own)."""
        return name.lower() in WORKLOADS[self.workloads] and not (name == JOBS and self.jobs_skipped)

    def workload_ok(self, name: str) -> bool:
        """No violation, a balanced conservation line, and something sent where the workload asked for it."""
        t = self.total(name)
        return (
            (t["sent"] > 0 or not self.required(name))
            and t["sent"] == t["processed"] + t["poison"] + t["dead_lettered"]
            and not any(t[k] for k in ("lost", "duplicated", "unexpected", "misrouted"))
        )

    def lines(self, *, rates: str, flags: str = "") -> list[str]:
        """The report; ``flags`` are the options a replay needs besides the seed (rates, sabotage)."""
        faults_by_kind: Counter[str] = Counter()
        for r in self.results:
            faults_by_kind.update(r["faults"])
        totals = {name: self.total(name) for name in self.names}
        every = {k: sum(t[k] for t in totals.values()) for k in LISTED}
        no_jobs = self.jobs_skipped
        redriven: Counter[str] = Counter({"lambda": 0, "stepfunctions": 0})
        for r in self.results:
            redriven[r["mode"]] += sum(len(t["redriven"]) for t in r["workloads"].values())
        by_workload = "; ".join(f"{n} {totals[n]['redriven']}" for n in self.names if n != JOBS)
        sent = {name: totals.get(name, {}).get("sent", 0) for name in (ORDERS, REFUNDS, JOBS)}
        out = [
            f"seeds run: {len(self.results)} ({rates})"
            + (f"; MISSING {len(self.missing)}: {self.missing[:20]}" if self.missing else ""),
            f"messages: {sent[ORDERS]} orders, {sent[REFUNDS]} refunds, {sent[JOBS]} jobs"
            + (f" (job store skipped: {no_jobs[0]})" if no_jobs and self.jobs_required else ""),
            f"faults injected: {sum(faults_by_kind.values())} — "
            + ", ".join(f"{k} {v}" for k, v in sorted(faults_by_kind.items())),
            f"lost = {every['lost']}, duplicated side effects = {every['duplicated']}, "
            f"unexpected = {every['unexpected']}, misrouted = {every['misrouted']}",
            *(self.workload_line(name) for name in self.names),
            f"valid messages isolated after their retries and redrives ran out under the faults: "
            f"{every['exhausted']}",
            "messages re-driven from a work DLQ: "
            + ", ".join(f"{mode} {n}" for mode, n in sorted(redriven.items()))
            + (f" ({by_workload})" if by_workload else ""),
            f"messages also found in a second place (a redelivered copy isolated or dead-lettered): "
            f"{every['overlaps']}",
            f"performed again inside the at-least-once window (a fault between an effect and its guard's "
            f"commit; not a violation): {every['at_least_once']}",
        ]
        for r in self.results:
            if not r["ok"]:
                out.append(
                    f"FAILED seed {r['seed']} ({r['mode']}): {r['failures']}; replay it alone: "
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
                "PostgreSQL, or run --workload queues to soak the orders and refunds without the jobs"
            )
        if self.results:
            out += [
                f"FAILED: the {n} workload sent nothing"
                for n in self.names
                if self.required(n) and not totals[n]["sent"]
            ]
        return out

    @property
    def ok(self) -> bool:
        return (
            bool(self.results)
            and not self.errors
            and not self.missing
            and not (self.jobs_required and self.jobs_skipped)
            and all(r["ok"] for r in self.results)
            and all(self.workload_ok(name) for name in self.names)
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
