"""The fault injector (``sluice_local.emulation.faults``): seeded, replayable, faithful to each fault."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError
from moto import mock_aws

from sluice_local.emulation import faults
from tests.conftest import TEST_SEAL

REGION = "us-east-1"
# botocore sleeps its retry back-off: recorded instead (see the fixture), so no test waits it out
pytestmark = pytest.mark.usefixtures("sdk_retry_sleeps")


def decisions(plan: faults.FaultPlan, calls: int = 400) -> list[str | None]:
    injector = faults.Injector(plan)
    out: list[str | None] = []
    with faults.scope(faults.Scope("ConsumerFunction")):
        for i in range(calls):
            out.append(injector.aws("sqs", ("SendMessageBatch", "DeleteMessage", "PutItem")[i % 3], b"{}"))
    return out


@contextmanager
def handler(inner: faults.Scope) -> Iterator[None]:
    """This thread as the handler thread of ``inner`` (what a thread started inside the scope is)."""
    thread: Any = threading.current_thread()
    thread._sluice_scope = inner
    try:
        with faults.scope(inner):
            yield
    finally:
        del thread._sluice_scope


def test_given_the_same_seed_when_replayed_then_every_decision_is_the_same():
    plan = faults.FaultPlan(seed=42, aws_rate=0.2)
    assert decisions(plan) == decisions(plan)
    assert decisions(plan) != decisions(faults.FaultPlan(seed=43, aws_rate=0.2))


def test_given_a_rate_when_many_calls_are_made_then_about_that_share_is_faulted():
    made = decisions(faults.FaultPlan(seed=7, aws_rate=0.1), calls=6000)
    share = sum(d is not None for d in made) / len(made)
    assert 0.08 < share < 0.12
    assert {d for d in made if d} >= {faults.THROTTLE, faults.LOST_RESPONSE, faults.PARTIAL_BATCH}


def test_given_no_scope_when_called_then_never_faulted():
    injector = faults.Injector(faults.FaultPlan(seed=1, aws_rate=1.0))
    assert injector.aws("sqs", "SendMessage", b"{}") is None  # the harness and the runtime itself


def test_given_a_crash_after_two_calls_then_every_later_call_dies_and_its_effects_are_in_the_window():
    injector = faults.Injector(faults.FaultPlan(seed=1, aws_rate=0.0, ledger_table="ledger"))
    inner = faults.Scope("ConsumerFunction", crash_after=2)
    with faults.scope(inner):  # the cold start, on the invoking thread: never dies
        injector.aws("secrets-manager", "GetSecretValue", b"{}")
    with handler(inner):
        injector.aws(
            "dynamodb", "PutItem", b'{"TableName": "ledger", "Item": {"effect_key": {"S": "o-1#charge"}}}'
        )
        injector.aws("sqs", "ChangeMessageVisibility", b"{}")
        for _ in range(2):
            with pytest.raises(faults.SimulatedCrash):
                injector.aws("dynamodb", "UpdateItem", b'{"TableName": "guards"}')
    assert injector.in_window == {"o-1#charge": 1}  # once: the calls after the crash open nothing more
    assert injector.counts[faults.CRASH] == 1  # counted once, where it happened


def test_given_a_ledger_write_then_it_is_never_faulted_and_marks_the_effect_uncommitted():
    plan = faults.FaultPlan(seed=3, aws_rate=1.0, ledger_table="ledger", guard_table="guards")
    injector = faults.Injector(plan)
    inner = faults.Scope("ConsumerFunction")
    with faults.scope(inner):
        ledger = b'{"TableName": "ledger", "Item": {"effect_key": {"S": "o-2#notify"}}}'
        assert injector.aws("dynamodb", "PutItem", ledger) is None
        assert injector.aws("dynamodb", "UpdateItem", b'{"TableName": "guards"}') is not None
    assert inner.uncommitted == {threading.get_ident(): ["o-2#notify"]}
    assert not injector.in_window  # a faulted attempt is not a failed commit: the SDK retries it


def test_given_a_batch_when_entries_are_dropped_then_at_least_one_goes_and_the_rest_stay_valid():
    injector = faults.Injector(faults.FaultPlan(seed=5))
    body = b'{"QueueUrl": "q", "Entries": [{"Id": "a"}, {"Id": "b"}, {"Id": "c"}]}'
    rest, dropped = injector.drop_entries("SendMessageBatch", body)
    kept = [e["Id"] for e in json.loads(rest)["Entries"]]
    assert dropped
    assert sorted(kept + dropped) == ["a", "b", "c"]


# --- through botocore (moto answers) ----------------------------------------------------------------


@pytest.fixture
def sqs() -> Iterator[tuple[Any, str]]:
    with mock_aws():
        client = boto3.client(
            "sqs", region_name=REGION, config=Config(retries={"mode": "standard", "max_attempts": 2})
        )
        url = client.create_queue(QueueName="faults")["QueueUrl"]
        yield client, url


def installed(only: tuple[str, ...], rate: float = 1.0) -> tuple[faults.Injector, Callable[[], None]]:
    injector = faults.Injector(faults.FaultPlan(seed=11, aws_rate=rate, only=only))
    return injector, faults.install(injector)


def depth(client: Any, url: str) -> int:
    attributes = client.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])
    return int(attributes["Attributes"]["ApproximateNumberOfMessages"])


def test_given_every_response_lost_when_a_message_is_sent_then_it_was_sent_and_the_caller_sees_a_timeout(sqs):
    client, url = sqs
    injector, undo = installed((faults.LOST_EVERY_ATTEMPT,))
    try:
        with faults.scope(faults.Scope("ConsumerFunction")), pytest.raises(ReadTimeoutError):
            client.send_message(QueueUrl=url, MessageBody="x")
    finally:
        undo()
    # Then SQS holds it once per attempt the SDK made: a lost response makes a retried send a duplicate
    attempts = injector.counts[faults.LOST_EVERY_ATTEMPT]
    assert attempts >= 2
    assert depth(client, url) == attempts


@pytest.mark.parametrize(
    ("kind", "error"),
    [
        (faults.THROTTLE, ClientError),
        (faults.SERVER_ERROR, ClientError),
        (faults.CONNECTION_ERROR, EndpointConnectionError),
    ],
)
def test_given_a_fault_before_the_request_when_sent_then_nothing_happened(sqs, kind, error):
    client, url = sqs
    _, undo = installed((kind,))
    try:
        with faults.scope(faults.Scope("ConsumerFunction")), pytest.raises(error):
            client.send_message(QueueUrl=url, MessageBody="x")
    finally:
        undo()
    assert depth(client, url) == 0


def test_given_a_partial_batch_when_sent_then_the_entries_reported_failed_were_not_sent(sqs):
    client, url = sqs
    _, undo = installed((faults.PARTIAL_BATCH,))
    entries = [{"Id": str(i), "MessageBody": f"m{i}"} for i in range(6)]
    try:
        with faults.scope(faults.Scope("ConsumerFunction")):
            response = client.send_message_batch(QueueUrl=url, Entries=entries)
    finally:
        undo()
    failed = {f["Id"] for f in response["Failed"]}
    assert failed
    assert all(not f["SenderFault"] for f in response["Failed"])
    assert {s["Id"] for s in response["Successful"]} == {e["Id"] for e in entries} - failed
    assert depth(client, url) == len(entries) - len(failed)


def test_given_a_scope_when_a_thread_is_started_inside_it_then_the_thread_runs_in_it_until_undone():
    injector, undo = installed((faults.THROTTLE,), rate=0.0)
    seen: list[faults.Scope | None] = []
    outer = faults.Scope("ConsumerFunction")
    try:
        with faults.scope(outer):
            thread = threading.Thread(target=lambda: seen.append(faults.current()))
            thread.start()
            thread.join()
    finally:
        undo()
    thread = threading.Thread(target=lambda: seen.append(faults.current()))
    thread.start()
    thread.join()
    assert seen == [outer, None]
    assert not injector.counts


def test_given_a_lost_receive_response_then_its_messages_are_in_flight_and_empty_polls_are_never_counted(sqs):
    client, url = sqs
    injector, undo = installed((faults.LOST_RESPONSE,))
    try:
        with faults.scope(faults.Scope("esm:ConsumerFunction")):
            assert client.receive_message(QueueUrl=url).get("Messages", []) == []  # empty: not counted
        client.send_message(QueueUrl=url, MessageBody="x")  # by the harness (no scope): never faulted
        with faults.scope(faults.Scope("esm:ConsumerFunction")):
            # the SDK retries the lost receive; the retry finds nothing visible
            assert client.receive_message(QueueUrl=url).get("Messages", []) == []
    finally:
        undo()
    names = ["ApproximateNumberOfMessagesNotVisible"]
    in_flight = client.get_queue_attributes(QueueUrl=url, AttributeNames=names)["Attributes"][names[0]]
    assert in_flight == "1"
    assert injector.counts == {faults.LOST_RESPONSE: 1}


# --- the soak's report -------------------------------------------------------------------------------


def result(seed: int, **changes: Any) -> dict[str, Any]:
    """A seed's result line, read back: 8 orders, one poisoned; ``changes`` to the orders' tally, or to
    the seed's own fields."""
    from sluice_local.soak.result import SeedResult, Tally  # noqa: PLC0415 - the soak imports the local runtime

    orders = Tally(sent=8, processed=7, poison=1)
    base = SeedResult(
        seed=seed, mode="lambda", workloads={"Orders": orders}, faults={"throttle": 2},
        faults_at={"ConsumerFunction PutItem throttle": 2}, seconds=1.0,
    )  # fmt: skip
    for name, value in changes.items():
        setattr(orders if hasattr(orders, name) else base, name, value)
    return json.loads(base.to_json())


