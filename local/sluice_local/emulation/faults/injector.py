"""The injector: every fault decision, the count of what was injected, and the at-least-once window.

The window: a side effect (a ledger write) performed, then its invocation died before its guard's commit,
or the commit failed for its caller; each opening excuses one more performance of that effect.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sluice_local.emulation.faults.plan import (
    AWS_KINDS,
    BATCH_APIS,
    CRASH,
    CRASH_WITHIN_CALLS,
    DB_KINDS,
    GUARD_COMMITS,
    GUARD_COMPLETES,
    LAMBDA_KINDS,
    LOST_RESPONSE,
    NO_SUCH_KEY,
    PARTIAL_BATCH,
    READ_APIS,
    RECEIVE,
    SABOTAGED,
    FaultPlan,
    Scope,
    SimulatedCrash,
    current,
)  # fmt: skip

log = logging.getLogger("sluice_local.emulation.faults")

HOLD_SECONDS = 120
"""The longest a call past its invocation's deadline waits for the runtime's verdict (a bound against a
bug, never reached: the verdict comes as the runtime's wait for the thread ends)."""


@dataclass
class Injector:
    plan: FaultPlan
    counts: Counter[str] = field(default_factory=Counter)
    where: Counter[str] = field(default_factory=Counter)
    """Faults by ``"<caller> <API> <kind>"``: which calls the schedule actually hit."""
    _sequence: Counter[tuple[str, str]] = field(default_factory=Counter)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _sabotaged: set[str] = field(default_factory=set)
    in_window: Counter[str] = field(default_factory=Counter)
    """Side effects (ledger ``effect_key``) whose invocation died after performing them and before
    committing their guard, or whose guard's commit failed for the caller (every attempt of the SDK's
    retries): how many times each opened the at-least-once window no guard can close
    (docs/guarantees.md). Each opening excuses one more performance, not any number of them."""

    def _next(self, caller: str, api: str) -> int:
        with self._lock:
            n = self._sequence[(caller, api)]
            self._sequence[(caller, api)] += 1
            return n

    def _count(self, kind: str, caller: str, api: str) -> None:
        with self._lock:
            self.counts[kind] += 1
            self.where[f"{caller} {api} {kind}"] += 1
        log.info("seed %d: injected %s into %s %s", self.plan.seed, kind, caller, api)

    # --- the Lambda boundary ---------------------------------------------------------------------

    def invocation(self, function: str) -> tuple[str | None, Scope]:
        """The fault (if any) for this function's next invocation, and the scope it runs in."""
        n = self._next(function, "Invoke")
        crash_after = None
        crash_before = ""
        kind = None
        kinds = tuple(k for k in LAMBDA_KINDS if not self.plan.only or k in self.plan.only)
        if kinds and self.plan.roll(function, "Invoke", n) < self.plan.lambda_rate:
            kind = self.plan.pick(kinds, function, "Invoke", n)
            points = dict(self.plan.crash_points)
            if kind == CRASH and function in points and self.plan.roll("crash-at", function, n) < 0.5:
                crash_before = points[function]  # counted where it happens (:meth:`_survives`)
            elif kind == CRASH:  # counted where it happens (:meth:`_survives`): it may finish first
                crash_after = int(self.plan.roll("crash-after", function, n) * CRASH_WITHIN_CALLS)
            else:
                self._count(kind, function, "Invoke")
        return kind, Scope(function, crash_after=crash_after, crash_before=crash_before)

    # --- the AWS boundary ------------------------------------------------------------------------

    def aws(self, service: str, api: str, params: bytes | None) -> str | None:
        """The fault (if any) for this call by the current scope; raises :class:`SimulatedCrash` when
        the scope's invocation has died."""
        here = current()
        if here is None:
            return None  # the test harness, the runtime itself: never faulted
        self._survives(here, api)
        table = _table(service, params)
        if table and table == self.plan.ledger_table:
            return self._ledger_write(here, api, params or b"")
        if api == RECEIVE:
            return None  # decided once it is known to have received something (:meth:`received`)
        n = self._next(here.caller, api)
        if self.plan.roll(here.caller, api, n) >= self.plan.aws_rate:
            return None
        kinds: tuple[str, ...] = AWS_KINDS
        if api in BATCH_APIS:
            kinds = (*kinds, PARTIAL_BATCH, PARTIAL_BATCH)
        elif api in READ_APIS and service == "s3":
            kinds = (*kinds, NO_SUCH_KEY)
        if self.plan.only:
            kinds = tuple(k for k in kinds if k in self.plan.only)
            if not kinds:
                return None
        kind = self.plan.pick(kinds, here.caller, api, n)
        self._count(kind, here.caller, api)
        return kind

    def commits_guard(self, api: str, params: dict[str, Any]) -> bool:
        """Whether this call (the whole call, its retries included) commits the guard of a side effect
        the current thread performed: its outcome for the caller decides the window (:meth:`committed`)."""
        here = current()
        return (
            here is not None
            and api in GUARD_COMMITS
            and params.get("TableName") == self.plan.guard_table
            and threading.get_ident() in here.uncommitted
        )

    def took_effect(self, api: str, params: bytes | None) -> None:
        """An attempt of this call took effect and its response was lost. For the guard's completion
        (Powertools' ``save_success``; a failed one is not undone) that attempt settles the guard."""
        here = current()
        if (
            here is not None
            and api == GUARD_COMPLETES
            and _table("dynamodb", params) == self.plan.guard_table
            and threading.get_ident() in here.uncommitted
        ):
            with self._lock:
                here.landed.add(threading.get_ident())

    def _survives(self, here: Scope, api: str) -> None:
        """Raises :class:`SimulatedCrash` once the invocation's handler has made the calls it may make
        (calls of its cold start, on the invoking thread, do not count: the crash lands in the handler)."""
        if getattr(threading.current_thread(), "_sluice_scope", None) is not here:
            return
        self.hold(here, api)
        if here.crash_after is None and not here.crash_before:
            return
        with self._lock:
            here.calls += 1
            due = api == here.crash_before or (here.crash_after is not None and here.calls > here.crash_after)
            first = not here.crashed and due
            if first:
                here.crashed = True
                self.counts[CRASH] += 1
                self.where[f"{here.caller} {api} {CRASH} (died before it)"] += 1
        if here.crashed:
            if first:
                log.info("seed %d: %s died before %s", self.plan.seed, here.caller, api)
            self._ended(here)
            where = (
                f"before {here.crash_before}" if here.crash_before else f"after {here.crash_after} AWS calls"
            )
            raise SimulatedCrash(f"{here.caller} died {where}")

    def hold(self, here: Scope, api: str) -> None:
        """Lambda stops an invocation at its deadline; the local runtime tells the timeout only when its
        wait for the handler's thread ends, a moment later (seconds on a loaded machine). A call of the
        invocation past its deadline waits for that verdict instead of going out meanwhile, then dies
        (:meth:`timed_out`) or, the invocation having returned in time, goes on. Without it a thread past
        its deadline could still perform a side effect whose guard had expired and been taken over by a
        retry: a duplicate AWS cannot produce (it failed a short soak in CI, seed 3, ``s3-4#notify x2``)."""
        if here.deadline is None or here.crashed or time.monotonic() < here.deadline:
            return
        if not here.over.wait(HOLD_SECONDS):
            log.warning("%s: %s past its deadline, not settled after %d s", here.caller, api, HOLD_SECONDS)

    def _ended(self, here: Scope) -> None:
        """The invocation's process is gone: effects it performed whose guards it never committed each
        open the window once (their records are retried; the guard expires and lets them run again)."""
        with self._lock:
            self.in_window.update(e for t, es in here.uncommitted.items() if t not in here.landed for e in es)
            here.uncommitted.clear()

    def db(self, statement: str) -> str | None:
        """The fault (if any) for the next database ``statement`` by the current scope (asked by a
        boundary plugged in with :func:`~sluice_local.emulation.faults.install`); raises
        :class:`SimulatedCrash` when the scope's invocation has died (or dies before it)."""
        here = current()
        if here is None:
            return None  # the checker's own reads
        site = f"db:{statement}"
        self._survives(here, site)
        n = self._next(here.caller, site)
        kinds = tuple(k for k in DB_KINDS if not self.plan.only or k in self.plan.only)
        if not kinds or self.plan.roll(here.caller, site, n) >= self.plan.aws_rate:
            return None
        kind = self.plan.pick(kinds, here.caller, site, n)
        self._count(kind, here.caller, site)
        return kind

    def committed(self, ok: bool, which: Callable[[str], bool] | None = None) -> None:
        """The commit of the current thread's side effects returned (``ok``) or failed for its caller: a
        guard's DynamoDB write after the SDK's retries, a job store commit after the worker's. Only then
        are the effects inside the window (the record is retried, the claim left to the reaper).
        ``which``: the effects this commit is about (a job's, by its ``effect_key``), when the thread
        holds others still uncommitted (a job batch's); default all of them."""
        here = current()
        if here is None:
            return
        thread = threading.get_ident()

        def judged(effects: list[str]) -> tuple[list[str], list[str]]:
            mine = [e for e in effects if which is None or which(e)]
            return mine, [e for e in effects if e not in mine]

        with self._lock:
            landed = thread in here.landed
            here.landed.discard(thread)
            effects, others = judged(here.uncommitted.pop(thread, []))
            if others:
                here.uncommitted[thread] = others
            if not ok:  # those performances' commit is over
                if effects and not landed:  # landed: the guard is COMPLETED, a repeat is a duplicate
                    self.in_window.update(effects)
                    here.failed_commit[thread] = here.failed_commit.get(thread, []) + effects
            elif not effects and thread in here.failed_commit:
                # the same thread retried the commit that failed (nothing performed since) and it
                # landed after all: the window it opened is closed
                closed, still = judged(here.failed_commit.pop(thread))
                if still:
                    here.failed_commit[thread] = still
                self.in_window.subtract(closed)
                self.in_window = +self.in_window

    def timed_out(self, here: Scope) -> None:
        """The invocation ran past its timeout. Lambda stops it there; the local runtime cannot stop its
        thread, so it dies at its next AWS call or statement instead: a side effect it has not performed
        yet never happens after its deadline (which AWS could not produce)."""
        with self._lock:
            here.crashed = True
            if here.crash_after is None:
                here.crash_after = here.calls
            self.where[f"{here.caller} Invoke timed-out (stopped at its next call)"] += 1
        here.over.set()
        log.info("seed %d: %s timed out; stopped at its next call", self.plan.seed, here.caller)

    def again(self, kind: str, api: str) -> None:
        """Count a fault that continues one already decided (the retries of a call)."""
        here = current()
        if here is not None:
            self._count(kind, here.caller, api)

    def received(self) -> bool:
        """Whether the response of a receive that returned messages is lost (they stay in flight until
        their visibility timeout, their receive count up). Empty polls are never counted nor faulted, so
        a mapping's decisions follow the messages it gets, not how often it polled an empty queue."""
        here = current()
        if here is None:
            return False
        n = self._next(here.caller, RECEIVE)
        if self.plan.roll(here.caller, RECEIVE, n) >= self.plan.aws_rate or (
            self.plan.only and LOST_RESPONSE not in self.plan.only
        ):
            return False
        self._count(LOST_RESPONSE, here.caller, RECEIVE)
        return True

    def _ledger_write(self, here: Scope, api: str, params: bytes) -> str | None:
        if api != "PutItem":
            return None
        item = json.loads(params).get("Item", {})
        key = str((item.get("effect_key") or {}).get("S", ""))
        here.uncommitted.setdefault(threading.get_ident(), []).append(key)
        here.failed_commit.pop(threading.get_ident(), None)  # a new performance: an old failure stays
        here.landed.discard(threading.get_ident())
        if not self.plan.sabotage_ledger:
            return None
        with self._lock:
            if key in self._sabotaged:
                return None
            self._sabotaged.add(key)
        self._count(SABOTAGED, here.caller, api)
        return SABOTAGED

    def drop_entries(self, api: str, body: bytes) -> tuple[bytes, list[str]]:
        """The request without some of its entries, and their ids (reported failed)."""
        doc = json.loads(body)
        entries = doc.get("Entries") or []
        if len(entries) < 2:  # one entry: it is dropped (nothing sent), the call reports it failed
            doc["Entries"] = []
            return json.dumps(doc).encode(), [e["Id"] for e in entries]
        dropped = [e["Id"] for i, e in enumerate(entries) if self.plan.roll("drop", api, e["Id"], i) < 0.5]
        dropped = dropped or [entries[0]["Id"]]
        doc["Entries"] = [e for e in entries if e["Id"] not in dropped]
        return json.dumps(doc).encode(), dropped


def _table(service: str, params: bytes | None) -> str:
    if service != "dynamodb" or not params:
        return ""
    try:
        return str(json.loads(params).get("TableName", ""))
    except ValueError:
        return ""
