"""The redrive circuit breaker against an in-process DynamoDB table (moto), with an injected clock."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, cast

import pytest

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

from sluice.envelope import Envelope
from sluice.errors import ConfigurationError
from sluice.redrive.breaker import Breaker, BreakerPolicy, BreakerState, BreakerStatus, report
from sluice.redrive.settings import BreakerSettings
from tests.clocks import Clock
from tests.dynamo import id_table

TABLE = "breaker"
T0 = 1_795_860_000.0
COOLDOWN = 300
POLICY = BreakerPolicy(cooldown_seconds=COOLDOWN, bounce_threshold=0.5, min_sample=10)


class Sink:
    def __init__(self) -> None:
        self.metrics: list[tuple[str, str, float]] = []

    def add_metric(self, name: str, unit: str, value: float) -> None:
        self.metrics.append((name, unit, value))


class RacingDynamoDB:
    """Delegates to a real client; right after the next GetItem, runs ``race`` (a concurrent writer)."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.race: Callable[[], object] | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def get_item(self, **kwargs: Any) -> Any:
        response = self._client.get_item(**kwargs)
        race, self.race = self.race, None
        if race is not None:
            race()
        return response


@pytest.fixture
def ddb() -> Iterator[Any]:
    with id_table(TABLE) as client:
        yield client


@pytest.fixture
def clock() -> Clock:
    return Clock(T0)


@pytest.fixture
def breaker(ddb: Any, clock: Clock) -> Breaker:
    return Breaker(ddb, TABLE, policy=POLICY, clock=clock)


def item(ddb: Any) -> dict[str, Any]:
    return ddb.get_item(TableName=TABLE, Key={"id": {"S": "redrive"}}, ConsistentRead=True).get("Item", {})


def put_raw(ddb: Any, **attributes: dict[str, str]) -> None:
    ddb.put_item(TableName=TABLE, Item={"id": {"S": "redrive"}, **attributes})


# --- reading -----------------------------------------------------------------------------------


def test_given_no_item_when_checked_then_the_breaker_is_closed_and_nothing_is_written(breaker, ddb):
    status = breaker.check()
    assert status.state is BreakerState.CLOSED
    assert not status.is_open
    assert status.reason == "never opened"
    assert (status.seen, status.bouncing, status.version) == (0, 0, 0)
    assert item(ddb) == {}


def test_given_observations_when_read_then_they_accumulate_in_one_window(breaker, ddb):
    breaker.observe(seen=5, bouncing=1)
    breaker.observe(seen=3, bouncing=2)
    status = breaker.status()
    assert status.state is BreakerState.CLOSED
    assert (status.seen, status.bouncing) == (8, 3)
    assert status.window_start == T0
    assert item(ddb)["seen"] == {"N": "8"}


def test_given_an_empty_observation_when_observed_then_nothing_is_written(breaker, ddb):
    breaker.observe(seen=0, bouncing=0)
    assert item(ddb) == {}


@pytest.mark.parametrize(("seen", "bouncing"), [(-1, 0), (3, 4), (3, -1)])
def test_given_impossible_counts_when_observed_then_value_error(breaker, seen, bouncing):
    with pytest.raises(ValueError, match="fresh <= seen"):
        breaker.observe(seen=seen, bouncing=bouncing)


# --- closed ------------------------------------------------------------------------------------


def test_given_a_window_over_the_threshold_when_checked_then_the_breaker_opens_itself(breaker):
    breaker.observe(seen=10, bouncing=6)
    status = breaker.check()
    assert status.state is BreakerState.OPEN
    assert status.is_open
    assert status.opened_by == "auto"
    assert "6 of 10" in status.reason
    assert f"{COOLDOWN}s" in status.reason
    assert status.since == T0
    assert (status.seen, status.bouncing) == (0, 0)  # counters start afresh with the transition
    assert breaker.status() == status


def test_given_a_share_exactly_at_the_threshold_when_checked_then_it_stays_closed(breaker):
    breaker.observe(seen=10, bouncing=5)
    status = breaker.check()
    assert status.state is BreakerState.CLOSED
    assert (status.seen, status.bouncing) == (10, 5)


def test_given_fewer_messages_than_the_minimum_sample_when_checked_then_it_stays_closed(breaker):
    breaker.observe(seen=9, bouncing=9)
    assert breaker.check().state is BreakerState.CLOSED


def test_given_an_expired_window_when_checked_then_the_counters_reset(breaker, clock):
    breaker.observe(seen=8, bouncing=5)
    clock.advance(COOLDOWN)
    status = breaker.check()
    assert status.state is BreakerState.CLOSED
    assert (status.seen, status.bouncing) == (0, 0)
    assert status.since == T0  # still closed since the first observation created the item
    assert status.window_start is None  # the next observation opens the next window
    breaker.observe(seen=5, bouncing=5)  # the old 8/5 no longer count towards the minimum sample
    assert breaker.check().state is BreakerState.CLOSED


