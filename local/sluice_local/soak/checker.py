"""The checker: a seed's history read from the ledger, the queues and the job rows once it drained."""

from __future__ import annotations

import builtins
import json
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sluice.envelope import split
from sluice.logevents import EVENT, LogEvent
from sluice_local.app.fast import FAST
from sluice_local.app.messages import ORDERS
from sluice_local.app.observer import Stack
from sluice_local.emulation import faults
from sluice_local.soak.logtail import LogTail
from sluice_local.soak.workload import Sent, SentJob

EFFECTS = ("charge", "reward", "notify")


@dataclass
class SeedResult:
    seed: int
    mode: str
    sent: int
    processed: int
    poison: int
    dead_lettered: int
    lost: list[str]
    duplicated: list[str]
    at_least_once: list[str]
    unexpected: list[str]
    faults: dict[str, int]
    faults_at: dict[str, int]
    seconds: float
    stuck: str = ""
    misrouted: list[str] = field(default_factory=list)
    """Orders that ended somewhere their kind must not: a valid order poisoned as permanently bad or
    after an error no fault produces (:func:`_a_bug`), a permanent failure processed, an order processed
    without all its side effects and not isolated (deleted part-way)."""
    exhausted: list[str] = field(default_factory=list)
    """Valid orders isolated, or left in the delay DLQ, because their retries and redrives ran out under
    the faults (allowed, and reported), some part-way through their side effects: their last error is a
    fault's (an AWS error, a timeout, a transient one) or none (their invocations died)."""
    redriven: list[str] = field(default_factory=list)
    """Orders whose message went from the work DLQ back to the work queue (re-driven or re-delayed by the
    redriver, or planned so by the redrive state machine): the redrive path ran under the faults."""
    overlaps: list[str] = field(default_factory=list)
    """Orders found in more than one place (processed and a copy isolated or dead-lettered): a redelivered
    copy, reported; each order is counted once in the conservation line, in the first of its places."""
    jobs_sent: int = 0
    jobs_completed: int = 0
    jobs_dead: int = 0
    jobs_skipped: str = ""
    """Why the seed created no jobs (no PostgreSQL answered), else ''."""

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.unexpected or self.stuck or self.misrouted) and (
            self.sent == self.processed + self.poison + self.dead_lettered
            and self.jobs_sent == self.jobs_completed + self.jobs_dead
        )

    def to_json(self) -> str:
        return json.dumps({**self.__dict__, "ok": self.ok})


