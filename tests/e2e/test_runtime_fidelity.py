"""The local runtime fails where AWS Lambda fails: timeouts, unmarshallable results, batch responses.

These run the runtime's pieces (FunctionHost, SqsPoller) directly on tiny handlers written into
``tmp_path``: no stack is deployed, so they take about a second in all.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from sluice_local.app.jobstore import release_connections
from sluice_local.emulation.functions import FunctionError, FunctionHost, FunctionSpec
from sluice_local.emulation.pollers import IDLE_POLLS_BEFORE_LONG, MappingSpec, SqsPoller

HANDLERS = """
import time
from decimal import Decimal


def sleeps(event, context):
    time.sleep(event["seconds"])
    return {"slept": event["seconds"], "remaining_ms": context.get_remaining_time_in_millis()}


def waits(event, context):
    event["gate"].wait(event["seconds"])  # in-process invoke: the test hands over a threading.Event
    return {"waited": True}


def returns_set(event, context):
    return {"ids": {"a", "b"}}


def returns_python(event, context):
    return {"tuple": (1, 2), 3: "int key", "price": Decimal("12.50"), "count": Decimal("7")}


def raises(event, context):
    raise ValueError("boom")


def exits(event, context):
    raise SystemExit(3)

"""


@pytest.fixture
def code_dir(tmp_path: Path) -> Path:
    (tmp_path / "app.py").write_text(HANDLERS)
    return tmp_path


def host(code_dir: Path, handler: str, timeout: float = 10.0) -> FunctionHost:
    """A host for ``handler``; the default timeout is far beyond what a loaded machine needs to run the
    quick handlers (the timeout tests set their own)."""
    return FunctionHost(
        FunctionSpec(
            logical_id=f"Test{handler.title().replace('_', '')}",
            name=f"test-{handler}",
            arn=f"arn:aws:lambda:us-east-1:123456789012:function:test-{handler}",
            code_dir=code_dir,
            handler=f"app.{handler}",
            environment={},
            timeout=timeout,
            memory=128,
        )
    )


# --- 1. Timeout ---------------------------------------------------------------------------------


def test_a_handler_within_its_timeout_succeeds_and_keeps_its_environment(code_dir):
    function = host(code_dir, "sleeps", timeout=5.0)

    first = function.invoke({"seconds": 0})
    second = function.invoke({"seconds": 0.05})

    assert first["slept"] == 0
    assert 0 < second["remaining_ms"] <= 5000 - 50
    assert (function.cold_starts, function.invocations, function.errors, function.timeouts) == (1, 2, 0, 0)


def runaway_threads(function: FunctionHost) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(f"lambda-{function.spec.logical_id}-")]


def test_an_overrun_fails_with_task_timed_out_and_discards_the_environment(code_dir):
    function = host(code_dir, "waits", timeout=0.5)
    gate = threading.Event()

    started = time.monotonic()
    with pytest.raises(FunctionError) as failure:
        function.invoke({"gate": gate, "seconds": 30})
    waited = time.monotonic() - started

    assert 0.5 <= waited < 15, "the caller waits the function's Timeout, not for the handler (30 s)"
    assert failure.value.payload["errorType"] == "Sandbox.Timedout"
    assert "Task timed out after 0.50 seconds" in failure.value.payload["errorMessage"]
    assert (function.errors, function.timeouts) == (1, 1)

    runaway = runaway_threads(function)
    assert len(runaway) == 1
    assert runaway[0].is_alive(), "Python cannot stop the thread: it runs on in the background"
    assert runaway[0].daemon, "a runaway handler must not keep the process alive"

    open_gate = threading.Event()
    open_gate.set()
    assert function.invoke({"gate": open_gate, "seconds": 0}) == {"waited": True}
    assert function.cold_starts == 2, "the timed-out environment is never reused"

    gate.set()  # let the background thread end
    runaway[0].join(timeout=5)
    assert not runaway[0].is_alive()


def test_a_timeout_through_the_invoke_api_is_an_unhandled_function_error(code_dir):
    function = host(code_dir, "sleeps", timeout=0.2)
    headers: dict[str, str] = {}

    body = json.loads(function.invoke_payload(json.dumps({"seconds": 0.4}), headers))

    assert headers["x-amz-function-error"] == "Unhandled"
    assert body["errorType"] == "Sandbox.Timedout"
    assert body["errorMessage"].endswith("Task timed out after 0.20 seconds")
    for thread in runaway_threads(function):  # the runaway sleep ends
        thread.join(timeout=5)


@pytest.mark.subprocess
def test_a_runaway_handler_does_not_block_interpreter_exit(code_dir):
    script = textwrap.dedent(
        f"""
        from pathlib import Path
        from sluice_local.emulation.functions import FunctionError, FunctionHost, FunctionSpec
        spec = FunctionSpec("Stuck", "stuck", "arn", Path({str(code_dir)!r}), "app.sleeps", {{}}, 0.1, 128)
        try:
            FunctionHost(spec).invoke({{"seconds": 600}})
        except FunctionError as exc:
            print(exc.payload["errorType"])
        """
    )

    finished = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )

    assert finished.stdout.strip() == "Sandbox.Timedout"


def test_a_raising_handler_keeps_its_environment(code_dir):
    function = host(code_dir, "raises")

    for _ in range(2):
        with pytest.raises(FunctionError) as failure:
            function.invoke({})

    assert failure.value.payload["errorType"] == "ValueError"
    assert failure.value.payload["errorMessage"] == "boom"
    assert (function.cold_starts, function.errors) == (1, 2)


def test_sys_exit_in_a_handler_is_a_runtime_exit_error_and_discards_the_environment(code_dir):
    function = host(code_dir, "exits")

    for _ in range(2):
        with pytest.raises(FunctionError) as failure:
            function.invoke({})

    assert failure.value.payload["errorType"] == "Runtime.ExitError"
    assert "exit status 3" in failure.value.payload["errorMessage"]
    assert function.cold_starts == 2


# --- 2. The response goes through JSON ------------------------------------------------------------


def test_a_result_json_cannot_represent_is_a_marshal_error(code_dir):
    function = host(code_dir, "returns_set")

    with pytest.raises(FunctionError) as failure:
        function.invoke({})

    assert failure.value.payload["errorType"] == "Runtime.MarshalError"
    assert failure.value.payload["errorMessage"] == (
        "Unable to marshal response: Object of type set is not JSON serializable"
    )
    assert (function.errors, function.cold_starts) == (1, 1)

    headers: dict[str, str] = {}
    body = json.loads(function.invoke_payload(b"{}", headers))
    assert headers["x-amz-function-error"] == "Unhandled"
    assert body["errorType"] == "Runtime.MarshalError"
    assert function.cold_starts == 1, "a marshal error does not cost the environment"


def test_the_result_is_what_a_json_round_trip_gives_back(code_dir):
    result = host(code_dir, "returns_python").invoke({})

    assert result == {"tuple": [1, 2], "3": "int key", "price": 12.5, "count": 7}
    assert isinstance(result["count"], int)


# --- 3. Refused deletes are logged and counted -----------------------------------------------------


class _Function:
    """A FunctionHost stand-in that answers with a fixed response."""

    def __init__(self, response: Any) -> None:
        self.response = response
        self.spec = FunctionSpec("Fake", "fake", "arn", Path(), "app.handler", {}, 1.0, 128)

    def invoke(self, event: Any) -> Any:
        return self.response


class _Sqs:
    def __init__(self, messages: list[dict[str, Any]], refuse: set[str]) -> None:
        self.messages = messages
        self.refuse = refuse
        self.deleted: list[str] = []

    def receive_message(self, **_: Any) -> dict[str, Any]:
        messages, self.messages = self.messages, []
        return {"Messages": messages}

    def delete_message_batch(self, Entries: list[dict[str, str]], **_: Any) -> dict[str, Any]:  # noqa: N803
        failed = [
            {"Id": e["Id"], "SenderFault": True, "Code": "ReceiptHandleIsInvalid", "Message": "expired"}
            for e in Entries
            if e["ReceiptHandle"] in self.refuse
        ]
        self.deleted += [e["ReceiptHandle"] for e in Entries if e["ReceiptHandle"] not in self.refuse]
        return {"Successful": [], "Failed": failed}


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_deletes_sqs_refuses_are_logged_and_counted():
    messages = [{"MessageId": f"m-{i}", "ReceiptHandle": f"rh-{i}", "Body": "{}"} for i in range(3)]
    sqs = _Sqs(messages, refuse={"rh-1"})
    function = _Function({"batchItemFailures": [{"itemIdentifier": "m-2"}]})
    poller = SqsPoller(
        sqs,
        MappingSpec(
            uuid="u-1",
            queue_arn="arn:aws:sqs:us-east-1:123456789012:work",
            queue_url="https://sqs.local/work",
            function=function,  # type: ignore[arg-type]
            batch_size=10,
            window=0,
            max_concurrency=1,
            report_failures=True,
        ),
    )

    records = _Records()
    logger = logging.getLogger("sluice_local")
    logger.addHandler(records)
    try:
        poller._poll_once()
    finally:
        logger.removeHandler(records)

    assert sqs.deleted == ["rh-0"]
    assert (poller.deleted, poller.failed, poller.delete_failures) == (1, 1, 1)
    refused = [m for m in records.messages if "could not delete" in m]
    assert len(refused) == 1
    assert "m-1" in refused[0]
    assert "ReceiptHandleIsInvalid" in refused[0]


def test_an_idle_queue_holding_nothing_is_not_polled_until_a_message_is_added():
    # Given a poller whose queue has been empty long enough to be long-polled, and holds nothing at all
    sqs = _Sqs([], refuse=set())
    receives: list[dict[str, Any]] = []
    receive = sqs.receive_message

    def counted(**kwargs: Any) -> dict[str, Any]:
        receives.append(kwargs)
        return receive(**kwargs)

    sqs.receive_message = counted  # type: ignore[method-assign]
    holds = [False]
    poller = SqsPoller(
        sqs,
        MappingSpec(
            uuid="u-2",
            queue_arn="arn:aws:sqs:us-east-1:123456789012:work",
            queue_url="https://sqs.local/work",
            function=_Function({}),  # type: ignore[arg-type]
            batch_size=10,
            window=0,
            max_concurrency=1,
            report_failures=True,
        ),
        quiet=lambda timeout: holds[0],
    )
    poller._idle.polls = IDLE_POLLS_BEFORE_LONG
    # When it polls while the queue holds nothing: no receive is sent
    for _ in range(5):
        poller._poll_once()
    assert receives == []
    # And once a message is there, it is received with a long poll, as before
    holds[0] = True
    sqs.messages = [{"MessageId": "m-1", "ReceiptHandle": "rh-1", "Body": "{}"}]
    poller._poll_once()
    assert [r["WaitTimeSeconds"] for r in receives] == [1]
    assert sqs.deleted == ["rh-1"]


# --- 4. batchItemFailures as the event source mapping reads it -------------------------------------

IDS = {"m-1", "m-2", "m-3"}


@pytest.mark.parametrize(
    ("response", "failed"),
    [
        pytest.param(None, set(), id="null response"),
        pytest.param({}, set(), id="empty response"),
        pytest.param({"batchItemFailures": None}, set(), id="null list"),
        pytest.param({"batchItemFailures": []}, set(), id="empty list"),
        pytest.param({"batchItemFailures": [{"itemIdentifier": "m-2"}]}, {"m-2"}, id="one failed"),
        pytest.param(
            {"batchItemFailures": [{"itemIdentifier": "m-1"}, {"itemIdentifier": "m-3"}]},
            {"m-1", "m-3"},
            id="two failed",
        ),
        pytest.param({"batchItemFailures": [{"itemIdentifier": ""}]}, IDS, id="empty identifier"),
        pytest.param({"batchItemFailures": [{"itemIdentifier": None}]}, IDS, id="null identifier"),
        pytest.param({"batchItemFailures": [{"itemId": "m-1"}]}, IDS, id="bad key name"),
        pytest.param({"batchItemFailures": [{"itemIdentifier": "m-9"}]}, IDS, id="unknown identifier"),
        pytest.param({"batchItemFailures": ["m-1"]}, IDS, id="item not an object"),
        pytest.param({"batchItemFailures": "m-1"}, IDS, id="not a list"),
        pytest.param("ok", IDS, id="not an object"),
    ],
)
def test_batch_item_failures_follow_the_event_source_mapping_rules(response, failed):
    assert SqsPoller._failures(response, IDS) == failed


# --- 4. A dropped environment frees what its process held ---------------------------------------

HOLDS_A_CONNECTION = """
import os
from sluice.jobs.connection import Connector

