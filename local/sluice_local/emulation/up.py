"""``up``: a deployed stack kept running until SIGTERM or SIGINT, announced on the console."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

from sluice_local.emulation.cloud import LocalCloud
from sluice_local.emulation.emulated import Ticker
from sluice_local.emulation.iam import report as iam_report
from sluice_local.emulation.reload import CodeWatcher

__all__ = ["function_output", "serve", "write_atomically"]


@contextmanager
def function_output(log_file: Path) -> Iterator[TextIO]:
    """Functions print JSON logs and EMF metrics to stdout, as in Lambda: into ``log_file`` while the
    block runs. The file is closed when it ends, before the interpreter shuts down: an asynchronous
    invocation still under way on a daemon thread then fails to write in its own thread, instead of
    holding the file's lock while the interpreter finalizes (``Fatal Python error:
    _enter_buffered_busy``, exit -6: a stack stopped in a loaded CI run so). Yields the console.

    Each run starts the file afresh (a ``grep -c`` counts this run's lines only); the previous run's lines
    are kept in ``<file>.1``."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    if log_file.is_file() and log_file.stat().st_size:
        os.replace(log_file, log_file.with_name(log_file.name + ".1"))
    redirected = log_file.open("w", buffering=1, encoding="utf-8")
    console, sys.stdout = sys.stdout, redirected
    try:
        yield console
    finally:
        sys.stdout = console
        redirected.close()


def write_atomically(path: Path, text: str) -> None:
    """``path`` appears with all of ``text`` or not at all: a reader polling for it (a test, a script)
    never reads it half-written (a loaded run once read it empty: JSONDecodeError)."""
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, path)


def serve(
    cloud: LocalCloud,
    *,
    console: TextIO,
    ready_file: Path | None = None,
    hint: Callable[[LocalCloud], str] | None = None,
    reload: bool = True,
    credentials: Callable[[LocalCloud], dict[str, dict[str, str]]] | None = None,
    iam_usage: Path | None = None,
) -> None:
    """Start ``cloud``, print its endpoint, outputs and the environment that points the AWS CLI and SDKs
    at it (then what ``hint`` says of it), write them as JSON to ``ready_file``, and run until SIGTERM
    or SIGINT; with ``reload``, a function whose files change runs the new code from its next cold
    start (:mod:`sluice_local.emulation.reload`); ``credentials``: who else acts on the stack (a
    producer, an operator: their ``AWS_*`` session credentials), printed and written beside the rest;
    ``iam_usage``: where the stack's statements and what they granted are written when it stops
    (``python -m sluice_local iam-report`` reads them)."""
    # The handlers only note the signal: an Event.set() in a handler deadlocks when a second signal
    # lands while the first handler holds the Event's lock (`make up` stopped by a process-group
    # SIGTERM gets one from the group and one forwarded by make).
    signals: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, _: signals.append(signum))
    signal.signal(signal.SIGINT, lambda signum, _: signals.append(signum))
    with cloud:
        watcher = _watch(cloud, console) if reload else None  # before anyone is told it is up
        info: dict[str, Any] = {
            "endpoint": cloud.endpoint,
            "stack": cloud.stack_name,
            "region": cloud.region,
            "outputs": cloud.outputs,
            "credentials": credentials(cloud) if credentials else {},
        }
        if ready_file is not None:
            write_atomically(ready_file, json.dumps(info))
        print(f"sluice local stack {cloud.stack_name!r} is up at {cloud.endpoint}", file=console)
        for key, value in cloud.outputs.items():
            print(f"  {key:28} {value}", file=console)
        if any(key.endswith("QueueUrl") for key in cloud.outputs):
            print(
                "  (queue URLs as AWS writes them; calls to the endpoint take them as they are, and "
                "get-queue-url answers with the endpoint's form of the same queue)",
                file=console,
            )
        if cloud.parameters:  # what this deploy set beyond the template's defaults (change with --param)
            print("parameters (--param KEY=VALUE overrides):", file=console)
            for key, value in sorted(cloud.parameters.items()):
                print(f"  {key:28} {value}", file=console)
        print(
            f"\nexport AWS_ENDPOINT_URL={cloud.endpoint} "
            "AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing "
            f"AWS_DEFAULT_REGION={cloud.region}\n"
            + "".join(
                f"as the {who} ({cloud.iam.mode} IAM): export "
                + " ".join(f"{k}={v}" for k, v in sorted(creds.items()))
                + "\n"
                for who, creds in info["credentials"].items()
            )
            + (f"{hint(cloud)}\n" if hint else "")
            + ("Edits to a function's folder take effect on its next invocation. " if reload else "")
            + "Ctrl-C stops it.",
            file=console,
            flush=True,
        )
        try:
            while not signals:
                time.sleep(0.2)  # a signal's handler runs in between; this notices it within 0.2 s
        finally:
            if watcher is not None:
                watcher.stop()
            if iam_usage is not None:
                policies = iam_report.stack_policies(cloud.iam, cloud.stack_name, [cloud.region])
                iam_report.dump(iam_report.usage(cloud.iam, policies, cloud.stack_name), iam_usage)
    print("stopped", file=console, flush=True)


def _watch(cloud: LocalCloud, console: TextIO) -> Ticker:
    layers = {d for host in cloud.functions.values() for d in host.spec.layer_dirs}
    watcher = CodeWatcher(cloud.functions, sorted(layers), lambda said: print(said, file=console, flush=True))
    ticker = Ticker("code-reload", 1.0, watcher.check)
    ticker.start()
    return ticker
