"""Lambda's recursive loop detection: what AWS counts, how far each of sluice's paths can go, and the
local runtime's model of the stop.

What AWS documents ("Use Lambda recursive loop detection to prevent infinite loops", AWS Lambda
Developer Guide; "Amazon SQS and AWS X-Ray", AWS X-Ray Developer Guide):

- Lambda counts, in the X-Ray trace header's metadata, how many times *one function* has been invoked
  by the same triggering event (a *chain of requests*). The supported AWS SDKs (boto3 1.24.46 and
  later) update that metadata when the function writes to SQS, S3, SNS or Lambda: botocore sets the
  invocation's ``_X_AMZN_TRACE_ID`` as the request's ``X-Amzn-Trace-Id`` header, which SQS keeps as
  the message's ``AWSTraceHeader``. In the header it is the ``Lineage`` field
  (``Lineage=<function hash>:<count>|...``, as SQS delivers it).
- "If your function is invoked approximately 16 times in the same chain of requests, then Lambda
  automatically stops the next function invocation in that request chain"; the metric
  ``RecursiveInvocationsDropped`` counts the stopped invocations. An SQS event source mapping gets a
  ``RecursiveInvocationException``; the message's ``receiveCount`` goes up, Lambda keeps blocking it
  on every retry, and SQS moves it to the queue's dead-letter queue after ``maxReceiveCount``.
- ``RecursiveLoop: Allow`` (``AWS::Lambda::Function``, ``AWS::Serverless::Function``,
  ``PutFunctionRecursionConfig``) turns the stop off for that function; ``Terminate`` is the default.
- Only loops through SQS, S3, SNS and Lambda are detected: "When another AWS service such as Amazon
  DynamoDB forms part of the loop, Lambda can't currently detect and stop it."
- When a SendMessage carries both, "the message system attribute overrides the HTTP trace header".

So a retry (the same message received again) is not a hop: nothing is written, and the message keeps
the header it was sent with. A function that is not invoked by the message (a schedule, an alarm's
EventBridge rule, an operator's command) starts a chain of its own: what it sends carries either the
``AWSTraceHeader`` sluice sets explicitly (the message's first hop's, frozen: it overrides the SDK's)
or its own invocation's fresh lineage.

:data:`PATHS` is the hop count of every path of sluice at the template's maximum parameter values
(tests/unit/test_recursion_bound.py holds each under :data:`LIMIT`; docs/observability.md has the table).
The rest of the module is the local runtime's model: the pollers count each record's lineage and
stop the invocation AWS would stop (:func:`admit`), and an SQS send made by an invocation carries the
invocation's header unless it sets ``AWSTraceHeader`` itself (:func:`install`).
"""

from __future__ import annotations

import contextvars
import hashlib
import logging
import re
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sluice_local.emulation.threads import install_thread_inheritance

__all__ = [
    "LIMIT",
    "PATHS",
    "Path",
    "Verdict",
    "admit",
    "current_header",
    "dropped",
    "install",
    "invocation",
    "lineage_of",
    "path_counts",
    "with_lineage",
]

log = logging.getLogger("sluice_local")

LIMIT = 16
"""Invocations of one function on one chain that AWS lets run: the next one is stopped (AWS writes
"approximately 16"; the runtime stops the 17th)."""
ALLOW = "Allow"
TERMINATE = "Terminate"

# --- the Lineage field -----------------------------------------------------------------------------

_LINEAGE = re.compile(r"(?:^|;)Lineage=([^;]*)")
_ENTRY = re.compile(r"^(?:\d+:)?([0-9a-f]{8}):(\d+)$")  # [version:]hash:count, as SQS delivers them


def function_hash(arn: str) -> str:
    """The 8 hex digits a function is known by in a lineage."""
    return hashlib.sha256(arn.encode()).hexdigest()[:8]


def lineage_of(header: str | None) -> dict[str, int]:
    """A trace header's lineage: function hash → invocations on this chain ({} without one). An
    entry it cannot read is ignored, as an unknown field of the header is."""
    match = _LINEAGE.search(header or "")
    out: dict[str, int] = {}
    for entry in match.group(1).split("|") if match else []:
        parsed = _ENTRY.match(entry)
        if parsed:
            out[parsed.group(1)] = max(out.get(parsed.group(1), 0), int(parsed.group(2)))
    return out