DSN, APP = os.environ["DSN"], os.environ["APP"]  # read at the cold start, as a handler's settings are
CONNECTING = {}  # "gate": a threading.Event the next connect waits for (a slow connect on a loaded machine)


def dsn(refresh):
    if "gate" in CONNECTING:
        CONNECTING.pop("gate").wait(timeout=60)
    return DSN


# no statement timeout: a statement still running ends only when it is cancelled
connector = Connector(dsn, application_name=APP, statement_timeout_ms=0)


def connects(event, context):
    if "connecting" in event:
        CONNECTING["gate"] = event["connecting"]
    connector.connection().execute("select 1")
    if "together" in event:  # a threading.Barrier: hold the environment until the others are busy too
        event["together"].wait(timeout=60)
    if event.get("exit"):
        raise SystemExit(3)
    if "sleep" in event:  # a statement still running when the invocation times out
        try:
            connector.connection().execute("select pg_sleep(%s)", (event["sleep"],))
        except Exception as exc:
            event["met"].append(type(exc).__name__)
            raise
    if "then" in event:  # past its timeout: its statement once the test lets it go on
        event["then"].wait(timeout=60)
        connector.connection().execute("select 1")
    return {"ok": True}


from aws_lambda_powertools import Logger  # noqa: E402 - the decorated handler, as every sluice function's