def test_given_a_failing_seed_when_reported_then_the_totals_say_so_and_name_its_replay():
    from sluice_local.soak.summary import Summary  # noqa: PLC0415 - the soak imports the local runtime

    summary = Summary(results=[result(1), result(2, lost=["s2-3"], processed=6)], workloads="orders")
    lines = summary.lines(rates="r", flags=" --aws-rate 0.2")
    assert not summary.ok
    assert "lost = 1, duplicated side effects = 0, unexpected = 0, misrouted = 0" in lines
    [orders] = [line for line in lines if line.startswith("Orders:")]
    assert orders == (
        "Orders: sent 16 = processed 13 + poison 2 + dead-lettered 0, lost 1, duplicated 0, unexpected 0, "
        "misrouted 0 ✗"
    )
    [failed] = [line for line in lines if line.startswith("FAILED")]
    assert failed.endswith("python -m sluice_local soak --seed 2 --aws-rate 0.2")


def test_given_only_passing_seeds_then_the_summary_is_ok_and_balanced():
    from sluice_local.soak.summary import Summary  # noqa: PLC0415 - the soak imports the local runtime

    summary = Summary(results=[result(1), result(3)], workloads="orders")
    assert summary.ok
    assert (
        "Orders: sent 16 = processed 14 + poison 2 + dead-lettered 0, lost 0, duplicated 0, unexpected 0, "
        "misrouted 0 ✓"
    ) in summary.lines(rates="r")
    assert not Summary().ok  # no seed ran: not a pass


