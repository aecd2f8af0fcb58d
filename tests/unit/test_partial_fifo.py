"""The FIFO partial-batch loop (sluice.partial.each_record_in_order): Lambda's rule for a FIFO queue's
partial batch, Powertools' ``SqsFifoPartialProcessor`` semantics, state per call."""

from __future__ import annotations

from typing import Any

from sluice.partial import SqsRecord, each_record_in_order, is_fifo

ARN = "arn:aws:sqs:us-east-1:123456789012:work.fifo"


def _event(*groups: str) -> dict[str, Any]:
    """One record per group named, m0, m1, ... in that order."""
    return {
        "Records": [
            {
                "messageId": f"m{i}",
                "receiptHandle": f"rh-{i}",
                "eventSourceARN": ARN,
                "body": f"body {i}",
                "attributes": {"MessageGroupId": group},
            }
            for i, group in enumerate(groups)
        ]
    }


class Recorder:
    """A handler failing the message ids it is told to, remembering what ran and what was skipped."""

    def __init__(self, failing: set[str]) -> None:
        self.failing = failing
        self.ran: list[str] = []
        self.skipped: list[str] = []

    def __call__(self, record: SqsRecord) -> None:
        self.ran.append(record.message_id)
        if record.message_id in self.failing:
            raise RuntimeError(f"fails {record.message_id}")

    def skip(self, record: SqsRecord) -> None:
        self.skipped.append(record.message_id)


def _failures(response: dict[str, Any]) -> list[str]:
    return [f["itemIdentifier"] for f in response["batchItemFailures"]]


def test_given_a_failure_then_it_and_every_later_record_are_reported_and_none_after_it_runs() -> None:
    handler = Recorder({"m2"})

    response = each_record_in_order(_event("a", "b", "a", "b", "c"), handler, on_skipped=handler.skip)

    assert handler.ran == ["m0", "m1", "m2"]
    assert handler.skipped == ["m3", "m4"]  # other groups too: Lambda's default rule
    assert _failures(response) == ["m2", "m3", "m4"]


def test_given_skip_group_on_error_then_only_the_failed_groups_later_records_are_held_back() -> None:
    handler = Recorder({"m1"})

    response = each_record_in_order(
        _event("a", "b", "a", "b", "c", "b"), handler, skip_group_on_error=True, on_skipped=handler.skip
    )

    assert handler.ran == ["m0", "m1", "m2", "m4"]  # groups a and c go on
    assert handler.skipped == ["m3", "m5"]  # b's records after its failure, in order
    assert _failures(response) == ["m1", "m3", "m5"]


def test_given_mixed_groups_each_failing_then_each_group_stops_at_its_own_first_failure() -> None:
    handler = Recorder({"m0", "m3"})

    response = each_record_in_order(
        _event("a", "b", "a", "b", "c", "b", "a"), handler, skip_group_on_error=True, on_skipped=handler.skip
    )

    assert handler.ran == ["m0", "m1", "m3", "m4"]
    assert handler.skipped == ["m2", "m5", "m6"]
    assert _failures(response) == ["m0", "m2", "m3", "m5", "m6"]  # the event's order


def test_given_a_group_failed_in_one_call_then_the_next_call_runs_that_groups_records() -> None:
    # Given a warm environment whose previous batch failed group "a" (Powertools TS issue 3673)
    first = Recorder({"m0"})
    each_record_in_order(_event("a", "a"), first, skip_group_on_error=True, on_skipped=first.skip)
    assert first.skipped == ["m1"]

    # When the next batch of group "a" arrives
    second = Recorder(set())
    response = each_record_in_order(
        _event("a", "a"), second, skip_group_on_error=True, on_skipped=second.skip
    )

    # Then it is processed: the failed-group state was that call's only
    assert second.ran == ["m0", "m1"]
    assert response == {"batchItemFailures": []}


def test_given_no_failure_then_every_record_runs_in_order_and_nothing_is_reported() -> None:
    handler = Recorder(set())

    response = each_record_in_order(_event("a", "b", "a"), handler)

    assert handler.ran == ["m0", "m1", "m2"]
    assert response == {"batchItemFailures": []}


def test_a_queue_is_fifo_by_its_name_ending_in_dot_fifo_arn_or_url() -> None:
    assert is_fifo(ARN)
    assert is_fifo("https://sqs.us-east-1.amazonaws.com/123456789012/work.fifo")
    assert not is_fifo("arn:aws:sqs:us-east-1:123456789012:work")