logger = Logger(service="test-connects")


@logger.inject_lambda_context
def decorated(event, context):  # its __globals__ are Powertools', not this module's
    return connects(event, context)
"""


def connecting_function(
    tmp_path: Path, pg_url: str, *, handler: str = "app.connects", timeout: float = 60.0
) -> tuple[FunctionHost, Callable[[], int]]:
    """A function whose environments each hold a job store connection, and a count of those open."""
    import psycopg  # noqa: PLC0415 - only with a PostgreSQL

    app = f"sluice-conn-{uuid.uuid4().hex[:12]}"
    (tmp_path / "app.py").write_text(HOLDS_A_CONNECTION)
    function = FunctionHost(
        FunctionSpec(
            logical_id="TestConnects", name="test-connects",
            arn="arn:aws:lambda:us-east-1:123456789012:function:test-connects",
            code_dir=tmp_path, handler=handler, environment={"DSN": pg_url, "APP": app},
            timeout=timeout, memory=128,
        ),
        on_drop=[release_connections],  # as the job store's attachment plugs it in
    )  # fmt: skip

    def open_connections() -> int:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            row = conn.execute(
                "select count(*) from pg_stat_activity where application_name = %s", (app,)
            ).fetchone()
            return int(row[0]) if row else 0

    return function, open_connections


def test_an_environment_dropped_after_a_crash_closes_its_job_store_connection(tmp_path, pg_url):
    """Found by a 500-seed soak: environments dropped after a crash or a timeout kept their job store
    connections open (in AWS their process is gone) until PostgreSQL's max_connections ran out."""
    function, open_connections = connecting_function(tmp_path, pg_url)
    assert function.invoke({}) == {"ok": True}
    assert open_connections() == 1  # a warm environment keeps its connection, as in AWS

    with pytest.raises(FunctionError) as failure:
        function.invoke({"exit": True})

    assert failure.value.payload["errorType"] == "Runtime.ExitError"
    assert _settles(open_connections, 0) == 0


