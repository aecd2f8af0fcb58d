"""pytest fixtures for a team's own tests: ``pytest_plugins = ["sluice_local.testing.plugin"]`` in the
root conftest.py, then ask for ``sluice_stack``.

``sluice_stack`` (one per test session) deploys the template named by the ``sluice_template`` ini
option (default: template.yaml beside pytest's rootdir) with the local runtime's fast settings,
``LogLevel=DEBUG`` (what :meth:`RunningStack.outcome` waits for) and the ``sluice_parameters`` ini
lines (``Name=Value``) over them, with only the workloads the ``sluice_workloads`` ini lines name (all
of workloads.yaml's when none), the queues the ``sluice_existing_queues`` lines name created before the
deploy (``NAME`` or ``NAME:VISIBILITY``, for workloads with ``Queue: existing``), and stops it at the
end, asserting it stopped cleanly.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from aws_lambda_powertools.utilities.typing import LambdaContext

from sluice_local.testing.events import lambda_context
from sluice_local.testing.stack import RunningStack, port_is_closed, start_stack

__all__ = ["pytest_addoption", "sluice_context", "sluice_stack"]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini("sluice_template", "the SAM template sluice_stack deploys", default="template.yaml")
    parser.addini(
        "sluice_parameters", "Name=Value parameter overrides for sluice_stack", type="linelist", default=[]
    )
    parser.addini(
        "sluice_existing_queues",
        "queues the account has before the deploy, NAME or NAME:VISIBILITY (for Queue: existing workloads)",
        type="linelist",
        default=[],
    )
    parser.addini(
        "sluice_workloads",
        "only these workloads of workloads.yaml (default: all)",
        type="linelist",
        default=[],
    )


@pytest.fixture(scope="session")
def sluice_stack(
    pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningStack]:
    root = Path(pytestconfig.rootpath)
    template = (root / str(pytestconfig.getini("sluice_template"))).resolve()
    params = {"LogLevel": "DEBUG"}
    for line in pytestconfig.getini("sluice_parameters"):
        name, sep, value = str(line).partition("=")
        if not sep:
            raise pytest.UsageError(f"sluice_parameters: {line!r} is not Name=Value")
        params[name.strip()] = value.strip()
    running = start_stack(
        tmp_path_factory.mktemp("sluice-stack"),
        stack_name="sluice-test",
        template=template,
        params=params,
        workloads=[str(name) for name in pytestconfig.getini("sluice_workloads")],
        existing_queues=[str(queue) for queue in pytestconfig.getini("sluice_existing_queues")],
    )
    yield running
    code = running.stop()
    if code != 0:
        raise AssertionError(f"local stack exited with {code}:\n{running.output.read_text()[-4000:]}")
    if not port_is_closed(running.port):
        raise AssertionError("the embedded endpoint's port is still open after shutdown")


@pytest.fixture
def sluice_context() -> LambdaContext:
    """A fresh Lambda context (30 s to go) for calling a handler directly."""
    return lambda_context()
