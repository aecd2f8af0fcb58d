"""Visibility heartbeat: which records are extended, how, and what happens when SQS says no."""

from __future__ import annotations

import threading
from typing import Any

from sluice.consumer import heartbeat as heartbeat_module
from sluice.consumer.heartbeat import SAFETY_SECONDS, Heartbeat, InFlight
from sluice.limits import MAX_VISIBILITY_SECONDS
from tests.clocks import Clock
from tests.doubles import FakeSqs

# How long a test waits for another thread to get somewhere it must get to. Generous: a loaded
# machine may not schedule a thread for a good while, and a wait returns as soon as its event is set.
# A thread that must NOT get somewhere (a call that should hold it) is never released before the
# test has looked, so a longer wait only makes such a bug take longer to report.
PATIENCE = 10.0

QUEUE_A = "https://sqs.us-east-1.amazonaws.com/123456789012/a"
QUEUE_B = "https://sqs.us-east-1.amazonaws.com/123456789012/b"


class BlockingSqs(FakeSqs):
    """A FakeSqs whose call number ``block`` (0-based) waits for ``release`` before returning."""

    def __init__(self, block: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.block = block
        self.blocked = threading.Event()  # the chosen call is in flight
        self.release = threading.Event()
        self.returned = threading.Event()  # the chosen call has returned

    def change_message_visibility_batch(self, **kwargs: Any) -> dict[str, Any]:
        if len(self.visibility_calls) != self.block:
            return super().change_message_visibility_batch(**kwargs)
        self.blocked.set()
        assert self.release.wait(timeout=3 * PATIENCE), "test never released the blocked call"
        try:
            return super().change_message_visibility_batch(**kwargs)
        finally:
            self.returned.set()


def _in_background(target: Any, *args: Any) -> threading.Event:
    """Runs ``target(*args)`` on a daemon thread; the event is set once it has returned."""
    done = threading.Event()

    def run() -> None:
        target(*args)
        done.set()

    threading.Thread(target=run, daemon=True).start()
    return done


def _records(count: int, queue_url: str = QUEUE_A, prefix: str = "m") -> list[InFlight]:
    return [InFlight(f"{prefix}{i}", f"rh-{prefix}{i}", queue_url) for i in range(count)]


def _heartbeat(sqs: FakeSqs, records: list[InFlight], **kwargs: Any) -> Heartbeat:
    kwargs.setdefault("visibility_timeout", 180)
    kwargs.setdefault("clock", Clock(1_000.0))
    return Heartbeat(sqs, records, **kwargs)  # type: ignore[arg-type]


def test_given_pending_records_when_beating_then_each_is_extended_by_the_visibility_timeout() -> None:
    sqs = FakeSqs()

    _heartbeat(sqs, _records(3)).beat()

    assert sqs.visibility_calls == [
        (
            QUEUE_A,
            [
                {"Id": "0", "ReceiptHandle": "rh-m0", "VisibilityTimeout": 180},
                {"Id": "1", "ReceiptHandle": "rh-m1", "VisibilityTimeout": 180},
                {"Id": "2", "ReceiptHandle": "rh-m2", "VisibilityTimeout": 180},
            ],
        )
    ]


def test_given_many_records_on_two_queues_when_beating_then_calls_hold_at_most_ten_of_one_queue() -> None:
    sqs = FakeSqs()
    records = _records(23, QUEUE_A, "a") + _records(3, QUEUE_B, "b")

    _heartbeat(sqs, records).beat()

    assert [(url, len(entries)) for url, entries in sqs.visibility_calls] == [
        (QUEUE_A, 10),
        (QUEUE_A, 10),
        (QUEUE_A, 3),
        (QUEUE_B, 3),
    ]
    assert sorted(sqs.handles()) == sorted(r.receipt_handle for r in records)
    for _, entries in sqs.visibility_calls:
        assert [e["Id"] for e in entries] == [str(i) for i in range(len(entries))]


def test_given_records_on_interleaved_queues_when_beating_then_each_call_targets_the_records_queue() -> None:
    sqs = FakeSqs()
    records = [InFlight(f"m{i}", f"rh-m{i}", QUEUE_A if i % 2 else QUEUE_B) for i in range(6)]

    _heartbeat(sqs, records).beat()

    by_url = {url: [e["ReceiptHandle"] for e in entries] for url, entries in sqs.visibility_calls}
    assert by_url == {QUEUE_A: ["rh-m1", "rh-m3", "rh-m5"], QUEUE_B: ["rh-m0", "rh-m2", "rh-m4"]}


def test_given_a_succeeded_record_when_others_are_pending_then_it_is_still_extended() -> None:
    sqs = FakeSqs()
    heartbeat = _heartbeat(sqs, _records(3))

    heartbeat.succeed("m0")
    heartbeat.beat()

    assert sorted(sqs.handles()) == ["rh-m0", "rh-m1", "rh-m2"]


def test_given_a_settled_record_when_beating_then_it_is_no_longer_extended() -> None:
    sqs = FakeSqs()
    heartbeat = _heartbeat(sqs, _records(3))
    heartbeat.beat()

    heartbeat.settle("m1")
    heartbeat.beat()

    assert sorted(sqs.handles(1)) == ["rh-m0", "rh-m2"]


def test_given_only_succeeded_records_remain_when_beating_then_nothing_is_extended() -> None:
    sqs = FakeSqs()
    heartbeat = _heartbeat(sqs, _records(2))

    heartbeat.succeed("m0")
    heartbeat.settle("m1")
    heartbeat.beat()

    assert sqs.visibility_calls == []


def test_given_no_records_when_beating_then_nothing_is_extended() -> None:
    sqs = FakeSqs()

    _heartbeat(sqs, []).beat()

    assert sqs.visibility_calls == []


def test_given_successful_extensions_when_beating_then_they_are_counted_and_reported() -> None:
    sqs = FakeSqs()
    reported: list[int] = []
    heartbeat = _heartbeat(sqs, _records(12), on_extended=reported.append)

    heartbeat.beat()

    assert reported == [10, 2]
    assert heartbeat.extensions == 12


def test_given_sqs_refuses_a_handle_when_beating_then_it_is_reported_and_dropped() -> None:
    sqs = FakeSqs(refuse={"rh-m1", "rh-m2"})
    errors: list[tuple[str, str]] = []
    extended: list[int] = []
    heartbeat = _heartbeat(
        sqs, _records(4), on_error=lambda mid, why: errors.append((mid, why)), on_extended=extended.append
    )
    heartbeat.succeed("m2")

    heartbeat.beat()
    heartbeat.beat()

    assert [mid for mid, _ in errors] == ["m1", "m2"]
    assert all("ReceiptHandleIsInvalid" in why for _, why in errors)
    assert sorted(sqs.handles(1)) == ["rh-m0", "rh-m3"]
    assert extended == [2, 2]


def test_given_sqs_raises_when_beating_then_every_record_of_the_chunk_is_reported_not_raised() -> None:
    sqs = FakeSqs(error=ConnectionError("endpoint unreachable"))
    errors: list[tuple[str, str]] = []
    heartbeat = _heartbeat(sqs, _records(12), on_error=lambda mid, why: errors.append((mid, why)))

    heartbeat.beat()

    assert sorted(mid for mid, _ in errors) == sorted(f"m{i}" for i in range(12))
    assert all("endpoint unreachable" in why for _, why in errors)
    assert heartbeat.extensions == 0


def test_given_sqs_raised_once_when_beating_again_then_the_records_are_still_extended() -> None:
    sqs = FakeSqs(error=ConnectionError("blip"))
    heartbeat = _heartbeat(sqs, _records(2))
    heartbeat.beat()

    sqs.error = None
    heartbeat.beat()

    assert sorted(sqs.handles(1)) == ["rh-m0", "rh-m1"]


def test_given_the_twelve_hour_budget_is_nearly_spent_when_beating_then_only_the_remainder_is_requested() -> (
    None
):
    sqs = FakeSqs()
    clock = Clock(1_000.0)
    heartbeat = _heartbeat(sqs, _records(1), visibility_timeout=900, batch_window=20, clock=clock)

    clock.now += MAX_VISIBILITY_SECONDS - 20 - 100  # 100 s left of 12 h, counting the batching window
    heartbeat.beat()

    assert sqs.visibility_calls[0][1][0]["VisibilityTimeout"] == 100 - SAFETY_SECONDS


def test_given_a_long_batch_when_beating_repeatedly_then_no_request_exceeds_the_remaining_budget() -> None:
    sqs = FakeSqs()
    clock = Clock(0.0)
    window = 30
    heartbeat = _heartbeat(sqs, _records(1), visibility_timeout=5400, batch_window=window, clock=clock)

    requests: dict[int, int] = {}
    for elapsed in range(0, MAX_VISIBILITY_SECONDS + 3600, 1800):
        clock.now = elapsed
        heartbeat.beat()
        if sqs.visibility_calls:
            requests[elapsed] = sqs.visibility_calls.pop()[1][0]["VisibilityTimeout"]

    assert len(requests) == MAX_VISIBILITY_SECONDS // 1800
    for elapsed, requested in requests.items():
        assert 0 < requested <= 5400
        assert elapsed + window + requested <= MAX_VISIBILITY_SECONDS


def test_given_the_twelve_hour_budget_is_spent_when_beating_then_nothing_is_requested() -> None:
    sqs = FakeSqs()
    clock = Clock(0.0)
    heartbeat = _heartbeat(sqs, _records(1), clock=clock)

    clock.now = MAX_VISIBILITY_SECONDS - SAFETY_SECONDS
    heartbeat.beat()

    assert sqs.visibility_calls == []


class ThreadSqs(FakeSqs):
    """A FakeSqs that remembers which thread made each visibility call."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: list[threading.Thread] = []

    def change_message_visibility_batch(self, **kwargs: Any) -> dict[str, Any]:
        self.threads.append(threading.current_thread())
        return super().change_message_visibility_batch(**kwargs)


def _batch_beaten(sqs: ThreadSqs, prefix: str, then: Any = None) -> Heartbeat:
    """One batch of two records held until the heartbeat has extended them (a beat every 0.2 s); ``then``
    runs inside the batch after that."""
    with Heartbeat(sqs, _records(2, prefix=prefix), visibility_timeout=1, fraction=0.2) as heartbeat:  # type: ignore[arg-type]
        assert sqs.called.wait(timeout=PATIENCE)
        sqs.called.clear()
        if then is not None:
            then()
    return heartbeat


def test_given_batches_on_the_main_thread_when_the_interval_passes_then_one_shared_thread_beats_each() -> (
    None
):
    # Given the main thread, as the Lambda runtime calls the handler (pytest runs tests on it)
    assert threading.current_thread() is threading.main_thread()
    sqs = ThreadSqs()
    pacer = heartbeat_module._MAIN

    # When two batches run one after the other, each outliving its interval (the shared thread held from
    # ending between them: it ends when it wakes with no batch, and this test must not depend on how soon
    # a loaded machine runs the second batch)
    first = _batch_beaten(sqs, "a", then=pacer._cond.acquire)
    beats_of_first = len(sqs.visibility_calls)
    try:
        second_entered = Heartbeat(sqs, _records(2, prefix="b"), visibility_timeout=1, fraction=0.2)  # type: ignore[arg-type]
        second_entered.__enter__()
    finally:
        pacer._cond.release()
    assert sqs.called.wait(timeout=PATIENCE)
    second_entered.__exit__(None, None, None)

    # Then both were extended, by one thread that is neither this one nor one of their own
    assert first.extensions >= 2
    assert second_entered.extensions >= 2
    assert first._thread is None
    assert second_entered._thread is None
    assert len({t.ident for t in sqs.threads}) == 1
    assert sqs.threads[0] is not threading.current_thread()
    assert sqs.threads[0].name == "sluice-heartbeat"
    # and no beat of a batch came after its exit (each exit waits for a beat of its batch in flight)
    assert all(e[0]["ReceiptHandle"].startswith("rh-a") for _, e in sqs.visibility_calls[:beats_of_first])
    assert all(e[0]["ReceiptHandle"].startswith("rh-b") for _, e in sqs.visibility_calls[beats_of_first:])


def test_given_a_batch_left_when_its_next_beat_would_be_due_then_no_beat_of_it_comes() -> None:
    sqs = ThreadSqs()
    _batch_beaten(sqs, "a")
    calls = len(sqs.visibility_calls)

    # When more than its interval (0.2 s) passes after the batch left: the shared thread wakes and ends
    thread = sqs.threads[-1]
    thread.join(PATIENCE)

    # Then it made no call for the batch that left, and it has ended (the next batch starts it again)
    assert len(sqs.visibility_calls) == calls
    assert not thread.is_alive()
    _batch_beaten(sqs, "b")
    assert sqs.threads[-1] is not thread


def test_given_a_batch_on_another_thread_when_the_interval_passes_then_a_thread_of_its_own_extends_it() -> (
    None
):
    sqs = ThreadSqs()
    seen: list[Heartbeat] = []

    def batch() -> None:  # a thread other than the main one (the local runtime's invocations)
        with Heartbeat(sqs, _records(2), visibility_timeout=1, fraction=0.2) as heartbeat:  # type: ignore[arg-type]
            seen.append(heartbeat)
            thread = heartbeat._thread
            assert thread is not None
            assert sqs.called.wait(timeout=PATIENCE)
        assert not thread.is_alive()

    assert _in_background(batch).wait(timeout=2 * PATIENCE)
    assert seen[0].extensions >= 2
    assert sqs.threads[0] is not threading.main_thread()
    assert sqs.visibility_calls[0][1][0]["VisibilityTimeout"] == 1


def test_given_no_records_when_entered_then_no_thread_is_started() -> None:
    sqs = FakeSqs()

    with Heartbeat(sqs, [], visibility_timeout=1, fraction=0.2) as heartbeat:  # type: ignore[arg-type]
        assert heartbeat._thread is None
        assert heartbeat._pacer is None

    assert sqs.visibility_calls == []


def test_given_a_beat_in_flight_when_its_batch_exits_then_exit_returns_once_the_call_has() -> None:
    sqs = BlockingSqs(block=0)
    heartbeat = Heartbeat(sqs, _records(2), visibility_timeout=1, fraction=0.2)  # type: ignore[arg-type]
    heartbeat.__enter__()
    assert sqs.blocked.wait(timeout=PATIENCE)

    exited = _in_background(heartbeat.__exit__, None, None, None)
    assert not exited.wait(timeout=0.5), "exit returned while a beat of its batch was in flight"
    sqs.release.set()

    assert exited.wait(timeout=PATIENCE)
    assert sqs.returned.is_set()


# --- a beat's calls are made without the lock --------------------------------------------------


def test_given_a_call_in_flight_when_a_record_succeeds_then_succeed_returns_at_once_and_it_rides_along() -> (
    None
):
    sqs = BlockingSqs(block=0)
    heartbeat = _heartbeat(sqs, _records(25))
    beat_done = _in_background(heartbeat.beat)
    assert sqs.blocked.wait(timeout=PATIENCE)

    in_blocked_chunk = _in_background(heartbeat.succeed, "m3")
    in_later_chunk = _in_background(heartbeat.succeed, "m17")

    assert in_blocked_chunk.wait(timeout=PATIENCE)
    assert in_later_chunk.wait(timeout=PATIENCE)
    assert not sqs.returned.is_set()
    sqs.release.set()
    assert beat_done.wait(timeout=PATIENCE)
    assert sorted(sqs.handles()) == sorted(r.receipt_handle for r in _records(25))
    assert heartbeat.extensions == 25


def test_given_a_call_in_flight_when_a_later_record_is_settled_then_it_returns_at_once_and_is_skipped() -> (
    None
):
    sqs = BlockingSqs(block=0)
    heartbeat = _heartbeat(sqs, _records(25))
    beat_done = _in_background(heartbeat.beat)
    assert sqs.blocked.wait(timeout=PATIENCE)

    settled = _in_background(heartbeat.settle, "m17")

    assert settled.wait(timeout=PATIENCE)
    assert not sqs.returned.is_set()
    sqs.release.set()
    assert beat_done.wait(timeout=PATIENCE)
    # Then the rest of the beat skips it (and packs the others into full calls)
    assert "rh-m17" not in sqs.handles()
    assert [len(entries) for _, entries in sqs.visibility_calls] == [10, 10, 4]
    assert heartbeat.extensions == 24


def test_given_a_call_in_flight_when_a_record_of_that_call_is_settled_then_settle_waits_for_the_call() -> (
    None
):
    sqs = BlockingSqs(block=1)
    heartbeat = _heartbeat(sqs, _records(25))
    beat_done = _in_background(heartbeat.beat)
    assert sqs.blocked.wait(timeout=PATIENCE)
    returned_before_settle: list[bool] = []

    def settle() -> None:
        heartbeat.settle("m13")
        returned_before_settle.append(sqs.returned.is_set())

    settled = _in_background(settle)

    assert not settled.wait(timeout=0.1)  # held while the call carrying m13 is in flight
    sqs.release.set()
    assert settled.wait(timeout=PATIENCE)
    assert returned_before_settle == [True]
    assert beat_done.wait(timeout=PATIENCE)
    heartbeat.beat()
    assert "rh-m13" not in sqs.handles(3)


def test_given_a_call_in_flight_when_a_record_of_an_earlier_call_is_settled_then_settle_returns_at_once() -> (
    None
):
    sqs = BlockingSqs(block=1)
    heartbeat = _heartbeat(sqs, _records(25))
    beat_done = _in_background(heartbeat.beat)
    assert sqs.blocked.wait(timeout=PATIENCE)

    settled = _in_background(heartbeat.settle, "m2")

    assert settled.wait(timeout=PATIENCE)
    sqs.release.set()
    assert beat_done.wait(timeout=PATIENCE)


def test_given_a_beat_in_progress_when_the_last_pending_record_finishes_then_the_rest_of_it_is_skipped() -> (
    None
):
    sqs = BlockingSqs(block=0)
    heartbeat = _heartbeat(sqs, _records(25))
    for i in range(1, 25):
        heartbeat.succeed(f"m{i}")
    beat_done = _in_background(heartbeat.beat)
    assert sqs.blocked.wait(timeout=PATIENCE)

    heartbeat.succeed("m0")
    sqs.release.set()

    assert beat_done.wait(timeout=PATIENCE)
    assert (
        len(sqs.visibility_calls) == 1
    )  # only succeeded records are left: they do not need a call of their own


def test_given_a_settle_waiting_on_a_call_when_sqs_refuses_the_record_then_it_is_reported() -> None:
    sqs = BlockingSqs(block=0, refuse={"rh-m1"})
    errors: list[str] = []
    heartbeat = _heartbeat(sqs, _records(3), on_error=lambda mid, why: errors.append(mid))
    beat_done = _in_background(heartbeat.beat)
    assert sqs.blocked.wait(timeout=PATIENCE)

    settled = _in_background(heartbeat.settle, "m1")
    sqs.release.set()

    assert settled.wait(timeout=PATIENCE)
    assert beat_done.wait(timeout=PATIENCE)
    assert errors == ["m1"]
    heartbeat.beat()
    assert sorted(sqs.handles(1)) == ["rh-m0", "rh-m2"]
