"""An Outgoing's due time is timezone-aware: a naive one is refused when it is built, not midway through
a send (sluice.batchsend)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from sluice.batchsend import Outgoing


def test_given_a_naive_due_time_then_the_message_is_refused_at_once() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        Outgoing("k", "b", due=datetime(2026, 11, 26, 12, 0))


def test_given_an_aware_due_time_then_it_is_kept() -> None:
    due = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)

    assert Outgoing("k", "b", due=due).due == due
