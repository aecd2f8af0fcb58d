"""The checker's job part: a seed's job rows read from the job store and their charges from the ledger."""

from __future__ import annotations

import uuid
from collections.abc import Callable

from sluice_local.app.observer import Stack
from sluice_local.emulation import faults
from sluice_local.soak.result import Tally
from sluice_local.soak.workload import SentJob


def check_jobs(
    tally: Tally,
    jobs: list[SentJob],
    *,
    injector: faults.Injector,
    stack: Stack,
    ledger: Callable[[str], int],
    checked: dict[str, int],
) -> None:
    """Every job row ends completed (counted as processed) or dead (as dead-lettered); a charge is
    performed once outside the window, a completed charge was performed, an invalid one never.
    ``ledger(effect_key)`` counts an effect's performances; ``checked`` records each charge's count."""
    store = stack.job_store()
    for j in jobs:
        job = store.get(uuid.UUID(j.job_id)) if store is not None else None
        tally.sent += 1
        key = f"{j.job_id}#charge"
        charges = checked[key] = ledger(key)
        label = f"job {j.business_id} ({j.kind}, {j.job_id})"
        if job is None or job.status not in ("completed", "dead"):
            tally.lost.append(f"{label}: {job.status if job else 'row missing'}")
            continue
        tally.processed += job.status == "completed"
        tally.dead_lettered += job.status == "dead"
        if charges > 1:
            excused = charges <= 1 + injector.in_window[key]
            (tally.at_least_once if excused else tally.duplicated).append(f"{label} charged x{charges}")
        never_finished = [e for e in job.errors if "never finished" in str(e.get("error"))]
        if j.kind == "job-invalid" and (job.status != "dead" or charges):
            tally.misrouted.append(f"{label}: {job.status}, charged {charges}x")
        elif job.kind == "charge" and never_finished:  # that message is for single-UPDATE runs only
            tally.misrouted.append(f"{label}: a two-phase job reaped as a single-UPDATE run")
        elif j.kind != "job-invalid" and job.status == "dead":
            tally.exhausted.append(f"{label}: dead after {job.attempt} attempts")
        elif job.kind == "charge" and job.status == "completed" and not charges:
            tally.misrouted.append(f"{label}: completed, never charged")
        elif job.kind == "thumbnail" and job.status == "completed" and not ledger(f"{j.job_id}#thumbnail"):
            tally.misrouted.append(f"{label}: completed, never rendered")
