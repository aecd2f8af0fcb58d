"""Visibility heartbeat: which records are extended, how, and what happens when SQS says no."""

from __future__ import annotations

import threading
from typing import Any

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


def test_given_a_running_heartbeat_when_the_interval_passes_then_the_thread_extends_and_stops_on_exit() -> (
    None
):
    sqs = FakeSqs()

    with Heartbeat(sqs, _records(2), visibility_timeout=1, fraction=0.2) as heartbeat:  # type: ignore[arg-type]
        thread = heartbeat._thread
        assert sqs.called.wait(timeout=PATIENCE)

    assert thread is not None
    assert not thread.is_alive()
    assert heartbeat.extensions >= 2
    assert sqs.visibility_calls[0][1][0]["VisibilityTimeout"] == 1


def test_given_no_records_when_entered_then_no_thread_is_started() -> None:
    sqs = FakeSqs()

    with Heartbeat(sqs, [], visibility_timeout=1, fraction=0.2) as heartbeat:  # type: ignore[arg-type]
        assert heartbeat._thread is None

    assert sqs.visibility_calls == []


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
