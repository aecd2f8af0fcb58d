"""e2e fixtures: the real template.yaml deployed into embedded AWS, running as its own process, with
the examples' workloads as sluice ships them (the e2e tests are about them: a fork's own workloads,
added or removed, change nothing here; ``with_examples``).

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

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sluice_local.app.messages import ORDERS
from sluice_local.app.observer import Stack
from sluice_local.emulation.endpoint import endpoint_client
from sluice_local.testing import RunningStack, port_is_closed, start_stack
from sluice_local.testing.project import with_examples

ROOT = Path(__file__).resolve().parents[2]
LAMBDA_ENDPOINT_VARIABLE = "SLUICE_LAMBDA_ENDPOINT"


def _session_stack(
    factory: pytest.TempPathFactory,
    name: str,
    params: dict[str, str] | None = None,
    database_url: str | None = None,
    workloads: tuple[str, ...] = (),
) -> Iterator[RunningStack]:
    """Start a stack of the examples (``workloads``: only these of them) for the session; on teardown it
    must stop cleanly and free its port."""
    examples = with_examples(ROOT / "template.yaml", factory.mktemp(f"{name}-examples") / "project")
    running = start_stack(
        factory.mktemp(name),
        stack_name=name,
        template=examples,
        params=params,
        database_url=database_url,
        workloads=workloads,
    )
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
    """The same template with ``RedriveMode=stepfunctions``: the redrive state machine drains the DLQ (the
    orders example's workload alone: its tests send to nothing else)."""
    params = {"RedriveMode": "stepfunctions"}
    yield from _session_stack(tmp_path_factory, "sluice-e2e-sfn", params, workloads=(ORDERS,))


@pytest.fixture(scope="session")
def sfn_stack(sfn_running_stack: RunningStack) -> Stack:
    return sfn_running_stack.stack


@pytest.fixture(scope="session")
def lambda_api(stack: Stack) -> tuple[Any, str]:
    """(Lambda client, consumer function name) for the configured Invoke API endpoint."""
    endpoint = os.environ.get(LAMBDA_ENDPOINT_VARIABLE)
    if not endpoint:
        return stack.client("lambda"), stack.outputs[ORDERS + "ConsumerFunctionName"]
    return endpoint_client(
        "lambda", endpoint, stack.region
    ), ORDERS + "ConsumerFunction"  # sam local start-lambda serves functions by logical id
