"""The redrive run lease against an in-process DynamoDB table (moto), with injected clocks, Given / When /
Then. Two runs are two :class:`RunLease` objects on one table, each with a clock of its own (so their
skew is what the test says)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, cast

import pytest

from sluice.redrive.breaker import Breaker, BreakerState
from sluice.redrive.lease import (
    LEASE_SECONDS,
    MAX_AHEAD_SECONDS,
    MAX_STRETCH_SECONDS,
    SKEW_MARGIN_SECONDS,
    HeldLease,
    Refusal,
    RunLease,
    lease_key,
)
from sluice.redrive.settings import BreakerSettings
from tests.clocks import Clock
from tests.dynamo import id_table

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

TABLE = "breaker"
T0 = 1_795_860_000.0


class CountingDynamoDB:
    """Delegates to a real client; counts the UpdateItem calls (the lease's only API)."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.updates = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def update_item(self, **kwargs: Any) -> Any:
        self.updates += 1
        return self._client.update_item(**kwargs)


@pytest.fixture
def ddb() -> Iterator[Any]:
    with id_table(TABLE) as client:
        yield client


def lease(ddb: Any, clock: Clock, name: str = "Orders") -> RunLease:
    return RunLease(ddb, TABLE, name=name, clock=clock)


def item(ddb: Any, name: str = "Orders") -> dict[str, Any]:
    return ddb.get_item(TableName=TABLE, Key={"id": {"S": lease_key(name)}}, ConsistentRead=True).get(
        "Item", {}
    )


def held(taken: HeldLease | Refusal) -> HeldLease:
    assert isinstance(taken, HeldLease), taken
    return taken


def refused(taken: HeldLease | Refusal) -> Refusal:
    assert isinstance(taken, Refusal), taken
    return taken


# --- taking it -----------------------------------------------------------------------------------------


def test_given_no_lease_when_a_run_takes_it_then_it_holds_it_for_the_stretch_plus_the_duration(ddb) -> None:
    # Given no lease item yet
    clock = Clock(T0)
    # When a run takes it for a stretch of 2 s
    first = held(lease(ddb, clock).acquire("redriver (schedule)", seconds=2))
    # Then the item names it, until its now + 2 s + the lease's duration
    stored = item(ddb)
    assert stored["owner"]["S"] == first.token
    assert stored["holder"]["S"] == "redriver (schedule)"
    assert float(stored["expires"]["N"]) == pytest.approx(T0 + 2 + LEASE_SECONDS)
    assert first.expires == pytest.approx(T0 + 2 + LEASE_SECONDS)


def test_given_a_live_lease_when_another_run_tries_then_it_is_refused_and_told_who_holds_it(ddb) -> None:
    # Given a run holding the lease
    clock = Clock(T0)
    holder = held(lease(ddb, clock).acquire("redriver (alarm, request 1)"))
    # When a second run tries a moment later
    clock.advance(5)
    refusal = refused(lease(ddb, clock).acquire("redriver (schedule, request 2)"))
    # Then it is refused, with the holder's name and expiry; the item still names the holder
    assert refusal == Refusal(holder="redriver (alarm, request 1)", expires=holder.expires)
    assert item(ddb)["owner"]["S"] == holder.token


def test_given_each_workload_then_its_lease_is_its_own_item(ddb) -> None:
    # Given Orders' run holding its lease
    clock = Clock(T0)
    held(lease(ddb, clock, "Orders").acquire())
    # When Refunds' run takes its own, Then it gets it: the leases are one item per workload
    held(lease(ddb, clock, "Refunds").acquire())
    assert {lease_key("Orders"), lease_key("Refunds")} == {"Orders#lease", "Refunds#lease"}


def test_given_the_lease_beside_the_breaker_when_the_breaker_changes_then_neither_touches_the_other(
    ddb,
) -> None:
    # Given the workload's breaker and its lease in the same table
    clock = Clock(T0)
    run = held(lease(ddb, clock).acquire("a run"))
    breaker = Breaker(ddb, TABLE, name="Orders", clock=clock)
    # When the breaker is opened, observed and closed (it rewrites its whole item)
    breaker.open("INC-1")
    breaker.close()
    breaker.observe(seen=3, bouncing=1)
    # Then the lease is still the run's, and the breaker reads as before
    assert item(ddb)["owner"]["S"] == run.token
    assert breaker.status().state is BreakerState.CLOSED
    assert breaker.status().seen == 3


def test_given_settings_then_the_lease_is_named_after_the_breaker(ddb) -> None:
    # Given the settings the template gives a workload's redriver
    settings = BreakerSettings(breaker_table=TABLE, breaker_name="Refunds")
    # When its lease is taken, Then it is the workload's lease item
    held(RunLease.from_settings(settings, ddb).acquire())
    assert item(ddb, "Refunds")
    assert not item(ddb, "Orders")


# --- renewing ------------------------------------------------------------------------------------------


def test_given_a_held_lease_when_kept_with_time_to_spare_then_nothing_is_written(ddb) -> None:
    # Given a run that has just taken the lease
    counting = CountingDynamoDB(ddb)
    clock = Clock(T0)
    run = held(RunLease(cast("DynamoDBClient", counting), TABLE, name="Orders", clock=clock).acquire())
    # When it keeps it for a 2 s stretch with more than half the lease left beyond it
    clock.advance(LEASE_SECONDS / 2 - 3)
    # Then it still holds it, and no request was made
    assert run.keep(2)
    assert counting.updates == 1  # the take only


def test_given_a_held_lease_when_half_of_it_is_used_then_keeping_it_renews_it(ddb) -> None:
    # Given a run that took the lease and worked past half of it
    clock = Clock(T0)
    run = held(lease(ddb, clock).acquire())
    clock.advance(LEASE_SECONDS / 2 + 1)
    # When it keeps it for the next 3 s stretch
    assert run.keep(3)
    # Then the expiry is its now + 3 s + the lease's duration, stored and known
    expected = clock.now + 3 + LEASE_SECONDS
    assert run.expires == pytest.approx(expected)
    assert float(item(ddb)["expires"]["N"]) == pytest.approx(expected)


def test_given_the_longest_stretch_when_kept_then_the_lease_covers_it_and_a_batch_after_it(ddb) -> None:
    # Given a run about to sleep the longest piece of a pacing wait and long-poll (30 s in all)
    clock = Clock(T0)
    run = held(lease(ddb, clock).acquire())
    # When it keeps the lease for that stretch
    assert run.keep(MAX_STRETCH_SECONDS)
    # Then after the stretch at least half the lease is left for the batch
    assert run.expires is not None
    assert run.expires - (clock.now + MAX_STRETCH_SECONDS) >= LEASE_SECONDS / 2


def test_given_a_stretch_longer_than_a_lease_covers_then_it_is_refused_before_any_write(ddb) -> None:
    # Given a run holding the lease (a longer wait is slept in pieces by the runner)
    counting = CountingDynamoDB(ddb)
    clock = Clock(T0)
    leases = RunLease(cast("DynamoDBClient", counting), TABLE, name="Orders", clock=clock)
    run = held(leases.acquire())
    # When asked to cover 100 s at once, Then it refuses: that expiry would look like a clock far ahead
    with pytest.raises(ValueError, match="stretch"):
        run.keep(100)
    with pytest.raises(ValueError, match="stretch"):
        leases.acquire(seconds=MAX_STRETCH_SECONDS + 1)
    assert counting.updates == 1  # the first take only


def test_given_a_run_held_for_the_functions_whole_timeout_then_renewing_keeps_every_other_run_out(
    ddb,
) -> None:
    # Given a run keeping its lease before every batch (one each 10 s) for the redriver's whole 300 s Timeout
    clock = Clock(T0)
    run = held(lease(ddb, clock).acquire("the long run", seconds=2))
    other = lease(ddb, clock)
    for _ in range(30):
        assert run.keep(2)
        clock.advance(10)
        # Then at every point another run is refused
        assert isinstance(other.acquire("a backstop run"), Refusal)


# --- takeover and clocks -----------------------------------------------------------------------------


def test_given_a_crashed_run_when_its_lease_expired_past_the_margin_then_the_next_run_takes_it_over(
    ddb,
) -> None:
    # Given a run that took the lease and then crashed (never renewed, never released)
    clock = Clock(T0)
    crashed = held(lease(ddb, clock).acquire("crashed run"))
    assert crashed.expires is not None
    # When the next run comes just before the expiry plus the margin, it is refused
    clock.now = crashed.expires + SKEW_MARGIN_SECONDS - 0.5
    refused(lease(ddb, clock).acquire("next run"))
    # When it comes after it, it takes it over
    clock.now = crashed.expires + SKEW_MARGIN_SECONDS + 0.5
    successor = held(lease(ddb, clock).acquire("next run"))
    assert item(ddb)["owner"]["S"] == successor.token
    # And the crashed run, were it alive after all, finds its lease lost at its next renewal
    assert not crashed.keep(LEASE_SECONDS)
    assert not crashed.held


@pytest.mark.parametrize("skew", [SKEW_MARGIN_SECONDS - 1, -(SKEW_MARGIN_SECONDS - 1)])
def test_given_clocks_apart_by_less_than_the_margin_then_a_lease_is_never_held_by_two(ddb, skew) -> None:
    # Given a holder and a taker whose clock is `skew` ahead of the holder's
    holder_clock = Clock(T0)
    taker_clock = Clock(T0 + skew)
    run = held(lease(ddb, holder_clock).acquire("holder"))
    assert run.expires is not None
    # When the taker tries at every second until the holder's own clock says the lease has expired
    assert run.expires is not None
    while holder_clock.now < run.expires:
        # Then it is refused every time: the lease never has two holders
        refused(lease(ddb, taker_clock).acquire("taker"))
        holder_clock.advance(1)
        taker_clock.advance(1)


def test_given_a_lease_written_by_a_clock_far_ahead_and_abandoned_then_a_correct_clock_takes_it_at_once(
    ddb,
) -> None:
    # Given an operator's run whose clock is an hour ahead: it took the lease, renewed it over its longest
    # stretch, and was then killed (a laptop shut), leaving an expiry an hour and a minute away
    laptop = Clock(T0 + 3600)
    abandoned = held(lease(ddb, laptop).acquire("sluice dlq redrive by op@laptop"))
    laptop.advance(LEASE_SECONDS / 2 + 1)
    assert abandoned.keep(MAX_STRETCH_SECONDS)
    # When the next Lambda run comes a second later by a correct clock
    clock = Clock(T0 + LEASE_SECONDS / 2 + 2)
    successor = held(lease(ddb, clock).acquire("redriver (schedule)"))
    # Then it takes the lease over at once (the expiry is later than any holder may write), not an hour on
    assert item(ddb)["owner"]["S"] == successor.token
    assert float(item(ddb)["expires"]["N"]) == pytest.approx(clock.now + LEASE_SECONDS)
    # And the next correct-clock run is refused: the successor's lease is live and plausible
    clock.advance(1)
    refused(lease(ddb, clock).acquire("redriver (alarm)"))


@pytest.mark.parametrize("ahead", [0.0, SKEW_MARGIN_SECONDS - 1])
def test_given_a_legitimately_long_renewal_then_it_is_never_taken_over_while_live(ddb, ahead) -> None:
    # Given a holder (its clock `ahead` of the taker's, within the margin) that renewed over the longest
    # stretch a renewal covers: the latest expiry a holder may write
    holder_clock = Clock(T0 + ahead)
    taker_clock = Clock(T0)
    run = held(lease(ddb, holder_clock).acquire("slow velocity run"))
    holder_clock.advance(LEASE_SECONDS / 2 + 1)
    taker_clock.advance(LEASE_SECONDS / 2 + 1)
    assert run.keep(MAX_STRETCH_SECONDS)
    assert run.expires == pytest.approx(holder_clock.now + MAX_STRETCH_SECONDS + LEASE_SECONDS)
    # When another run tries at every second until the holder's own clock says the lease has expired
    assert run.expires is not None
    while holder_clock.now < run.expires:
        # Then it is refused every time: a long renewal is not mistaken for a clock far ahead
        refused(lease(ddb, taker_clock).acquire("backstop"))
        holder_clock.advance(1)
        taker_clock.advance(1)
    assert item(ddb)["owner"]["S"] == run.token


def test_given_stored_expiries_around_the_plausible_limit_then_only_the_one_beyond_it_is_taken(ddb) -> None:
    # Given a lease item owned by someone else, its expiry just within, then just beyond, now + MAX_AHEAD
    clock = Clock(T0)
    assert MAX_AHEAD_SECONDS == MAX_STRETCH_SECONDS + LEASE_SECONDS + SKEW_MARGIN_SECONDS
    for offset, taken in ((MAX_AHEAD_SECONDS - 0.5, False), (MAX_AHEAD_SECONDS + 0.5, True)):
        ddb.put_item(
            TableName=TABLE,
            Item={
                "id": {"S": lease_key("Orders")},
                "owner": {"S": "someone"},
                "holder": {"S": "someone"},
                "expires": {"N": str(clock.now + offset)},
            },
        )
        # When a run tries, Then it takes it only when the expiry is beyond the limit
        assert isinstance(lease(ddb, clock).acquire("taker"), HeldLease) is taken


def test_given_a_run_that_stalled_past_its_lease_when_taken_over_then_it_stops_at_its_next_keep(ddb) -> None:
    # Given a run whose batch stalled beyond its lease, and another run that took the lease over
    clock = Clock(T0)
    stalled = held(lease(ddb, clock).acquire("stalled"))
    clock.advance(LEASE_SECONDS + SKEW_MARGIN_SECONDS + 1)
    held(lease(ddb, clock).acquire("successor"))
    # When the stalled run wakes up and keeps its lease, Then it is told it lost it
    assert not stalled.keep(2)
    # And its release leaves the successor's lease alone
    stalled.release()
    assert item(ddb)["holder"]["S"] == "successor"


def test_given_a_run_that_stalled_past_its_lease_when_nobody_took_it_then_it_keeps_it(ddb) -> None:
    # Given a run past its lease's expiry, with no other run having come
    clock = Clock(T0)
    run = held(lease(ddb, clock).acquire("slow"))
    clock.advance(LEASE_SECONDS + SKEW_MARGIN_SECONDS + 1)
    # When it keeps it, Then it renews it: it was still the owner
    assert run.keep(2)
    refused(lease(ddb, clock).acquire("other"))


def test_given_a_retried_take_whose_first_attempt_took_effect_then_the_run_holds_it(ddb) -> None:
    # Given a take that succeeded but whose response was lost, so the SDK sends it again (same token)
    clock = Clock(T0)
    first = RunLease(ddb, TABLE, name="Orders", clock=clock, token=lambda: "run-1").acquire()
    # When the retry arrives, Then it succeeds too: the owner is this run already
    again = RunLease(ddb, TABLE, name="Orders", clock=clock, token=lambda: "run-1").acquire()
    assert held(first).token == held(again).token == "run-1"


@pytest.mark.parametrize(
    "stored",
    [
        {"owner": {"S": "someone"}},  # written by hand: no expiry
        {"owner": {"S": "someone"}, "expires": {"S": "tomorrow"}},  # an expiry that is no number
    ],
)
def test_given_an_unreadable_lease_item_then_a_run_takes_it(ddb, stored) -> None:
    # Given a lease item with an owner but no usable expiry
    ddb.put_item(TableName=TABLE, Item={"id": {"S": lease_key("Orders")}, **stored})
    # When a run takes the lease, Then it gets it (an item nobody can expire would block every run)
    held(lease(ddb, Clock(T0)).acquire())


# --- releasing -----------------------------------------------------------------------------------------


def test_given_a_finished_run_when_it_releases_then_the_next_run_takes_it_at_once(ddb) -> None:
    # Given a run that held the lease and released it at its end
    clock = Clock(T0)
    run = held(lease(ddb, clock).acquire("first"))
    run.release()
    # Then it holds it no more, the item has no owner, and a second release does nothing
    assert not run.held
    assert not run.keep()
    assert "owner" not in item(ddb)
    run.release()
    # When the next run comes a second later, Then it takes it
    clock.advance(1)
    held(lease(ddb, clock).acquire("second"))


def test_given_bad_durations_then_the_lease_refuses_them(ddb) -> None:
    with pytest.raises(ValueError, match="duration"):
        RunLease(ddb, TABLE, duration=0)
    with pytest.raises(ValueError, match="margin"):
        RunLease(ddb, TABLE, margin=-1)
    with pytest.raises(ValueError, match="max_stretch"):
        RunLease(ddb, TABLE, max_stretch=-1)