def test_a_decorated_handler_dropped_after_a_crash_closes_its_job_store_connection(tmp_path, pg_url):
    """Found by the 500-seed soak of session 10: the release looked for the connector among the handler's
    __globals__, which for a decorated handler (every sluice function) are Powertools' module's, so the
    job functions' crashed environments kept their connections (the sweeper's grew to 21)."""
    function, open_connections = connecting_function(tmp_path, pg_url, handler="app.decorated")
    assert function.invoke({}) == {"ok": True}
    assert open_connections() == 1

    with pytest.raises(FunctionError):
        function.invoke({"exit": True})

    assert _settles(open_connections, 0) == 0


def test_a_timed_out_handler_thread_cannot_open_a_connection_after_its_environment_was_dropped(
    tmp_path, pg_url
):
    """Lambda stops a timed-out process; here its thread runs on. Its next statement must not reconnect
    the released connector (a connection no environment would ever close)."""
    function, open_connections = connecting_function(tmp_path, pg_url, handler="app.decorated", timeout=1.0)
    then = threading.Event()
    with pytest.raises(FunctionError) as failure:
        function.invoke({"then": then})
    assert failure.value.payload["errorType"] == "Sandbox.Timedout"
    assert _settles(open_connections, 0) == 0  # dropped: its connection closed

    then.set()  # the thread goes on to its statement
    [thread] = function.timed_out
    thread.join(timeout=60)
    assert not thread.is_alive()
    assert open_connections() == 0


