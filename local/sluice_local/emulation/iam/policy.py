"""IAM policies, parsed once and evaluated as AWS documents it, for requests within one account.

AWS's "Policy evaluation logic" and "Policy evaluation for requests within a single account", as the
runtime follows them:

- an explicit ``Deny`` in any statement that applies (identity-based or resource-based) wins;
- otherwise the request is allowed if an identity-based statement allows it, OR a resource-based
  statement allows it to the caller *directly*: ``"*"``, ``{"AWS": "*"}``, the session's ARN, its role's
  ARN (``aws:PrincipalArn``), the user's ARN, or ``{"Service": name}`` for a service principal;
- a resource-based statement naming the account (``"123456789012"`` or ``arn:aws:iam::ACCT:root``)
  delegates to IAM ("AWS JSON policy elements: Principal"): an ``Allow`` grants nothing by itself, a
  ``Deny`` applies to every principal of the account;
- ``resource_required`` (a KMS key policy, "Key policies in AWS KMS"): the key policy must allow
  directly, or allow the account (which enables IAM policies) and an identity-based policy allow too;
- a service principal has no identity-based policies: only the resource-based policy speaks for it;
- the account root user is allowed unless denied, except where the resource policy is required (KMS).

Not modelled: cross-account requests (both sides must allow), permissions boundaries, Organizations
SCPs and RCPs, session policies, KMS grants, S3 ACLs. Federated and canonical-user principals are
parsed and never match.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from sluice_local.emulation.iam.conditions import Condition, Context, Patterns, PolicyError

__all__ = ["Decision", "Policy", "PolicyError", "Principal", "Request", "Statement", "evaluate"]

_ACCOUNT_ID = re.compile(r"\d{12}")
_ROOT = re.compile(r"arn:aws[\w-]*:iam::(\d{12}):root")
_ROLE = re.compile(r"arn:(aws[\w-]*):iam::(\d{12}):role/(?:.*/)?([^/]+)")
_VERSIONS = ("2012-10-17", "2008-10-17")
_POLICY_KEYS = frozenset({"Version", "Id", "Statement"})
_STATEMENT_KEYS = frozenset(
    {
        "Sid",
        "Effect",
        "Principal",
        "NotPrincipal",
        "Action",
        "NotAction",
        "Resource",
        "NotResource",
        "Condition",
    }
)

Reach = Literal["direct", "account"]


@dataclass(frozen=True)
class Principal:
    """Who makes a request. ``arn`` names it as AWS does in errors; ``principal_arn`` is
    ``aws:PrincipalArn`` (the role's ARN for a role session); ``account`` is None for a service."""

    arn: str
    principal_arn: str
    account: str | None
    service: bool = False

    @classmethod
    def role_session(cls, role_arn: str, session: str) -> Principal:
        """A session of a role: ``arn:aws:sts::ACCT:assumed-role/NAME/SESSION`` (without the role's path)."""
        found = _ROLE.fullmatch(role_arn)
        if found is None:
            raise ValueError(f"not a role ARN: {role_arn!r}")
        partition, account, name = found.groups()
        return cls(f"arn:{partition}:sts::{account}:assumed-role/{name}/{session}", role_arn, account)

    @classmethod
    def user(cls, user_arn: str) -> Principal:
        return cls(user_arn, user_arn, user_arn.split(":")[4])

    @classmethod
    def root(cls, account: str) -> Principal:
        arn = f"arn:aws:iam::{account}:root"
        return cls(arn, arn, account)

    @classmethod
    def aws_service(cls, name: str) -> Principal:
        """A service principal (``sns.amazonaws.com``), as when a service delivers on a resource's behalf."""
        return cls(name, name, None, service=True)

    @property
    def is_root(self) -> bool:
        return self.account is not None and self.arn == f"arn:aws:iam::{self.account}:root"

    @functools.cached_property
    def context(self) -> dict[str, tuple[str, ...]]:
        """The global keys the principal brings to every request ("AWS global condition context keys")."""
        if self.service:
            return {"aws:principalservicename": (self.arn,), "aws:principalisawsservice": ("true",)}
        keys: dict[str, tuple[str, ...]] = {
            "aws:principalarn": (self.principal_arn,),
            "aws:principalisawsservice": ("false",),
        }
        if self.account is not None:
            keys["aws:principalaccount"] = (self.account,)
        resource = self.arn.split(":", 5)[-1]
        kind = resource.split("/", 1)[0]
        types = {
            "assumed-role": "AssumedRole",
            "user": "User",
            "root": "Account",
            "federated-user": "FederatedUser",
        }
        if kind in types:
            keys["aws:principaltype"] = (types[kind],)
        if kind == "user":
            keys["aws:username"] = (resource.rsplit("/", 1)[-1],)
        return keys


@dataclass(frozen=True)
class Request:
    """One authorization question: may ``principal`` perform ``action`` on ``resource`` (an ARN, or
    ``"*"`` for an action without a resource)? ``context`` holds the request's keys (``aws:SourceArn``,
    ``kms:ViaService``, ...; any case); the evaluator adds the principal's own (:attr:`Principal.context`)."""

    principal: Principal
    action: str
    resource: str
    context: Mapping[str, str | Sequence[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class PrincipalSet:
    """A ``Principal``/``NotPrincipal`` element: ``"*"``, account IDs, ARNs, service names."""

    everyone: bool = False
    arns: frozenset[str] = frozenset()
    accounts: frozenset[str] = frozenset()
    services: frozenset[str] = frozenset()

    def reach(self, caller: Principal) -> Reach | None:
        """``direct`` when the element names the caller (or everyone), ``account`` when it names only
        the caller's account, None when it does not name the caller."""
        if self.everyone:
            return "direct"
        if caller.service:
            return "direct" if caller.arn.lower() in self.services else None
        if caller.arn in self.arns or caller.principal_arn in self.arns:
            return "direct"
        if caller.account in self.accounts:
            return "direct" if caller.is_root else "account"
        return None

    def excludes(self, caller: Principal, *, every_level: bool) -> bool:
        """Whether a ``NotPrincipal`` element leaves the caller out. AWS may check the account, then the
        role, then the session ("AWS JSON policy elements: NotPrincipal"): with ``every_level`` (a
        ``Deny``) the caller is left out only if each of them is listed; otherwise (``Allow``) if any is."""
        if self.everyone:
            return True
        if caller.service:
            return caller.arn.lower() in self.services
        levels = [caller.account in self.accounts]
        if not caller.is_root:
            levels.append(caller.arn in self.arns)
            if caller.principal_arn != caller.arn:
                levels.append(caller.principal_arn in self.arns)
        return all(levels) if every_level else any(levels)


@dataclass(frozen=True, eq=False)
class Statement:
    """One parsed statement. ``index`` is its position in the policy; ``policy`` the policy holding it."""

    sid: str | None
    index: int
    effect: Literal["Allow", "Deny"]
    policy: Policy = field(repr=False)
    actions: Patterns = field(repr=False)
    not_action: bool = False
    resources: Patterns | None = field(default=None, repr=False)  # None: the resource the policy is on
    not_resource: bool = False
    principals: PrincipalSet | None = field(default=None, repr=False)  # None: an identity-based policy
    not_principal: bool = False
    condition: Condition | None = field(default=None, repr=False)

    @property
    def label(self) -> str:
        """For reports: ``<policy source> statement "Sid"`` (or ``#index`` without a Sid)."""
        return (
            f"{self.policy.source} statement {self.sid!r}"
            if self.sid
            else f"{self.policy.source} #{self.index}"
        )

    def applies(self, action: str, resource: str, context: Context) -> bool:
        """Whether the action, the resource and the condition match (the principal aside)."""
        if self.actions.matches(action, context) == self.not_action:
            return False
        if self.resources is not None and self.resources.matches(resource, context) == self.not_resource:
            return False
        return self.condition is None or self.condition.holds(context)

    def reach(self, caller: Principal) -> Reach | None:
        """How a resource-based statement's ``Principal``/``NotPrincipal`` names the caller."""
        if self.principals is None:
            return "direct"
        if self.not_principal:
            excluded = self.principals.excludes(caller, every_level=self.effect == "Deny")
            return None if excluded else "direct"
        return self.principals.reach(caller)


@dataclass(frozen=True, eq=False)
class Policy:
    """A parsed policy. ``source`` names who holds it, for reports (``"queue arn:... policy"``)."""

    source: str
    kind: Literal["identity", "resource"]
    statements: tuple[Statement, ...] = ()
    version: str | None = None

    @classmethod
    def parse(
        cls, document: str | Mapping[str, Any], *, source: str, kind: Literal["identity", "resource"]
    ) -> Policy:
        """The policy as AWS reads it: ``Statement`` an object or a list, elements a string or a list,
        ``Version`` optional (policy variables need ``2012-10-17``). PolicyError names what AWS refuses."""
        if isinstance(document, str):
            try:
                document = json.loads(document)
            except json.JSONDecodeError as error:
                raise PolicyError(f"{source}: the policy is not JSON: {error}") from error
        if not isinstance(document, Mapping):
            raise PolicyError(f"{source}: a policy is a JSON object, not {type(document).__name__}")
        unknown = set(document) - _POLICY_KEYS
        if unknown:
            raise PolicyError(f"{source}: unknown policy element(s) {sorted(unknown)}")
        version = document.get("Version")
        if version is not None and version not in _VERSIONS:
            raise PolicyError(f"{source}: Version must be one of {list(_VERSIONS)}, not {version!r}")
        raw = document.get("Statement")
        items = [raw] if isinstance(raw, Mapping) else raw
        if not isinstance(items, list) or not items:
            raise PolicyError(f"{source}: Statement must be an object or a non-empty list of objects")
        policy = cls(source, kind, (), version)
        statements = tuple(_statement(policy, i, item) for i, item in enumerate(items))
        sids = [s.sid for s in statements if s.sid is not None]
        if len(sids) != len(set(sids)):
            raise PolicyError(f"{source}: statement IDs (Sid) must be unique in a policy: {sids}")
        object.__setattr__(policy, "statements", statements)
        return policy


def _strings(value: object, where: str) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise PolicyError(f"{where} must be a string or a non-empty list of strings, not {value!r}")


def _one_of(item: Mapping[str, Any], name: str, where: str, *, required: bool) -> tuple[object, bool] | None:
    """The element ``name`` or ``Not<name>`` (value, negated); exactly one of them may be present."""
    present = [key for key in (name, f"Not{name}") if key in item]
    if len(present) > 1:
        raise PolicyError(f"{where}: a statement has {name} or Not{name}, not both")
    if not present:
        if required:
            raise PolicyError(f"{where}: a statement needs {name} or Not{name}")
        return None
    return item[present[0]], present[0].startswith("Not")


def _statement(policy: Policy, index: int, item: object) -> Statement:
    where = f"{policy.source}: Statement[{index}]"
    if not isinstance(item, Mapping):
        raise PolicyError(f"{where} must be an object")
    unknown = set(item) - _STATEMENT_KEYS
    if unknown:
        raise PolicyError(f"{where}: unknown statement element(s) {sorted(unknown)}")
    sid = item.get("Sid")
    if sid is not None and not isinstance(sid, str):
        raise PolicyError(f"{where}: Sid must be a string")
    effect = item.get("Effect")
    if effect not in ("Allow", "Deny"):
        raise PolicyError(f"{where}: Effect must be 'Allow' or 'Deny', not {effect!r}")
    variables = policy.version == "2012-10-17"
    action = _one_of(item, "Action", where, required=True)
    assert action is not None  # noqa: S101 - required=True raised otherwise
    actions = _strings(action[0], f"{where}.Action")
    for name in actions:
        if name != "*" and ":" not in name:
            raise PolicyError(
                f"{where}: Actions/Conditions must be prefaced by a vendor, e.g., iam, sdb, ec2: {name!r}"
            )
    resource = _one_of(item, "Resource", where, required=policy.kind == "identity")
    resources: Patterns | None = None
    if resource is not None:
        texts = _strings(resource[0], f"{where}.Resource")
        for text in texts:
            if text != "*" and not text.startswith("arn:"):
                raise PolicyError(f'{where}: Resource {text} must be in ARN format or "*"')
        resources = Patterns(texts, mode="glob", variables=variables)
    principal = _one_of(item, "Principal", where, required=False)
    if policy.kind == "identity" and principal is not None:
        raise PolicyError(f"{where}: an identity-based policy cannot have Principal or NotPrincipal")
    if policy.kind == "resource" and principal is None:
        raise PolicyError(f"{where}: a resource-based policy statement needs Principal or NotPrincipal")
    condition = item.get("Condition")
    return Statement(
        sid=sid,
        index=index,
        effect=effect,
        policy=policy,
        actions=Patterns(actions, mode="glob", variables=False, ignore_case=True),
        not_action=action[1],
        resources=resources,
        not_resource=resource is not None and resource[1],
        principals=_principal_set(principal[0], where) if principal is not None else None,
        not_principal=principal is not None and principal[1],
        condition=None if condition is None else Condition.parse(condition, variables=variables, where=where),
    )


def _principal_set(value: object, where: str) -> PrincipalSet:
    if value == "*":
        return PrincipalSet(everyone=True)
    if not isinstance(value, Mapping) or not value:
        raise PolicyError(f'{where}: Principal must be "*" or an object such as {{"AWS": ...}}')
    everyone, arns, accounts, services = False, set(), set(), set()
    for key, names in value.items():
        for name in _strings(names, f"{where}.Principal.{key}"):
            if name == "*" and key == "AWS":
                everyone = True
            elif "*" in name:
                raise PolicyError(f"{where}: a wildcard cannot match part of a principal: {name!r}")
            elif key == "AWS" and (_ACCOUNT_ID.fullmatch(name) or _ROOT.fullmatch(name)):
                accounts.add(name if _ACCOUNT_ID.fullmatch(name) else name.split(":")[4])
            elif key == "AWS":
                arns.add(name)
            elif key == "Service":
                services.add(name.lower())
            elif key not in ("Federated", "CanonicalUser"):
                raise PolicyError(f"{where}: unknown principal type {key!r}")
    return PrincipalSet(everyone, frozenset(arns), frozenset(accounts), frozenset(services))


@dataclass(frozen=True)
class Decision:
    """The answer. ``reason`` ends AWS's AccessDenied message (empty when allowed); ``granted_by`` holds
    every Allow statement that matched when allowed (a resource statement naming the account only with an
    identity-based Allow beside it); ``denied_by`` the Deny statements that matched."""

    allowed: bool
    reason: str
    granted_by: tuple[Statement, ...] = ()
    denied_by: tuple[Statement, ...] = ()

    def message(self, request: Request) -> str:
        """AWS's words: ``User: <arn> is not authorized to perform: <action> on resource: <arn> <reason>``."""
        return (
            f"User: {request.principal.arn} is not authorized to perform: {request.action} "
            f"on resource: {request.resource} {self.reason}"
        )


def _context(request: Request) -> dict[str, tuple[str, ...]]:
    context = dict(request.principal.context)
    for key, value in request.context.items():
        context[key.lower()] = (value,) if isinstance(value, str) else tuple(value)
    return context


def _identity(
    caller: Principal, action: str, target: str, context: Context, identity: Sequence[Policy]
) -> list[Statement]:
    """The identity-based statements that apply (none for a service principal: it has no such policies)."""
    found: list[Statement] = []
    for policy in () if caller.service else identity:
        if policy.kind != "identity":
            raise ValueError(f"{policy.source} is a {policy.kind}-based policy, passed as identity-based")
        found.extend(s for s in policy.statements if s.applies(action, target, context))
    return found


def _resource(
    caller: Principal, action: str, target: str, context: Context, resource: Policy | None
) -> list[tuple[Statement, Reach]]:
    """The resource-based statements that apply to the caller, each with how it names the caller."""
    if resource is None:
        return []
    if resource.kind != "resource":
        raise ValueError(f"{resource.source} is an identity-based policy, passed as resource-based")
    found: list[tuple[Statement, Reach]] = []
    for statement in resource.statements:
        reach = statement.reach(caller)
        if reach is not None and statement.applies(action, target, context):
            found.append((statement, reach))
    return found


def evaluate(
    request: Request,
    identity: Sequence[Policy],
    resource: Policy | None,
    *,
    resource_required: bool = False,
) -> Decision:
    """AWS's decision for ``request`` given the caller's identity-based policies and the resource's
    policy (None: the resource has none). ``resource_required``: the resource policy must allow (KMS)."""
    caller, action, target = request.principal, request.action, request.resource
    context = _context(request)
    mine = _identity(caller, action, target, context, identity)
    theirs = _resource(caller, action, target, context, resource)
    # A Deny applies wherever it is (in a resource policy, one naming the account: to all its principals).
    denied = [s for s in mine if s.effect == "Deny"] + [s for s, _ in theirs if s.effect == "Deny"]
    if denied:
        where = (
            "an identity-based" if any(s.policy.kind == "identity" for s in denied) else "a resource-based"
        )
        return Decision(False, f"with an explicit deny in {where} policy", (), tuple(denied))
    by_identity = [s for s in mine if s.effect == "Allow"]
    direct = [s for s, reach in theirs if s.effect == "Allow" and reach == "direct"]
    by_account = [s for s, reach in theirs if s.effect == "Allow" and reach == "account"]
    if resource_required:
        allowed = bool(direct) or bool(by_account and by_identity)
    else:
        allowed = bool(direct or by_identity) or caller.is_root
    if allowed:
        # An account statement counts only where an identity-based policy took up its delegation.
        return Decision(True, "", (*by_identity, *direct, *(by_account if by_identity else ())), ())
    missing = "resource" if caller.service or (resource_required and not by_account) else "identity"
    return Decision(False, f"because no {missing}-based policy allows the {action} action", (), ())
