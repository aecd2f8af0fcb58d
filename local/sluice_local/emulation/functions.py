"""Run the stack's Lambda functions in-process, like the Lambda runtime would.

Each function gets execution environments: an environment is one cold-started copy of the handler
module, loaded with the function's CodeUri first on the import path, the layer's package importable,
and the function's resolved environment variables in ``os.environ`` while the module initializes
(the cold start, where sluice reads its settings). An environment serves one invocation at a time;
concurrent invocations get more environments, as in Lambda. An environment left idle for
:data:`IDLE_LIFETIME_SECONDS` is reclaimed (its module's connections closed, :data:`OnDrop`), as Lambda
reclaims idle environments, and a stopped stack's environments end with it.

An invocation runs the handler on its own daemon thread and waits at most the function's Timeout,
then sends the result through JSON, as the Lambda runtime does: an overrun fails with
``Sandbox.Timedout`` and discards the environment (Python cannot stop the thread, so it runs on in
the background and never blocks shutdown); a result JSON cannot represent fails with
``Runtime.MarshalError``.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from sluice_local.emulation import recursion
from sluice_local.emulation.environment_state import own_metric_state
from sluice_local.emulation.iam.acting import Acting, acting_as
from sluice_local.emulation.lambda_loader import Handler, LambdaContext, load_handler

__all__ = ["IDLE_LIFETIME_SECONDS", "FunctionError", "FunctionHost", "FunctionSpec", "Handler", "OnDrop"]

log = logging.getLogger("sluice_local")
_ENV_LOCK = threading.RLock()  # os.environ is process-wide: one cold start at a time

IDLE_LIFETIME_SECONDS = 60.0
"""How long an execution environment waits for an invocation before it is reclaimed. Lambda reclaims
idle environments at a time it does not document (minutes in practice) and guarantees no reuse; here
a burst's extra environments (a schedule firing every 2 s under ``--fast`` while its first runs are
slow) would otherwise each keep a job-store connection open for as long as the stack runs."""


@dataclass
class FunctionSpec:
    logical_id: str
    name: str
    arn: str
    code_dir: Path
    handler: str
    environment: dict[str, str]
    timeout: float
    memory: int
    layer_dirs: list[Path] = field(default_factory=list)
    role_arn: str | None = None
    """The execution role: every call the function (and its event source mapping) makes acts as it."""
    reserved_concurrency: int | None = None
    """ReservedConcurrentExecutions: invocations beyond it wait for a free slot (Lambda queues
    asynchronous invocations it throttles and retries them)."""
    recursive_loop: str = "Terminate"
    """RecursiveLoop: ``Allow`` lets it run beyond Lambda's recursive loop limit
    (:mod:`sluice_local.emulation.recursion`)."""


class FunctionError(Exception):
    """The handler raised: Lambda reports ``FunctionError: Unhandled`` with this payload."""

    def __init__(self, payload: dict[str, Any]) -> None:
        super().__init__(payload.get("errorMessage", "function error"))
        self.payload = payload


@contextmanager
def _function_environment(spec: FunctionSpec) -> Iterator[None]:
    overlay = {
        **spec.environment,
        "AWS_LAMBDA_FUNCTION_NAME": spec.name,
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(spec.memory),
        "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
    }
    saved = {key: os.environ.get(key) for key in overlay}
    before = set(os.environ)
    added_paths = [str(p) for p in spec.layer_dirs if str(p) not in sys.path]
    try:
        os.environ.update(overlay)
        sys.path[:0] = added_paths
        yield
    finally:
        # what the cold start set itself (a workload's Environment, put there by Consumer.from_env) is
        # its execution environment's, as in Lambda: not left for the next function's cold start
        for key in set(os.environ) - before - saved.keys():
            os.environ.pop(key, None)
        for key, value in saved.items():  # restore only what was overlaid; other threads keep running
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        for p in added_paths:
            if p in sys.path:
                sys.path.remove(p)


def _marshal_default(value: Any) -> Any:
    """The Lambda runtime's encoder writes a Decimal as a JSON number; anything else is an error."""
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


