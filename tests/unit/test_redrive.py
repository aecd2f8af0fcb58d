"""Redrive planning and decisions: full-jitter bounds, cap, floor, poison threshold, routing beyond the
threshold, envelope bookkeeping, source allowlist, bounce detection and settings."""

from __future__ import annotations

import base64
import json
import math
import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from sluice.envelope import ATTRIBUTE, Envelope, ErrorInfo, split
from sluice.errors import ConfigurationError, PermanentError
from sluice.limits import MAX_LONG_DELAY_SECONDS
from sluice.redrive.plan import (
    MAX_HOLD_WAIT,
    SOURCE_ATTRIBUTE,
    Decision,
    DlqMessage,
    decide,
    plan,
    source_queue,
)
from sluice.redrive.settings import RedriveSettings
from sluice.sqs import queue_url_from_arn
from tests.conftest import ENVELOPE_KEY_ARN

SOURCE = "arn:aws:sqs:us-east-1:123456789012:work"


def _lowest(a: float, b: float) -> float:
    return a


def _highest(a: float, b: float) -> float:
    return b


@pytest.mark.parametrize("attempts_so_far", range(0, 5))
def test_given_attempts_below_the_maximum_when_planned_then_the_delay_is_within_full_jitter_bounds(
    attempts_so_far: int,
) -> None:
    rng = random.Random(attempts_so_far)
    attempt = attempts_so_far + 1
    top = min(3600.0, 10 * 2**attempt)
    for _ in range(500):
        p = plan(attempts_so_far, max_attempts=5, base=10, cap=3600, floor=5, uniform=rng.uniform)
        assert p.attempt == attempt
        assert not p.poison
        assert 5 <= p.delay_seconds <= math.ceil(top)


def test_given_a_large_attempt_when_planned_then_the_cap_bounds_the_delay() -> None:
    p = plan(40, max_attempts=100, base=10, cap=600, uniform=_highest)
    assert p.delay_seconds == 600


def test_given_the_lowest_draw_when_planned_then_the_floor_holds() -> None:
    assert plan(0, max_attempts=5, base=10, cap=600, floor=30, uniform=_lowest).delay_seconds == 30


def test_given_a_floor_above_the_exponential_term_when_planned_then_the_floor_wins() -> None:
    # base * 2^1 = 2 < floor 30: the window collapses to the floor
    assert plan(0, max_attempts=5, base=1, cap=600, floor=30, uniform=_highest).delay_seconds == 30


@pytest.mark.parametrize(("attempts_so_far", "poison"), [(3, False), (4, False), (5, True), (9, True)])
def test_given_the_attempt_count_when_planned_then_poison_starts_after_the_maximum(
    attempts_so_far: int, poison: bool
) -> None:
    p = plan(attempts_so_far, max_attempts=5, base=10, cap=600, uniform=_highest)
    assert p.poison is poison
    assert p.attempt == attempts_so_far + 1
    if poison:
        assert p.delay_seconds == 0
        assert not p.via_delay_pipeline


@pytest.mark.parametrize(("delay", "via_delay"), [(899, False), (900, False), (901, True), (86_400, True)])
def test_given_a_delay_beyond_the_direct_send_threshold_when_planned_then_it_goes_through_the_delay_pipeline(
    delay: int, via_delay: bool
) -> None:
    p = plan(0, max_attempts=5, base=delay, cap=delay, floor=delay, uniform=_highest)
    assert p.delay_seconds == delay
    assert p.via_delay_pipeline is via_delay


def test_given_a_smaller_threshold_when_planned_then_routing_follows_it() -> None:
    p = plan(0, max_attempts=5, base=10, cap=10, floor=10, direct_send_threshold=6, uniform=_highest)
    assert p.via_delay_pipeline


def test_given_an_enormous_cap_when_planned_then_the_delay_stays_within_a_year() -> None:
    p = plan(60, max_attempts=100, base=1e9, cap=1e12, uniform=_highest)
    assert p.delay_seconds == MAX_LONG_DELAY_SECONDS


