"""The job store's values: a ``jobs`` row and the answers of its transitions, and what jsonb and
PostgreSQL text accept (:func:`storable`, :func:`error_text`)."""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

__all__ = [
    "MAX_ERROR_CHARS",
    "Claim",
    "Created",
    "Failed",
    "Job",
    "Reaped",
    "Requeue",
    "Status",
    "error_text",
    "serialized",
    "storable",
]

Status = Literal["pending", "processing", "completed", "error", "dead"]

MAX_ERROR_CHARS = 2000
"""An error message is cut to this many characters in the row's history."""

_NUL_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")
"""JSON's escape of NUL (not an escaped backslash followed by ``u0000``)."""


def serialized(value: Any) -> tuple[str, str | None]:
    """``(JSON text, None)`` when jsonb accepts ``value``, else the text of :func:`storable`'s note and
    why: the batch commit's result, serialized once (the check is the serialization)."""
    try:
        text = json.dumps(value, allow_nan=False, ensure_ascii=False)
        text.encode("utf-8")
    except (TypeError, ValueError) as exc:  # UnicodeEncodeError is a ValueError
        why = f"{exc.__class__.__name__}: {str(exc)[:200]}"
    else:
        if _NUL_ESCAPE.search(text) is None:
            return text, None
        why = "contains \\u0000, which jsonb refuses"
    return json.dumps({"unstorable_result": why, "type": type(value).__name__}), why


def storable(value: Any) -> tuple[Any, str | None]:
    """``(value, None)`` when PostgreSQL's jsonb accepts ``value``, else ``(replacement, why not)``.

    jsonb refuses what Python's json writes happily: NaN and Infinity, ``\\u0000``, lone surrogates; and
    some values are not JSON at all. A handler's result that cannot be stored must not fail the commit
    (its side effect already ran: a failed commit would have the reaper run it again), so it is replaced
    by a note saying why.
    """
    text, why = serialized(value)
    return (value, None) if why is None else (json.loads(text), why)


def error_text(value: str) -> str:
    """Text PostgreSQL accepts: NUL escaped, lone surrogates escaped, at most MAX_ERROR_CHARS."""
    cut = value[:MAX_ERROR_CHARS].replace("\x00", "\\x00")
    return cut.encode("utf-8", "backslashreplace").decode("utf-8")


@dataclass(frozen=True)
class Job:
    """One row of the ``jobs`` table."""

    id: uuid.UUID
    kind: str
    payload: Any
    status: Status
    attempt: int
    max_attempts: int
    errors: list[dict[str, Any]]
    result: Any
    claim_token: uuid.UUID | None
    claimed_by: str | None
    claimed_at: datetime | None
    next_attempt_at: datetime | None
    unique_key: str | None
    created_at: datetime
    updated_at: datetime
    completed_at: datetime | None


@dataclass(frozen=True)
class Claim:
    """A worker's exclusive hold on a job: ``token`` fences its commit or fail."""

    job: Job
    token: uuid.UUID

    @property
    def job_id(self) -> uuid.UUID:
        return self.job.id


@dataclass(frozen=True)
class Created:
    id: uuid.UUID
    created: bool
    """False when a job with the same unique key (or id) already existed."""


@dataclass(frozen=True)
class Failed:
    status: Literal["error", "dead"]
    attempt: int
    next_attempt_at: datetime | None


@dataclass(frozen=True)
class Requeue:
    """A pending job to be enqueued again, with the X-Ray trace header its message carries."""

    id: uuid.UUID
    trace: str | None = None


@dataclass(frozen=True)
class Reaped:
    pending: list[uuid.UUID] = field(default_factory=list)
    """Taken back from an expired claim: to be enqueued again."""
    traces: dict[uuid.UUID, str] = field(default_factory=dict)
    """The trace header of each job in ``pending`` that has one."""
    dead: list[uuid.UUID] = field(default_factory=list)
    """Expired on their last attempt: no more runs."""
