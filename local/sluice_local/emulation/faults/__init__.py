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
- **At a database boundary** an app plugs in (:data:`Boundary`; the soak's is the job store's,
  :mod:`sluice_local.soak.db_faults`), each statement decided by :meth:`Injector.db`: the connection
  dropped before a statement, or dropped after the statement took effect ("committed but the response
  was lost"); a crashing invocation can also die before any of its statements.

The kinds, the plan and the scope are in :mod:`.plan`, the decisions in :mod:`.injector`, the
injection points in :mod:`.boundaries`. Every injected fault is counted by kind
(:attr:`Injector.counts`) and logged with the seed.
"""

from sluice_local.emulation.faults.boundaries import Boundary, Undo, install
from sluice_local.emulation.faults.injector import Injector, log
from sluice_local.emulation.faults.plan import (
    ALL_KINDS,
    AWS_KINDS,
    CONNECTION_ERROR,
    CRASH,
    DB_DROPPED,
    DB_KINDS,
    DB_LOST_RESPONSE,
    INVOKE_ERROR,
    LAMBDA_KINDS,
    LOST_EVERY_ATTEMPT,
    LOST_INVOKE_RESPONSE,
    LOST_RESPONSE,
    NO_SUCH_KEY,
    PARTIAL_BATCH,
    SABOTAGED,
    SERVER_ERROR,
    THROTTLE,
    FaultPlan,
    Scope,
    SimulatedCrash,
    current,
    scope,
)  # fmt: skip

__all__ = [
    "ALL_KINDS", "AWS_KINDS", "CONNECTION_ERROR", "CRASH", "DB_DROPPED", "DB_KINDS", "DB_LOST_RESPONSE",
    "INVOKE_ERROR", "LAMBDA_KINDS", "LOST_EVERY_ATTEMPT", "LOST_INVOKE_RESPONSE", "LOST_RESPONSE",
    "NO_SUCH_KEY", "PARTIAL_BATCH", "SABOTAGED", "SERVER_ERROR", "THROTTLE", "Boundary", "FaultPlan",
    "Injector", "Scope", "SimulatedCrash", "Undo", "current", "install", "log", "scope",
]  # fmt: skip