def with_lineage(header: str | None, lineage: Mapping[str, int]) -> str:
    """``header`` (a new trace's without one) with its ``Lineage`` field replaced by ``lineage``."""
    if not header:
        header = f"Root=1-{int(time.time()):08x}-{secrets.token_hex(12)};Sampled=1"
    fields = [f for f in header.split(";") if f and not f.startswith("Lineage=")]
    if lineage:
        fields.append("Lineage=" + "|".join(f"{h}:{n}" for h, n in sorted(lineage.items())))
    return ";".join(fields)


@dataclass(frozen=True)
class Verdict:
    """What Lambda does with one record's invocation of a function."""

    count: int
    """This invocation's number on the record's chain (1 for the first)."""
    header: str
    """The invocation's trace header (its ``_X_AMZN_TRACE_ID``): the record's, its count raised."""
    stopped: bool
    """Lambda stops it: beyond :data:`LIMIT`, and the function's ``RecursiveLoop`` is not ``Allow``."""


def admit(header: str | None, function_arn: str, recursive_loop: str = TERMINATE) -> Verdict:
    """Lambda's decision for a record arriving with ``header`` at the function ``function_arn``."""
    lineage = lineage_of(header)
    key = function_hash(function_arn)
    count = lineage.get(key, 0) + 1
    return Verdict(
        count=count,
        header=with_lineage(header, {**lineage, key: count}),
        stopped=count > LIMIT and recursive_loop != ALLOW,
    )


# --- the invocation's header on the threads it runs ---------------------------------------------------

_header: contextvars.ContextVar[str | None] = contextvars.ContextVar("sluice_local_trace", default=None)
_dropped: dict[str, int] = {}
_dropped_lock = threading.Lock()


def current_header() -> str | None:
    """The trace header of the invocation this thread runs for (None outside one)."""
    return _header.get()


class invocation:  # noqa: N801 - a context manager, used as ``with invocation(header):``
    """This thread runs for an invocation whose ``_X_AMZN_TRACE_ID`` is ``header`` (None: not one the
    runtime models a chain for)."""

    def __init__(self, header: str | None) -> None:
        self._header = header
        self._reset: contextvars.Token[str | None] | None = None

    def __enter__(self) -> None:
        self._reset = _header.set(self._header)

    def __exit__(self, *exc: object) -> None:
        if self._reset is not None:
            _header.reset(self._reset)


def dropped(function_name: str, count: int) -> None:
    """Record one stopped invocation (the ``RecursiveInvocationsDropped`` metric's datapoint) and log it."""
    with _dropped_lock:
        _dropped[function_name] = _dropped.get(function_name, 0) + 1
    log.warning(
        "RecursiveInvocationsDropped: %s not invoked, its record's chain reached invocation %d (limit %d): "
        "Lambda's recursive loop detection (RecursiveLoop: Terminate)",
        function_name,
        count,
        LIMIT,
    )


def drops() -> dict[str, int]:
    """Stopped invocations so far, per function name (the runtime's ``RecursiveInvocationsDropped``)."""
    with _dropped_lock:
        return dict(_dropped)


_SEND = {"SendMessage", "SendMessageBatch"}
_installed = threading.Lock()
_done: list[bool] = []


def install() -> None:
    """Model the SDK's part, once per process: an SQS send made on a thread of a modelled invocation
    (or a thread it started) carries the invocation's header as its ``AWSTraceHeader``, unless it sets
    one itself (SQS keeps the system attribute over the HTTP header). Inert outside invocations."""
    from botocore.client import BaseClient  # noqa: PLC0415 - the runtime's dependency, not the layer's

    with _installed:
        if _done:
            return
        _done.append(True)
        install_thread_inheritance()  # a thread the handler starts runs for its invocation
        original_call = BaseClient._make_api_call  # type: ignore[attr-defined]

        def make_api_call(self: Any, operation_name: str, api_params: dict[str, Any]) -> Any:
            header = current_header()
            if header and operation_name in _SEND and self.meta.service_model.service_name == "sqs":
                api_params = _carrying(operation_name, api_params, header)
            return original_call(self, operation_name, api_params)

        BaseClient._make_api_call = make_api_call  # type: ignore[attr-defined]