@pytest.mark.parametrize(
    "kwargs",
    [
        {"attempts_so_far": -1},
        {"max_attempts": 0},
        {"floor": 700},
        {"direct_send_threshold": 901},
    ],
)
def test_given_invalid_inputs_when_planned_then_value_error(kwargs: dict) -> None:
    args = {"attempts_so_far": 0, "max_attempts": 5, "base": 10, "cap": 600, **kwargs}
    attempts = args.pop("attempts_so_far")
    with pytest.raises(ValueError):  # noqa: PT011 - each case names its own problem
        plan(attempts, **args)


def test_given_the_dlq_source_attribute_when_resolving_then_it_wins_over_the_recorded_source() -> None:
    other = "arn:aws:sqs:us-east-1:123456789012:other"
    assert (
        source_queue({"DeadLetterQueueSourceArn": other}, recorded=SOURCE, allowlist=[SOURCE, other]) == other
    )


def test_given_no_source_attribute_when_resolving_then_the_recorded_source_is_used() -> None:
    assert source_queue({}, recorded=SOURCE, allowlist=[SOURCE]) == SOURCE


def test_given_a_source_outside_the_allowlist_when_resolving_then_permanent_error() -> None:
    with pytest.raises(PermanentError, match="not in the redrive allowlist"):
        source_queue(
            {"DeadLetterQueueSourceArn": "arn:aws:sqs:us-east-1:999999999999:evil"},
            recorded=None,
            allowlist=[SOURCE],
        )


def test_given_a_recorded_source_outside_the_allowlist_when_resolving_then_it_is_refused_by_name() -> None:
    # Given a recorded source the allowlist does not hold, and another queue that it does
    other = "arn:aws:sqs:us-east-1:123456789012:refunds"
    # When resolved / Then refused, naming the source and the allowlist: never sent to another queue
    with pytest.raises(PermanentError) as refused:
        source_queue({}, recorded=other, allowlist=[SOURCE])
    assert str(refused.value) == f"source queue {other!r} is not in the redrive allowlist ({SOURCE})"


def test_given_no_source_at_all_when_resolving_then_permanent_error() -> None:
    with pytest.raises(PermanentError, match="no source queue"):
        source_queue(None, recorded=None, allowlist=[SOURCE])


# --- decide(): one dead-lettered message -------------------------------------------------------

NOW = datetime(2026, 11, 22, 12, 0, 0, tzinfo=UTC)
ACCOUNT = "123456789012"
WORK_URL = f"https://sqs.us-east-1.amazonaws.com/{ACCOUNT}/work"
OTHER = f"arn:aws:sqs:us-east-1:{ACCOUNT}:other"
DELAY_ARN = f"arn:aws:sqs:us-east-1:{ACCOUNT}:delay"
DLQ_URL = f"https://sqs.us-east-1.amazonaws.com/{ACCOUNT}/work-dlq"
DELAY_URL = f"https://sqs.us-east-1.amazonaws.com/{ACCOUNT}/delay"
POISON_URL = f"https://sqs.us-east-1.amazonaws.com/{ACCOUNT}/poison"
TRACE = "Root=1-6740f000-0123456789abcdef01234567;Parent=53995c3f42cd8ad8;Sampled=1"
BODY = '{"order_id": "ord-1"}'
COOLDOWN = 300


def redrive_settings(**overrides: object) -> RedriveSettings:
    env = {
        "SLUICE_DEAD_LETTER_QUEUE_URL": DLQ_URL,
        "SLUICE_POISON_QUEUE_URL": POISON_URL,
        "SLUICE_ENVELOPE_KEY_SECRET": ENVELOPE_KEY_ARN,
        "SLUICE_SOURCE_QUEUE_ARN": SOURCE,
        "SLUICE_REDRIVE_SOURCES": f"{SOURCE}, {OTHER}",
        "SLUICE_DELAY_QUEUE_URL": DELAY_URL,
        "SLUICE_REDRIVE_MAX_ATTEMPTS": "5",
        "SLUICE_REDRIVE_BASE_SECONDS": "60",
        "SLUICE_REDRIVE_CAP_SECONDS": "3600",
        "SLUICE_REDRIVE_FLOOR_SECONDS": "1",
        "SLUICE_BREAKER_TABLE": "breaker",
        "SLUICE_BREAKER_COOLDOWN_SECONDS": str(COOLDOWN),
    }
    env.update({f"SLUICE_{k.upper()}": str(v) for k, v in overrides.items()})
    return RedriveSettings.from_env({k: v for k, v in env.items() if v != ""})