class _Invocation:
    """One run of a handler on its own thread: the result or the exception it ended with."""

    __slots__ = ("error", "header", "result")

    def __init__(self) -> None:
        self.result: Any = None
        self.error: BaseException | None = None
        self.header = recursion.current_header()
        """The invocation's trace header (its ``_X_AMZN_TRACE_ID``): its invoker's, a poller's."""

    def run(self, handler: Handler, event: Any, context: LambdaContext) -> None:
        try:
            with recursion.invocation(self.header):
                self.result = handler(event, context)
        except BaseException as exc:  # noqa: BLE001 - handed to the invoking thread, which reports it
            self.error = exc


OnDrop = Callable[[Handler], None]
"""Called with the handler of an execution environment that is dropped (it crashed or timed out), to free
what its process held: in AWS the process is gone, here its module lives on (and a timed-out handler's
thread keeps running). What a handler holds is the app's business: its runtime plugs these in."""


class FunctionHost:
    def __init__(
        self,
        spec: FunctionSpec,
        *,
        on_drop: Sequence[OnDrop] = (),
        idle_lifetime: float = IDLE_LIFETIME_SECONDS,
    ) -> None:
        self.spec = spec
        self.on_drop = list(on_drop)
        self.idle_lifetime = idle_lifetime
        self._idle: list[tuple[Handler, float]] = []
        """Environments waiting for an invocation, each with the time it began waiting (oldest first)."""
        self._lock = threading.Lock()
        self._generation = 0
        self._born: dict[int, int] = {}
        """id of each environment's handler → the code generation it was started with (:meth:`retire`)."""
        self.cold_starts = 0
        self.invocations = 0
        self.errors = 0
        self.timeouts = 0
        self.timed_out: list[threading.Thread] = []
        """Threads of invocations that ran past their timeout (Python cannot stop them)."""
        reserved = spec.reserved_concurrency
        self._slots = threading.BoundedSemaphore(reserved) if reserved else None

    def _acquire(self) -> Handler:
        self.reclaim()
        with self._lock:
            if self._idle:
                return self._idle.pop()[0]  # the most recently used, as Lambda tends to
            generation = self._generation
        with _ENV_LOCK, _function_environment(self.spec), own_metric_state():
            handler = load_handler(self.spec.code_dir, self.spec.handler)
        with self._lock:
            self.cold_starts += 1
            self._born[id(handler)] = generation
        return handler

    def _release(self, handler: Handler) -> None:
        """The invocation ended well: the environment waits for the next one, unless its code is old."""
        with self._lock:
            current = self._born.get(id(handler)) == self._generation
            if current:
                self._idle.append((handler, time.monotonic()))
        if not current:
            self._drop(handler)

    def reclaim(self) -> int:
        """End the environments idle for longer than :attr:`idle_lifetime`; returns how many ended."""
        cutoff = time.monotonic() - self.idle_lifetime
        with self._lock:
            stale = [handler for handler, since in self._idle if since < cutoff]
            self._idle = [(handler, since) for handler, since in self._idle if since >= cutoff]
        for handler in stale:
            self._drop(handler)
        return len(stale)

    def retire(self) -> int:
        """The function's code changed, or its stack stopped: every environment started before now ends
        (idle ones at once, busy ones when their invocation ends), so the next invocation cold-starts on
        the new code, as after a deploy. Returns how many idle environments ended."""
        with self._lock:
            self._generation += 1
            idle, self._idle = self._idle, []
        for handler, _since in idle:
            self._drop(handler)
        return len(idle)

    def _drop(self, handler: Handler) -> None:
        """This environment is gone: never returned to the idle pool, what it held freed (:data:`OnDrop`)."""
        with self._lock:
            self._born.pop(id(handler), None)
        for release in self.on_drop:
            try:
                release(handler)
            except Exception:  # the invocation's own error is what the caller must see
                log.warning("%s: releasing a dropped environment failed", self.spec.name, exc_info=True)

    def _fail(self, payload: dict[str, Any], *, timed_out: bool = False) -> FunctionError:
        with self._lock:
            self.errors += 1
            if timed_out:
                self.timeouts += 1
        return FunctionError(payload)

    def invoke(self, event: Any) -> Any:
        """Run one invocation; raises :class:`FunctionError` when it fails as a Lambda function would.

        The result is what the caller of the Lambda API would get back: the handler's return value
        after a JSON round trip.
        """
        return json.loads(self._invoke_json(event))

    def _invoke_json(self, event: Any) -> str:
        if self._slots is None:
            return self._run(event)
        with self._slots:
            return self._run(event)

    @property
    def principal(self) -> Acting | None:
        """The function's execution role, as a session named after the function (as Lambda names it)."""
        role = self.spec.role_arn
        return Acting.role_session(role, self.spec.name) if role else None

    def _run(self, event: Any) -> str:
        with acting_as(self.principal):  # the cold start and the handler's threads call as the role
            return self._run_as_role(event)

    def _run_as_role(self, event: Any) -> str:
        try:
            handler = self._acquire()
        except Exception as exc:
            # (an environment whose init raised is not kept; the next invocation runs the init again)
            raise self._fail(
                {
                    "errorMessage": str(exc),
                    "errorType": exc.__class__.__name__,
                    "stackTrace": traceback.format_exception(exc)[-5:],
                }
            ) from exc
        context = LambdaContext(
            function_name=self.spec.name,
            timeout_seconds=self.spec.timeout,
            memory_limit_in_mb=self.spec.memory,
        )
        with self._lock:
            self.invocations += 1
        run = _Invocation()
        worker = threading.Thread(
            target=run.run,
            args=(handler, event, context),
            name=f"lambda-{self.spec.logical_id}-{context.aws_request_id[:8]}",
            daemon=True,  # a runaway handler must never keep the process alive
        )
        worker.start()
        worker.join(self.spec.timeout)
        if worker.is_alive():
            # Lambda stops the environment and starts a fresh one for the next invocation. The thread
            # cannot be stopped, so this environment is dropped (never returned to the idle pool).
            self._drop(handler)
            with self._lock:
                self.timed_out = [*(t for t in self.timed_out if t.is_alive()), worker]
            log.warning(
                "%s timed out after %.2f s; its thread %s keeps running in the background",
                self.spec.name,
                self.spec.timeout,
                worker.name,
            )
            raise self._fail(
                {
                    "errorType": "Sandbox.Timedout",
                    "errorMessage": f"RequestId: {context.aws_request_id} Error: "
                    f"Task timed out after {self.spec.timeout:.2f} seconds",
                },
                timed_out=True,
            )
        error = run.error
        if error is not None and not isinstance(error, Exception):
            # sys.exit() and the like end the runtime process: the environment is gone too.
            code = error.code if isinstance(error, SystemExit) else 1
            self._drop(handler)
            raise self._fail(
                {
                    "errorType": "Runtime.ExitError",
                    "errorMessage": f"RequestId: {context.aws_request_id} Error: "
                    f"Runtime exited with error: exit status {code}",
                }
            ) from error
        self._release(handler)
        if error is not None:
            raise self._fail(
                {
                    "errorMessage": str(error),
                    "errorType": error.__class__.__name__,
                    "stackTrace": traceback.format_exception(error)[-5:],
                }
            ) from error
        try:
            return json.dumps(run.result, default=_marshal_default)
        except (TypeError, ValueError, RecursionError) as exc:
            raise self._fail(
                {
                    "errorMessage": f"Unable to marshal response: {exc}",
                    "errorType": "Runtime.MarshalError",
                    "stackTrace": [],
                }
            ) from exc

    def invoke_payload(self, body: str | bytes | None, response_headers: dict[str, str]) -> bytes:
        """The Lambda Invoke API contract: JSON in, JSON out, errors flagged in a header."""
        event = json.loads(body) if body else {}
        try:
            result = self._invoke_json(event)
        except FunctionError as exc:
            response_headers["x-amz-function-error"] = "Unhandled"
            return json.dumps(exc.payload).encode()
        return result.encode()