def test_given_a_worker_line_that_is_no_seed_result_then_it_is_a_worker_error_not_a_crash():
    # A JSON line without a seed (an EMF document a handler still running after its stack stopped
    # printed: the runner once died sorting the results, KeyError 'seed') and a line that is no JSON
    from sluice_local.soak.summary import Summary  # noqa: PLC0415 - the soak imports the local runtime

    summary = Summary(expected=[1])
    summary.add(json.dumps(result(1)))
    summary.add('{"_aws": {"Timestamp": 1, "CloudWatchMetrics": []}, "RecordsProcessed": 1}')
    summary.add("Traceback (most recent call last):")

    assert [r["seed"] for r in summary.results] == [1]
    assert summary.errors == [
        'not a seed\'s result: {"_aws": {"Timestamp": 1, "CloudWatchMetrics": []}, "RecordsProcessed": 1}',
        "not a seed's result: Traceback (most recent call last):",
    ]
    assert not summary.ok


def test_given_an_effect_whose_guard_committed_then_a_later_fault_or_crash_does_not_excuse_its_duplicate():
    plan = faults.FaultPlan(seed=3, aws_rate=0.0, ledger_table="ledger", guard_table="guards")
    injector = faults.Injector(plan)
    with handler(faults.Scope("ConsumerFunction", crash_after=3)):
        injector.aws(
            "dynamodb", "PutItem", b'{"TableName": "ledger", "Item": {"effect_key": {"S": "o-3#charge"}}}'
        )
        injector.aws("dynamodb", "UpdateItem", b'{"TableName": "guards"}')
        injector.committed(ok=True)  # the guard's commit returned to its caller
        injector.aws("sqs", "ChangeMessageVisibility", b"{}")
        with pytest.raises(faults.SimulatedCrash):
            injector.aws("dynamodb", "PutItem", b'{"TableName": "guards"}')
    assert not injector.in_window


def test_given_a_lost_response_once_when_sent_then_the_sdk_retry_succeeds_and_it_is_sent_twice(sqs):
    client, url = sqs
    injector = faults.Injector(faults.FaultPlan(seed=11, aws_rate=0.5, only=(faults.LOST_RESPONSE,)))
    undo = faults.install(injector)
    try:
        with faults.scope(faults.Scope("ConsumerFunction")):
            for _ in range(6):
                client.send_message(QueueUrl=url, MessageBody="x")  # no error reaches the caller
    finally:
        undo()
    assert injector.counts[faults.LOST_RESPONSE] >= 1
    assert depth(client, url) == 6 + injector.counts[faults.LOST_RESPONSE]  # each lost one: a duplicate


def test_given_a_one_entry_partial_batch_then_nothing_is_sent_and_it_is_reported_failed(sqs):
    client, url = sqs
    _, undo = installed((faults.PARTIAL_BATCH,))
    try:
        with faults.scope(faults.Scope("ConsumerFunction")):
            response = client.send_message_batch(QueueUrl=url, Entries=[{"Id": "a", "MessageBody": "m"}])
    finally:
        undo()
    assert response.get("Successful", []) == []
    assert [f["Id"] for f in response["Failed"]] == ["a"]
    assert depth(client, url) == 0


def test_given_a_timed_out_invocation_then_its_thread_dies_at_its_next_call_and_its_effect_is_in_the_window():
    """Found by a loaded 50-seed soak (seed 7): the local runtime cannot stop a timed-out handler's thread,
    and one performed a side effect after its deadline, after another invocation had taken over its
    expired guard — a duplicate AWS cannot produce (Lambda stops a timed-out invocation)."""
    injector = faults.Injector(faults.FaultPlan(seed=7, aws_rate=0.0, ledger_table="ledger"))
    inner = faults.Scope("ConsumerFunction")  # no planned crash
    with handler(inner):
        injector.aws(
            "dynamodb", "PutItem", b'{"TableName": "ledger", "Item": {"effect_key": {"S": "o-7#charge"}}}'
        )
        injector.timed_out(inner)  # what the invoking thread does when the host reports Sandbox.Timedout
        with pytest.raises(faults.SimulatedCrash):
            injector.aws(
                "dynamodb", "PutItem", b'{"TableName": "ledger", "Item": {"effect_key": {"S": "o-7#notify"}}}'
            )
        with pytest.raises(faults.SimulatedCrash):
            injector.db("commit")
    assert injector.in_window == {"o-7#charge": 1}  # performed before the deadline, its guard never committed


PAST_ITS_DEADLINE = """\
import os
import sys
import time

import boto3


QUEUE = os.environ["QUEUE"]  # the cold start reads the function's environment


def lambda_handler(event, context):
    while context.get_remaining_time_in_millis() > 0:  # until Lambda would have stopped it
        time.sleep(0.01)
    boto3.client("sqs", region_name="us-east-1").send_message(QueueUrl=QUEUE, MessageBody="late")
    sys.modules["_late_signal"].set()  # (never reached when the call is stopped)
"""