class UrlOf:
    """Records every ARN → URL lookup ``decide`` asks for."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def __call__(self, arn: str) -> str:
        self.asked.append(arn)
        return queue_url_from_arn(arn)


def string(value: str) -> dict[str, Any]:
    return {"DataType": "String", "StringValue": value}


def dlq_message(
    *,
    envelope: Envelope | str | None = None,
    attributes: dict[str, dict[str, Any]] | None = None,
    system: dict[str, str] | None = None,
    message_id: str = "dlq-msg-1",
) -> DlqMessage:
    """A ReceiveMessage entry as boto3 returns it (binary values as bytes)."""
    message_attributes = dict(attributes or {})
    if envelope is not None:
        raw = envelope if isinstance(envelope, str) else envelope.to_json()
        message_attributes[ATTRIBUTE] = string(raw)
    api: dict[str, Any] = {
        "MessageId": message_id,
        "ReceiptHandle": f"rh-{message_id}",
        "Body": BODY,
        "Attributes": {"ApproximateReceiveCount": "5", "SentTimestamp": "1795860000000", **(system or {})},
    }
    if message_attributes:
        api["MessageAttributes"] = message_attributes
    return DlqMessage.from_api(api)


def sent_envelope(decision: Decision) -> Envelope:
    """The envelope as it travels (the attribute), checked against the decision's own copy."""
    _, envelope, problem = split(decision.attributes, body="", seal=None)
    assert problem is None
    assert envelope == decision.envelope
    return envelope


def decided(message: DlqMessage, settings: RedriveSettings | None = None, **kwargs: Any) -> Decision:
    kwargs.setdefault("uniform", _highest)
    kwargs.setdefault("seal", None)
    return decide(
        message, settings or redrive_settings(), now=NOW, url_of=kwargs.pop("url_of", UrlOf()), **kwargs
    )


@pytest.mark.parametrize("seed", range(20))
def test_given_a_first_time_dead_lettered_message_when_decided_then_it_goes_back_to_its_source_within_bounds(
    seed: int,
) -> None:
    url_of = UrlOf()
    message = dlq_message(system={SOURCE_ATTRIBUTE: SOURCE, "AWSTraceHeader": TRACE})
    d = decide(
        message, redrive_settings(), now=NOW, url_of=url_of, uniform=random.Random(seed).uniform, seal=None
    )
    assert d.action == "redrive"
    assert url_of.asked == [SOURCE]
    assert d.destination == WORK_URL
    assert d.attempt == 1
    assert 1 <= d.delay_seconds <= 120  # uniform(floor 1, min(cap 3600, 60 · 2^1))
    assert d.send_delay_seconds == d.delay_seconds
    assert (d.message_id, d.receipt_handle, d.body) == ("dlq-msg-1", "rh-dlq-msg-1", BODY)
    assert not d.bouncing
    assert d.envelope_problem is None
    env = sent_envelope(d)
    assert env.origin_id == "dlq-msg-1"
    assert env.attempts == 1
    assert env.redriven_at == NOW + timedelta(seconds=d.delay_seconds)  # due on its source again
    assert env.first_failure == NOW
    assert env.last_error is not None
    assert env.last_error.type == "MaxReceiveCountExceeded"
    assert env.last_error.at == NOW
    assert env.last_error.receives == 5
    assert env.source == SOURCE
    assert env.trace == TRACE
    assert env.deliver_at is None
    assert env.target is None


def test_given_user_attributes_when_decided_then_they_travel_untouched_beside_the_envelope() -> None:
    user = {
        "tenant": string("acme"),
        "amount": {"DataType": "Number", "StringValue": "42"},
        "signature": {"DataType": "Binary", "BinaryValue": b"\x00\xffsig"},
    }
    d = decided(dlq_message(attributes=user, system={SOURCE_ATTRIBUTE: SOURCE}))
    assert set(d.attributes) == {*user, ATTRIBUTE}
    assert {k: v for k, v in d.attributes.items() if k != ATTRIBUTE} == user