def test_given_a_window_within_the_cooldown_when_checked_then_the_counters_are_kept(breaker, clock):
    breaker.observe(seen=8, bouncing=5)
    clock.advance(COOLDOWN - 1)
    assert breaker.check().seen == 8


def test_given_a_quiet_spell_since_the_last_transition_when_bounces_arrive_then_they_still_count(
    breaker, clock
):
    breaker.open("maintenance")
    clock.advance(COOLDOWN)
    breaker.close("maintenance over")  # the last transition
    clock.advance(10 * COOLDOWN)  # a quiet spell
    breaker.observe(seen=6, bouncing=6)
    assert breaker.check().seen == 6  # evaluated in the window they opened, not thrown away
    clock.advance(5)
    breaker.observe(seen=6, bouncing=6)
    assert breaker.check().state is BreakerState.OPEN


# --- open (auto) -------------------------------------------------------------------------------


def trip(breaker: Breaker) -> BreakerStatus:
    breaker.observe(seen=10, bouncing=10)
    status = breaker.check()
    assert status.state is BreakerState.OPEN
    return status


def test_given_an_automatic_open_before_its_cooldown_when_checked_then_it_stays_open(breaker, clock):
    opened = trip(breaker)
    clock.advance(COOLDOWN - 0.5)
    assert breaker.check() == opened


def test_given_an_automatic_open_after_its_cooldown_when_checked_then_it_half_opens_with_fresh_counters(
    breaker, clock
):
    trip(breaker)
    breaker.observe(seen=4, bouncing=4)  # whatever was counted while open
    clock.advance(COOLDOWN)
    status = breaker.check()
    assert status.state is BreakerState.HALF_OPEN
    assert not status.is_open
    assert status.opened_by == "auto"
    assert (status.seen, status.bouncing) == (0, 0)
    assert status.since == T0 + COOLDOWN
    assert "probe" in status.reason


# --- half-open ---------------------------------------------------------------------------------


@pytest.fixture
def half_open(breaker: Breaker, clock: Clock) -> Breaker:
    trip(breaker)
    clock.advance(COOLDOWN)
    assert breaker.check().state is BreakerState.HALF_OPEN
    return breaker


def test_given_half_open_and_no_probe_yet_when_checked_then_it_stays_half_open(half_open, clock):
    clock.advance(3 * COOLDOWN)
    first = half_open.check()
    assert first.state is BreakerState.HALF_OPEN
    assert first.to_dict()["isOpen"] is False
    assert half_open.check() == first


def test_given_half_open_when_the_probe_goes_out_then_everything_holds_for_a_cooldown(half_open, clock):
    assert half_open.check().is_open is False  # the probe may go out
    half_open.observe(seen=10, bouncing=0)
    held = half_open.check()
    assert held.state is BreakerState.HALF_OPEN
    assert held.is_open is True  # nothing moves while the probe's messages may come back
    assert held.to_dict()["isOpen"] is True
    assert "probe of 10 messages re-driven" in held.reason
    clock.advance(COOLDOWN - 1)
    assert half_open.check().is_open is True
    clock.advance(1)
    judging = half_open.check()
    assert (judging.state, judging.is_open) == (BreakerState.HALF_OPEN, False)  # the judging batch


def _probe_and_hold(breaker, clock, *, due_in: float = 0) -> None:
    breaker.observe(seen=10, bouncing=0, latest_due=clock() + due_in)
    breaker.check()  # probe out: hold until it is due, plus a cooldown
    clock.advance(due_in + COOLDOWN)


def test_given_a_probe_with_a_long_backoff_when_checked_then_the_hold_lasts_until_it_is_due_plus_a_cooldown(
    half_open, clock
):
    breaker_due_in = 1920.0  # the probe's latest backoff
    half_open.observe(seen=10, bouncing=0, latest_due=clock() + breaker_due_in)
    assert half_open.check().is_open is True
    clock.advance(breaker_due_in + COOLDOWN - 1)
    assert half_open.check().is_open is True  # its messages may still come back failing
    clock.advance(1)
    assert half_open.check().is_open is False  # now the judging batch may go


def test_given_half_open_and_no_fresh_failures_when_judged_then_it_closes(half_open, clock):
    _probe_and_hold(half_open, clock)
    half_open.observe(seen=10, bouncing=2, fresh=2)  # old backlog bounced before the open: not fresh
    status = half_open.check()
    assert status.state is BreakerState.CLOSED
    assert status.opened_by is None
    assert "2 of 10" in status.reason
    assert (status.seen, status.bouncing) == (0, 0)