def test_given_a_handler_past_its_deadline_when_its_timeout_is_not_told_yet_then_its_call_never_goes_out(
    sqs, tmp_path, monkeypatch
):
    """Found by a loaded short soak in CI (seed 3, ``s3-4#notify x2``): between the context's deadline and
    the moment the runtime's wait for the handler's thread ends (seconds, on a loaded machine), the thread
    ran on unhindered: it could perform a side effect whose guard had expired at that deadline and been
    taken over by a retry. Lambda stops the invocation at the deadline; so does the injector now."""
    from sluice_local.emulation.functions import FunctionError, FunctionHost, FunctionSpec  # noqa: PLC0415

    client, url = sqs
    (tmp_path / "late.py").write_text(PAST_ITS_DEADLINE)
    spec = FunctionSpec(
        logical_id="LateFunction", name="late", arn="arn:aws:lambda:us-east-1:1:function:late",
        code_dir=tmp_path, handler="late.lambda_handler", environment={"QUEUE": url}, timeout=1, memory=128,
    )  # fmt: skip
    host = FunctionHost(spec)
    # The runtime's verdict comes only once the late call was made or is being held: what a loaded
    # machine's scheduling can do, made certain
    reached = threading.Event()
    monkeypatch.setitem(sys.modules, "_late_signal", reached)
    drop, hold = FunctionHost._drop, faults.Injector.hold

    def verdict_once_reached(self: FunctionHost, environment: Any) -> None:
        reached.wait(30)
        drop(self, environment)

    def held(self: faults.Injector, here: faults.Scope, api: str) -> None:
        reached.set()
        hold(self, here, api)

    monkeypatch.setattr(FunctionHost, "_drop", verdict_once_reached)
    monkeypatch.setattr(faults.Injector, "hold", held)
    injector, undo = installed(only=(), rate=0.0)
    try:
        # When the handler calls AWS once its context says no time is left
        with pytest.raises(FunctionError) as failed:
            host.invoke({})
        (zombie,) = host.timed_out
        zombie.join(30)  # it dies at the call it was holding
    finally:
        undo()
    # Then the invocation timed out, its thread is gone, and the message was never sent
    assert failed.value.payload["errorType"] == "Sandbox.Timedout"
    assert not zombie.is_alive()
    assert injector.where == {"LateFunction Invoke timed-out (stopped at its next call)": 1}
    assert depth(client, url) == 0


def test_given_a_call_past_the_deadline_when_the_invocation_returned_in_time_then_it_goes_on():
    """A thread the handler left running (it returned before its deadline) is not killed by the hold."""
    injector = faults.Injector(faults.FaultPlan(seed=7, aws_rate=0.0))
    inner = faults.Scope("ConsumerFunction", deadline=0.0)  # long past
    inner.over.set()  # the runtime settled the invocation: it returned
    with handler(inner):
        assert injector.aws("sqs", "SendMessage", b"{}") is None
    assert not inner.crashed


def test_given_a_job_commit_that_fails_then_lands_on_retry_then_its_effect_is_not_excused():
    injector = faults.Injector(faults.FaultPlan(seed=1, aws_rate=0.0, ledger_table="ledger"))
    with handler(faults.Scope("JobConsumerFunction")):
        injector.aws(
            "dynamodb", "PutItem", b'{"TableName": "ledger", "Item": {"effect_key": {"S": "j-1#charge"}}}'
        )
        injector.committed(ok=False)  # the first try of the commit failed for good ...
        assert injector.in_window == {"j-1#charge": 1}
        injector.committed(ok=True)  # ... and the worker's retry landed: a second charge would be a bug
    assert not injector.in_window


# --- a guard's commit through botocore: only a failure its caller sees opens the window --------------


class _FirstCallOnly(faults.FaultPlan):
    """Faults the first attempt of each call site only (its SDK retry then succeeds)."""

    def roll(self, *key: object) -> float:
        return 0.0 if key[-1] == 0 else 1.0


@pytest.fixture
def guards() -> Iterator[Any]:
    with mock_aws():
        client = boto3.client(
            "dynamodb", region_name=REGION, config=Config(retries={"mode": "standard", "max_attempts": 3})
        )
        for name in ("guards", "ledger"):
            client.create_table(
                TableName=name, BillingMode="PAY_PER_REQUEST",
                KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
                AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
            )  # fmt: skip
        yield client


def perform_then_commit(
    client: Any, injector: faults.Injector, effect: str, inner: faults.Scope | None = None
) -> Exception | None:
    undo = faults.install(injector)
    try:
        with handler(inner or faults.Scope("ConsumerFunction")):
            client.put_item(TableName="ledger", Item={"id": {"S": effect}, "effect_key": {"S": effect}})
            try:
                client.update_item(
                    TableName="guards", Key={"id": {"S": effect}},
                    UpdateExpression="SET #s = :c", ExpressionAttributeNames={"#s": "status"},
                    ExpressionAttributeValues={":c": {"S": "COMPLETED"}},
                )  # fmt: skip
            except Exception as exc:  # noqa: BLE001 - what the caller saw
                return exc
            return None
    finally:
        undo()


def test_given_a_guard_commit_faulted_once_when_the_sdk_retry_lands_then_nothing_is_excused(guards):
    """Review finding: a throttled commit that botocore retried successfully excused a later duplicate."""
    plan = _FirstCallOnly(
        seed=1, aws_rate=0.5, only=(faults.THROTTLE,), guard_table="guards", ledger_table="ledger"
    )
    injector = faults.Injector(plan)
    seen = perform_then_commit(guards, injector, "o-1#charge")
    assert seen is None
    assert injector.counts[faults.THROTTLE] >= 1  # the commit's first attempt was throttled
    item = guards.get_item(TableName="guards", Key={"id": {"S": "o-1#charge"}})["Item"]
    assert item["status"]["S"] == "COMPLETED"
    assert not injector.in_window