def _carrying(operation: str, params: dict[str, Any], header: str) -> dict[str, Any]:
    def one(message: Mapping[str, Any]) -> dict[str, Any]:
        system = dict(message.get("MessageSystemAttributes") or {})
        if "AWSTraceHeader" in system:
            return dict(message)
        system["AWSTraceHeader"] = {"DataType": "String", "StringValue": header}
        return {**message, "MessageSystemAttributes": system}

    if operation == "SendMessage":
        return one(params)
    return {**params, "Entries": [one(e) for e in params.get("Entries") or []]}


# --- sluice's paths at the maximum parameter values ---------------------------------------------------


@dataclass(frozen=True)
class Path:
    """One way a message travels, as Lambda's detection sees it."""

    name: str
    sender: str
    """What sends the message at the start of a round (a Lambda function at worst: its lineage counts)."""
    chain: tuple[str, ...]
    """The functions one round invokes by the message, in order, on one lineage."""
    rounds: Callable[[Mapping[str, int]], int]
    """How many times a message can go round, from the template's maximum parameter values."""
    bound_by: str
    """The parameters (or the party) that bound the rounds."""
    restarts: str
    """Why a new round does not continue the last one's lineage ('' when there is one round)."""
    sender_is_function: bool = True

    def hops(self) -> int:
        """Lambda → SQS (or S3 and Step Functions, counted as if they carried it) → Lambda hops of one
        round on one lineage: one per function the message invokes after a function sent it."""
        return len(self.chain) - (0 if self.sender_is_function else 1)


FROZEN = (
    "each round is started by a function the message did not invoke (EventBridge alarm rule or "
    "schedule), whose send carries the message's first-hop AWSTraceHeader (it overrides the SDK's "
    "header) or else that function's own new lineage"
)
DELAY_CHAIN = ("batch-delay", "rehydrator", "consumer")

PATHS: tuple[Path, ...] = (
    Path(
        "consumer retries",
        "producer",
        ("consumer",),
        lambda p: p["MaxReceiveCount"],
        "MaxReceiveCount (receives of one message)",
        "a retry is the same message received again: nothing is sent, its header is unchanged",
    ),
    Path(
        "DLQ -> redriver -> work queue",
        "redriver",
        ("consumer",),
        lambda p: p["RedriveMaxAttempts"],
        "RedriveMaxAttempts (then the poison queue)",
        FROZEN,
    ),
    Path(
        "redrive backoff beyond DirectSendThresholdSeconds (through the delay pipeline)",
        "redriver",
        DELAY_CHAIN,
        lambda p: p["RedriveMaxAttempts"],
        "RedriveMaxAttempts; each wait at most RedriveCapSeconds",
        FROZEN,
    ),
    Path(
        "the delay pipeline (delay queue -> batch-delay -> S3 -> state machine -> rehydrator -> target)",
        "producer",
        DELAY_CHAIN,
        lambda p: 1,
        "one delivery per request (the delay queue's retries are receives, not hops)",
        "",
    ),
    Path(
        "operator replays (poison replay, delay-dlq redrive)",
        "operator",
        ("consumer",),
        lambda p: 1,
        "the operator (each replay is one command)",
        "",
        sender_is_function=False,
    ),
    Path(
        "job sweeper and reaper",
        "job sweeper / reaper",
        ("job-consumer",),
        lambda p: p["JobMaxAttempts"],
        "JobMaxAttempts (then the job is dead)",
        "the sweeper and the reaper run on a schedule: each enqueue carries the job's first AWSTraceHeader "
        "or the scheduled run's own new lineage",
    ),
)
"""Every path of sluice on which a message goes from a Lambda function through SQS to a function.
A processor's own follow-ups (``record.later``) are bounded by the processor, not by a parameter:
docs/observability.md says what AWS does with them."""


def path_counts(path: Path, maxima: Mapping[str, int]) -> tuple[int, int]:
    """(invocations of one function on one lineage, as AWS counts them; the same if every round went
    on with the last one's lineage, which the restarts prevent)."""
    rounds = path.rounds(maxima)
    per_round = max((path.chain.count(f) for f in set(path.chain)), default=0)
    return (per_round if path.restarts else per_round * rounds), per_round * rounds
