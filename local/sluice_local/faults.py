"""Seeded fault injection for the local runtime (never deployed): AWS's failures, on purpose.

One integer seed decides every fault. A decision is a pure function of ``(seed, who, API, n)``: who
calls (a function of the stack, or the event source mapping that feeds it), which API, and how many
times that caller has called that API so far in the run. So the same seed gives the same schedule;
no decision reads the clock. (Which call is a caller's n-th can still depend on how threads
interleave, so a replay reproduces the schedule exactly and the run itself almost always.)

Where faults are injected:

- **At the AWS boundary**, beneath botocore's retries (``Endpoint._do_get_response``), on every call a
  function or a mapping makes: throttling and 5xx errors and connection errors before the request is
  sent; a read timeout **after** the request took effect ("succeeded but the response was lost"),
  which botocore then retries as the SDK does in AWS; a ``SendMessageBatch``/``DeleteMessageBatch``
  that performs only some of its entries and reports the others failed; ``NoSuchKey`` on a read of an
  object (a claim check read before its object is visible). The example processor's ledger table is
  never touched: it is the checker's instrument, standing in for an external system (docs/guarantees.md).
- **At the Lambda boundary**, like AWS FIS's Lambda actions: an invocation that fails before the
  handler runs; one whose handler ran to the end but whose response was lost (side effects done,
  the caller sees an error); one that dies part-way (a crash or a timeout: every AWS call the
  invocation makes after its k-th one fails, the k-th itself having taken effect or not), which
  covers a crash after a guarded side effect, part-way through a rehydrated object and between the
  redriver's send and its delete.

- **At the database boundary** of the job store (``JobStore._run``, beneath its own reconnect-and-retry):
  the connection dropped before a statement, or dropped after the statement took effect ("committed
  but the response was lost"); a crashing invocation can also die before any of its statements.

Every injected fault is counted by kind (:attr:`Injector.counts`) and logged with the seed.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import psycopg
from botocore.awsrequest import AWSResponse, HTTPHeaders
from botocore.client import BaseClient
from botocore.endpoint import Endpoint
from botocore.exceptions import EndpointConnectionError, ReadTimeoutError

from sluice_local.functions import FunctionError, FunctionHost
from sluice_local.pollers import SqsPoller

log = logging.getLogger("sluice_local.faults")

# --- kinds ---------------------------------------------------------------------------------------

THROTTLE = "throttle"
SERVER_ERROR = "server-error"
CONNECTION_ERROR = "connection-error"
LOST_RESPONSE = "lost-response"
LOST_EVERY_ATTEMPT = "lost-response-every-attempt"
"""The call takes effect and its response is lost on every attempt the SDK makes: the caller sees
the error although the effect happened (a lost response alone is usually retried away)."""
PARTIAL_BATCH = "partial-batch"
NO_SUCH_KEY = "no-such-key"
INVOKE_ERROR = "invoke-error"
LOST_INVOKE_RESPONSE = "lost-invoke-response"
CRASH = "crash-mid-invocation"
SABOTAGED = "sabotage-took-effect-then-failed"
"""Only to check the checker: the call takes effect, then fails with an error the SDK does not retry."""

DB_DROPPED = "db-connection-dropped"
"""The job store's connection dies before a statement reaches the database."""
DB_LOST_RESPONSE = "db-lost-response"
"""The statement took effect (autocommit), then the connection died before its result arrived."""

AWS_KINDS = (THROTTLE, SERVER_ERROR, CONNECTION_ERROR, LOST_RESPONSE, LOST_EVERY_ATTEMPT)
LAMBDA_KINDS = (INVOKE_ERROR, LOST_INVOKE_RESPONSE, CRASH)
DB_KINDS = (DB_DROPPED, DB_LOST_RESPONSE)
ALL_KINDS = (*AWS_KINDS, PARTIAL_BATCH, NO_SUCH_KEY, *LAMBDA_KINDS, *DB_KINDS)
DB_COMMITS = frozenset({"commit", "complete_if_pending"})
"""The job store's commits, which end a job's run after its side effect (the methods of these names):
their outcome for the caller opens the window."""
BATCH_APIS = frozenset({"SendMessageBatch", "DeleteMessageBatch"})
READ_APIS = frozenset({"GetObject", "HeadObject"})
GUARD_COMMITS = frozenset({"UpdateItem", "DeleteItem"})  # Powertools: COMPLETED, or removed when fn raised
GUARD_COMPLETES = "UpdateItem"
HTTP_REDIRECT = 300
CRASH_WITHIN_CALLS = 8
"""A crashing invocation dies before one of its handler's first 8 AWS calls (a consumer batch makes
dozens; the redriver's send and delete, the rehydrator's reads, sends and rewrites come early)."""
CRASH_POINTS = {"RedriverFunction": "DeleteMessageBatch"}
"""Where half of a function's crashes land instead of after a random number of calls: points a random
count rarely reaches (the redriver between its send and its delete: it seldom has messages in hand)."""
RECEIVE = "ReceiveMessage"
SERVICE_EXCEPTION = "Lambda.ServiceException"
TIMED_OUT = "Sandbox.Timedout"


