"""The mutation run: every statement a scenario needs, taken out one at a time, must make it fail with
AccessDenied.

``python -m sluice_local mutation`` first runs each demo scenario alone on a fresh stack with IAM
enforced, recording which statements granted its calls (the baseline; every scenario must pass). Then,
for each Allow statement of the stack's roles and resource policies that granted something, it starts a
fresh stack with that one statement taken out of its policy (:attr:`Enforcer.without
<sluice_local.emulation.iam.enforce.Enforcer.without>`: the policy as if the template did not have
it), runs the quickest scenario that used it, and reports whether the run was refused: an AccessDenied
naming one of the statement's actions (the demo fails on any refusal) and whether the scenario itself
failed before it settled. A statement whose removal nothing notices is granted twice, or not needed.

Statements no scenario used are the least-privilege report's (:mod:`sluice_local.emulation.iam.report`),
not this run's.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import re
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Baseline", "Mutant", "baseline", "mutate", "run"]

STACK = "sluice-mutation"
SETTLE_SECONDS = 15.0
"""How long a mutant's run waits, once its scenario is judged, for a refusal of what the stack does beside
it (alarms, schedules, pollers): a deadline, not a pause: it ends at the first refusal."""


@dataclass
class Baseline:
    scenario: str
    ok: bool
    seconds: float
    statements: dict[str, list[str]] = field(default_factory=dict)
    """Each statement that granted a call of the run → what it granted: ``principal action resource``."""
    denied: list[str] = field(default_factory=list)


@dataclass
class Mutant:
    statement: str
    scenario: str
    granted: list[str]
    """What the statement granted in the baseline: ``principal action resource``."""
    refused: str = ""
    """The AccessDenied the run got for one of those requests ("" if none)."""
    scenario_failed: bool = False
    seconds: float = 0.0

    @property
    def killed(self) -> bool:
        return bool(self.refused)


_GENERATED = re.compile(r"-[A-Za-z0-9]{12,13}(?=$|[/:])")
_KEY_ID = re.compile(r"key/[0-9a-f-]{36}")
_SECRET = re.compile(r"(:secret:[^ ]*?)-[A-Za-z0-9]{12,13}-[A-Za-z0-9]{6}(?=$| )")


def _general(request: str) -> str:
    """A request as every deploy of the stack makes it: the random parts of generated names (a role's
    or a bucket's suffix, a key's id) left out, so a baseline's request and a mutant's compare."""
    return _GENERATED.sub("", _KEY_ID.sub("key/*", _SECRET.sub(r"\1", request)))


def _scenarios(params: dict[str, str], jobs: bool) -> list[Any]:
    from sluice_local.demo.scenarios.consumer import consumer_scenarios  # noqa: PLC0415
    from sluice_local.demo.scenarios.delay import delay_scenarios  # noqa: PLC0415
    from sluice_local.demo.scenarios.jobs import job_scenarios  # noqa: PLC0415
    from sluice_local.demo.scenarios.redrive import (  # noqa: PLC0415
        exclusive_redrive_scenarios,
        redrive_scenarios,
    )

    return [
        *consumer_scenarios(),
        *(job_scenarios() if jobs else []),
        *delay_scenarios(float(params["DirectSendThresholdSeconds"]), str(params.get("DelayOrchestrator"))),
        *redrive_scenarios(params),
        *(s for phase in exclusive_redrive_scenarios(params) for s in phase),
    ]


def _one(name: str, without: str | None, log_dir: str) -> dict[str, Any]:
    """Run scenario ``name`` alone on a fresh stack, ``without`` one statement from the stack's start (what
    happens at the start, a cold start's secret read, an alarm's first publish, is refused too); what the
    record says."""
    from sluice_local.app import postgres  # noqa: PLC0415
    from sluice_local.app.fast import FAST  # noqa: PLC0415
    from sluice_local.app.observer import Stack  # noqa: PLC0415
    from sluice_local.app.stack import acting_credentials, local_cloud  # noqa: PLC0415
    from sluice_local.demo.scenarios.runner import run as run_scenarios  # noqa: PLC0415
    from sluice_local.emulation.up import function_output  # noqa: PLC0415

    logging.raiseExceptions = False  # a function thread still logging as the stack stops: not this run's news
    url = postgres.database_url()
    database = url if postgres.unreachable_reason(url) is None else None
    params = dict(FAST)
    [scenario] = [s for s in _scenarios(params, database is not None) if s.name == name]
    log = Path(log_dir) / f"{name}-{abs(hash(without)) % 10**8}.log"
    started = time.monotonic()
    cloud = local_cloud(params, stack_name=STACK, database_url=database, examples=True)
    cloud.iam.without = frozenset({without}) if without is not None else frozenset()
    with function_output(log), cloud:
        stack = Stack(cloud.endpoint, cloud.outputs, log, cloud.region, acting_credentials(cloud))
        if without is not None:
            scenario.timeout = min(scenario.timeout, 30.0)  # a refused run is judged as it stands by then
        [outcome] = run_scenarios(stack, [scenario])
        deadline = time.monotonic() + SETTLE_SECONDS
        while without is not None and not cloud.iam.record.denials and time.monotonic() < deadline:
            time.sleep(0.2)  # what the stack does beside the scenario (an alarm's publish) comes later
        grants: dict[str, set[str]] = {}
        for grant in cloud.iam.record.grants:
            for key in grant.statements:
                grants.setdefault(key, set()).add(f"{grant.principal} {grant.action} {grant.resource}")
        denials = list(cloud.iam.record.denials)
        return {
            "ok": outcome.ok,
            "seconds": round(time.monotonic() - started, 1),
            "statements": {k: sorted(v) for k, v in grants.items()},
            "denied": [d.message for d in denials],
            "refusals": [f"{d.principal} {d.action} {d.resource}" for d in denials],
        }


def _map(tasks: list[tuple[str, str | None]], workers: int, log_dir: Path) -> list[dict[str, Any]]:
    if workers <= 1:  # in this process, a fresh stack each (the smoke: a baseline, then a mutant)
        return [_one(name, without, str(log_dir)) for name, without in tasks]
    # a fresh process per run: a second stack started in one process does not settle as the first does
    with multiprocessing.get_context("spawn").Pool(workers, maxtasksperchild=1) as pool:
        return pool.starmap(_one, [(name, without, str(log_dir)) for name, without in tasks], chunksize=1)


def baseline(names: Sequence[str] | None, workers: int, log_dir: Path) -> list[Baseline]:
    """Each scenario alone, nothing taken out: every one must pass, with no refusal."""
    from sluice_local.app.fast import FAST  # noqa: PLC0415

    names = list(names or [s.name for s in _scenarios(dict(FAST), jobs=True)])
    done = _map([(name, None) for name in names], workers, log_dir)
    return [
        Baseline(name, d["ok"], d["seconds"], d["statements"], d["denied"])
        for name, d in zip(names, done, strict=True)
    ]


def mutate(runs: list[Baseline], workers: int, log_dir: Path, limit: int | None = None) -> list[Mutant]:
    """Each statement the baseline used, taken out, on the quickest scenario that used it."""
    chosen: dict[str, tuple[Baseline, list[str]]] = {}
    for run_ in sorted((r for r in runs if r.ok), key=lambda r: r.seconds):
        for key, granted in run_.statements.items():
            if key.startswith("user:sluice-local-admin") or f"{STACK}-local-" in key:
                continue  # the administrator's "Allow *", the harness's producer and operator: not stack's
            chosen.setdefault(key, (run_, granted))
    keys = sorted(chosen)[:limit] if limit else sorted(chosen)
    done = _map([(chosen[k][0].scenario, k) for k in keys], workers, log_dir)
    out = []
    for key, result in zip(keys, done, strict=True):
        requests = {_general(r) for r in chosen[key][1]}
        # killed: a request the statement granted in the baseline (its principal, action, resource) refused
        pairs = zip(result["denied"], result["refusals"], strict=True)
        refused = next((message for message, request in pairs if _general(request) in requests), "")
        scenario = chosen[key][0].scenario
        out.append(Mutant(key, scenario, sorted(requests), refused, not result["ok"], result["seconds"]))
    return out


def run(
    *,
    workers: int = 2,
    limit: int | None = None,
    scenarios: Sequence[str] | None = None,
    out: Path | None = None,
) -> int:
    log_dir = Path(".sluice-local/mutation")
    log_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    runs = baseline(scenarios, workers, log_dir)
    for b in runs:
        print(
            f"baseline {b.scenario:24} {'PASS' if b.ok else 'FAIL'} {b.seconds:5.1f} s, "
            f"{len(b.statements)} statements, {len(b.denied)} denied",
            flush=True,
        )
    mutants = mutate(runs, workers, log_dir, limit)
    print(f"\n{'statement':90} {'scenario':24} result")
    for m in mutants:
        verdict = ("AccessDenied" if m.killed else "NOT REFUSED") + (
            ", scenario failed" if m.scenario_failed else ""
        )
        print(f"{m.statement:90} {m.scenario:24} {verdict}")
    killed = sum(m.killed for m in mutants)
    failed_baseline = [b.scenario for b in runs if not b.ok or b.denied]
    print(
        f"\n{len(mutants)} statements taken out one at a time: {killed} refused with AccessDenied, "
        f"{len(mutants) - killed} not; baseline: {len(runs) - len(failed_baseline)} of {len(runs)} scenarios "
        f"passed without refusal; {time.monotonic() - started:.0f} s"
    )
    if out is not None:
        out.write_text(
            json.dumps(
                {
                    "baseline": [asdict(b) for b in runs],
                    "mutants": [{**asdict(m), "killed": m.killed} for m in mutants],
                },
                indent=1,
            )
        )
    return 0 if not failed_baseline and killed == len(mutants) else 1
