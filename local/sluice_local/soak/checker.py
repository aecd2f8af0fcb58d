"""The checker: a seed's history read from the ledger, the queues and the job rows once it drained, each
workload checked on its own (:class:`~sluice_local.soak.result.Tally`).

The poison queue, the delay pipeline and the ledger are shared by the workloads: a message found there is
the seed's by its origin (or message) id, which names what was sent to which workload; the envelope's
recorded queue (``source``, else the delay request's ``target``) and the body (a refund's ``refund_id``,
an order's ``customer_id``) must name that same workload, else the message is misrouted. In the ledger an
order's effects are ``<order id>#<effect>``, a refund's ``refund:<refund id>#repay``, a job's
``<job id>#<kind>``.
"""

from __future__ import annotations

import builtins
import json
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from sluice.envelope import split
from sluice.logevents import EVENT, LogEvent
from sluice_local.app.fast import FAST
from sluice_local.app.messages import ORDERS, REFUND_LEDGER_PREFIX, REFUNDS
from sluice_local.app.observer import Stack
from sluice_local.emulation import faults
from sluice_local.soak.jobcheck import check_jobs
from sluice_local.soak.logtail import LogTail
from sluice_local.soak.result import JOBS, SeedResult, Tally
from sluice_local.soak.workload import Sent, SentJob

QUEUE_WORKLOADS = (ORDERS, REFUNDS)
EFFECTS = {ORDERS: ("charge", "reward", "notify"), REFUNDS: ("repay",)}
"""Each queue workload's guarded side effects; the first is performed first: once it is in the ledger,
the message was processed."""
Ref = tuple[str, str]
"""A sent message's identity: (its workload, its business id). The workloads' ids take the same values."""


def effect_key(workload: str, business_id: str, effect: str) -> str:
    """The ledger's ``effect_key`` of a workload's effect (examples/orders, examples/refunds processors)."""
    return f"{REFUND_LEDGER_PREFIX if workload == REFUNDS else ''}{business_id}#{effect}"


def expected_effects(s: Sent) -> set[str]:
    """The effects a processed message of this kind performs: all of them must be in the ledger."""
    if s.workload == REFUNDS:
        return {"repay"}
    return {"charge", "notify"} | ({"reward"} if s.kind == "claim-check" else set())


def ref(s: Sent) -> Ref:
    return (s.workload, s.business_id)