def test_given_ten_user_attributes_when_decided_then_the_last_is_displaced_and_all_ten_survive() -> None:
    user = {f"a{i}": string(f"v{i}") for i in range(9)}
    user["z-binary"] = {"DataType": "Binary", "BinaryValue": b"\x01\x02"}
    d = decided(dlq_message(attributes=user, system={SOURCE_ATTRIBUTE: SOURCE}))
    assert len(d.attributes) == 10
    assert "z-binary" not in d.attributes
    assert d.envelope.displaced == {"z-binary": {"DataType": "Binary", "BinaryValue": "AQI="}}
    restored, _, _ = split(d.attributes, body="", seal=None)
    assert restored == user


def test_given_an_envelope_at_the_maximum_when_decided_then_it_is_a_poison_pill_with_full_forensics() -> None:
    first = NOW - timedelta(days=2)
    previous = NOW - timedelta(hours=3)
    envelope = Envelope(
        origin_id="origin-1",
        attempts=5,
        first_failure=first,
        last_error=ErrorInfo(type="MaxReceiveCountExceeded", message="old", at=previous - timedelta(hours=1)),
        redriven_at=previous,
        source=SOURCE,
        trace=TRACE,
    )
    url_of = UrlOf()
    d = decided(dlq_message(envelope=envelope, attributes={"tenant": string("acme")}), url_of=url_of)
    assert d.action == "poison"
    assert d.destination == POISON_URL
    assert (d.attempt, d.delay_seconds, d.send_delay_seconds) == (6, 0, 0)
    assert "still failing after 5 redrives" in d.reason
    assert url_of.asked == []  # nothing is sent to the source
    env = sent_envelope(d)
    assert env.attempts == 6
    assert env.first_failure == first
    assert env.origin_id == "origin-1"
    assert env.source == SOURCE
    assert env.trace == TRACE
    assert env.last_error is not None
    assert env.last_error.type == "MaxReceiveCountExceeded"
    assert env.last_error.at == NOW  # this cycle's, not the old one
    assert d.attributes["tenant"] == string("acme")


def test_given_a_consumer_error_newer_than_the_last_redrive_when_decided_then_it_is_kept() -> None:
    recorded = ErrorInfo(type="TransientError", message="payment gateway unavailable", at=NOW, receives=5)
    envelope = Envelope(
        origin_id="origin-1",
        attempts=5,
        redriven_at=NOW - timedelta(minutes=10),
        last_error=recorded,
        first_failure=NOW - timedelta(hours=1),
        source=SOURCE,
    )
    d = decided(dlq_message(envelope=envelope))
    assert d.action == "poison"
    assert d.envelope.last_error == recorded
    assert "TransientError: payment gateway unavailable" in d.reason


def test_given_a_consumer_error_older_than_the_last_redrive_when_decided_then_this_cycle_gets_its_own() -> (
    None
):
    old = ErrorInfo(type="TransientError", message="gone by now", at=NOW - timedelta(hours=2))
    envelope = Envelope(origin_id="o", attempts=1, redriven_at=NOW - timedelta(hours=1), last_error=old)
    d = decided(dlq_message(envelope=envelope, system={SOURCE_ATTRIBUTE: SOURCE}))
    assert d.action == "redrive"
    assert d.attempt == 2
    assert d.envelope.last_error is not None
    assert d.envelope.last_error.type == "MaxReceiveCountExceeded"
    assert d.envelope.first_failure == NOW  # none was recorded before


