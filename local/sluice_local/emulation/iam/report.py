"""What the record of authorizations says: permissions granted but never used, and which statements a
run needed (re-deciding each recorded request without one statement at a time).

:func:`usage` lists every Allow statement of the stack's roles and resource policies with the
requests it granted (and the actions it lists that nothing used); :func:`replay` re-decides each
recorded request without one statement at a time: a statement whose removal denies a request is
needed by the path that made it (the mutation run, :mod:`sluice_local.iam_mutation`, then shows that
path's scenario failing with AccessDenied); one whose removal denies nothing is granted twice (or not
used). :func:`dump` and :func:`load` keep a run's usage as JSON, so runs of the demo, the battery and
the soak can be merged (:func:`merge`) into one least-privilege report.
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sluice_local.emulation.iam.enforce import Enforcer, statement_key
from sluice_local.emulation.iam.policy import Policy
from sluice_local.emulation.iam.store import lambda_backend

HARNESS_PATH = "/sluice-local/"
"""The IAM path of the roles the local runtime creates beside a stack (its producer and operator)."""

__all__ = [
    "HARNESS_PATH",
    "StatementUse",
    "dump",
    "justifications",
    "least_privilege",
    "load",
    "merge",
    "replay",
    "stack_policies",
    "summary",
    "usage",
]


@dataclass
class StatementUse:
    key: str
    """``<holder>/<policy>#<Sid or index>`` (:func:`~.enforce.statement_key`)."""
    sid: str | None
    actions: list[str]
    """The statement's ``Action`` texts (``NotAction`` ones prefixed ``not ``)."""
    granted: int = 0
    """Requests it allowed in the run(s)."""
    used_actions: set[str] = field(default_factory=set)
    """The actions of those requests."""

    @property
    def unused_actions(self) -> list[str]:
        """Listed actions nothing used (a wildcard counts as used when any action it matches was)."""
        return [
            text
            for text in self.actions
            if not text.startswith("not ")
            and not any(fnmatch.fnmatchcase(used.lower(), text.lower()) for used in self.used_actions)
        ]


def stack_policies(enforcer: Enforcer, stack_name: str, regions: Sequence[str]) -> list[Policy]:
    """The identity policies of the stack's roles and every resource policy in its regions (the local
    account holds only the stacks deployed into it)."""
    from moto.iam.models import iam_backends  # noqa: PLC0415 - moto's backends, while the stack runs

    store = enforcer.store
    policies: list[Policy] = []
    for role in list(iam_backends[enforcer.account]["global"].roles.values()):
        if role.path.startswith(HARNESS_PATH):
            continue  # the local producer's and operator's: the harness's, not the stack's
        if role.name.startswith(f"{stack_name}-") or role.path.startswith(f"/{stack_name}/"):
            policies += store.identity(role.arn)
    for arn in _resource_arns(enforcer.account, regions):
        policy = store.resource(arn)
        if policy is not None:
            policies.append(policy)
    return policies


def _resource_arns(account: str, regions: Sequence[str]) -> Iterable[str]:
    from moto.kms.models import kms_backends  # noqa: PLC0415
    from moto.s3.models import s3_backends  # noqa: PLC0415
    from moto.sns.models import sns_backends  # noqa: PLC0415
    from moto.sqs.models import sqs_backends  # noqa: PLC0415

    for region in regions:
        for name in list(sqs_backends[account][region].queues):
            yield f"arn:aws:sqs:{region}:{account}:{name}"
        yield from list(sns_backends[account][region].topics)
        for key in list(kms_backends[account][region].keys.values()):
            if not any(alias.startswith("alias/aws/") for alias in key.aliases):  # AWS managed: AWS's
                yield str(key.arn)
        for function in list(lambda_backend(account, region).list_functions()):
            yield str(function.function_arn)
    for bucket in list(s3_backends[account]["global"].buckets):
        yield f"arn:aws:s3:::{bucket}"


def usage(enforcer: Enforcer, policies: Iterable[Policy], stack_name: str) -> dict[str, StatementUse]:
    """Every Allow statement of ``policies`` with what the record says it granted; keys name the stack
    ``<stack>``, so the runs of differently named stacks merge."""
    pattern = re.compile(re.escape(stack_name), re.IGNORECASE)

    def general(key: str) -> str:
        return pattern.sub("<stack>", key)

    found: dict[str, StatementUse] = {}
    for policy in policies:
        if policy.source.startswith("topic:") and all(
            s.sid == "__default_statement_ID" for s in policy.statements
        ):
            continue  # the default topic policy SNS gives a topic without one: not the stack's grant
        for statement in policy.statements:
            if statement.effect != "Allow":
                continue
            texts = [f"not {t}" if statement.not_action else t for t in statement.actions.texts]
            key = general(statement_key(statement))
            found.setdefault(key, StatementUse(key, statement.sid, texts))
    for grant, count in enforcer.record.grants.items():
        for key in grant.statements:
            use = found.get(general(key))
            if use is not None:
                use.granted += count
                use.used_actions.add(grant.action)
    return found