class SimulatedCrash(BaseException):
    """The invocation's process died: raised by every AWS call it makes from then on. A BaseException,
    so no ``except Exception`` in the code under test can swallow it, as none can survive a crash."""


@dataclass(frozen=True)
class FaultPlan:
    seed: int
    aws_rate: float = 0.05
    """Share of AWS calls that fail (of those made by the stack's functions and mappings)."""
    lambda_rate: float = 0.08
    """Share of invocations that fail at the Lambda boundary."""
    ledger_table: str = ""
    """The example's ledger (the checker's instrument, standing in for an external system): never
    faulted; its writes are noted, so a duplicate can be traced to a fault inside its guard's window."""
    guard_table: str = ""
    """The idempotency table that holds the side effects' guards."""
    only: tuple[str, ...] = ()
    """When set, the kinds that may be injected (the others never are): for a targeted run or a test."""
    sabotage_ledger: bool = False
    """Check the checker: the first ledger write of each item takes effect, then fails with an error
    the SDK does not retry (an unguarded side effect, performed again when its record is retried)."""

    def roll(self, *key: object) -> float:
        """A number in [0, 1) that depends only on the seed and ``key``."""
        text = "|".join([str(self.seed), *map(str, key)]).encode()
        return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big") / 2**64

    def pick(self, options: tuple[str, ...], *key: object) -> str:
        return options[int(self.roll("pick", *key) * len(options))]


@dataclass
class Scope:
    """What is calling AWS on this thread: a function invocation (and the threads it started) or an
    event source mapping."""

    caller: str
    crash_after: int | None = None
    """Calls this invocation may make before it dies (None: it does not)."""
    crash_before: str = ""
    """An API the invocation dies before calling (a targeted crash: a test, a replay of a point)."""
    calls: int = 0
    crashed: bool = False
    uncommitted: dict[int, str] = field(default_factory=dict)
    """Per thread of the invocation: the side effect (ledger ``effect_key``) it performed whose guard
    it has not committed yet (``once``: guard in progress → effect → commit)."""
    failed_commit: dict[int, str] = field(default_factory=dict)
    """Per thread: the effect whose commit last failed for good, until the thread performs another; a
    retry of that same commit (the job worker's) that lands closes the window it opened."""
    landed: set[int] = field(default_factory=set)
    """Threads whose guard commit (the UpdateItem to COMPLETED) took effect on some attempt although its
    caller saw an error: the guard is completed, so a retry must not perform the effect again and no
    window opens (a repeat would be a duplicate)."""


_local = threading.local()


def current() -> Scope | None:
    return getattr(_local, "scope", None)