def test_given_a_long_backoff_when_decided_then_it_goes_through_the_delay_queue() -> None:
    settings = redrive_settings(redrive_base_seconds=600)  # attempt 1: uniform(1, 1200)
    d = decided(dlq_message(system={SOURCE_ATTRIBUTE: SOURCE}), settings)
    assert d.action == "delay"
    assert d.destination == DELAY_URL
    assert d.delay_seconds == 1200
    assert d.send_delay_seconds == 0  # the delay pipeline holds it, not DelaySeconds
    env = sent_envelope(d)
    assert env.deliver_at == NOW + timedelta(seconds=1200)
    assert env.target == WORK_URL
    assert env.redriven_at == NOW + timedelta(seconds=1200)  # due again when the pipeline delivers it
    assert env.attempts == 1
    assert "delay pipeline" in d.reason


def test_given_a_long_backoff_to_a_queue_the_delay_pipeline_refuses_when_decided_then_it_is_capped() -> None:
    # Given the delay pipeline delivers to the stack's own queues only, and a message of an existing queue
    existing = f"arn:aws:sqs:us-east-1:{ACCOUNT}:invoices"
    settings = redrive_settings(
        redrive_base_seconds=600,
        redrive_sources=existing,
        delay_targets=f"arn:aws:sqs:us-east-1:{ACCOUNT}:app-*-work,",
    )
    # When its backoff is beyond the direct-send threshold
    d = decided(dlq_message(system={SOURCE_ATTRIBUTE: existing}), settings)
    # Then it goes back to its queue directly, at the threshold, not to a pipeline that would isolate it
    assert d.action == "redrive"
    assert d.destination == queue_url_from_arn(existing)
    assert d.delay_seconds == 900
    env = sent_envelope(d)
    assert env.redriven_at == NOW + timedelta(seconds=900)
    assert env.target is None
    assert "ExtraDelayTargetArns" in d.reason
    # And a queue the pipeline delivers to (a pattern entry, or ExtraDelayTargetArns) keeps its whole backoff
    for reachable in (f"{existing},arn:aws:sqs:us-east-1:{ACCOUNT}:app-*-work", ""):
        d = decided(
            dlq_message(system={SOURCE_ATTRIBUTE: existing}),
            redrive_settings(redrive_base_seconds=600, redrive_sources=existing, delay_targets=reachable),
        )
        assert (d.action, d.delay_seconds) == ("delay", 1200)


def test_given_a_delay_beyond_the_threshold_and_no_delay_queue_when_decided_then_permanent_error() -> None:
    settings = redrive_settings(redrive_base_seconds=600, delay_queue_url="")
    with pytest.raises(PermanentError, match="SLUICE_DELAY_QUEUE_URL"):
        decided(dlq_message(system={SOURCE_ATTRIBUTE: SOURCE}), settings)


def test_given_the_step_functions_mode_when_decided_then_no_delay_pipeline_and_a_capped_wait() -> None:
    settings = redrive_settings(redrive_base_seconds=86_400, redrive_cap_seconds=MAX_LONG_DELAY_SECONDS)
    d = decided(dlq_message(system={SOURCE_ATTRIBUTE: SOURCE}), settings, hold_in_dlq=True)
    assert d.action == "redrive"
    assert d.destination == WORK_URL
    assert d.delay_seconds == MAX_HOLD_WAIT
    assert d.envelope.deliver_at is None
    state = d.to_state()
    assert (state["sendDelaySeconds"], state["waitSeconds"]) == (900, MAX_HOLD_WAIT - 900)
    assert state["holdSeconds"] == MAX_HOLD_WAIT - 900 + 300  # held while the execution waits


def test_given_the_step_functions_mode_and_a_huge_floor_when_decided_then_the_floor_is_capped() -> None:
    settings = redrive_settings(
        redrive_base_seconds=86_400, redrive_cap_seconds=200_000, redrive_floor_seconds=100_000
    )
    d = decided(dlq_message(system={SOURCE_ATTRIBUTE: SOURCE}), settings, hold_in_dlq=True, uniform=_lowest)
    assert d.delay_seconds == MAX_HOLD_WAIT