class Checker:
    """What a stack's seeds did, checked one seed after another (some checks span every seed so far)."""

    def __init__(self, stack: Stack, log_path: Path, *, mode: str, no_jobs: str = "") -> None:
        """``log_path``: the functions' log; ``no_jobs``: why the stack has no job store ('' when it has)."""
        self.stack = stack
        self.mode = mode
        self.no_jobs = no_jobs
        self._log = LogTail(log_path)
        self._known: dict[str, set[str]] = {ORDERS: set(), REFUNDS: set(), JOBS: set()}
        """Per ledger namespace, every id this stack was sent (jobs: ids and business ids), over its seeds."""
        self._reported: set[str] = set()
        """The ledger keys already reported unexpected or misrouted (each is reported once)."""
        self._reasons: dict[Ref, str] = {}
        """Per message found isolated: its envelope's last error message (a misrouted report names it)."""
        self._checked: dict[str, int] = {}
        """Per guarded effect (ledger ``effect_key``) of the seeds run so far: its performances when its
        seed was checked. Every later seed's check re-reads them: a performance written afterwards (by
        anything still running) is reported then, as a duplicate."""
        self._performed: Counter[str] = Counter()
        """The ledger as the current check read it at its start: each effect key's performances."""
        self._effects: dict[str, str] = {}
        """Per effect key ever read: its effect's name."""
        self._owners = {
            value: name
            for name in QUEUE_WORKLOADS
            for value in (stack.outputs.get(name + "QueueArn"), stack.outputs.get(name + "QueueUrl"))
            if value
        }
        """The queue workloads' queues, by ARN and URL: where an envelope says a message was."""

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
        for s in sent:
            self._known[s.workload].add(s.business_id)
        self._known[JOBS] |= {i for j in jobs for i in (j.job_id, j.business_id)}
        checked_before = set(self._checked)
        result = SeedResult(
            seed=seed, mode=self.mode, workloads={}, faults=dict(injector.counts),
            faults_at=dict(injector.where), seconds=round(seconds, 1), stuck=stuck,
        )  # fmt: skip
        self._performed = self._read_ledger()  # one read of the whole table: every effect's count below
        self._check(result, sent, injector)
        result.jobs_skipped = self.no_jobs
        if jobs:
            tally = result.tally(JOBS)
            check_jobs(
                tally, jobs, injector=injector, stack=self.stack, ledger=self._ledger, checked=self._checked
            )
        if stuck:  # still running at its check (the seed fails): what it performs later is not re-counted
            for key in set(self._checked) - checked_before:
                del self._checked[key]
        self._whole_ledger(result)
        return result

    def _ledger(self, key: str) -> int:
        """How many times the effect ``key`` was performed, as the seed's read of the ledger found it."""
        return self._performed[key]

    def _read_ledger(self) -> Counter[str]:
        """The whole ledger (every effect of every seed this stack ran), scanned page by page at a check's
        start and again at its end, rather than one query per effect: each item's effect key counted, and
        its effect kept in :attr:`_effects`."""
        kwargs: dict[str, Any] = {
            "TableName": self.stack.outputs["LedgerTableName"],
            "ConsistentRead": True,
            "ProjectionExpression": "effect_key, effect",
        }
        performed: Counter[str] = Counter()
        while True:
            page = self.stack.client("dynamodb").scan(**kwargs)
            for item in page.get("Items", []):
                performed[item["effect_key"]["S"]] += 1
                self._effects[item["effect_key"]["S"]] = item.get("effect", {}).get("S", "")
            if "LastEvaluatedKey" not in page:
                return performed
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def _in_queue(self, output: str, by_message: dict[str, Sent]) -> dict[Ref, tuple[str, str]]:
        """The seed's messages found on a queue (by origin id, or the message id it was sent with), each
        with the type of its envelope's last error ('' when none) and the workload its envelope's queue
        or its body names ('' when neither does)."""
        found: dict[Ref, tuple[str, str]] = {}
        for message in self.stack.every_message(output):
            attributes = {k: dict(v) for k, v in message.get("MessageAttributes", {}).items()}
            _, env, _ = split(attributes, body=message["Body"], seal=self.stack.seal())
            origin = env.origin_id if env is not None else None
            error = env.last_error.type if env is not None and env.last_error is not None else ""
            for key in (origin, message["MessageId"]):
                if key in by_message:
                    s = by_message[key]
                    queues = (env.source, env.target) if env is not None else ()
                    named = {self._owners.get(str(q)) for q in queues} | {_workload_of_body(message["Body"])}
                    other = sorted(w for w in named if w and w != s.workload)
                    found.setdefault(ref(s), (error, other[0] if other else ""))
                    if env is not None and env.last_error is not None:  # the reason, for the report
                        self._reasons.setdefault(ref(s), env.last_error.message[:300])
                    break
        return found

    def _check(self, result: SeedResult, sent: list[Sent], injector: faults.Injector) -> None:
        by_message = {mid: s for s in sent for mid in s.message_ids}
        poisoned = self._in_queue("PoisonPillQueueUrl", by_message)
        delay_dead = self._in_queue("DelayDeadLetterQueueUrl", by_message)
        work_dead: dict[Ref, tuple[str, str]] = {}
        for workload in QUEUE_WORKLOADS:
            for r, (error, other) in self._in_queue(workload + "DeadLetterQueueUrl", by_message).items():
                work_dead.setdefault(r, (error, workload if workload != r[0] else other))
        by_ref = {ref(s): s for s in sent}
        for where, found in (("poison queue", poisoned), ("delay DLQ", delay_dead), ("DLQ", work_dead)):
            for r, (_, other) in found.items():
                if other:
                    s = by_ref[r]
                    result.tally(s.workload).misrouted.append(
                        f"{s} ({s.kind}) found in the {where} of the {other} workload"
                    )
        origins = self._redriven_origins()
        for workload in QUEUE_WORKLOADS:
            mine = [s for s in sent if s.workload == workload]
            if mine:
                tally = result.tally(workload)
                dead = {"poisoned": poisoned, "delay_dead": delay_dead, "work_dead": work_dead}
                self._check_workload(tally, mine, injector, **dead)
                tally.redriven = sorted({str(s) for s in mine if set(s.message_ids) & origins})

    def _check_workload(
        self,
        tally: Tally,
        sent: list[Sent],
        injector: faults.Injector,
        *,
        poisoned: dict[Ref, tuple[str, str]],
        delay_dead: dict[Ref, tuple[str, str]],
        work_dead: dict[Ref, tuple[str, str]],
    ) -> None:
        """One queue workload's messages of the seed: where each ended, and every effect they performed."""
        ids = {ref(s) for s in sent}
        processed: set[Ref] = set()
        isolated = {
            r: error for found in (work_dead, delay_dead, poisoned) for r, (error, _) in found.items()
        }
        for s in sent:
            performed = {
                e: self._ledger(effect_key(s.workload, s.business_id, e)) for e in EFFECTS[s.workload]
            }
            for effect, n in performed.items():
                key = effect_key(s.workload, s.business_id, effect)
                self._checked[key] = n
                if n > 1:  # each time the window opened for it excuses one more performance, no more
                    excused = n <= 1 + injector.in_window[key]
                    (tally.at_least_once if excused else tally.duplicated).append(f"{key} x{n}")
            if not performed[EFFECTS[s.workload][0]]:
                continue
            processed.add(ref(s))
            missing = sorted(e for e in expected_effects(s) if not performed[e])
            error = isolated.get(ref(s))
            if missing and s.kind != "permanent" and _a_fault(error):
                # part-way, then its retries ran out: isolated where an operator re-drives it (the
                # guards keep what was done from being done again); deleted part-way would be a loss
                tally.exhausted.append(f"{s} ({s.kind}): isolated part-way, {missing} not performed "
                                       f"({error or 'no error'})")  # fmt: skip
            elif missing or s.kind == "permanent":
                where = ", and deleted" if error is None else f", isolated ({error})"
                where = "" if s.kind == "permanent" else where
                tally.misrouted.append(f"{s} ({s.kind}) processed, missing {missing}{where}")
        for s in sent:
            error = poisoned[ref(s)][0] if ref(s) in poisoned else None
            if error is None or ref(s) in processed or s.kind == "permanent":
                continue
            reason = self._reasons.get(ref(s), "no reason recorded")
            if error == "PermanentError" and _refused_late(s, reason):
                tally.exhausted.append(f"{s} ({s.kind}): its send took {s.send_seconds:.1f} s, {reason}")
            elif error == "PermanentError":  # a valid message refused as permanently bad
                tally.misrouted.append(f"{s} ({s.kind}) poisoned with a PermanentError: {reason}")
            elif _a_bug(error):  # retries cannot cure it, and no injected fault raises it
                tally.misrouted.append(f"{s} ({s.kind}) poisoned after a {error}: a bug, not a fault")
            else:
                tally.exhausted.append(f"{s} ({s.kind}): {error or 'no error'}")
        poison = set(poisoned) & ids
        dead = (set(work_dead) | set(delay_dead)) & ids
        tally.exhausted += [
            f"{s} ({s.kind}): in the delay DLQ ({delay_dead[ref(s)][0] or 'no error'})"
            for s in sent
            if ref(s) in delay_dead and ref(s) not in processed | poison and s.kind != "permanent"
        ]
        places = {"processed": processed, "poison": poison, "dead-lettered": dead}
        tally.overlaps = [
            f"{s} {'+'.join(name for name, where in places.items() if ref(s) in where)}"
            for s in sorted(sent, key=lambda s: s.business_id)
            if sum(ref(s) in where for where in places.values()) > 1
        ]
        # each message counted once, in the first of its places: the line balances exactly when none is lost
        tally.sent, tally.processed = len(ids), len(processed)
        tally.poison, tally.dead_lettered = len(poison - processed), len(dead - processed - poison)
        tally.lost = sorted(f"{s}" for s in sent if ref(s) not in processed | poison | dead)

    def _whole_ledger(self, result: SeedResult) -> None:
        """The whole ledger, read again at the end of the check (every effect, every seed this stack ran),
        each item in its workload's namespace: the ids of side effects never sent (**unexpected**), an
        order's effect keyed as a refund's or a refund's as an order's (**misrouted**), each reported once,
        by the seed whose check first sees it; and the effects of earlier seeds performed again since their
        seed's check (a late duplicate), each reported once."""
        # read again, not the check's first read: what was written while the check ran (a late duplicate,
        # an effect never sent) is reported by this seed, the last seed of a run included
        performed, effects = self._read_ledger(), self._effects
        for key in sorted(set(performed) - self._reported):
            workload, business_id = _namespace(key)
            effect = effects[key]
            if workload == REFUNDS and effect not in EFFECTS[REFUNDS]:
                self._reported.add(key)
                result.tally(REFUNDS).misrouted.append(f"{key}: a {effect!r} effect keyed as a refund's")
            elif workload != REFUNDS and effect in EFFECTS[REFUNDS]:
                self._reported.add(key)
                result.tally(workload).misrouted.append(f"{key}: a refund's {effect!r} keyed outside refund:")
            elif business_id not in self._known[workload]:
                self._reported.add(key)
                result.tally(workload).unexpected.append(business_id)
        for key, checked in self._checked.items():
            if performed[key] > checked:
                result.tally(_namespace(key)[0]).duplicated.append(
                    f"{key} x{performed[key]} (performed again after its seed's check: {checked})"
                )
                self._checked[key] = performed[key]

    def _redriven_origins(self) -> set[str]:
        """Origin ids of the messages sent back from a work DLQ since the last call, from the functions'
        log lines (the redrivers' re-driven lines; the redrive state machines' Plan steps')."""
        out: set[str] = set()
        for entry in self._log.read(LogEvent.MESSAGE_REDRIVEN, LogEvent.REDRIVE_PLANNED):
            planned = entry.get(EVENT) == LogEvent.REDRIVE_PLANNED and entry.get("action") != "poison"
            if (entry.get(EVENT) == LogEvent.MESSAGE_REDRIVEN or planned) and entry.get("origin_id"):
                out.add(str(entry["origin_id"]))
        return out