def replay(enforcer: Enforcer) -> dict[str, list[str]]:
    """For each statement that granted something: the recorded requests (``principal action resource``)
    denied without it (empty: another statement grants them too)."""
    granting: dict[str, set[tuple[str, str, str]]] = {}
    for grant in enforcer.record.grants:
        for key in grant.statements:
            granting.setdefault(key, set()).add((grant.principal, grant.action, grant.resource))
    denied: dict[str, list[str]] = {}
    for key, requests in sorted(granting.items()):
        denied[key] = []
        for request in sorted(requests):
            acting, (call, region) = enforcer.record.requests[request]
            # decided without the statement, this once: the running stack's own requests are not
            if not enforcer.decide(acting, call, region, record=False, without=frozenset({key})).allowed:
                denied[key].append(" ".join(request))
    return denied


def dump(uses: dict[str, StatementUse], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [{**asdict(use), "used_actions": sorted(use.used_actions)} for use in uses.values()]
    path.write_text(json.dumps(rows, indent=1, sort_keys=True))


def load(path: Path) -> dict[str, StatementUse]:
    rows: list[dict[str, Any]] = json.loads(path.read_text())
    return {
        row["key"]: StatementUse(
            row["key"], row["sid"], list(row["actions"]), int(row["granted"]), set(row["used_actions"])
        )
        for row in rows
    }


def merge(runs: Iterable[dict[str, StatementUse]]) -> dict[str, StatementUse]:
    """One usage of several runs: a statement is used if any run used it."""
    merged: dict[str, StatementUse] = {}
    for run in runs:
        for key, use in run.items():
            into = merged.setdefault(key, StatementUse(key, use.sid, list(use.actions)))
            into.granted += use.granted
            into.used_actions |= use.used_actions
    return merged


def summary(enforcer: Enforcer, uses: dict[str, StatementUse]) -> list[str]:
    """What a run's authorizations come to, in a few lines (the demo and the soak print them)."""
    grants = enforcer.record.grants
    principals = {grant.principal for grant in grants}
    unused = sorted(key for key, use in uses.items() if use.granted == 0)
    lines = [
        f"IAM ({enforcer.mode}): {sum(grants.values())} requests by {len(principals)} principals authorized, "
        f"{len(enforcer.record.denials)} denied; {len(uses) - len(unused)} of {len(uses)} Allow statements "
        f"used, {len(unused)} granted nothing in this run"
    ]
    lines += [f"  denied: {denial.message}" for denial in enforcer.record.denials[:20]]
    return lines


def justifications(templates: Iterable[Path]) -> dict[str, str]:
    """``Metadata.SluiceLeastPrivilege`` of each template: a statement's Sid (or a managed policy's
    name) → why it stays though the local runs never use it (what only AWS does on the role's behalf:
    log delivery, trace upload; a path no local run reaches, with the test that covers it)."""
    import yaml  # noqa: PLC0415 - the templates' own reader (CloudFormation's tags: see below)

    class _Loader(yaml.SafeLoader):
        pass

    _Loader.add_multi_constructor("!", lambda loader, suffix, node: None)  # intrinsics: not needed here
    found: dict[str, str] = {}
    for path in templates:
        document = yaml.load(path.read_text(), Loader=_Loader)  # noqa: S506 - SafeLoader subclass
        found.update((document.get("Metadata") or {}).get("SluiceLeastPrivilege") or {})
    return found


def least_privilege(uses: dict[str, StatementUse], why: dict[str, str]) -> tuple[list[str], list[str]]:
    """(report lines, what granted nothing and is not justified: a statement, or an action of a used
    statement, ``<key> <action>``)."""
    lines: list[str] = []
    unjustified: list[str] = []
    unused = sorted(key for key, use in uses.items() if use.granted == 0)
    for key in unused:
        sid = uses[key].sid or ""
        policy_name = key.partition("#")[0].rpartition("/")[2]  # an AWS managed policy has no Sids
        reason = why.get(sid) or why.get(policy_name)
        if reason is None:
            unjustified.append(key)
        lines.append(f"granted nothing: {key}  {('— ' + reason) if reason else '— NOT JUSTIFIED'}")
    for key, use in sorted(uses.items()):
        for action in use.unused_actions if use.granted else []:
            reason = why.get(f"{use.sid} {action}")  # an action of a used statement: "<Sid> <action>"
            if reason is None:
                unjustified.append(f"{key} {action}")
            lines.append(
                f"used, but never {action}: {key}  {('— ' + reason) if reason else '— NOT JUSTIFIED'}"
            )
    return lines, unjustified
