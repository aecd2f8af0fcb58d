"""What a fault is: its kinds, the plan one seed decides them by, and the scope a call is made in."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

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
"""The database connection dies before a statement reaches the database."""
DB_LOST_RESPONSE = "db-lost-response"
"""The statement took effect (autocommit), then the connection died before its result arrived."""

AWS_KINDS = (THROTTLE, SERVER_ERROR, CONNECTION_ERROR, LOST_RESPONSE, LOST_EVERY_ATTEMPT)
LAMBDA_KINDS = (INVOKE_ERROR, LOST_INVOKE_RESPONSE, CRASH)
DB_KINDS = (DB_DROPPED, DB_LOST_RESPONSE)
ALL_KINDS = (*AWS_KINDS, PARTIAL_BATCH, NO_SUCH_KEY, *LAMBDA_KINDS, *DB_KINDS)
BATCH_APIS = frozenset({"SendMessageBatch", "DeleteMessageBatch"})
READ_APIS = frozenset({"GetObject", "HeadObject"})
GUARD_COMMITS = frozenset({"UpdateItem", "DeleteItem"})  # Powertools: COMPLETED, or removed when fn raised
GUARD_COMPLETES = "UpdateItem"
HTTP_REDIRECT = 300
CRASH_WITHIN_CALLS = 8
"""A crashing invocation dies before one of its handler's first 8 AWS calls (a consumer batch makes
dozens; the redriver's send and delete, the rehydrator's reads, sends and rewrites come early)."""
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
    crash_points: tuple[tuple[str, str], ...] = ()
    """(function, API): where half of that function's crashes land, before that call, instead of after a
    random number of calls: points a random count rarely reaches."""
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
    uncommitted: dict[int, list[str]] = field(default_factory=dict)
    """Per thread of the invocation: the side effects (ledger ``effect_key``) it performed whose guard
    or commit it has not committed yet (``once``: guard in progress → effect → commit; a job batch: its
    handlers' effects, then one commit for them all)."""
    failed_commit: dict[int, list[str]] = field(default_factory=dict)
    """Per thread: the effects whose commit last failed for good, until the thread performs another; a
    retry of that same commit (the job worker's) that lands closes the window it opened."""
    landed: set[int] = field(default_factory=set)
    """Threads whose guard commit (the UpdateItem to COMPLETED) took effect on some attempt although its
    caller saw an error: the guard is completed, so a retry must not perform the effect again and no
    window opens (a repeat would be a duplicate)."""
    deadline: float | None = None
    """The invocation's deadline (``time.monotonic``), its context's: no thread of it makes a call after
    it (:meth:`~sluice_local.emulation.faults.Injector.hold`)."""
    over: threading.Event = field(default_factory=threading.Event)
    """Set once the runtime has settled the invocation (returned, failed, timed out)."""


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
