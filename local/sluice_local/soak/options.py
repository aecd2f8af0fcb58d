"""How a soak breaks things: the same for every seed of a run, and part of a seed's replay."""

from __future__ import annotations

from dataclasses import dataclass

WORKLOADS = ("all", "orders", "jobs")
"""What each seed sends: orders and job rows (the default), or only one of them."""
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
    """:data:`WORKLOADS`: orders and jobs, or only one of them."""

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
