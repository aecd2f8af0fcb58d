"""statemachines/delay.asl.json executed by moto's Step Functions interpreter (Given / When / Then).

The definition runs as written, retriers included, with its ``${...}`` DefinitionSubstitutions filled in
the way the template fills them. moto's retrier really sleeps each interval (``time.sleep``), which
would make the always-failing case alone wait out the deployed 5 s / 10 s / 20 s; the
``retry_backoffs`` fixture records those intervals instead of sleeping them, so the number of attempts
and the backoff before each are both the deployed ones, checked without waiting.

The Lambda Task calls the mocked Lambda API through boto3; with ``use_docker: False`` that lands in
``LambdaSimpleBackend.invoke``, which is patched to run a scripted fake rehydrator in-process.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import math
import os
import re
import threading
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws
from moto.awslambda_simple.models import LambdaSimpleBackend
from moto.core.exceptions import JsonRESTError
from moto.stepfunctions.parser.asl.component.state.wait.wait_function.wait_function import WaitFunction

from tests.conftest import create_task_role
from tests.waiting import finished_execution

ROOT = Path(__file__).resolve().parents[2]
DEFINITION = ROOT / "statemachines" / "delay.asl.json"
REGION = "us-east-1"
NAMESPACE = "Sluice"
SERVICE = "sluice-test"
"""The service dimension (the template substitutes the stack's name)."""

# Every ${...} the definition may use. A new placeholder must be added here (and substituted in the
# `machine` fixture), or test_given_the_definition_... fails.
PLACEHOLDERS = {"RehydratorFunctionArn", "MetricsNamespace", "MetricsService"}

EXECUTION_TIMEOUT = 25.0
# moto turns a Wait's timestamp into int(wake_at - now) seconds: the fraction of a second is dropped,
# so it wakes up to 1 s before wake_at (Step Functions never wakes early).
MOTO_WAIT_TRUNCATION = 1.0
# Wall-clock bounds only catch gross delays: on a loaded machine moto's execution thread, its Lambda
# call or the test's own polling may be scheduled seconds late. What a Wait state asked for is
# checked exactly instead (the ``waits`` fixture).
LOADED_MACHINE_SLACK = 10.0

MOTO_CONFIG: Any = {"stepfunctions": {"execute_state_machine": True}, "lambda": {"use_docker": False}}
# moto sleeps every Retry interval: recorded instead (see the fixture), so no test waits them out
pytestmark = pytest.mark.usefixtures("retry_backoffs")


def load_definition(substitutions: dict[str, str]) -> dict[str, Any]:
    text = DEFINITION.read_text()
    for name, value in substitutions.items():
        text = text.replace("${" + name + "}", value)
    return dict(json.loads(text))


def wake_at_text(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class FunctionFailedError(Exception):
    """The fake rehydrator raised: Lambda answers with X-Amz-Function-Error: Unhandled."""


class ThrottledError(Exception):
    """The Lambda service refused the invocation (HTTP 429 TooManyRequestsException)."""


@dataclass
class Invocation:
    at: float
    function_name: str
    payload: dict[str, Any]


@dataclass
class FakeRehydrator:
    """Plays its script, one step per invocation; the last step repeats once the script runs out.

    A step is a result dict (``{"more": ..., "sent": ...}``), ``FunctionFailedError`` or
    ``ThrottledError``.
    """

    script: list[Any] = field(default_factory=lambda: [{"more": False, "sent": 0}])
    calls: list[Invocation] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def invoke(
        self, function_name: str, body: Any, response_headers: dict[str, str]
    ) -> bytes:  # moto's Lambda Invoke contract: JSON bytes, function errors flagged in a header
        payload = json.loads(body) if body else {}
        with self._lock:
            self.calls.append(Invocation(time.time(), function_name, payload))
            step = self.script[min(len(self.calls), len(self.script)) - 1]
        if step is ThrottledError:
            raise JsonRESTError("TooManyRequestsException", "Rate exceeded")
        if step is FunctionFailedError:
            response_headers["x-amz-function-error"] = "Unhandled"
            return json.dumps(
                {"errorMessage": "S3 unavailable", "errorType": "TransientError", "stackTrace": []}
            ).encode()
        return json.dumps({**step, "failed": 0}).encode()


@dataclass
class DelayMachine:
    sfn: Any
    cloudwatch: Any
    arn: str
    function_arn: str
    definition: dict[str, Any]
    rehydrator: FakeRehydrator

    def start(self, bucket: int, wake_at: str) -> str:
        return self.sfn.start_execution(
            stateMachineArn=self.arn,
            name=f"delay-{bucket}",
            input=json.dumps({"bucket": bucket, "prefix": f"delayed/{bucket}/", "wake_at": wake_at}),
        )["executionArn"]

    def finish(self, execution_arn: str, timeout: float = EXECUTION_TIMEOUT) -> dict[str, Any]:
        return finished_execution(self.sfn, execution_arn, timeout)

    def stranded_metric_sum(self) -> float:
        now = dt.datetime.now(dt.UTC)
        result = self.cloudwatch.get_metric_data(
            MetricDataQueries=[
                {
                    "Id": "stranded",
                    "MetricStat": {
                        "Metric": {
                            "Namespace": NAMESPACE,
                            "MetricName": "DelayBucketsStranded",
                            "Dimensions": [{"Name": "service", "Value": SERVICE}],
                        },
                        "Period": 60,
                        "Stat": "Sum",
                    },
                }
            ],
            StartTime=now - dt.timedelta(minutes=5),
            EndTime=now + dt.timedelta(minutes=5),
        )["MetricDataResults"][0]
        return float(sum(result["Values"]))


def lambda_zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("app.py", "def handler(event, context):\n    return event\n")
    return buffer.getvalue()


@pytest.fixture
def utc_clock() -> Iterator[None]:
    """moto compares wake_at (UTC) with the naive local datetime.now(): pin the process to UTC."""
    saved = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    yield
    if saved is None:
        os.environ.pop("TZ", None)
    else:
        os.environ["TZ"] = saved
    time.tzset()


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> list[tuple[float, int]]:
    """(when, seconds) of every wait a Wait state asks moto for, as moto computes it (``int(wake_at -
    now)``, ``<= 0`` for no wait at all): what the definition waited for, whatever the machine's load."""
    requested: list[tuple[float, int]] = []

    def eval_body(self: WaitFunction, env: Any) -> None:  # moto's WaitFunction._eval_body, recorded
        at = time.time()
        seconds = self._get_wait_seconds(env=env)
        requested.append((at, seconds))
        self._wait_interval(env=env, wait_seconds=seconds)

    monkeypatch.setattr(WaitFunction, "_eval_body", eval_body)
    return requested


@pytest.fixture
def rehydrator() -> FakeRehydrator:
    return FakeRehydrator()


@pytest.fixture
def machine(utc_clock, rehydrator: FakeRehydrator, monkeypatch: pytest.MonkeyPatch) -> Iterator[DelayMachine]:
    def backend_invoke(  # moto's signature
        backend: Any, function_name: str, qualifier: Any, body: Any, headers: Any, response_headers: Any
    ) -> bytes:
        return rehydrator.invoke(function_name, body, response_headers)

    monkeypatch.setattr(LambdaSimpleBackend, "invoke", backend_invoke)
    with mock_aws(config=MOTO_CONFIG):
        iam = boto3.client("iam", region_name=REGION)
        lam = boto3.client("lambda", region_name=REGION)
        sfn = boto3.client("stepfunctions", region_name=REGION)
        role_arn = create_task_role(iam, "delay-test")
        function_arn = lam.create_function(
            FunctionName="sluice-test-rehydrator",
            Runtime="python3.13",
            Role=role_arn,
            Handler="app.handler",
            Code={"ZipFile": lambda_zip()},
        )["FunctionArn"]
        definition = load_definition(
            {"RehydratorFunctionArn": function_arn, "MetricsNamespace": NAMESPACE, "MetricsService": SERVICE}
        )
        arn = sfn.create_state_machine(
            name="sluice-test-delay", definition=json.dumps(definition), roleArn=role_arn, type="STANDARD"
        )["stateMachineArn"]
        delay = DelayMachine(
            sfn, boto3.client("cloudwatch", region_name=REGION), arn, function_arn, definition, rehydrator
        )
        yield delay
        # Never leave an execution thread behind that outlives the mock.
        for execution in sfn.list_executions(stateMachineArn=arn, statusFilter="RUNNING")["executions"]:
            sfn.stop_execution(executionArn=execution["executionArn"])


def retrier(definition: dict[str, Any], state: str, error: str) -> dict[str, Any]:
    return next(r for r in definition["States"][state]["Retry"] if error in r["ErrorEquals"])


# --- the definition and its substitutions ---------------------------------------------------------


def test_given_the_definition_when_listing_its_placeholders_then_each_one_has_a_known_substitution():
    # Given the definition as committed
    text = DEFINITION.read_text()
    # When its ${...} placeholders are listed
    found = set(re.findall(r"\$\{([^}]*)\}", text))
    # Then each is one this test (and the template) substitutes, and all of them are used
    assert found == PLACEHOLDERS
    substituted = json.dumps(load_definition(dict.fromkeys(PLACEHOLDERS, "x")))
    assert "${" not in substituted


# --- WaitForBucket --------------------------------------------------------------------------------


def test_given_a_wake_at_in_the_past_when_the_execution_starts_then_the_bucket_is_rehydrated_at_once(
    machine, rehydrator, waits
):
    # Given a bucket that fell due an hour ago
    bucket = int(time.time()) - 3600
    started = time.time()
    # When its execution starts
    result = machine.finish(machine.start(bucket, wake_at_text(bucket)))
    # Then the wait passes straight through (no wait asked for) and the rehydrator is called at once
    assert result["status"] == "SUCCEEDED"
    assert len(rehydrator.calls) == 1
    [(_, seconds)] = waits
    assert seconds <= 0
    assert rehydrator.calls[0].at - started < LOADED_MACHINE_SLACK


def test_given_a_wake_at_two_seconds_ahead_when_the_execution_starts_then_the_first_call_waits_for_it(
    machine, rehydrator, waits
):
    # Given a bucket due two whole seconds from the next second boundary
    started = time.time()
    wake_at = math.ceil(started) + 2
    # When its execution starts
    result = machine.finish(machine.start(wake_at, wake_at_text(wake_at)))
    # Then the rehydrator is first called about 2 s later, not before wake_at (less moto's truncation)
    assert result["status"] == "SUCCEEDED"
    first = rehydrator.calls[0].at
    assert first >= wake_at - MOTO_WAIT_TRUNCATION
    assert first - started >= 2 - MOTO_WAIT_TRUNCATION  # wake_at is at least 2 s after started
    # ... having asked for one wait, up to wake_at and no further (a later call is the machine's load)
    [(asked_at, seconds)] = waits
    assert seconds <= 0 or asked_at + seconds <= wake_at
    # ... and was called once that wait was over: within the slack of wake_at, or of when the wait was
    # computed when a loaded machine started the execution after wake_at (a CI run: 11 s late, wait -9 s)
    assert first <= max(wake_at, asked_at) + LOADED_MACHINE_SLACK


# --- Rehydrate / MoreWork -------------------------------------------------------------------------


def test_given_the_rehydrator_reports_more_twice_when_the_execution_runs_then_it_is_called_three_times(
    machine, rehydrator
):
    # Given a rehydrator that stops at its deadline twice before the bucket is empty
    rehydrator.script = [{"more": True, "sent": 500}, {"more": True, "sent": 500}, {"more": False, "sent": 7}]
    bucket = int(time.time()) - 60
    # When the execution runs
    result = machine.finish(machine.start(bucket, wake_at_text(bucket)))
    # Then Rehydrate runs three times, each time for the same bucket and prefix, and the execution succeeds
    assert result["status"] == "SUCCEEDED"
    assert [c.payload for c in rehydrator.calls] == [{"bucket": bucket, "prefix": f"delayed/{bucket}/"}] * 3
    assert {c.function_name for c in rehydrator.calls} == {machine.function_arn}
    output = json.loads(result["output"])
    assert output["result"] == {"more": False, "sent": 7}
    assert output["bucket"] == bucket


def test_given_one_function_error_when_the_execution_runs_then_the_retry_succeeds(machine, rehydrator):
    # Given a rehydrator that fails once (an unhandled exception), then empties the bucket
    rehydrator.script = [FunctionFailedError, {"more": False, "sent": 3}]
    bucket = int(time.time()) - 60
    # When the execution runs
    result = machine.finish(machine.start(bucket, wake_at_text(bucket)))
    # Then the States.ALL retrier calls it again and the execution succeeds
    assert result["status"] == "SUCCEEDED"
    assert len(rehydrator.calls) == 2
    assert machine.stranded_metric_sum() == 0


def test_given_throttles_and_function_errors_when_the_execution_runs_then_each_retrier_counts_its_own(
    machine, rehydrator
):
    # Given two throttles by the Lambda service (Lambda.TooManyRequestsException), then two function
    # errors: four failures, more than the States.ALL retrier alone allows (MaxAttempts 3)
    rehydrator.script = [
        ThrottledError,
        ThrottledError,
        FunctionFailedError,
        FunctionFailedError,
        {"more": False, "sent": 1},
    ]
    bucket = int(time.time()) - 60
    # When the execution runs
    result = machine.finish(machine.start(bucket, wake_at_text(bucket)))
    # Then the Lambda.* retrier (listed first) takes the throttles and States.ALL the function errors
    assert result["status"] == "SUCCEEDED"
    assert len(rehydrator.calls) == 5


# --- Catch → ReportStranded → Stranded ------------------------------------------------------------


def test_given_the_rehydrator_always_fails_when_retries_run_out_then_the_bucket_is_reported_stranded(
    machine, rehydrator, retry_backoffs
):
    # Given a rehydrator that fails on every call
    rehydrator.script = [FunctionFailedError]
    bucket = int(time.time()) - 60
    # When the execution runs
    result = machine.finish(machine.start(bucket, wake_at_text(bucket)))
    # Then it is tried once plus MaxAttempts retries, then caught, counted and failed as stranded
    policy = retrier(machine.definition, "Rehydrate", "States.ALL")
    attempts = 1 + policy["MaxAttempts"]
    assert len(rehydrator.calls) == attempts
    # ... waiting the deployed backoff before each retry (5, 10, 20 s: recorded, not slept)
    assert retry_backoffs == [
        policy["IntervalSeconds"] * policy["BackoffRate"] ** n for n in range(policy["MaxAttempts"])
    ]
    assert result["status"] == "FAILED"
    assert result["error"] == "DelayBucketStranded"
    assert "sweep" in result["cause"]
    assert machine.stranded_metric_sum() == 1
    # ... and the error was kept beside the input (Catch ResultPath $.error) for ReportStranded
    history = machine.sfn.get_execution_history(executionArn=result["executionArn"])["events"]
    entered = [
        json.loads(e["stateEnteredEventDetails"]["input"])
        for e in history
        if e["type"] == "TaskStateEntered" and e["stateEnteredEventDetails"]["name"] == "ReportStranded"
    ]
    assert len(entered) == 1
    assert entered[0]["bucket"] == bucket
    assert entered[0]["error"]["Error"] == "TransientError"