def test_given_a_source_outside_the_allowlist_when_decided_then_it_is_isolated_as_refused() -> None:
    url_of = UrlOf()
    evil = "arn:aws:sqs:us-east-1:999999999999:evil"
    envelope = Envelope(origin_id="o", attempts=2, first_failure=NOW - timedelta(hours=1))
    d = decided(dlq_message(envelope=envelope, system={SOURCE_ATTRIBUTE: evil}), url_of=url_of)
    assert d.action == "poison"
    assert d.destination == POISON_URL
    assert url_of.asked == []
    assert d.attempt == 3
    env = sent_envelope(d)
    assert env.attempts == 3
    assert env.last_error is not None
    assert env.last_error.type == "RedriveRefused"
    assert "not in the redrive allowlist" in env.last_error.message
    assert env.first_failure == NOW - timedelta(hours=1)
    assert "not in the redrive allowlist" in d.reason


def test_given_no_source_anywhere_when_decided_then_it_is_isolated_as_refused() -> None:
    d = decided(dlq_message(), redrive_settings(source_queue_arn=""))
    assert d.action == "poison"
    assert d.envelope.last_error is not None
    assert d.envelope.last_error.type == "RedriveRefused"
    assert "no source queue" in d.envelope.last_error.message


def test_given_no_source_attribute_when_decided_then_the_envelope_source_is_used_when_allowlisted() -> None:
    url_of = UrlOf()
    d = decided(dlq_message(envelope=Envelope(origin_id="o", source=OTHER)), url_of=url_of)
    assert d.action == "redrive"
    assert url_of.asked == [OTHER]
    assert d.destination == queue_url_from_arn(OTHER)


def test_given_a_delayed_message_the_consumer_forwarded_when_decided_then_it_goes_back_to_its_queue() -> None:
    # Given: send_delayed → batch-delay recorded the delay queue as the first hop's source; the consumer
    # then forwarded the failing message to the DLQ itself (SendMessage: no DeadLetterQueueSourceArn),
    # recording the queue it failed on as its source
    envelope = Envelope(
        origin_id="o",
        source=SOURCE,
        deliver_at=NOW - timedelta(hours=1),
        target=WORK_URL,
        last_error=ErrorInfo(type="TransientError", message="down", at=NOW - timedelta(seconds=5)),
    )
    url_of = UrlOf()
    # When
    d = decided(dlq_message(envelope=envelope), url_of=url_of)
    # Then: re-driven to the queue it failed on
    assert d.action == "redrive"
    assert url_of.asked == [SOURCE]
    assert d.destination == WORK_URL
    assert d.envelope.source == SOURCE  # where it was re-driven to: what a replay uses
    assert d.envelope.deliver_at is None  # the old delay request is over
    assert d.envelope.target is None
    assert d.envelope.last_error is not None
    assert d.envelope.last_error.type == "TransientError"


@pytest.mark.parametrize(
    "recorded",
    [DELAY_ARN, f"arn:aws:sqs:us-east-1:{ACCOUNT}:refunds"],
    ids=["an old envelope naming the delay queue", "another workload's queue"],
)
def test_given_a_recorded_source_outside_the_allowlist_when_decided_then_it_is_refused_not_sent_elsewhere(
    recorded: str,
) -> None:
    # Given: a forwarded message (no DeadLetterQueueSourceArn) whose recorded source is not allowlisted,
    # while the configured work queue is
    envelope = Envelope(origin_id="o", attempts=1, source=recorded)
    url_of = UrlOf()
    # When
    d = decided(dlq_message(envelope=envelope), url_of=url_of)
    # Then: isolated as refused, naming the source and the allowlist; no queue was even looked up
    assert d.action == "poison"
    assert d.destination == POISON_URL
    assert url_of.asked == []
    assert d.envelope.last_error is not None
    assert d.envelope.last_error.type == "RedriveRefused"
    assert d.envelope.last_error.message == (
        f"source queue {recorded!r} is not in the redrive allowlist ({SOURCE}, {OTHER})"
    )
    assert d.envelope.source == recorded  # kept as the record of where it came from


def test_given_neither_a_source_attribute_nor_a_recorded_source_when_decided_then_it_is_refused() -> None:
    # Given: a message with no DeadLetterQueueSourceArn and an envelope recording no source, while a
    # work queue is configured (sluice used to send such a message there)
    url_of = UrlOf()
    # When
    d = decided(dlq_message(envelope=Envelope(origin_id="o", attempts=1)), url_of=url_of)
    # Then
    assert d.action == "poison"
    assert url_of.asked == []
    assert d.envelope.last_error is not None
    assert d.envelope.last_error.type == "RedriveRefused"
    assert "no source queue" in d.envelope.last_error.message


