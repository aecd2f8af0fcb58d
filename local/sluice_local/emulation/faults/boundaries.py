"""Where faults are injected: the AWS boundary (beneath botocore's retries), the Lambda boundary (an
invocation of the runtime's functions), the mappings' polls, and the threads an invocation starts."""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

from botocore.awsrequest import AWSResponse, HTTPHeaders
from botocore.client import BaseClient
from botocore.endpoint import Endpoint
from botocore.exceptions import EndpointConnectionError, ReadTimeoutError

from sluice_local.emulation import functions
from sluice_local.emulation.faults.injector import Injector
from sluice_local.emulation.faults.plan import (
    CONNECTION_ERROR,
    HTTP_REDIRECT,
    INVOKE_ERROR,
    LOST_EVERY_ATTEMPT,
    LOST_INVOKE_RESPONSE,
    LOST_RESPONSE,
    NO_SUCH_KEY,
    PARTIAL_BATCH,
    RECEIVE,
    SABOTAGED,
    SERVER_ERROR,
    SERVICE_EXCEPTION,
    THROTTLE,
    TIMED_OUT,
    Scope,
    SimulatedCrash,
    current,
    scope,
)  # fmt: skip
from sluice_local.emulation.functions import FunctionError, FunctionHost
from sluice_local.emulation.lambda_loader import LambdaContext
from sluice_local.emulation.pollers import SqsPoller

Undo = Callable[[], None]
Boundary = Callable[[Injector], Undo]
"""Installs the injector at a boundary of the app's own (a database client, ...); returns the undo."""


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
        finally:
            inner.over.set()  # a call held past the deadline (Injector.hold) dies or goes on now
        if kind == LOST_INVOKE_RESPONSE:
            raise FunctionError({"errorType": SERVICE_EXCEPTION, "errorMessage": "injected: ran, lost"})
        return result

    return invoke


def _accounted_calls(injector: Injector, original_call: Callable[..., Any]) -> Callable[..., Any]:
    """``BaseClient._make_api_call`` telling ``injector`` how a guard's commit ended."""

    def make_api_call(self: BaseClient, api: str, params: dict[str, Any]) -> Any:
        guard = injector.commits_guard(api, params)
        try:
            result = original_call(self, api, params)
        except Exception:  # a crash (BaseException) marks the window where it happens
            if guard:
                injector.committed(ok=False)
            raise
        if guard:
            injector.committed(ok=True)
        return result

    return make_api_call


def install(injector: Injector, *boundaries: Boundary) -> Undo:
    """Route every AWS call, invocation, mapping poll and thread start of this process through
    ``injector``, and install it at the app's own ``boundaries`` too; returns the undo of it all."""
    original_get = Endpoint._do_get_response  # type: ignore[attr-defined]
    original_start = threading.Thread.start
    original_run = threading.Thread.run
    original_invoke = FunctionHost._run
    original_poll = SqsPoller._poll_once
    original_context = LambdaContext  # as functions.py names it
    original_call = BaseClient._make_api_call  # type: ignore[attr-defined]

    def do_get_response(self: Endpoint, request: Any, operation_model: Any, context: Any) -> Any:
        service = operation_model.service_model.service_id.hyphenize()
        body = request.body if isinstance(request.body, bytes) else None
        send = functools.partial(original_get, self, request, operation_model, context)
        kind = _decide(injector, service, operation_model.name, body, context)
        return _faulty_response(injector, kind, request, operation_model, send)

    make_api_call = _accounted_calls(injector, original_call)
    invoke = _faulty_invocations(injector, original_invoke)

    def poll_once(self: SqsPoller) -> None:
        with scope(Scope(f"esm:{self.spec.function.spec.logical_id}")):
            original_poll(self)

    def context(*args: Any, **kwargs: Any) -> LambdaContext:
        made = original_context(*args, **kwargs)
        here = current()  # made on the invoking thread, inside the invocation's scope
        if here is not None:
            here.deadline = made.deadline
        return made

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
        (functions, "LambdaContext", context, original_context),
    ]
    for owner, name, new, _ in patches:
        setattr(owner, name, new)
    undos = [boundary(injector) for boundary in boundaries]

    def undo() -> None:
        for one in reversed(undos):
            one()
        for owner, name, _, old in reversed(patches):
            setattr(owner, name, old)

    return undo
