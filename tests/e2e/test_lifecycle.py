"""The local runtime starts and stops cleanly in-process: no thread, port, patch or variable left."""

from __future__ import annotations

import os
import threading
import time
from typing import Any, cast

from aws_lambda_powertools.metrics.provider.cloudwatch_emf import cloudwatch
from moto.core.config import default_user_config

from sluice_local.app.stack import local_cloud
from sluice_local.emulation import moto_adapter
from sluice_local.testing import port_is_closed

ASYNC_INVOCATION_DEADLINE_SECONDS = 60.0


def patched_attributes() -> dict[str, object]:
    """What each attribute the runtime patches holds on its moto class (nothing when inherited)."""
    return {str(a): vars(a.owner_class()).get(a.name) for a in moto_adapter.PATCHED}


def leftover_threads(before: set[int | None]) -> list[str]:
    """Threads started since ``before`` still alive. An asynchronous invocation under way at the stop (a
    schedule's run of the redriver) is not waited for by the runtime (docs/local.md): it ends at its next
    call to the stopped endpoint, and is waited for here (a deadline, not a wait)."""
    new = [t for t in threading.enumerate() if t.ident not in before and t.is_alive()]
    for thread in new:  # the handler's thread, and the one that invoked it asynchronously
        if thread.name.startswith("lambda-") or "(invoke_payload)" in thread.name:
            thread.join(ASYNC_INVOCATION_DEADLINE_SECONDS)
    return [t.name for t in new if t.is_alive()]


def moto_config(section: str) -> dict[str, Any]:
    return dict(cast("dict[str, Any]", default_user_config.get(section) or {}))


def test_start_and_stop_leave_nothing_behind():
    threads_before = {t.ident for t in threading.enumerate()}
    env_before = {k: os.environ.get(k) for k in ("AWS_ENDPOINT_URL", "MOTO_PORT", "AWS_ACCESS_KEY_ID")}
    config_before = {
        k: dict(cast("dict[str, Any]", default_user_config.get(k) or {})) for k in ("lambda", "stepfunctions")
    }
    patched_before = patched_attributes()

    with local_cloud({"MaximumConcurrency": "2"}, stack_name="sluice-lifecycle", examples=True) as cloud:
        port = cloud.endpoint.rsplit(":", 1)[1]
        assert not port_is_closed(int(port))
        assert cloud.pollers
        assert all(t.is_alive() for p in cloud.pollers for t in p._threads)
        assert os.environ["AWS_ENDPOINT_URL"] == cloud.endpoint
        assert all(patched_attributes()[name] is not before for name, before in patched_before.items())
        assert "print" in vars(cloudwatch)  # EMF documents are captured (sluice_local.emulation.emf)

    assert leftover_threads(threads_before) == []
    assert port_is_closed(int(port))
    assert {k: os.environ.get(k) for k in env_before} == env_before
    assert {
        k: dict(cast("dict[str, Any]", default_user_config.get(k) or {})) for k in config_before
    } == config_before
    assert patched_attributes() == patched_before
    assert "print" not in vars(cloudwatch)


def test_stopping_the_first_of_two_stacks_in_one_account_stops_both_and_leaves_nothing_behind():
    threads_before = {t.ident for t in threading.enumerate()}
    patched_before = patched_attributes()
    first = local_cloud({"MaximumConcurrency": "2"}, stack_name="sluice-first", examples=True).start()
    second = local_cloud(
        {"MaximumConcurrency": "2"}, stack_name="sluice-second", beside=first, examples=True
    ).start()
    port = int(first.endpoint.rsplit(":", 1)[1])
    assert second.endpoint == first.endpoint
    assert second.pollers

    first.stop()  # the wrong order: the owner of the embedded AWS first

    assert second.pollers == []  # stopped before the server it polls
    assert leftover_threads(threads_before) == []
    assert port_is_closed(port)
    assert patched_attributes() == patched_before
    assert "print" not in vars(cloudwatch)


def test_a_stopped_stack_closes_the_job_store_connections_its_environments_held(pg_url):
    """LocalCloud.stop ends every function's environments (after the last request in flight), closing the
    job store connections they held: a long-lived process (a soak worker) starting stack after stack would
    otherwise keep each stack's connections until PostgreSQL's max_connections ran out."""
    import psycopg  # noqa: PLC0415 - only with a PostgreSQL

    def held(app: str) -> int:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (app,)
            ).fetchone()
            return int(row[0]) if row else 0

    # Given a stack with a job store whose reaper has run (its environment holds a connection)
    with local_cloud(
        {"MaximumConcurrency": "2"}, stack_name="sluice-lifecycle-jobs", examples=True, database_url=pg_url
    ) as cloud:
        [reaper] = [h for h in cloud.functions.values() if h.spec.name.endswith("-job-reaper")]
        reaper.invoke({"schedule": True})
        assert held(reaper.spec.name) >= 1
    # When it stops, then no connection of its functions is left (PostgreSQL ends a closed one's backend
    # asynchronously: a deadline, not a wait)
    deadline = time.monotonic() + 10
    while held(reaper.spec.name) and time.monotonic() < deadline:
        time.sleep(0.05)  # polling the condition
    assert held(reaper.spec.name) == 0
