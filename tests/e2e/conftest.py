"""e2e fixtures: the real template.yaml deployed into embedded AWS, running as its own process.

One stack serves the whole test run (session scope), with the default ``RedriveMode=lambda``; a second
one, with ``RedriveMode=stepfunctions``, is started for the redrive tests that need it. Each runs in a
separate process
(``python -m sluice_local up``) so its moto state never mixes with the in-process ``mock_aws`` of
the functional tests, exactly as a developer would run it beside their tools.

Functions are invoked through a Lambda Invoke API endpoint with boto3: the embedded one by default,
or the one ``sam local start-lambda`` serves (needs Docker) when ``SLUICE_LAMBDA_ENDPOINT`` names it,
e.g. ``SLUICE_LAMBDA_ENDPOINT=http://127.0.0.1:3001``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sluice_local.app.observer import Stack
from sluice_local.emulation.cloud import endpoint_client

ROOT = Path(__file__).resolve().parents[2]
LAMBDA_ENDPOINT_VARIABLE = "SLUICE_LAMBDA_ENDPOINT"


@dataclass
class RunningStack:
    stack: Stack
    process: subprocess.Popen[bytes]
    port: int
    output: Path

    def stop(self, timeout: float = 60) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
                raise AssertionError(f"local stack did not stop within {timeout}s of SIGTERM") from None
        return int(self.process.returncode)


def start_stack(
    workdir: Path,
    *,
    stack_name: str,
    template: Path | None = None,
    params: dict[str, str] | None = None,
    database_url: str | None = None,
    timeout: float = 180,  # a deadline, not a wait; within STACK_TIMEOUT (tests/conftest.py) its setup spends
) -> RunningStack:
    ready = workdir / f"{stack_name}.ready.json"
    log = workdir / f"{stack_name}.functions.log"
    output = workdir / f"{stack_name}.out"
    cmd = [
        sys.executable, "-m", "sluice_local", "up", "--fast",
        "--stack-name", stack_name, "--ready-file", str(ready), "--log-file", str(log),
    ]  # fmt: skip
    if template is not None:
        cmd += ["--template", str(template)]
    for key, value in (params or {}).items():
        cmd += ["--param", f"{key}={value}"]
    if database_url is not None:
        cmd += ["--database-url", database_url]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "SLUICE_", "MOTO_"))}
    with output.open("wb") as sink:
        process = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT)
    try:
        _wait_ready(process, ready, output, timeout)
    except BaseException:  # the deadline, pytest-timeout or ^C: never leave the stack running
        process.kill()
        process.wait()
        raise
    info = json.loads(ready.read_text())
    stack = Stack(info["endpoint"], info["outputs"], log, info["region"])
    return RunningStack(stack, process, int(info["endpoint"].rsplit(":", 1)[1]), output)


def _wait_ready(process: subprocess.Popen[bytes], ready: Path, output: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not ready.exists():
        if process.poll() is not None:
            tail = output.read_text()[-4000:]
            raise AssertionError(f"local stack exited with {process.returncode}:\n{tail}")
        if time.monotonic() > deadline:
            raise AssertionError(f"local stack not ready within {timeout}s:\n{output.read_text()[-4000:]}")
        time.sleep(0.1)  # polling the ready file, not standing in for it


def port_is_closed(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) != 0


def _session_stack(
    factory: pytest.TempPathFactory,
    name: str,
    params: dict[str, str] | None = None,
    database_url: str | None = None,
) -> Iterator[RunningStack]:
    """Start a stack for the session; on teardown it must stop cleanly and free its port."""
    running = start_stack(factory.mktemp(name), stack_name=name, params=params, database_url=database_url)
    yield running
    code = running.stop()
    assert code == 0, f"local stack exited with {code}:\n{running.output.read_text()[-4000:]}"
    assert port_is_closed(running.port), "the embedded endpoint's port is still open after shutdown"


NO_DATABASE: list[str] = []
"""Why the session stack has no job store (no PostgreSQL answered), for the job tests' skip reason."""


@pytest.fixture(scope="session")
def running_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningStack]:
    """The session's stack, with the job store attached when a PostgreSQL answers (SLUICE_DATABASE_URL,
    else 127.0.0.1:5432); its schema is its own and is dropped when the stack stops."""
    from sluice_local.app import postgres  # noqa: PLC0415

    url = postgres.database_url()
    reason = postgres.unreachable_reason(url)
    if reason is not None:
        NO_DATABASE.append(reason)
    yield from _session_stack(tmp_path_factory, "sluice-e2e", database_url=None if reason else url)


@pytest.fixture(scope="session")
def stack(running_stack: RunningStack) -> Stack:
    return running_stack.stack


@pytest.fixture
def job_stack(stack: Stack) -> Stack:
    """The session stack when it has a job store; otherwise the test is skipped with the reason (no
    PostgreSQL answered)."""
    if "JobQueueUrl" not in stack.outputs:
        pytest.skip(NO_DATABASE[0] if NO_DATABASE else "the session stack has no job store")
    return stack


@pytest.fixture(scope="session")
def sfn_running_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningStack]:
    """The same template with ``RedriveMode=stepfunctions``: the redrive state machine drains the DLQ."""
    yield from _session_stack(tmp_path_factory, "sluice-e2e-sfn", {"RedriveMode": "stepfunctions"})


@pytest.fixture(scope="session")
def sfn_stack(sfn_running_stack: RunningStack) -> Stack:
    return sfn_running_stack.stack


@pytest.fixture(scope="session")
def lambda_api(stack: Stack) -> tuple[Any, str]:
    """(Lambda client, consumer function name) for the configured Invoke API endpoint."""
    endpoint = os.environ.get(LAMBDA_ENDPOINT_VARIABLE)
    if not endpoint:
        return stack.client("lambda"), stack.outputs["ConsumerFunctionName"]
    return endpoint_client(
        "lambda", endpoint, stack.region
    ), "ConsumerFunction"  # sam local start-lambda serves functions by logical id