def test_a_handler_timed_out_mid_statement_has_its_statement_cancelled_and_its_connection_closed(
    tmp_path, pg_url
):
    """A soak worker died with SIGSEGV: the drop closed the connection while the timed-out thread was
    still waiting on its statement (psycopg's close takes no lock, libpq's memory was freed under it).
    The statement is cancelled instead and the connection closed once the thread lets go of it."""
    function, open_connections = connecting_function(tmp_path, pg_url, handler="app.decorated", timeout=1.0)
    met: list[str] = []
    with pytest.raises(FunctionError) as failure:
        function.invoke({"sleep": 600, "met": met})
    assert failure.value.payload["errorType"] == "Sandbox.Timedout"

    [thread] = function.timed_out
    thread.join(timeout=60)  # the cancelled statement ends the thread long before its 600 s sleep
    assert not thread.is_alive()
    assert met == ["QueryCanceled"]  # no statement timeout here: only the cancel ended it
    assert _settles(open_connections, 0) == 0


def test_an_environment_dropped_while_connecting_closes_the_connection_it_opens_after(tmp_path, pg_url):
    """Review finding: the release read the connector's connection while a connect was still in progress
    (none yet), so the connection that connect opened was never closed."""
    function, open_connections = connecting_function(tmp_path, pg_url, handler="app.decorated", timeout=1.0)
    connecting = threading.Event()
    with pytest.raises(FunctionError) as failure:
        function.invoke({"connecting": connecting})
    assert failure.value.payload["errorType"] == "Sandbox.Timedout"

    connecting.set()  # the connect in progress completes after the environment was dropped
    [thread] = function.timed_out
    thread.join(timeout=60)
    assert not thread.is_alive()
    assert _settles(open_connections, 0) == 0


def _settles(read: Any, want: int, within: float = 10.0) -> int:
    """``read()`` once it equals ``want`` or ``within`` seconds have passed (PostgreSQL ends a closed
    connection's backend asynchronously)."""
    deadline = time.monotonic() + within
    value = read()
    while value != want and time.monotonic() < deadline:
        time.sleep(0.05)  # polling the condition, not standing in for it
        value = read()
    return int(value)


def test_environments_left_idle_past_their_lifetime_are_reclaimed_with_their_connections(tmp_path, pg_url):
    """Found in CI: a schedule firing every 2 s while its first runs were slow (a stack starting beside
    twenty others) left eight reaper and eight sweeper environments per stack, each holding a job store
    connection for as long as the stack ran, until PostgreSQL's max_connections ran out."""
    # Given a burst of three invocations at once: three environments, three connections
    function, open_connections = connecting_function(tmp_path, pg_url, handler="app.decorated")
    together = threading.Barrier(3)
    with ThreadPoolExecutor(max_workers=3) as pool:
        results = list(pool.map(lambda _: function.invoke({"together": together}), range(3)))
    assert results == [{"ok": True}] * 3
    assert (function.cold_starts, open_connections()) == (3, 3)
    assert function.invoke({}) == {"ok": True}  # within their lifetime: a warm one serves it
    assert (function.cold_starts, open_connections()) == (3, 3)

    # When they have all been idle past their lifetime and the next invocation comes
    function.idle_lifetime = 0.0
    assert function.invoke({}) == {"ok": True}

    # Then the idle three ended with their connections; the invocation cold-started one of its own
    assert function.cold_starts == 4
    assert _settles(open_connections, 1) == 1
    # And a stopped stack's environments end with it (LocalCloud.stop retires every function)
    function.idle_lifetime = 3600.0
    assert function.retire() == 1
    assert _settles(open_connections, 0) == 0