@contextmanager
def scope(value: Scope | None) -> Iterator[None]:
    previous = current()
    _local.scope = value
    try:
        yield
    finally:
        _local.scope = previous


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
            if kind == CRASH and function in CRASH_POINTS and self.plan.roll("crash-at", function, n) < 0.5:
                crash_before = CRASH_POINTS[function]  # counted where it happens (:meth:`_survives`)
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
        planned = here.crash_after is not None or here.crash_before
        if not planned or getattr(threading.current_thread(), "_sluice_scope", None) is not here:
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
            with self._lock:  # effects done, their guards never committed: each opens the window once
                self.in_window.update(e for t, e in here.uncommitted.items() if t not in here.landed)
                here.uncommitted.clear()
            where = (
                f"before {here.crash_before}" if here.crash_before else f"after {here.crash_after} AWS calls"
            )
            raise SimulatedCrash(f"{here.caller} died {where}")

    def db(self, statement: str) -> str | None:
        """The fault (if any) for the job store's next ``statement`` by the current scope; raises
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

    def committed(self, ok: bool) -> None:
        """The commit of the current thread's side effect returned (``ok``) or failed for its caller: a
        guard's DynamoDB write after the SDK's retries, a job store commit after the worker's. Only then
        is the effect inside the window (the record is retried, the claim left to the reaper)."""
        here = current()
        if here is None:
            return
        thread = threading.get_ident()
        with self._lock:
            landed = thread in here.landed
            here.landed.discard(thread)
            if not ok:
                effect = here.uncommitted.pop(thread, None)  # that performance's commit is over
                if effect and not landed:  # landed: the guard is COMPLETED, a repeat is a duplicate
                    self.in_window[effect] += 1
                    here.failed_commit[thread] = effect
            elif here.uncommitted.pop(thread, None) is None and thread in here.failed_commit:
                # the same thread retried the commit that failed (nothing performed since) and it
                # landed after all: the window it opened is closed
                effect = here.failed_commit.pop(thread)
                self.in_window[effect] -= 1
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
        here.uncommitted[threading.get_ident()] = key
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


# --- installing ----------------------------------------------------------------------------------


class _Raw:
    def stream(self, **_: Any) -> Iterator[bytes]:
        yield b""


def _error(request: Any, status: int, code: str, message: str) -> tuple[tuple[Any, dict[str, Any]], None]:
    response = AWSResponse(request.url, status, HTTPHeaders(), _Raw())
    parsed = {
        "Error": {"Code": code, "Message": message},
        "ResponseMetadata": {"HTTPStatusCode": status, "HTTPHeaders": {}},
    }
    return (response, parsed), None


def _refused(kind: str, service: str, request: Any) -> Any:
    """``(response, error)`` for a call that fails before it reaches AWS; None for kinds that do reach it."""
    if kind == THROTTLE:
        code, status = ("SlowDown", 503) if service == "s3" else ("ThrottlingException", 400)
        return _error(request, status, code, f"injected {kind}")
    if kind == SERVER_ERROR:
        code = "InternalServerError" if service == "dynamodb" else "InternalError"
        return _error(request, 500, code, f"injected {kind}")
    if kind == CONNECTION_ERROR:
        return None, EndpointConnectionError(endpoint_url=request.url)
    if kind == NO_SUCH_KEY:
        return _error(request, 404, "NoSuchKey", "injected: The specified key does not exist.")
    return None


def _faulty_response(
    injector: Injector, kind: str | None, request: Any, operation_model: Any, send: Callable[[], Any]
) -> Any:
    """What ``Endpoint._do_get_response`` returns for a call hit by ``kind``: ``(response, error)``."""
    if kind is None:
        return _receive(injector, request, send) if operation_model.name == RECEIVE else send()
    refused = _refused(kind, operation_model.service_model.service_id.hyphenize(), request)
    if refused is not None:
        return refused
    if kind == PARTIAL_BATCH and isinstance(request.body, bytes):
        request.body, dropped = injector.drop_entries(operation_model.name, request.body)
        request.headers["Content-Length"] = str(len(request.body))
        result: Any
        error: Any
        if not json.loads(request.body).get("Entries"):  # every entry dropped: nothing is sent
            result, error = (AWSResponse(request.url, 200, HTTPHeaders(), _Raw()), {"Successful": []}), None
        else:
            result, error = send()
        if error is None and result[0].status_code < HTTP_REDIRECT:
            failed = {"SenderFault": False, "Code": "InternalError", "Message": "injected"}
            result[1].setdefault("Failed", []).extend({"Id": i, **failed} for i in dropped)
        return result, error
    result, error = send()  # LOST_RESPONSE or SABOTAGED: the call took effect
    if error is not None:
        return result, error
    if result[0].status_code < HTTP_REDIRECT:
        injector.took_effect(operation_model.name, request.body if isinstance(request.body, bytes) else None)
    if kind == SABOTAGED:
        return _error(request, 400, "InjectedFailureAfterEffect", "sabotage: it happened")
    return None, ReadTimeoutError(endpoint_url=request.url)


def _receive(injector: Injector, request: Any, send: Callable[[], Any]) -> Any:
    result, error = send()
    if error is None and result[1].get("Messages") and injector.received():
        return None, ReadTimeoutError(endpoint_url=request.url)
    return result, error


def _decide(
    injector: Injector, service: str, api: str, body: bytes | None, context: dict[str, Any]
) -> str | None:
    """The fault for this attempt; ``context`` is botocore's, shared by the attempts of one call."""
    if context.get(LOST_EVERY_ATTEMPT):  # a retry of a call whose every response is lost
        injector.again(LOST_EVERY_ATTEMPT, api)
        return LOST_RESPONSE
    kind = injector.aws(service, api, body)
    if kind == LOST_EVERY_ATTEMPT:
        context[LOST_EVERY_ATTEMPT] = True
        return LOST_RESPONSE
    return kind


def _faulty_statements(injector: Injector, original: Callable[..., Any]) -> Callable[..., Any]:
    """``JobStore._run`` with each statement attempt decided by ``injector`` (:meth:`Injector.db`)."""

    def db_run(self: Any, name: str, fn: Callable[[Any], Any], *, isolated: bool = True) -> Any:
        def faulty(conn: Any) -> Any:  # each attempt of the store's own retry is decided anew
            kind = injector.db(name)
            if kind == DB_DROPPED:
                conn.close()
                raise psycopg.OperationalError(f"injected {kind}: server closed the connection unexpectedly")
            result = fn(conn)
            if kind == DB_LOST_RESPONSE:
                conn.close()
                raise psycopg.OperationalError(f"injected {kind}: server closed the connection unexpectedly")
            return result

        return original(self, name, faulty, isolated=isolated)

    return db_run