def test_given_half_open_and_fresh_failures_when_judged_then_it_opens_again(half_open, clock):
    _probe_and_hold(half_open, clock)
    half_open.observe(seen=3, bouncing=0, fresh=2)  # failed after the probe went out
    status = half_open.check()
    assert status.state is BreakerState.OPEN
    assert status.opened_by == "auto"
    assert "the probe did not pass: 2 of 3" in status.reason
    clock.advance(COOLDOWN)
    assert half_open.check().state is BreakerState.HALF_OPEN  # and it gets another probe later


# --- operator ----------------------------------------------------------------------------------


def test_given_an_operator_open_when_the_cooldown_passes_then_it_stays_open(breaker, clock):
    opened = breaker.open("payments API down; INC-42")
    assert opened.opened_by == "operator"
    clock.advance(100 * COOLDOWN)
    status = breaker.check()
    assert status.state is BreakerState.OPEN
    assert status.reason == "payments API down; INC-42"
    assert status.opened_by == "operator"


def test_given_an_open_breaker_when_an_operator_closes_it_then_it_is_closed_with_fresh_counters(breaker):
    trip(breaker)
    breaker.observe(seen=3, bouncing=3)
    status = breaker.close("downstream fixed")
    assert status.state is BreakerState.CLOSED
    assert status.reason == "downstream fixed"
    assert status.opened_by is None
    assert (status.seen, status.bouncing) == (0, 0)
    assert "opened_by" not in item(breaker._db)
    assert breaker.close().reason == "closed by an operator"


@pytest.mark.parametrize("reason", ["", "   "])
def test_given_no_reason_when_opening_then_value_error_and_nothing_changes(breaker, ddb, reason):
    with pytest.raises(ValueError, match="needs a reason"):
        breaker.open(reason)
    assert item(ddb) == {}


def test_given_a_very_long_reason_when_opening_then_it_is_cut_to_512_characters(breaker):
    assert len(breaker.open("x" * 2000).reason) == 512


# --- races -------------------------------------------------------------------------------------


def test_given_a_concurrent_writer_when_a_transition_loses_the_race_then_the_winner_stands(ddb, clock):
    racing = RacingDynamoDB(ddb)
    breaker = Breaker(cast("DynamoDBClient", racing), TABLE, policy=POLICY, clock=clock)
    operator = Breaker(ddb, TABLE, policy=POLICY, clock=clock)
    breaker.observe(seen=10, bouncing=10)  # this check would open it automatically …
    racing.race = lambda: operator.open("maintenance window")  # … but an operator writes first
    status = breaker.check()
    assert status.state is BreakerState.OPEN
    assert status.opened_by == "operator"
    assert status.reason == "maintenance window"
    stored = item(ddb)
    assert stored["reason"] == {"S": "maintenance window"}
    assert stored["opened_by"] == {"S": "operator"}
    assert stored["version"] == {"N": "2"}  # the observe, then the operator: the auto write never landed


def test_given_counts_observed_between_read_and_write_when_the_window_resets_then_they_are_kept(ddb, clock):
    racing = RacingDynamoDB(ddb)
    breaker = Breaker(cast("DynamoDBClient", racing), TABLE, policy=POLICY, clock=clock)
    other_run = Breaker(ddb, TABLE, policy=POLICY, clock=clock)
    breaker.observe(seen=2, bouncing=0)
    clock.advance(COOLDOWN)  # the window expired: this check resets it …
    racing.race = lambda: other_run.observe(seen=10, bouncing=10)  # … while another run reports
    status = breaker.check()
    assert (status.seen, status.bouncing) == (12, 10)  # the reset lost; nothing was wiped
    assert breaker.check().state is BreakerState.OPEN


def test_given_a_writer_that_keeps_changing_the_item_when_forcing_then_runtime_error(ddb, clock):
    racing = RacingDynamoDB(ddb)
    breaker = Breaker(cast("DynamoDBClient", racing), TABLE, policy=POLICY, clock=clock)
    rival = Breaker(ddb, TABLE, policy=POLICY, clock=clock)

    def keep_racing() -> None:
        rival.observe(seen=1, bouncing=0)
        racing.race = keep_racing

    racing.race = keep_racing
    with pytest.raises(RuntimeError, match="kept changing"):
        breaker.open("deploy")
    assert item(ddb)["state"] == {"S": "closed"}


