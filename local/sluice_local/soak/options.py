"""How a soak breaks things: the same for every seed of a run, and part of a seed's replay."""

from __future__ import annotations

from dataclasses import dataclass

WORKLOADS: dict[str, tuple[str, ...]] = {
    "all": ("orders", "refunds", "jobs"),
    "queues": ("orders", "refunds"),
    "orders": ("orders",),
    "refunds": ("refunds",),
    "jobs": ("jobs",),
}
"""What each seed sends, by ``--workload``: the two example queue workloads' messages (orders, refunds)
and job rows (``all``, the default); the two queue workloads without the job store (``queues``); or one
of the three alone."""
SABOTAGE = {
    "ledger": "every ledger write loses its response: a side effect that happened but reported an error is "
    "performed again when its record is retried (unguarded by design): the checker must report duplicated "
    "side effects",
    "delete-failed": "the event source mapping deletes records the batch reported failed: the checker "
    "must report them lost",
}


@dataclass(frozen=True)
class Options:
    """How a soak breaks things: the same for every seed of a run, and part of a seed's replay."""

    aws_rate: float = 0.05
    lambda_rate: float = 0.08
    sabotage: str = ""
    """'' (the real thing), or something the checker must catch (:data:`SABOTAGE`)."""
    only: tuple[str, ...] = ()
    """Fault kinds to inject (all when empty): a targeted run."""
    workload: str = "all"
    """A key of :data:`WORKLOADS`: what each seed sends."""

    def sends(self, part: str) -> bool:
        """Whether each seed sends ``part`` (``orders``, ``refunds`` or ``jobs``)."""
        return part in WORKLOADS[self.workload]

    def argv(self) -> list[str]:
        """The command-line options that differ from the defaults."""
        out: list[str] = []
        default = Options()
        for name in ("aws_rate", "lambda_rate", "sabotage", "workload"):
            if getattr(self, name) != getattr(default, name):
                out += [f"--{name.replace('_', '-')}", str(getattr(self, name))]
        if self.only:
            out += ["--only", ",".join(self.only)]
        return out