def _judged_commits(injector: Injector, original: Callable[..., Any]) -> Callable[..., Any]:
    """A job store commit (``JobStore.commit``, ``complete_if_pending``) judged by what its caller gets:
    returned, it landed; raised (unreachable, or :class:`~sluice.errors.LostClaim` when the claim was
    reaped meanwhile and another run took the job), it failed for good — the window, as for a guard."""

    def commit(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            result = original(self, *args, **kwargs)
        except Exception:  # a crash (BaseException) marks the window where it happens
            injector.committed(ok=False)
            raise
        injector.committed(ok=True)
        return result

    return commit


def _faulty_invocations(injector: Injector, original: Callable[..., Any]) -> Callable[..., Any]:
    """``FunctionHost._run`` with each invocation decided by ``injector`` (:meth:`Injector.invocation`)."""

    def invoke(self: FunctionHost, event: Any) -> str:
        kind, inner = injector.invocation(self.spec.logical_id)
        if kind == INVOKE_ERROR:  # as Lambda's service reports it (Step Functions retries it by name)
            raise FunctionError({"errorType": SERVICE_EXCEPTION, "errorMessage": "injected: not run"})
        try:
            with scope(inner):
                result = str(original(self, event))
        except SimulatedCrash as exc:  # raised on the invoking thread: the runtime process is gone
            raise FunctionError(
                {"errorType": "Runtime.ExitError", "errorMessage": f"injected: {exc}"}
            ) from None
        except FunctionError as exc:
            if exc.payload.get("errorType") == TIMED_OUT:
                injector.timed_out(inner)
            raise
        if kind == LOST_INVOKE_RESPONSE:
            raise FunctionError({"errorType": SERVICE_EXCEPTION, "errorMessage": "injected: ran, lost"})
        return result

    return invoke


def install(injector: Injector) -> Callable[[], None]:
    """Route every AWS call, invocation, mapping poll and thread start of this process through
    ``injector``; returns the undo."""
    original_get = Endpoint._do_get_response  # type: ignore[attr-defined]
    original_start = threading.Thread.start
    original_run = threading.Thread.run
    original_invoke = FunctionHost._run
    original_poll = SqsPoller._poll_once
    from sluice.jobs.store import JobStore  # noqa: PLC0415 - psycopg only where the job store is

    original_db = JobStore._run
    original_commits = {name: getattr(JobStore, name) for name in DB_COMMITS}
    original_call = BaseClient._make_api_call  # type: ignore[attr-defined]

    def do_get_response(self: Endpoint, request: Any, operation_model: Any, context: Any) -> Any:
        service = operation_model.service_model.service_id.hyphenize()
        body = request.body if isinstance(request.body, bytes) else None
        send = functools.partial(original_get, self, request, operation_model, context)
        kind = _decide(injector, service, operation_model.name, body, context)
        return _faulty_response(injector, kind, request, operation_model, send)

    def make_api_call(self: BaseClient, api: str, params: dict[str, Any]) -> Any:
        if not injector.commits_guard(api, params):
            return original_call(self, api, params)
        try:
            result = original_call(self, api, params)
        except Exception:  # a crash (BaseException) marks the window where it happens
            injector.committed(ok=False)
            raise
        injector.committed(ok=True)
        return result

    invoke = _faulty_invocations(injector, original_invoke)
    db_run = _faulty_statements(injector, original_db)

    def poll_once(self: SqsPoller) -> None:
        with scope(Scope(f"esm:{self.spec.function.spec.logical_id}")):
            original_poll(self)

    def start(self: threading.Thread) -> None:
        self._sluice_scope = current()  # type: ignore[attr-defined]
        original_start(self)

    def run(self: threading.Thread) -> None:
        with scope(getattr(self, "_sluice_scope", None)):
            original_run(self)

    patches: list[tuple[Any, str, Any, Any]] = [
        (Endpoint, "_do_get_response", do_get_response, original_get),
        (BaseClient, "_make_api_call", make_api_call, original_call),
        (threading.Thread, "start", start, original_start),
        (threading.Thread, "run", run, original_run),
        (FunctionHost, "_run", invoke, original_invoke),
        (SqsPoller, "_poll_once", poll_once, original_poll),
        (JobStore, "_run", db_run, original_db),
        *(
            (JobStore, name, _judged_commits(injector, method), method)
            for name, method in original_commits.items()
        ),
    ]
    for owner, name, new, _ in patches:
        setattr(owner, name, new)

    def undo() -> None:
        for owner, name, _, old in reversed(patches):
            setattr(owner, name, old)

    return undo