def test_given_a_guard_commit_whose_every_attempt_fails_then_the_window_opens_once(guards):
    plan = faults.FaultPlan(
        seed=1, aws_rate=1.0, only=(faults.THROTTLE,), guard_table="guards", ledger_table="ledger"
    )
    injector = faults.Injector(plan)
    seen = perform_then_commit(guards, injector, "o-2#charge")
    assert isinstance(seen, ClientError)
    assert injector.in_window == {"o-2#charge": 1}  # one more performance is excused, not any number


def test_given_a_commit_whose_every_response_is_lost_then_it_landed_and_no_window_opens(guards):
    """Review finding: the window opened although the guard was COMPLETED. Powertools does not undo a
    ``save_success`` that raised, so the record's retry finds the guard completed and must not perform
    the effect again: a repeat there is a duplicate (a guard ignored), never excused."""
    plan = faults.FaultPlan(
        seed=1, aws_rate=1.0, only=(faults.LOST_EVERY_ATTEMPT,), guard_table="guards", ledger_table="ledger"
    )
    injector = faults.Injector(plan)
    seen = perform_then_commit(guards, injector, "o-3#charge")
    assert isinstance(seen, ReadTimeoutError)  # the caller saw the commit fail
    item = guards.get_item(TableName="guards", Key={"id": {"S": "o-3#charge"}})["Item"]
    assert item["status"]["S"] == "COMPLETED"
    assert not injector.in_window


def test_given_a_commit_that_landed_when_the_invocation_dies_on_its_retry_then_no_window_opens(guards):
    plan = faults.FaultPlan(
        seed=1, aws_rate=1.0, only=(faults.LOST_RESPONSE,), guard_table="guards", ledger_table="ledger"
    )
    injector = faults.Injector(plan)
    dying = faults.Scope("ConsumerFunction", crash_after=2)  # the ledger write, the commit's first attempt
    with pytest.raises(faults.SimulatedCrash):
        perform_then_commit(guards, injector, "o-5#charge", dying)
    item = guards.get_item(TableName="guards", Key={"id": {"S": "o-5#charge"}})["Item"]
    assert item["status"]["S"] == "COMPLETED"
    assert not injector.in_window


def test_given_a_redriver_crash_then_half_of_them_land_between_its_send_and_its_delete():
    from sluice_local.soak.runner import CRASH_POINTS  # noqa: PLC0415 - the soak imports the local runtime

    points = []
    for seed in range(200):
        plan = faults.FaultPlan(seed=seed, lambda_rate=1.0, only=(faults.CRASH,), crash_points=CRASH_POINTS)
        injector = faults.Injector(plan)
        _, inner = injector.invocation("OrdersRedriverFunction")
        points.append(inner.crash_before)
    share = points.count("DeleteMessageBatch") / len(points)
    assert 0.35 < share < 0.65
    injector = faults.Injector(faults.FaultPlan(seed=1, lambda_rate=1.0, only=(faults.CRASH,)))
    assert injector.invocation("ConsumerFunction")[1].crash_before == ""  # others die after N calls


def test_given_a_worker_that_died_when_reported_then_its_missing_seeds_fail_the_run():
    """Review finding: a worker that crashed part-way exited 1 like a failing seed; the seeds it never ran
    vanished from the report and the run could pass."""
    from sluice_local.soak.summary import Summary  # noqa: PLC0415 - the soak imports the local runtime

    summary = Summary(results=[result(1), result(3)], expected=[1, 2, 3], workloads="orders")
    assert summary.missing == [2]
    assert not summary.ok
    assert summary.lines(rates="r")[0] == "seeds run: 2 (r); MISSING 1: [2]"


def test_given_a_soak_with_the_jobs_when_no_postgresql_answered_then_the_run_fails_and_says_why():
    """Review finding: `make soak` passed without the job store having been soaked at all."""
    from sluice_local.soak.summary import Summary  # noqa: PLC0415 - the soak imports the local runtime

    skipped = [result(1, jobs_skipped="no PostgreSQL at 127.0.0.1:5432")]
    assert Summary(results=skipped, workloads="orders").ok  # the jobs are not asked for
    summary = Summary(results=skipped, workloads="all")
    assert not summary.ok
    assert any(line.startswith("FAILED: the job store was not soaked") for line in summary.lines(rates="r"))


def test_given_reports_from_both_modes_then_the_re_driven_orders_are_counted_per_mode():
    from sluice_local.soak.summary import Summary  # noqa: PLC0415 - the soak imports the local runtime

    summary = Summary(
        results=[result(1, redriven=["s1-4", "s1-5"]), result(3, redriven=["s3-1"])], workloads="orders"
    )
    assert "messages re-driven from a work DLQ: lambda 3, stepfunctions 0 (Orders 3)" in summary.lines(
        rates="r"
    )


@pytest.mark.parametrize(
    ("error", "a_bug"),
    [("TypeError", True), ("KeyError", True), ("RuntimeError", True), ("", False),
     ("TransientError", False), ("ClientError", False), ("ReadTimeoutError", False),
     ("TimeoutError", False), ("ConnectionError", False)],
)  # fmt: skip
def test_given_a_valid_order_isolated_then_only_an_error_no_fault_raises_is_called_a_bug(error, a_bug):
    """Review finding: any valid order isolated with a non-PermanentError was excused as exhausted, so a
    processor raising TypeError on every attempt would have passed the soak."""
    from sluice_local.soak.checker import _a_bug, _a_fault  # noqa: PLC0415 - the soak imports the local runtime

    assert _a_bug(error) is a_bug
    assert _a_fault(error) is not a_bug  # isolated part-way after it: exhausted, else misrouted