class Checker:
    """What a stack's seeds did, checked one seed after another (some checks span every seed so far)."""

    def __init__(self, stack: Stack, log_path: Path, *, mode: str, no_jobs: str = "") -> None:
        """``log_path``: the functions' log; ``no_jobs``: why the stack has no job store ('' when it has)."""
        self.stack = stack
        self.mode = mode
        self.no_jobs = no_jobs
        self._log = LogTail(log_path)
        self._known: set[str] = set()
        """Every id this stack was sent (orders, job ids, job business ids), over all its seeds."""
        self._reported: set[str] = set()
        self._reasons: dict[str, str] = {}
        """Per order found isolated: its envelope's last error message (a misrouted order's report
        names it)."""
        self._checked: dict[str, int] = {}
        """Per guarded effect (ledger ``effect_key``) of the seeds run so far: its performances when its
        seed was checked. Every later seed's check re-reads them: a performance written afterwards (by
        anything still running) is reported then, as a duplicate."""

    def check(
        self,
        seed: int,
        sent: list[Sent],
        jobs: list[SentJob],
        injector: faults.Injector,
        *,
        seconds: float,
        stuck: str,
    ) -> SeedResult:
        """The seed's result, once it drained (or got ``stuck``) and its faults were uninstalled."""
        self._known |= {s.order_id for s in sent} | {i for j in jobs for i in (j.job_id, j.business_id)}
        checked_before = set(self._checked)
        result = self._check(seed, sent, injector, seconds, stuck)
        self._check_jobs(result, jobs, injector)
        if stuck:  # still running at its check (the seed fails): what it performs later is not re-counted
            for key in set(self._checked) - checked_before:
                del self._checked[key]
        result.unexpected, late = self.whole_ledger()
        result.duplicated += late
        return result

    def _ledger(self, order_id: str, effect: str) -> int:
        response = self.stack.client("dynamodb").query(
            TableName=self.stack.outputs["LedgerTableName"],
            KeyConditionExpression="effect_key = :k",
            ExpressionAttributeValues={":k": {"S": f"{order_id}#{effect}"}},
            ConsistentRead=True,
        )
        return int(response["Count"])

    def _in_queue(self, output: str, by_message: dict[str, str]) -> dict[str, str]:
        """Order ids of the seed found on a queue (by origin id, or the message id it was sent with),
        each with the type of its envelope's last error ('' when none)."""
        found: dict[str, str] = {}
        for message in self.stack.every_message(output):
            attributes = {k: dict(v) for k, v in message.get("MessageAttributes", {}).items()}
            _, env, _ = split(attributes, body=message["Body"], seal=self.stack.seal())
            origin = env.origin_id if env is not None else None
            error = env.last_error.type if env is not None and env.last_error is not None else ""
            for key in (origin, message["MessageId"]):
                if key in by_message:
                    found.setdefault(by_message[key], error)
                    if env is not None and env.last_error is not None:  # the reason, for the report
                        self._reasons.setdefault(by_message[key], env.last_error.message[:300])
                    break
        return found

    def _check(
        self, seed: int, sent: list[Sent], injector: faults.Injector, seconds: float, stuck: str
    ) -> SeedResult:
        by_message = {mid: s.order_id for s in sent for mid in s.message_ids}
        ids = {s.order_id for s in sent}
        processed: set[str] = set()
        duplicated: list[str] = []
        window: list[str] = []
        misrouted: list[str] = []
        exhausted: list[str] = []
        poisoned = self._in_queue("PoisonPillQueueUrl", by_message)
        delay_dead = self._in_queue("DelayDeadLetterQueueUrl", by_message)
        work_dead = self._in_queue(ORDERS + "DeadLetterQueueUrl", by_message)
        isolated = {**work_dead, **delay_dead, **poisoned}
        for s in sent:
            performed = {effect: self._ledger(s.order_id, effect) for effect in EFFECTS}
            self._checked.update({f"{s.order_id}#{effect}": n for effect, n in performed.items()})
            for effect, n in performed.items():
                if n > 1:  # each time the window opened for it excuses one more performance, no more
                    key = f"{s.order_id}#{effect}"
                    (window if n <= 1 + injector.in_window[key] else duplicated).append(f"{key} x{n}")
            if performed["charge"]:
                processed.add(s.order_id)
                expected = {"charge", "notify"} | ({"reward"} if s.kind == "claim-check" else set())
                missing = sorted(e for e in expected if not performed[e])
                error = isolated.get(s.order_id)
                if missing and s.kind != "permanent" and _a_fault(error):
                    # part-way, then its retries ran out: isolated where an operator re-drives it (the
                    # guards keep what was done from being done again); deleted part-way would be a loss
                    exhausted.append(f"{s.order_id} ({s.kind}): isolated part-way, {missing} not performed "
                                     f"({error or 'no error'})")  # fmt: skip
                elif missing or s.kind == "permanent":
                    where = ", and deleted" if error is None else f", isolated ({error})"
                    where = "" if s.kind == "permanent" else where
                    misrouted.append(f"{s.order_id} ({s.kind}) processed, missing {missing}{where}")
        for s in sent:
            error = poisoned.get(s.order_id)
            if error is None or s.order_id in processed or s.kind == "permanent":
                continue
            reason = self._reasons.get(s.order_id, "no reason recorded")
            if error == "PermanentError" and _refused_late(s, reason):
                exhausted.append(f"{s.order_id} ({s.kind}): its send took {s.send_seconds:.1f} s, {reason}")
            elif error == "PermanentError":  # a valid order refused as permanently bad
                misrouted.append(f"{s.order_id} ({s.kind}) poisoned with a PermanentError: {reason}")
            elif _a_bug(error):  # retries cannot cure it, and no injected fault raises it
                misrouted.append(f"{s.order_id} ({s.kind}) poisoned after a {error}: a bug, not a fault")
            else:
                exhausted.append(f"{s.order_id} ({s.kind}): {error or 'no error'}")
        poison = set(poisoned)
        dead = set(work_dead) | set(delay_dead)
        exhausted += [
            f"{s.order_id} ({s.kind}): in the delay DLQ ({delay_dead[s.order_id] or 'no error'})"
            for s in sent
            if s.order_id in delay_dead and s.order_id not in processed | poison and s.kind != "permanent"
        ]
        places = {"processed": processed, "poison": poison, "dead-lettered": dead}
        overlaps = [
            f"{order} {'+'.join(name for name, where in places.items() if order in where)}"
            for order in sorted(ids)
            if sum(order in where for where in places.values()) > 1
        ]
        origins = self._redriven_origins()
        redriven = sorted({order for mid, order in by_message.items() if mid in origins})
        # each order counted once, in the first of its places: the line balances exactly when none is lost
        return SeedResult(
            seed=seed, mode=self.mode, sent=len(ids), processed=len(processed),
            poison=len(poison - processed),
            dead_lettered=len(dead - processed - poison),
            lost=sorted(ids - processed - poison - dead), duplicated=duplicated, at_least_once=window,
            unexpected=[], faults=dict(injector.counts),
            faults_at=dict(injector.where), seconds=round(seconds, 1), stuck=stuck,
            misrouted=misrouted, exhausted=exhausted, overlaps=overlaps, redriven=redriven,
        )  # fmt: skip

    def whole_ledger(self) -> tuple[list[str], list[str]]:
        """Read the whole ledger (every effect, every seed this stack ran): the ids of side effects never
        sent (**unexpected**), each reported once, by the seed whose check first sees it; and the effects
        of earlier seeds performed again since their seed's check (a late duplicate), each reported once."""
        table = self.stack.outputs["LedgerTableName"]
        kwargs: dict[str, Any] = {"TableName": table, "ConsistentRead": True}
        kwargs["ProjectionExpression"] = "order_id, effect_key"
        ids: set[str] = set()
        performed: Counter[str] = Counter()
        while True:
            page = self.stack.client("dynamodb").scan(**kwargs)
            for item in page.get("Items", []):
                ids.add(item["order_id"]["S"])
                performed[item["effect_key"]["S"]] += 1
            if "LastEvaluatedKey" not in page:
                break
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        new = sorted(ids - self._known - self._reported)
        self._reported.update(new)
        late: list[str] = []
        for key, checked in self._checked.items():
            if performed[key] > checked:
                late.append(f"{key} x{performed[key]} (performed again after its seed's check: {checked})")
                self._checked[key] = performed[key]
        return new, late

    def _check_jobs(self, result: SeedResult, jobs: list[SentJob], injector: faults.Injector) -> None:
        result.jobs_skipped = self.no_jobs
        store = self.stack.job_store() if jobs else None
        for j in jobs:
            job = store.get(uuid.UUID(j.job_id)) if store is not None else None
            result.jobs_sent += 1
            charges = self._ledger(j.job_id, "charge")
            self._checked[f"{j.job_id}#charge"] = charges
            label = f"job {j.business_id} ({j.kind}, {j.job_id})"
            if job is None or job.status not in ("completed", "dead"):
                result.lost.append(f"{label}: {job.status if job else 'row missing'}")
                continue
            result.jobs_completed += job.status == "completed"
            result.jobs_dead += job.status == "dead"
            if charges > 1:
                key = f"{j.job_id}#charge"
                excused = charges <= 1 + injector.in_window[key]
                (result.at_least_once if excused else result.duplicated).append(f"{label} charged x{charges}")
            never_finished = [e for e in job.errors if "never finished" in str(e.get("error"))]
            if j.kind == "job-invalid" and (job.status != "dead" or charges):
                result.misrouted.append(f"{label}: {job.status}, charged {charges}x")
            elif job.kind == "charge" and never_finished:  # that message is for single-UPDATE runs only
                result.misrouted.append(f"{label}: a two-phase job reaped as a single-UPDATE run")
            elif j.kind != "job-invalid" and job.status == "dead":
                result.exhausted.append(f"{label}: dead after {job.attempt} attempts")
            elif job.kind == "charge" and job.status == "completed" and not charges:
                result.misrouted.append(f"{label}: completed, never charged")
            elif (
                job.kind == "thumbnail"
                and job.status == "completed"
                and not self._ledger(j.job_id, "thumbnail")
            ):
                result.misrouted.append(f"{label}: completed, never rendered")

    def _redriven_origins(self) -> set[str]:
        """Origin ids of the messages sent back from the work DLQ since the last call, from the functions'
        log lines (the redriver's re-driven lines; the redrive state machine's Plan step's)."""
        out: set[str] = set()
        for entry in self._log.read(LogEvent.MESSAGE_REDRIVEN, LogEvent.REDRIVE_PLANNED):
            planned = entry.get(EVENT) == LogEvent.REDRIVE_PLANNED and entry.get("action") != "poison"
            if (entry.get(EVENT) == LogEvent.MESSAGE_REDRIVEN or planned) and entry.get("origin_id"):
                out.add(str(entry["origin_id"]))
        return out


LATE = "in the past when it was sent"
"""The end of the delay queue's refusal of a request past its due time by more than the grace."""


def _refused_late(s: Sent, reason: str) -> bool:
    """A delay request refused as too late whose producer stalled long enough that it truly was (the
    machine's load, not a bug: the grace is seconds under --fast). Nothing else excuses the refusal."""
    return reason.endswith(LATE) and s.may_be_refused_late(float(FAST["DelayPastGraceSeconds"]))


def _a_bug(error: str) -> bool:
    """Whether an order's last error is one no injected fault produces: a built-in exception other than
    an OS or connection error (a TypeError, KeyError, ... in the code that handled it)."""
    kind = getattr(builtins, error, None) if error else None
    return isinstance(kind, type) and issubclass(kind, Exception) and not issubclass(kind, OSError)


def _a_fault(error: str | None) -> bool:
    """Whether an order isolated with this last error (None: not isolated) may have run out of retries
    under the faults: neither a verdict (``PermanentError``) nor a bug (:func:`_a_bug`)."""
    return error is not None and error != "PermanentError" and not _a_bug(error)