def test_given_an_envelope_without_a_trace_when_decided_then_the_trace_header_fills_it() -> None:
    d = decided(dlq_message(envelope=Envelope(origin_id="o"), system={"AWSTraceHeader": TRACE}))
    assert d.envelope.trace == TRACE
    assert d.envelope.origin_id == "o"


def test_given_an_envelope_without_an_origin_when_decided_then_the_message_id_becomes_it() -> None:
    d = decided(dlq_message(envelope=Envelope(attempts=1, source=SOURCE)))
    assert d.envelope.origin_id == "dlq-msg-1"
    assert d.attempt == 2


@pytest.mark.parametrize(
    ("redriven_ago", "bouncing"),
    [(0, True), (COOLDOWN - 1, True), (COOLDOWN, False), (COOLDOWN + 1, False)],
)
def test_given_the_last_redrive_time_when_decided_then_bouncing_follows_the_cooldown_edge(
    redriven_ago: int, bouncing: bool
) -> None:
    envelope = Envelope(origin_id="o", attempts=1, redriven_at=NOW - timedelta(seconds=redriven_ago))
    d = decided(dlq_message(envelope=envelope, system={SOURCE_ATTRIBUTE: SOURCE}))
    assert d.bouncing is bouncing
    assert d.action == "redrive"


def test_given_a_bouncing_poison_pill_when_decided_then_it_still_counts_as_bouncing() -> None:
    envelope = Envelope(origin_id="o", attempts=5, redriven_at=NOW - timedelta(seconds=10))
    d = decided(dlq_message(envelope=envelope, system={SOURCE_ATTRIBUTE: SOURCE}))
    assert d.action == "poison"
    assert d.bouncing


@pytest.mark.parametrize(
    "raw", ["{not json", '{"v": 2, "attempts": 1}', '{"v": 1, "attempts": -3}', '{"v":1,"attempts":"many"}']
)
def test_given_a_corrupt_envelope_when_decided_then_the_problem_is_reported_and_it_is_still_decided(
    raw: str,
) -> None:
    d = decided(
        dlq_message(envelope=raw, attributes={"tenant": string("acme")}, system={SOURCE_ATTRIBUTE: SOURCE})
    )
    assert d.envelope_problem is not None
    assert d.envelope_problem.startswith("ignoring unreadable sluice envelope")
    assert d.action == "redrive"
    assert d.attempt == 1
    env = sent_envelope(d)  # a fresh, valid envelope replaces the corrupt one
    assert env.origin_id == "dlq-msg-1"
    assert d.attributes["tenant"] == string("acme")


def test_given_a_decision_when_turned_into_state_then_it_is_json_and_binary_values_are_base64() -> None:
    user = {"tenant": string("acme"), "signature": {"DataType": "Binary", "BinaryValue": b"\x00\xffsig"}}
    d = decided(dlq_message(attributes=user, system={SOURCE_ATTRIBUTE: SOURCE}))
    state = json.loads(json.dumps(d.to_state()))
    assert state == {
        "messageId": "dlq-msg-1",
        "receiptHandle": "rh-dlq-msg-1",
        "action": "redrive",
        "attempt": 1,
        "delaySeconds": 120,
        "sendDelaySeconds": 120,  # within SQS's 900 s: sent at once with DelaySeconds
        "waitSeconds": 0,
        "holdSeconds": 300,
        "queueUrl": WORK_URL,
        "body": BODY,
        "messageAttributes": {
            "tenant": string("acme"),
            "signature": {"DataType": "Binary", "BinaryValue": base64.b64encode(b"\x00\xffsig").decode()},
            ATTRIBUTE: string(d.envelope.to_json()),
        },
        "bouncing": False,
        "reason": d.reason,
    }
    # and the Step Functions shape reads back to the same message
    again = DlqMessage.from_api(
        {
            "MessageId": state["messageId"],
            "ReceiptHandle": state["receiptHandle"],
            "Body": state["body"],
            "MessageAttributes": state["messageAttributes"],
        }
    )
    assert again.attributes == d.attributes