def test_given_an_order_not_isolated_or_refused_then_it_never_counts_as_run_out_under_the_faults():
    from sluice_local.soak.checker import _a_fault  # noqa: PLC0415 - the soak imports the local runtime

    assert not _a_fault(None)  # charged and not isolated anywhere: deleted part-way
    assert not _a_fault("PermanentError")  # a verdict, not bad luck


def test_given_a_job_commit_fenced_out_by_a_reaped_claim_then_its_effect_is_in_the_window():
    """Found by the 500-seed soak (seed 293, loaded machine): a worker whose claim was reaped while it
    retried its commit got LostClaim, another run charged again; the commit's statement had returned
    (touching no row), so the injector took it for landed and the checker reported a duplicate."""
    from sluice.errors import LostClaim  # noqa: PLC0415
    from sluice_local.soak.db_faults import judged_commits  # noqa: PLC0415 - the soak imports the local runtime

    def fenced_out(self: Any, claim: Any, result: Any = None) -> None:
        raise LostClaim("job j-2: claim t lost; the job is processing under another claim")

    injector = faults.Injector(faults.FaultPlan(seed=293, aws_rate=0.0, ledger_table="ledger"))
    commit = judged_commits(injector, fenced_out)
    with handler(faults.Scope("JobConsumerFunction")):
        injector.aws(
            "dynamodb", "PutItem", b'{"TableName": "ledger", "Item": {"effect_key": {"S": "j-2#charge"}}}'
        )
        with pytest.raises(LostClaim):
            commit(object(), object())
    assert injector.in_window == {"j-2#charge": 1}


def test_given_a_job_batch_commit_that_refuses_one_stale_claim_then_only_that_effect_is_in_the_window():
    """A job batch: three charges performed on one thread, then one commit for the three that reports the
    middle claim lost (reaped and re-claimed): that charge may run again, the other two may not."""
    import uuid  # noqa: PLC0415

    from sluice.errors import LostClaim  # noqa: PLC0415
    from sluice_local.soak.db_faults import judged_commits  # noqa: PLC0415 - the soak imports the local runtime

    ids = [uuid.uuid4() for _ in range(3)]

    class Claim:
        def __init__(self, job_id: uuid.UUID) -> None:
            self.job_id = job_id

    def commit_batch(self: Any, results: Any) -> dict[uuid.UUID, LostClaim]:
        return {ids[1]: LostClaim("reaped and claimed again")}

    injector = faults.Injector(faults.FaultPlan(seed=1, aws_rate=0.0, ledger_table="ledger"))
    commit = judged_commits(injector, commit_batch)
    with handler(faults.Scope("JobConsumerFunction")):
        for job_id in ids:
            item = f'{{"TableName": "ledger", "Item": {{"effect_key": {{"S": "{job_id}#charge"}}}}}}'
            injector.aws("dynamodb", "PutItem", item.encode())
        commit(object(), [(Claim(job_id), "{}") for job_id in ids])
    assert injector.in_window == {f"{ids[1]}#charge": 1}


def test_given_a_failed_guard_commit_then_neither_its_cleanup_nor_another_performers_commit_closes_it():
    """Review finding: a failed commit's opening was cancelled by the next successful commit of the same
    effect key (Powertools deleting the in-progress guard on the same thread, or the retry that performed
    the effect again), so the excused repeat was reported duplicated."""
    plan = faults.FaultPlan(seed=1, aws_rate=0.0, ledger_table="ledger", guard_table="guards")
    injector = faults.Injector(plan)
    ledger = b'{"TableName": "ledger", "Item": {"effect_key": {"S": "o-4#charge"}}}'
    first = faults.Scope("ConsumerFunction")
    with handler(first):
        injector.aws("dynamodb", "PutItem", ledger)
        assert injector.commits_guard("UpdateItem", {"TableName": "guards"})
        injector.committed(ok=False)  # save_success failed for good
        assert not injector.commits_guard("DeleteItem", {"TableName": "guards"})  # its cleanup: not judged
    second = faults.Scope("ConsumerFunction")  # the retry, after the guard expired
    with handler(second):
        injector.aws("dynamodb", "PutItem", ledger)
        injector.committed(ok=True)
    assert injector.in_window == {"o-4#charge": 1}  # the second performance stays excused


class _LedgerStack:
    """What the soak's checker reads of a stack here: the ledger table, through moto."""

    def __init__(self, client: Any) -> None:
        self.outputs = {"LedgerTableName": "ledger"}
        self._client = client

    def client(self, name: str) -> Any:
        assert name == "dynamodb"
        return self._client