# --- unreadable items --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "attributes",
    [
        {"state": {"S": "sideways"}, "version": {"N": "7"}},
        {"state": {"S": "closed"}, "since": {"S": "yesterday"}, "version": {"N": "7"}},
        {"state": {"N": "1"}, "version": {"N": "7"}},
        {"state": {"S": "closed"}, "seen": {"S": "many"}, "version": {"N": "7"}},
    ],
)
def test_given_an_unreadable_item_when_checked_then_it_fails_safe_open_and_an_operator_can_close_it(
    breaker, ddb, clock, attributes
):
    put_raw(ddb, **attributes)
    status = breaker.check()
    assert status.is_open
    assert status.opened_by == "operator"
    assert "unreadable breaker item" in status.reason
    clock.advance(100 * COOLDOWN)
    assert breaker.check().is_open  # never half-opens by itself
    closed = breaker.close("repaired by hand")
    assert closed.state is BreakerState.CLOSED
    assert item(ddb)["version"] == {"N": "8"}


def test_given_an_unreadable_version_when_an_operator_closes_then_the_item_is_repaired(breaker, ddb):
    put_raw(ddb, state={"S": "open"}, version={"S": "seven"})
    assert breaker.check().is_open
    assert breaker.close().state is BreakerState.CLOSED
    assert item(ddb)["version"] == {"N": "1"}
    assert breaker.check().state is BreakerState.CLOSED


# --- answer and metric -------------------------------------------------------------------------


def test_given_a_status_when_answered_then_the_shape_is_the_check_answer(breaker):
    breaker.open("maintenance")
    answer = breaker.check().to_dict()
    assert answer == {
        "isOpen": True,
        "state": "open",
        "reason": "maintenance",
        "openedBy": "operator",
        "since": datetime.fromtimestamp(T0, UTC).isoformat(),
        "seen": 0,
        "bouncing": 0,
        "probeAt": None,
    }
    assert BreakerStatus(BreakerState.CLOSED, "never opened").to_dict()["since"] is None


@pytest.mark.parametrize(
    ("state", "value"), [(BreakerState.OPEN, 1), (BreakerState.HALF_OPEN, 0), (BreakerState.CLOSED, 0)]
)
def test_given_a_status_when_reported_then_breaker_open_is_a_gauge(state, value):
    sink = Sink()
    report(BreakerStatus(state, "r"), sink)
    assert sink.metrics == [("BreakerOpen", "Count", value)]


# --- policy and settings -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("redriven_ago", "bouncing"), [(None, False), (0, True), (COOLDOWN - 1, True), (COOLDOWN, False)]
)
def test_given_a_redrive_time_when_judged_then_only_a_return_within_the_cooldown_bounces(
    redriven_ago, bouncing
):
    now = datetime.fromtimestamp(T0, UTC)
    envelope = Envelope(redriven_at=None if redriven_ago is None else now - timedelta(seconds=redriven_ago))
    assert POLICY.is_bouncing(envelope, now) is bouncing
    assert POLICY.is_bouncing(None, now) is False


def test_given_a_naive_redrive_time_when_judged_then_it_is_read_as_utc():
    now = datetime.fromtimestamp(T0, UTC)
    envelope = Envelope(redriven_at=(now - timedelta(seconds=10)).replace(tzinfo=None))
    assert POLICY.is_bouncing(envelope, now)


@pytest.mark.parametrize(
    ("kwargs", "problem"),
    [
        ({"cooldown_seconds": 0}, "cooldown_seconds"),
        ({"bounce_threshold": 1.5}, "bounce_threshold"),
        ({"min_sample": 0}, "min_sample"),
    ],
)
def test_given_an_invalid_policy_when_built_then_value_error_names_the_field(kwargs, problem):
    with pytest.raises(ValueError, match=problem):
        BreakerPolicy(**kwargs)


def test_given_settings_from_the_environment_when_read_then_the_percent_becomes_a_share(ddb):
    settings = BreakerSettings.from_env(
        {
            "SLUICE_BREAKER_TABLE": TABLE,
            "SLUICE_BREAKER_COOLDOWN_SECONDS": "120",
            "SLUICE_BREAKER_BOUNCE_PERCENT": "25",
            "SLUICE_BREAKER_MIN_SAMPLE": "4",
        }
    )
    assert settings.policy() == BreakerPolicy(cooldown_seconds=120, bounce_threshold=0.25, min_sample=4)
    breaker = Breaker.from_settings(settings, ddb)
    breaker.observe(seen=4, bouncing=2)
    assert breaker.check().is_open


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("SLUICE_BREAKER_BOUNCE_PERCENT", "150"),
        ("SLUICE_BREAKER_COOLDOWN_SECONDS", "0"),
        ("SLUICE_BREAKER_MIN_SAMPLE", "lots"),
    ],
)
def test_given_a_bad_setting_when_read_then_the_error_names_the_variable(variable, value):
    with pytest.raises(ConfigurationError, match=variable):
        BreakerSettings.from_env({"SLUICE_BREAKER_TABLE": TABLE, variable: value})
