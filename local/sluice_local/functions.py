"""Run the stack's Lambda functions in-process, like the Lambda runtime would.

Each function gets execution environments: an environment is one cold-started copy of the handler
module, loaded with the function's CodeUri first on the import path, the layer's package importable,
and the function's resolved environment variables in ``os.environ`` while the module initializes
(the cold start, where sluice reads its settings). An environment serves one invocation at a time;
concurrent invocations get more environments, as in Lambda.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sluice_local.lambda_loader import Handler, LambdaContext, load_handler

_ENV_LOCK = threading.RLock()  # os.environ is process-wide: one cold start at a time


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
    added_paths = [str(p) for p in spec.layer_dirs if str(p) not in sys.path]
    try:
        os.environ.update(overlay)
        sys.path[:0] = added_paths
        yield
    finally:
        for key, value in saved.items():  # restore only what was overlaid; other threads keep running
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        for p in added_paths:
            if p in sys.path:
                sys.path.remove(p)


class FunctionHost:
    def __init__(self, spec: FunctionSpec) -> None:
        self.spec = spec
        self._idle: list[Handler] = []
        self._lock = threading.Lock()
        self.cold_starts = 0
        self.invocations = 0
        self.errors = 0

    def _acquire(self) -> Handler:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        with _ENV_LOCK, _function_environment(self.spec):
            handler = load_handler(self.spec.code_dir, self.spec.handler)
        with self._lock:
            self.cold_starts += 1
        return handler

    def invoke(self, event: Any) -> Any:
        """Run one invocation; raises :class:`FunctionError` when the handler raises."""
        handler = self._acquire()
        context = LambdaContext(
            function_name=self.spec.name,
            timeout_seconds=self.spec.timeout,
            memory_limit_in_mb=self.spec.memory,
        )
        try:
            with self._lock:
                self.invocations += 1
            return handler(event, context)
        except Exception as exc:
            with self._lock:
                self.errors += 1
            raise FunctionError(
                {
                    "errorMessage": str(exc),
                    "errorType": exc.__class__.__name__,
                    "stackTrace": traceback.format_exception(exc)[-5:],
                }
            ) from exc
        finally:
            with self._lock:
                self._idle.append(handler)

    def invoke_payload(self, body: str | bytes | None, response_headers: dict[str, str]) -> bytes:
        """The Lambda Invoke API contract: JSON in, JSON out, errors flagged in a header."""
        event = json.loads(body) if body else {}
        try:
            result = self.invoke(event)
        except FunctionError as exc:
            response_headers["x-amz-function-error"] = "Unhandled"
            return json.dumps(exc.payload).encode()
        return json.dumps(result).encode()
