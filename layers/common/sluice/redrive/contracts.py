"""What the redrive state machine and its Lambdas hand each other (``statemachines/redrive.asl.json``).

Every payload crossing a Lambda <-> Step Functions boundary is one of these ``TypedDict``s, in both
directions: what the definition passes into a Task (``Parameters``/``ItemSelector``) and what the
function returns (which ``ResultSelector``, ``OutputPath`` and later states read by JSONPath). The
producing code returns them (strict mypy checks the keys), the handlers in ``functions/*`` annotate
with them, and ``tests/unit/test_asl_contracts.py`` checks every JSONPath of the definitions against
them, so a renamed field fails a unit test instead of an execution.

Field names are camelCase: they are the state machine's JSON, not Python.
"""

from __future__ import annotations

from typing import Literal, NotRequired, Required, TypedDict, final

__all__ = [
    "Action",
    "AttributeValue",
    "BreakerAnswer",
    "BreakerCheckRequest",
    "IsolateAnswer",
    "IsolateRequest",
    "OtherRun",
    "PlanItem",
    "PlanRequest",
    "PlanState",
    "ReceivedMessage",
    "Refusal",
    "RefuseRequest",
    "RunReport",
    "TaskError",
]

Action = Literal["redrive", "delay", "poison"]
"""What to do with a dead-lettered message (the state machine plans only redrive and poison)."""


class AttributeValue(TypedDict, total=False):
    """One message attribute in SendMessage shape; Step Functions carries binary values as base64 text."""

    DataType: Required[str]
    StringValue: str
    BinaryValue: str


class ReceivedMessage(TypedDict, total=False):
    """One of ``sqs:receiveMessage``'s ``Messages``, exactly as Step Functions passes it on."""

    MessageId: Required[str]
    ReceiptHandle: Required[str]
    Body: str
    MD5OfBody: str
    MD5OfMessageAttributes: str
    Attributes: dict[str, str]
    MessageAttributes: dict[str, AttributeValue]


class TaskError(TypedDict):
    """A Catch's error output (``ResultPath: "$.error"``)."""

    Error: str
    Cause: str


# --- CheckCircuitBreaker: the circuit_breaker function ------------------------------------------


class BreakerCheckRequest(TypedDict):
    """The check's input: ``{}`` (the breaker item is the whole state)."""


class BreakerAnswer(TypedDict):
    """The check's answer (:meth:`sluice.redrive.BreakerStatus.to_dict`)."""

    isOpen: bool
    state: Literal["closed", "open", "half_open"]
    reason: str
    openedBy: str | None
    since: str | None
    """ISO 8601 time of the last transition."""
    seen: int
    bouncing: int
    probeAt: float | None
    """The half-open probe's time (epoch seconds), else null: passed to every Plan."""


# --- Plan and Refuse: the redrive_plan function -------------------------------------------------


@final  # closed: `"refused" in event` tells the two requests apart (mypy narrows on it)
class PlanItem(TypedDict):
    """The PlanBatch Map's item (its ``ItemSelector``): one received message and the probe's time."""

    message: ReceivedMessage
    probeAt: float | None


class PlanState(TypedDict):
    """The Plan step's answer (:meth:`sluice.redrive.Decision.to_state`), also the Refuse step's."""

    messageId: str
    receiptHandle: str
    action: Action
    attempt: int
    delaySeconds: int
    """The whole backoff."""
    sendDelaySeconds: int
    """min(backoff, 900): SQS's ``DelaySeconds`` of the send."""
    waitSeconds: int
    """What the execution waits before sending (backoff - 900, else 0)."""
    holdSeconds: int
    """How long the message is held invisible in the DLQ meanwhile."""
    queueUrl: str
    body: str
    messageAttributes: dict[str, AttributeValue]
    bouncing: bool
    reason: str
    groupId: NotRequired[str]
    """The message's ``MessageGroupId`` (its fair-queue tenant), when it has one: sent with it again."""
    service: NotRequired[str]
    """The workload's metric service (the Plan step's ``POWERTOOLS_SERVICE_NAME``): the isolator counts
    the pill under it, on the workload's own dashboard and alarms."""


class Refusal(TypedDict):
    """A redrive plan whose send the source queue refused, with the Catch's error."""

    plan: PlanState
    error: TaskError


@final
class RefuseRequest(TypedDict):
    """The Refuse step's input: ``{"refused": {"plan", "error"}}``."""

    refused: Refusal


PlanRequest = PlanItem | RefuseRequest
"""Everything the redrive_plan function is called with."""


# --- Isolate: the poison_isolator function -------------------------------------------------------


class IsolateRequest(TypedDict):
    """What the isolator takes: a redrive plan (:class:`PlanState`) or any message with a body."""

    body: str
    messageAttributes: NotRequired[dict[str, AttributeValue]]
    reason: NotRequired[str]
    messageId: NotRequired[str]
    service: NotRequired[str]


class IsolateAnswer(TypedDict):
    poisonMessageId: str
    attempts: int


# --- the redriver function (RedriveMode=lambda: no state machine reads it, the CLI and logs do) --


class OtherRun(TypedDict):
    """The run holding the lease, as a run that found it held reports it."""

    holder: str
    until: str | None
    """The lease's expiry (ISO 8601, by the holder's clock), renewed while that run lives."""


class RunReport(TypedDict):
    """One redriver run (:meth:`sluice.redrive.RedriveReport.to_dict`)."""

    received: int
    redriven: int
    delayed: int
    isolated: int
    failed: int
    bouncing: int
    batches: int
    stopped: str
    """Why the run ended: drained, breaker_open, deadline, limit, another_run (the lease is held by a
    live run: nothing was done) or lease_lost (another run took the lease over)."""
    breaker: BreakerAnswer | None
    """The last breaker check (None when the run failed before its first)."""
    elapsed_seconds: float
    other_run: OtherRun | None
    """another_run: who holds the lease, until when."""
