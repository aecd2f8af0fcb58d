"""Who makes a call: the principal each thread of the local runtime acts as.

In AWS a function's code calls with its execution role's credentials, an event source mapping polls
with the function's role, a state machine's tasks run as the state machine's role, and services
(CloudWatch publishing an alarm, EventBridge invoking a target) act as service principals. Here they
all share one process: the principal is a context variable, set where each kind of work starts, and
inherited by every thread started inside it (a handler's worker threads, a state machine execution's
worker: :mod:`sluice_local.emulation.threads`). A call made in-process carries it to the embedded
endpoint in a header (:data:`PRINCIPAL_HEADER`); a client outside the process (the operator CLI, a
team's script) is known by its access key instead, as in AWS (see :mod:`.enforce`).
"""

from __future__ import annotations

import contextvars
import secrets
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

__all__ = [
    "EMULATION",
    "PRINCIPAL_HEADER",
    "STAGING_ACCESS_KEY",
    "Acting",
    "acting_as",
    "acting_for_token",
    "current",
    "token_for",
]

PRINCIPAL_HEADER = "x-sluice-local-principal"
"""The header an in-process call carries its principal in (a token: :func:`acting_for_token`)."""


@dataclass(frozen=True)
class Acting:
    """A principal at work: its ARN as AWS names the caller, aws:PrincipalArn, its account, and the
    request context keys that come with it (aws:SourceArn and aws:SourceAccount for a service acting
    for a resource)."""

    arn: str
    principal_arn: str
    account: str | None
    service: bool = False
    context: tuple[tuple[str, str], ...] = ()
    """(key, value) pairs: hashable, so one token names one principal."""
    role_arn: str | None = None
    """The IAM role whose identity policies apply (a role session), None for a user, root or service."""
    exempt: bool = False
    """The runtime's own emulation (reading what CloudWatch or a poller reads without an API call in
    AWS): not authorized, not recorded."""

    @classmethod
    def role_session(cls, role_arn: str, session: str) -> Acting:
        account = role_arn.split(":")[4]
        name = role_arn.rsplit("/", 1)[-1]
        return cls(
            arn=f"arn:aws:sts::{account}:assumed-role/{name}/{session}"[:2048],
            principal_arn=role_arn,
            account=account,
            role_arn=role_arn,
        )

    @classmethod
    def service_principal(cls, service: str, *, source_arn: str | None, account: str) -> Acting:
        context = [("aws:SourceAccount", account), ("aws:SourceOwner", account)]  # SNS's older name for it
        if source_arn:
            context.append(("aws:SourceArn", source_arn))
        return cls(arn=service, principal_arn=service, account=None, service=True, context=tuple(context))


STAGING_ACCESS_KEY = "sluice-local-staging"
"""The access key of a test harness putting state where only AWS itself puts it (a message in a
dead-letter queue, as SQS's redrive moves it there): it acts as :data:`EMULATION`. Never a
producer's or an operator's: their calls are authorized as theirs."""

EMULATION = Acting(arn="sluice-local", principal_arn="sluice-local", account=None, exempt=True)
"""The runtime's own bookkeeping calls: in AWS they are not API calls at all."""

_current: contextvars.ContextVar[Acting | None] = contextvars.ContextVar("sluice_local_acting", default=None)
_tokens: dict[str, Acting] = {}
_token_of: dict[Acting, str] = {}
_lock = threading.Lock()


def current() -> Acting | None:
    return _current.get()


@contextmanager
def acting_as(principal: Acting | None) -> Iterator[None]:
    """Calls made in this block (and in threads started in it) are made as ``principal``."""
    reset = _current.set(principal)
    try:
        yield
    finally:
        _current.reset(reset)


def token_for(principal: Acting) -> str:
    """The header value naming ``principal`` (one per principal, kept for the process's life)."""
    with _lock:
        token = _token_of.get(principal)
        if token is None:
            token = secrets.token_urlsafe(18)  # unguessable: a client outside the process cannot claim one
            _token_of[principal] = token
            _tokens[token] = principal
        return token


def acting_for_token(token: str) -> Acting | None:
    return _tokens.get(token)
