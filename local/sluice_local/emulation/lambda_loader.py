"""Load a function's handler the way the Lambda Python runtime does.

The runtime puts the function's code directory (CodeUri) first on the import path, imports the
handler module once per execution environment (the cold start) and calls the handler with the event
and a context object. ``load_handler`` does the same in-process, so tests and the local runtime run
the exact files that ``sam build`` packages.
"""

from __future__ import annotations

import importlib.util
import itertools
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_counter = itertools.count()

Handler = Callable[[Any, Any], Any]


@dataclass
class LambdaContext:
    """A Lambda-like context: name, ARN, request id and a deadline from the function's Timeout."""

    function_name: str = "sluice-local"
    timeout_seconds: float = 30.0
    memory_limit_in_mb: int = 256
    region: str = "us-east-1"
    account_id: str = "123456789012"
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    function_version: str = "$LATEST"
    log_group_name: str = ""
    log_stream_name: str = ""
    _started: float = field(default_factory=time.monotonic)

    @property
    def invoked_function_arn(self) -> str:
        return f"arn:aws:lambda:{self.region}:{self.account_id}:function:{self.function_name}"

    @property
    def deadline(self) -> float:
        """When the invocation times out, by ``time.monotonic``."""
        return self._started + self.timeout_seconds

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self.timeout_seconds - (time.monotonic() - self._started)) * 1000))


def load_handler(code_dir: str | Path, handler: str = "app.lambda_handler") -> Handler:
    """Import ``handler`` ("module.function") from ``code_dir`` as a fresh cold start."""
    code = Path(code_dir).resolve()
    module_name, _, function_name = handler.rpartition(".")
    source = code / (module_name.replace(".", "/") + ".py")
    if not source.is_file():
        raise FileNotFoundError(f"handler module {source} not found")
    # What the folder provides is imported afresh: its modules and packages (another function's of the
    # same name must not be reused, nor this folder's from an environment started on older files).
    provided = {p.stem for p in code.glob("*.py")} | {
        d.name
        for d in code.iterdir()
        if d.is_dir() and any(d.glob("*.py"))  # namespace packages too
    }
    for name in [m for m in list(sys.modules) if m.partition(".")[0] in provided]:  # a copy: others import
        sys.modules.pop(name, None)
    unique = f"_sluice_fn_{code.name}_{next(_counter)}"
    spec = importlib.util.spec_from_file_location(unique, source)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {source}")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(code))
    try:
        sys.modules[unique] = module
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(code))
    fn = getattr(module, function_name, None)
    if not callable(fn):
        raise TypeError(f"{handler} is not a callable in {source}")
    return fn  # type: ignore[no-any-return]