def _namespace(key: str) -> tuple[str, str]:
    """The workload a ledger ``effect_key`` belongs to, and the id it names: ``refund:<id>#repay`` a
    refund's, ``<uuid>#<kind>`` a job's, anything else an order's."""
    business_id = key.rsplit("#", 1)[0]
    if business_id.startswith(REFUND_LEDGER_PREFIX):
        return REFUNDS, business_id.removeprefix(REFUND_LEDGER_PREFIX)
    try:
        uuid.UUID(business_id)
    except ValueError:
        return ORDERS, business_id
    return JOBS, business_id


def _workload_of_body(body: str) -> str:
    """The queue workload a body is a message of, by its fields ('' for another body: a claim-check
    pointer, an offloaded one, one that is not JSON)."""
    try:
        data = json.loads(body)
    except ValueError:
        return ""
    if not isinstance(data, dict):
        return ""
    return REFUNDS if "refund_id" in data else ORDERS if "customer_id" in data else ""


LATE = "in the past when it was sent"
"""The end of the delay queue's refusal of a request past its due time by more than the grace."""


def _refused_late(s: Sent, reason: str) -> bool:
    """A delay request refused as too late whose producer stalled long enough that it truly was (the
    machine's load, not a bug: the grace is seconds under --fast). Nothing else excuses the refusal."""
    return reason.endswith(LATE) and s.may_be_refused_late(float(FAST["DelayPastGraceSeconds"]))


def _a_bug(error: str) -> bool:
    """Whether a message's last error is one no injected fault produces: a built-in exception other than
    an OS or connection error (a TypeError, KeyError, ... in the code that handled it)."""
    kind = getattr(builtins, error, None) if error else None
    return isinstance(kind, type) and issubclass(kind, Exception) and not issubclass(kind, OSError)


def _a_fault(error: str | None) -> bool:
    """Whether a message isolated with this last error (None: not isolated) may have run out of retries
    under the faults: neither a verdict (``PermanentError``) nor a bug (:func:`_a_bug`)."""
    return error is not None and error != "PermanentError" and not _a_bug(error)