def test_given_an_effect_performed_again_after_its_seed_was_checked_then_a_later_check_reports_it(guards):
    """Review finding: each seed counted only its own effects at its own check, so a performance written
    afterwards (by anything still running) went unseen."""
    from sluice_local.soak.checker import Checker  # noqa: PLC0415 - the soak imports the local runtime
    from sluice_local.soak.result import SeedResult  # noqa: PLC0415 - the soak imports the local runtime

    def perform(effect_key: str, n: int, effect: str = "charge") -> None:
        guards.put_item(
            TableName="ledger",
            Item={"id": {"S": f"{effect_key}/{n}"}, "effect_key": {"S": effect_key}, "effect": {"S": effect},
                  "order_id": {"S": effect_key.partition("#")[0]}},
        )  # fmt: skip

    def whole_ledger() -> dict[str, dict[str, list[str]]]:
        """What one read of the whole ledger reports, per workload: its unexpected, duplicated, misrouted."""
        result = SeedResult(seed=9, mode="lambda", workloads={}, faults={}, faults_at={}, seconds=0.0)
        checker._whole_ledger(result)
        return {
            name: {k: v for k, v in vars(t).items() if k in ("unexpected", "duplicated", "misrouted") and v}
            for name, t in result.workloads.items()
        }

    checker = Checker(_LedgerStack(guards), Path("unused.log"), mode="lambda")  # type: ignore[arg-type]
    checker._known["Orders"] = {"s1-0", "s2-0"}
    checker._known["Refunds"] = {"s1-0"}
    checker._checked = {"s1-0#charge": 1, "s1-0#notify": 1, "refund:s1-0#repay": 1}
    perform("s1-0#charge", 1)
    perform("s1-0#notify", 1, "notify")
    perform("refund:s1-0#repay", 1, "repay")  # the refund of the same id value: its own namespace
    assert whole_ledger() == {}

    perform("s1-0#charge", 2)  # seed 1's charge again, after seed 1 was checked
    perform("refund:s1-0#repay", 2, "repay")  # and its refund's repayment
    perform("s9-0#charge", 1)  # never sent
    perform("refund:s2-0#repay", 1, "repay")  # an order id, never sent as a refund
    perform("refund:s2-0#charge", 1)  # an order's effect keyed as a refund's
    perform("s2-0#repay", 1, "repay")  # a refund's effect keyed as an order's
    assert whole_ledger() == {
        "Orders": {
            "unexpected": ["s9-0"],
            "duplicated": ["s1-0#charge x2 (performed again after its seed's check: 1)"],
            "misrouted": ["s2-0#repay: a refund's 'repay' keyed outside refund:"],
        },
        "Refunds": {
            "unexpected": ["s2-0"],
            "duplicated": ["refund:s1-0#repay x2 (performed again after its seed's check: 1)"],
            "misrouted": ["refund:s2-0#charge: a 'charge' effect keyed as a refund's"],
        },
    }
    assert whole_ledger() == {}  # each reported once


