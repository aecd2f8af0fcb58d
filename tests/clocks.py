"""A clock a test moves by hand: what the code under test reads instead of ``time.time``."""

from __future__ import annotations


class Clock:
    """Called, it answers ``now`` (seconds); :meth:`advance` moves it."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
