"""A seed's result: one :class:`Tally` per workload it sent to, checked on its own, and the faults it ran
under. A worker prints it as one JSON line (:meth:`SeedResult.to_json`); the summary reads those back."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

JOBS = "Jobs"
"""The job store's tally's name (the queue workloads' are their names: ``Orders``, ``Refunds``)."""


@dataclass
class Tally:
    """One workload's messages (or job rows) of one seed, where each ended, and what went wrong.

    For a queue workload: ``processed`` (its first guarded effect is in the ledger), ``poison`` (in the
    shared poison queue), ``dead_lettered`` (its DLQ, or the shared delay DLQ), each message counted once,
    in the first of those places. For the job store: completed rows count as processed, dead ones as
    dead-lettered (``jobs: sent = completed + dead``)."""

    sent: int = 0
    processed: int = 0
    poison: int = 0
    dead_lettered: int = 0
    lost: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    at_least_once: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    misrouted: list[str] = field(default_factory=list)
    """Messages that ended somewhere their kind must not: a valid one poisoned as permanently bad or after
    an error no fault produces, a permanent failure processed, one processed without all its side effects
    and not isolated (deleted part-way); one found in another workload's queue, DLQ or ledger namespace."""
    exhausted: list[str] = field(default_factory=list)
    """Valid messages isolated, or left in the delay DLQ, because their retries and redrives ran out under
    the faults (allowed, and reported)."""
    redriven: list[str] = field(default_factory=list)
    """Messages that went from the workload's DLQ back to its queue (the redrive path ran)."""
    overlaps: list[str] = field(default_factory=list)
    """Messages found in more than one place (processed and a redelivered copy isolated): reported."""

    @property
    def balanced(self) -> bool:
        """The conservation line: ``sent = processed + poison + dead-lettered``."""
        return self.sent == self.processed + self.poison + self.dead_lettered

    @property
    def ok(self) -> bool:
        return self.balanced and not (self.lost or self.duplicated or self.unexpected or self.misrouted)

    @classmethod
    def of(cls, data: dict[str, Any]) -> Tally:
        return cls(**data)


@dataclass
class SeedResult:
    seed: int
    mode: str
    workloads: dict[str, Tally]
    """Per workload the seed sent to (``Orders``, ``Refunds``, :data:`JOBS`), and any other the ledger
    showed an unexpected or misrouted effect of."""
    faults: dict[str, int]
    faults_at: dict[str, int]
    seconds: float
    stuck: str = ""
    jobs_skipped: str = ""
    """Why the seed created no jobs (no PostgreSQL answered, or not in the workload), else ''."""

    def tally(self, workload: str) -> Tally:
        """``workload``'s tally, added empty when the seed has none yet."""
        return self.workloads.setdefault(workload, Tally())

    @property
    def ok(self) -> bool:
        return not self.stuck and all(t.ok for t in self.workloads.values())

    def failures(self) -> str:
        """What failed, per workload (for the report's FAILED line)."""
        out = [
            f"{name}: lost {t.lost} duplicated {t.duplicated} unexpected {t.unexpected} misrouted "
            f"{t.misrouted}" + ("" if t.balanced else f" (sent {t.sent} unbalanced)")
            for name, t in self.workloads.items()
            if not t.ok
        ]
        return "; ".join(out + ([f"stuck {self.stuck!r}"] if self.stuck else []))

    def to_json(self) -> str:
        data = asdict(self)
        return json.dumps({**data, "ok": self.ok, "failures": self.failures()})

    @classmethod
    def of(cls, data: dict[str, Any]) -> SeedResult:
        """A result read back from :meth:`to_json`'s line."""
        known = {k: v for k, v in data.items() if k not in ("ok", "failures", "workloads")}
        tallies = {name: Tally.of(t) for name, t in data["workloads"].items()}
        return cls(workloads=tallies, **known)