@pytest.mark.subprocess
def test_given_workers_that_write_more_than_a_pipe_holds_then_the_soak_reads_them_all_at_once(tmp_path):
    """Found by the 500-seed soak of session 10: the workers' result lines were read one worker after
    another; a later worker's pipe filled and it blocked between seeds until the earlier ones ended.
    Here the first worker waits for the second to finish writing 400 KiB: read in turn, it never would."""
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    from sluice_local.soak.summary import Summary, gather  # noqa: PLC0415 - the soak imports the local runtime

    done = tmp_path / "second-done"
    line = json.dumps(result(1)).replace('"seed": 1', '"seed": %d')
    first = f"import pathlib,time\nprint({line!r} % 1, flush=True)\n" + (
        f"while not pathlib.Path({str(done)!r}).exists(): time.sleep(0.05)\n"
    )
    second = (
        f"import pathlib\nfor n in range(2, 2 + 400 * 1024 // {len(line)}): print({line!r} % n)\n"
        f"pathlib.Path({str(done)!r}).touch()\n"
    )
    processes = [
        (name, subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True))
        for name, code in (("first", first), ("second", second))
    ]
    summary = Summary()
    reader = threading.Thread(target=gather, args=(processes, summary, tmp_path), daemon=True)
    reader.start()
    reader.join(timeout=60)
    for _, process in processes:
        process.kill()
    assert not reader.is_alive(), "the second worker blocked on its full pipe"
    assert not summary.errors
    assert len(summary.results) == 1 + len(range(2, 2 + 400 * 1024 // len(line)))


ORDERS_ARN = "arn:aws:sqs:us-east-1:123456789012:soak-Orders-work"


class _PoisonedStack(_LedgerStack):
    """A stack whose queues hold these messages (by output), as the checker reads them."""

    def __init__(self, client: Any, queues: dict[str, list[dict[str, Any]]]) -> None:
        super().__init__(client)
        self.queues = queues
        self.outputs = {
            **self.outputs,
            "OrdersQueueArn": ORDERS_ARN,
            "RefundsQueueArn": ORDERS_ARN[:-11] + "Refunds-work",
        }

    def seal(self) -> Any:
        return TEST_SEAL

    def every_message(self, output: str) -> list[dict[str, Any]]:
        return self.queues.get(output, [])


def checked(queues: dict[str, list[dict[str, Any]]], sent: list[Any], guards: Any) -> Any:
    """The seed's result when ``sent`` ended in ``queues`` and nothing was performed."""
    from sluice_local.soak.checker import Checker  # noqa: PLC0415 - the soak imports the local runtime
    from sluice_local.soak.result import SeedResult  # noqa: PLC0415 - the soak imports the local runtime

    checker = Checker(_PoisonedStack(guards, queues), Path("unused.log"), mode="lambda")  # type: ignore[arg-type]
    checker._ledger = lambda key: 0  # type: ignore[method-assign]  # nothing performed
    plan = faults.FaultPlan(seed=1, aws_rate=0.0, ledger_table="ledger", guard_table="guards")
    result = SeedResult(seed=1, mode="lambda", workloads={}, faults={}, faults_at={}, seconds=1.0)
    checker._check(result, sent, faults.Injector(plan))
    return result


def isolated(envelope: Any, body: str = "{}", message_id: str = "p-1") -> dict[str, Any]:
    """A message as the checker reads it off a queue, with ``envelope``."""
    from sluice.envelope import merge  # noqa: PLC0415

    attributes = merge({}, envelope, body=body, seal=TEST_SEAL)
    return {"MessageId": message_id, "Body": body, "MessageAttributes": attributes}


def test_given_a_valid_order_poisoned_as_permanent_then_the_report_names_the_reason(guards):
    """A loaded run's seed failed as 'poisoned with a PermanentError' and passed alone: the report now
    carries the envelope's last error, so such a failure says why without a replay."""
    from sluice.envelope import Envelope  # noqa: PLC0415
    from sluice.errors import PermanentError  # noqa: PLC0415
    from sluice_local.soak.workload import Sent  # noqa: PLC0415

    # Given a delay-direct order found on the poison queue, refused as permanently bad
    reason = "deliver_at 2026-11-26T09:50:00+00:00 was more than 3s in the past when it was sent"
    poisoned = isolated(Envelope(origin_id="m-1").failed(PermanentError(reason)))

    # When its seed is checked
    result = checked({"PoisonPillQueueUrl": [poisoned]}, [Sent("s1-3", "delay-direct", ["m-1"])], guards)

    # Then it is misrouted, with the reason it was refused
    assert result.workloads["Orders"].misrouted == [
        f"s1-3 (delay-direct) poisoned with a PermanentError: {reason}"
    ]


def test_given_a_refund_isolated_as_the_orders_then_it_is_misrouted_in_the_refunds_tally(guards):
    """The poison queue is shared: a message is the seed's by its origin id, and its envelope's queue and
    its body must name the workload it was sent to. The DLQs are each workload's own."""
    from sluice.envelope import Envelope  # noqa: PLC0415
    from sluice.errors import PermanentError  # noqa: PLC0415
    from sluice_local.app import messages  # noqa: PLC0415
    from sluice_local.soak.workload import Sent  # noqa: PLC0415

    # Given refunds and an order of the same id values: one refund poisoned from the orders' queue, one in
    # the orders' DLQ, one poisoned from its own queue with an order's body; a fraud refund poisoned right
    fraud = PermanentError("refund s1-3 is flagged as fraud: not repaid")
    refunds_arn = ORDERS_ARN[:-11] + "Refunds-work"
    sent = [
        Sent("s1-0", "normal", ["m-0"], workload="Refunds"),
        Sent("s1-1", "normal", ["m-1"], workload="Refunds"),
        Sent("s1-2", "normal", ["m-2"], workload="Refunds"),
        Sent("s1-3", "permanent", ["m-3"], workload="Refunds"),
        Sent("s1-3", "permanent", ["m-4"]),
    ]
    queues = {
        "PoisonPillQueueUrl": [
            isolated(Envelope(origin_id="m-0", source=ORDERS_ARN).failed(fraud), message_id="p-0"),
            isolated(
                Envelope(origin_id="m-2", source=refunds_arn).failed(fraud),
                body=json.dumps(messages.order("s1-2")),
                message_id="p-2",
            ),
            isolated(Envelope(origin_id="m-3", source=refunds_arn).failed(fraud), message_id="p-3"),
            isolated(Envelope(origin_id="m-4", source=ORDERS_ARN).failed(fraud), message_id="p-4"),
        ],
        "OrdersDeadLetterQueueUrl": [isolated(Envelope(origin_id="m-1"), message_id="d-1")],
    }

    # When the seed is checked
    result = checked(queues, sent, guards)

    # Then each refund found where the orders' are is misrouted, in the refunds' tally; the order is fine
    refunds, orders = result.workloads["Refunds"], result.workloads["Orders"]
    assert {
        "refund s1-0 (normal) found in the poison queue of the Orders workload",
        "refund s1-1 (normal) found in the DLQ of the Orders workload",
        "refund s1-2 (normal) found in the poison queue of the Orders workload",
    } <= set(refunds.misrouted)
    assert not [line for line in refunds.misrouted if line.startswith("refund s1-3")]  # where it belongs
    assert (refunds.sent, refunds.poison, refunds.dead_lettered, refunds.lost) == (4, 3, 1, [])
    assert (orders.sent, orders.poison, orders.misrouted, orders.lost) == (1, 1, [], [])
    assert not refunds.ok
    assert orders.ok


@pytest.mark.parametrize(
    ("kind", "send_seconds", "late", "excused"),
    [("delay-direct", 5.5, True, True), ("delay-direct", 4.9, True, False),
     ("delay-parked", 11.5, True, True), ("delay-parked", 10.5, True, False),
     ("delay-direct", 30.0, False, False), ("normal", 30.0, True, False)],
)  # fmt: skip
def test_given_a_delay_request_refused_as_too_late_then_only_a_producer_stall_excuses_it(
    kind, send_seconds, late, excused
):
    """Seed 11 under load: a delay-direct order was poisoned as too late. Its refusal is allowed only when
    the producer's own clock saw its send take longer than its delay plus the grace (--fast: 2 s + 3 s),
    and only for that refusal, in the words the delay queue's check uses."""
    from datetime import UTC, datetime, timedelta  # noqa: PLC0415

    from sluice.delay.schedule import due_time  # noqa: PLC0415
    from sluice.envelope import Envelope  # noqa: PLC0415
    from sluice.errors import PermanentError  # noqa: PLC0415
    from sluice_local.soak.checker import _refused_late  # noqa: PLC0415 - the soak imports the local runtime
    from sluice_local.soak.workload import Sent  # noqa: PLC0415

    now = datetime.now(UTC)
    reason = "deliver_at has no time zone"
    if late:  # the delay queue's own refusal of a request that reached SQS past its grace
        with pytest.raises(PermanentError) as refused:
            due_time(Envelope(deliver_at=now - timedelta(seconds=10)), now=now, grace_seconds=3)
        reason = str(refused.value)
    assert _refused_late(Sent("s1-0", kind, send_seconds=send_seconds), reason) is excused