def test_given_a_message_when_read_from_the_api_then_system_attributes_and_receives_are_kept() -> None:
    message = dlq_message(system={SOURCE_ATTRIBUTE: SOURCE})
    assert message.receives == 5
    assert message.system[SOURCE_ATTRIBUTE] == SOURCE
    assert DlqMessage.from_api({"MessageId": "m", "ReceiptHandle": "r"}).receives is None


# --- RedriveSettings ---------------------------------------------------------------------------


def test_given_sources_when_read_then_the_allowlist_holds_the_default_first_without_duplicates() -> None:
    settings = redrive_settings(redrive_sources=f"{OTHER},{SOURCE}, {OTHER}")
    assert settings.allowlist == (SOURCE, OTHER)
    assert redrive_settings(source_queue_arn="").allowlist == (SOURCE, OTHER)


@pytest.mark.parametrize(
    ("overrides", "variable"),
    [
        ({"redrive_floor_seconds": "700", "redrive_cap_seconds": "600"}, "SLUICE_REDRIVE_FLOOR_SECONDS"),
        ({"source_queue_arn": "arn:aws:sns:us-east-1:123456789012:topic"}, "SLUICE_SOURCE_QUEUE_ARN"),
        ({"redrive_sources": f"{SOURCE},not-a-queue"}, "SLUICE_REDRIVE_SOURCES"),
        ({"dead_letter_queue_url": "work-dlq"}, "SLUICE_DEAD_LETTER_QUEUE_URL"),
        ({"direct_send_threshold_seconds": "901"}, "SLUICE_DIRECT_SEND_THRESHOLD_SECONDS"),
        ({"redrive_max_attempts": "0"}, "SLUICE_REDRIVE_MAX_ATTEMPTS"),
        ({"redrive_max_per_second": "0"}, "SLUICE_REDRIVE_MAX_PER_SECOND"),
        ({"breaker_table": ""}, "SLUICE_BREAKER_TABLE"),
    ],
)
def test_given_a_bad_redrive_setting_when_read_then_the_error_names_the_variable(
    overrides: dict[str, str], variable: str
) -> None:
    with pytest.raises(ConfigurationError, match=variable):
        redrive_settings(**overrides)


def test_given_a_consumer_failure_soon_after_due_when_seen_much_later_then_it_is_bouncing() -> None:
    # Bounces are timed from the failure, not from when a (backstop) run happens to see the message.
    due = NOW - timedelta(hours=2)
    error = ErrorInfo(type="TransientError", message="still down", at=due + timedelta(seconds=40))
    envelope = Envelope(origin_id="o", attempts=1, redriven_at=due, last_error=error, source=SOURCE)
    assert decided(dlq_message(envelope=envelope)).bouncing is True
    late = ErrorInfo(type="TransientError", message="down again", at=due + timedelta(seconds=301))
    quiet = envelope.model_copy(update={"last_error": late})
    assert decided(dlq_message(envelope=quiet)).bouncing is False  # failed long after it was due


@pytest.mark.parametrize(
    ("failed_ago", "recorded", "fresh"),
    [(60, True, True), (7200, True, False), (60, False, False)],
)
def test_given_a_probe_time_when_decided_then_only_recorded_failures_after_it_are_fresh(
    failed_ago: int, recorded: bool, fresh: bool
) -> None:
    probe_at = NOW - timedelta(hours=1)
    error = ErrorInfo(type="TransientError", message="down", at=NOW - timedelta(seconds=failed_ago))
    envelope = Envelope(origin_id="o", source=SOURCE, last_error=error if recorded else None)
    # without a recorded error SQS moved it: its failure time is unknown, so it is no evidence
    assert decided(dlq_message(envelope=envelope), failed_after=probe_at).fresh is fresh
    assert decided(dlq_message(envelope=envelope)).fresh is False  # no probe: nothing is fresh
