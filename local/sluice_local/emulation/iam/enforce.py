"""Every request to the embedded AWS authorized as AWS would, before moto sees it.

A hook in front of moto's server (:func:`install`) finds who calls (the in-process principal header,
:mod:`.acting`, else the access key: an STS session of a role, an IAM user's key, else the local
administrator), what the request asks (:func:`~.actions.calls`: the action, the resource and the
request context, with the KMS calls a service makes for it), and decides each with the caller's
identity policies and the resource's policy (:func:`~.policy.evaluate`). A denied request gets the
service's own AccessDenied answer; nothing reaches moto. The runtime's in-process deliveries (an
EventBridge rule or a schedule invoking a function, an alarm publishing) are authorized through
:meth:`Enforcer.authorize` the same way.

Every decision is recorded (:class:`Record`): who did what on which resource, granted by which
statements. That record is the least-privilege report's input and the mutation run's
(:mod:`.report`). ``SLUICE_LOCAL_IAM=record`` decides and records without denying (the would-be
denials are logged); ``off`` skips it all.
"""

from __future__ import annotations

import dataclasses
import io
import logging
import os
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sluice_local.emulation.iam import actions
from sluice_local.emulation.iam.acting import (
    EMULATION,
    PRINCIPAL_HEADER,
    STAGING_ACCESS_KEY,
    Acting,
    acting_for_token,
    current,
    token_for,
)
from sluice_local.emulation.iam.policy import Decision, Policy, Principal, Request, Statement, evaluate
from sluice_local.emulation.iam.store import ADMIN_ARN_TEMPLATE, PolicyStore, stable_name
from sluice_local.emulation.threads import install_thread_inheritance

__all__ = ["MODES", "AccessDenied", "Denial", "Enforcer", "Grant", "Record", "mode_from_env"]

log = logging.getLogger("sluice_local.iam")
MODES = ("enforce", "record", "off")


def mode_from_env() -> str:
    mode = os.environ.get("SLUICE_LOCAL_IAM", "enforce").strip().lower() or "enforce"
    if mode not in MODES:
        raise ValueError(f"SLUICE_LOCAL_IAM={mode!r}: one of {', '.join(MODES)}")
    return mode


class AccessDenied(Exception):  # noqa: N818 - AWS's name for it
    """An in-process delivery was denied (the caller logs it as the service would)."""


@dataclass(frozen=True)
class Grant:
    principal: str
    """The role (stable name), user or service that called."""
    action: str
    resource: str
    statements: tuple[str, ...]
    """The statements that allowed it (:func:`statement_key`), identity and resource."""


@dataclass(frozen=True)
class Denial:
    principal: str
    action: str
    resource: str
    message: str


def statement_key(statement: Statement) -> str:
    return f"{statement.policy.source}#{statement.sid or statement.index}"


@dataclass
class Record:
    grants: Counter[Grant] = field(default_factory=Counter)
    denials: list[Denial] = field(default_factory=list)
    requests: dict[tuple[str, str, str], tuple[Acting, Any]] = field(default_factory=dict)
    """One request of each (principal, action, resource), kept to re-decide it without a statement."""
    policies: dict[str, Policy] = field(default_factory=dict)
    """Every policy a decision read, by source: the statements the report lists."""


class Enforcer:
    def __init__(self, account: str, mode: str = "enforce") -> None:
        self.account = account
        self.mode = mode
        self.store = PolicyStore(account)
        self.record = Record()
        self.without: frozenset[str] = frozenset()
        """Statements taken out of every policy (:func:`statement_key`): the mutation run's lever."""
        self._lock = threading.Lock()
        self._generation = 0
        self._decisions: dict[tuple[Any, ...], tuple[int, Decision, tuple[Policy, ...]]] = {}
        self.admin = Acting(
            arn=ADMIN_ARN_TEMPLATE.format(account=account),
            principal_arn=ADMIN_ARN_TEMPLATE.format(account=account),
            account=account,
            role_arn=ADMIN_ARN_TEMPLATE.format(account=account),
        )

    # --- who calls ------------------------------------------------------------------------------------

    def principal(self, headers: Mapping[str, str], key: str | None) -> Acting | None:
        """The caller of a signed request: the in-process principal its header names, else who its
        access key ``key`` belongs to; None for a key AWS would not know."""
        token = headers.get(PRINCIPAL_HEADER)
        if token:
            found = acting_for_token(token)
            if found is not None:
                return found
        return self._by_access_key(key) if key is not None else None

    def _by_access_key(self, key: str) -> Acting | None:
        if key == STAGING_ACCESS_KEY:
            return EMULATION
        from moto.iam.models import iam_backends  # noqa: PLC0415
        from moto.sts.models import sts_backends  # noqa: PLC0415

        session = sts_backends[self.account]["global"].get_assumed_role_from_access_key(key)
        if session is not None:
            return Acting.role_session(session.role_arn, session.session_name)
        user = iam_backends[self.account]["global"].get_user_from_access_key_id(key)
        if user is not None:
            return Acting(arn=user.arn, principal_arn=user.arn, account=self.account, role_arn=user.arn)
        if key in ADMIN_ACCESS_KEYS:
            return self.admin
        return None  # AWS knows no such key: InvalidClientTokenId

    # --- deciding ---------------------------------------------------------------------------------------

    def decide(
        self,
        acting: Acting,
        call: actions.Call,
        region: str,
        *,
        record: bool = True,
        without: frozenset[str] | None = None,
    ) -> Decision:
        """``without``: statements to leave out of this decision alone (default: :attr:`without`). A
        decision is kept until a policy may have changed (:meth:`policies_changed`): the soak makes tens
        of thousands of requests, most of them the same few."""
        removed = self.without if without is None else without
        key = (acting, call.action, call.resource, _frozen(call.context), region, removed)
        generation = self._generation
        cached = self._decisions.get(key)
        if cached is not None and cached[0] == generation:
            decision, policies = cached[1], cached[2]
        else:
            decision, policies = self._decide(acting, call, region, removed)
            if len(self._decisions) > DECISIONS_KEPT:
                self._decisions.clear()
            self._decisions[key] = (generation, decision, policies)
        if not record:
            return decision
        with self._lock:
            if cached is None:
                for policy in policies:
                    self.record.policies.setdefault(policy.source, policy)
            label, resource_name = _label(acting), _recorded(call.resource)
            self.record.requests.setdefault((label, call.action, resource_name), (acting, (call, region)))
            if decision.allowed:
                granted = tuple(sorted({statement_key(s) for s in decision.granted_by}))
                self.record.grants[Grant(label, call.action, resource_name, granted)] += 1
        return decision

    def policies_changed(self) -> None:
        """A policy, a role or a stack may have changed: decide every request afresh from now on."""
        self._generation += 1
        self.store.forget()

    def _decide(
        self, acting: Acting, call: actions.Call, region: str, removed: frozenset[str]
    ) -> tuple[Decision, tuple[Policy, ...]]:
        identity = [] if acting.role_arn is None else self.store.identity(acting.role_arn)
        resource = self.store.resource(call.resource) if call.resource != "*" else None
        if removed:
            identity = [_without(p, removed) for p in identity]
            resource = _without(resource, removed) if resource is not None else None
        context = {
            "aws:SecureTransport": "true",  # every SDK call in AWS is HTTPS; the local endpoint is not
            "aws:RequestedRegion": region,
            "aws:SourceIp": "127.0.0.1",
            **dict(acting.context),
            **call.context,
        }
        principal = Principal(
            arn=acting.arn, principal_arn=acting.principal_arn, account=acting.account, service=acting.service
        )
        request = Request(principal=principal, action=call.action, resource=call.resource, context=context)
        decision = evaluate(request, identity, resource, resource_required=call.resource_required)
        return decision, (*identity, *([resource] if resource is not None else []))

    def trusts(
        self, role_arn: str, service: str, region: str, context: Mapping[str, str] | None = None
    ) -> str | None:
        """None when ``role_arn``'s trust policy lets ``service`` (``lambda.amazonaws.com``) assume it,
        else why not: Lambda, Step Functions and the schedulers take on a role only then. ``context``:
        the keys the service sets on its AssumeRole (``aws:SourceAccount``)."""
        if self.mode == "off":
            return None
        principal = Principal(arn=service, principal_arn=service, account=None, service=True)
        trust = self.store.resource(role_arn)
        assume = "sts:AssumeRole"
        request = Request(principal=principal, action=assume, resource=role_arn, context=context or {})
        decision = evaluate(request, [], trust, resource_required=True)
        if decision.allowed:
            return None
        return f"the role {role_arn} cannot be assumed by {service}: its trust policy does not allow it"

    def authorize(self, acting: Acting, calls: Iterable[actions.Call], region: str) -> str | None:
        """None when every call is allowed (or this runs in ``record`` mode), else AWS's message."""
        if acting.exempt or self.mode == "off":
            return None
        for call in calls:
            decision = self.decide(acting, call, region)
            if decision.allowed:
                continue
            message = (
                f"User: {acting.arn} is not authorized to perform: {call.action} on resource: "
                f"{call.resource} {decision.reason}"
            )
            with self._lock:
                self.record.denials.append(
                    Denial(_label(acting), call.action, _recorded(call.resource), message)
                )
            log.warning("AccessDenied: %s", message)
            if self.mode == "enforce":
                return message
        return None

    # --- the server hook ----------------------------------------------------------------------------------

    def check(  # noqa: PLR0911 - one answer per way a request is refused
        self, environ: dict[str, Any]
    ) -> tuple[int, dict[str, str], bytes] | None:
        """The response that denies this WSGI request, None to let moto answer it."""
        if self.mode == "off":
            return None
        headers = {
            key[5:].replace("_", "-").lower(): str(value)
            for key, value in environ.items()
            if key.startswith("HTTP_")
        }
        if "CONTENT_TYPE" in environ:
            headers["content-type"] = str(environ["CONTENT_TYPE"])
        path = str(environ.get("PATH_INFO", "/"))
        query = str(environ.get("QUERY_STRING", ""))
        scope = actions.credential_scope(headers, query)  # the Authorization header or a presigned URL
        if scope is None:
            if path.startswith("/moto-api"):
                return None  # moto's own endpoints (not AWS's): the runtime's bookkeeping
            message = "the request is not signed: an anonymous caller is not authorized (sluice local IAM)"
            log.warning("AccessDenied: %s %s %s", environ.get("REQUEST_METHOD"), path, message)
            return actions.access_denied("s3", headers, message)
        key, _, region, service = scope
        acting = self.principal(headers, key)
        if acting is None:
            log.warning("InvalidClientTokenId: access key %s is not one of the embedded AWS's", key)
            return _invalid_token(service, headers)
        if acting.exempt:
            return None
        body = b""
        if service != "s3":  # an object's body is not needed to authorize; S3 streams it
            length = int(environ.get("CONTENT_LENGTH") or 0)
            body = environ["wsgi.input"].read(length) if length else b""
            environ["wsgi.input"] = io.BytesIO(body)
        lookup = _Lookup(self.store, region)
        try:
            asked = actions.calls(
                service,
                str(environ.get("REQUEST_METHOD", "GET")),
                str(
                    environ.get("RAW_URI") or environ.get("REQUEST_URI") or environ.get("PATH_INFO", "/")
                ).split("?", 1)[0],
                query,
                headers,
                body,
                region=region,
                account=self.account,
                lookup=lookup,
            )
        except actions.Unmapped as exc:
            unmapped = f"the local runtime cannot authorize {exc}: it is not mapped to IAM actions"
            log.error("%s (sluice_local/emulation/iam/actions.py)", unmapped)  # noqa: TRY400 - no traceback
            return actions.access_denied(service, headers, unmapped)
        if changes_policies(asked):
            self.policies_changed()
            environ[CHANGES_POLICIES] = True  # and again once moto has made the change
        refusal = self.authorize(acting, asked, region)
        if refusal is None and service == "s3":
            refusal = self._missing_object(acting, asked, region)
        if refusal is None:
            return None
        return actions.access_denied(service, headers, refusal)

    def _missing_object(self, acting: Acting, asked: list[actions.Call], region: str) -> str | None:
        """S3 answers a read of a missing object with 404 only to a caller allowed ``s3:ListBucket`` on
        the bucket, with 403 AccessDenied to any other (GetObject's API reference). AWS does not
        document this check's request context; the runtime reads it as a listing of the key itself
        (``s3:prefix`` the key), so a grant limited to a prefix covers the keys under it."""
        reads = [c for c in asked if c.action == "s3:GetObject" and c.resource.startswith("arn:aws:s3:::")]
        if not reads:
            return None
        bucket, _, key = reads[0].resource.removeprefix("arn:aws:s3:::").partition("/")
        if self.store.object_exists(bucket, key):
            return None
        listing = actions.Call(
            "s3", "ListObjectsV2", "s3:ListBucket", f"arn:aws:s3:::{bucket}", {"s3:prefix": key}
        )
        return self.authorize(acting, [listing], region)


class _Lookup:
    """:class:`~.actions.Lookup` for one request's region."""

    def __init__(self, store: PolicyStore, region: str) -> None:
        self._store = store
        self._region = region

    def secret_arn(self, secret_id: str) -> str | None:
        return self._store.secret_arn(secret_id, self._region)

    def key_arn(self, key_id_or_alias: str) -> str | None:
        return self._store.key_arn(key_id_or_alias, self._region)

    def queue_kms_key(self, queue_arn: str) -> str | None:
        return self._store.queue_kms_key(queue_arn)

    def bucket_kms_key(self, bucket: str) -> str | None:
        return self._store.bucket_kms_key(bucket, self._region)

    def topic_kms_key(self, topic_arn: str) -> str | None:
        return self._store.topic_kms_key(topic_arn)

    def function_arn(self, name_or_arn: str) -> str | None:
        return self._store.function_arn(name_or_arn, self._region)

    def table_partition_key(self, table_arn: str) -> str | None:
        return self._store.table_partition_key(table_arn)


def _without(policy: Policy, removed: frozenset[str]) -> Policy:
    kept = tuple(s for s in policy.statements if statement_key(s) not in removed)
    if len(kept) == len(policy.statements):
        return policy
    return dataclasses.replace(policy, statements=kept)


DECISIONS_KEPT = 50_000
POLICY_WRITES = frozenset(
    {
        "sqs:SetQueueAttributes",
        "sqs:AddPermission",
        "sqs:RemovePermission",
        "s3:PutBucketPolicy",
        "s3:DeleteBucketPolicy",
        "sns:SetTopicAttributes",
        "sns:AddPermission",
        "sns:RemovePermission",
        "kms:PutKeyPolicy",
        "lambda:AddPermission",
        "lambda:RemovePermission",
        "secretsmanager:PutResourcePolicy",
        "secretsmanager:DeleteResourcePolicy",
    }
)
"""Actions that change a resource policy (with every IAM and CloudFormation write): after one, every
request is decided afresh."""


def changes_policies(calls: Iterable[actions.Call]) -> bool:
    return any(
        call.action in POLICY_WRITES
        or call.action.startswith("iam:")
        or (
            call.action.startswith("cloudformation:")
            and not call.action.startswith(
                ("cloudformation:Describe", "cloudformation:List", "cloudformation:Get")
            )
        )
        for call in calls
    )


def _frozen(context: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in context.items()))


def _recorded(resource: str) -> str:
    """The resource as the record keeps it: an S3 object as its bucket's objects, a Step Functions
    execution as its state machine's, so that a long run's record stays the size of the stack."""
    if resource.startswith("arn:aws:s3:::") and "/" in resource:
        return resource.split("/", 1)[0] + "/*"
    if ":states:" in resource and ":execution:" in resource:
        return resource.rsplit(":", 1)[0] + ":*"
    return resource


def _label(acting: Acting) -> str:
    if acting.role_arn and ":role/" in acting.role_arn:
        return f"role:{stable_name(acting.role_arn.rsplit('/', 1)[-1])}"
    if acting.role_arn and ":user/" in acting.role_arn:
        return f"user:{acting.role_arn.rsplit('/', 1)[-1]}"
    return acting.principal_arn


ADMIN_ACCESS_KEYS = frozenset({"testing"})
"""The runtime's default credentials: the administrator who deployed the stack (:data:`ADMIN_ARN`).
moto's Step Functions clients sign with ``ak``, which names nobody: their calls carry their execution's
principal in the header, and one that lost it is refused (InvalidClientTokenId) rather than trusted."""


def _invalid_token(service: str, headers: Mapping[str, str]) -> tuple[int, dict[str, str], bytes]:
    status, response_headers, body = actions.access_denied(
        service, headers, "The security token included in the request is invalid."
    )
    for old, new in (
        (b"AccessDeniedException", b"InvalidClientTokenId"),
        (b"AccessDenied", b"InvalidClientTokenId"),
    ):
        body = body.replace(old, new)
    return status, {**response_headers, "x-amzn-ErrorType": "InvalidClientTokenId"}, body


# --- installing ----------------------------------------------------------------------------------------


def install(enforcer: Enforcer) -> Callable[[], None]:
    """Put ``enforcer`` in front of moto's server and stamp every in-process call with its principal;
    returns the undo."""
    from botocore.endpoint import Endpoint  # noqa: PLC0415
    from moto.iam.access_control import PermissionResult  # noqa: PLC0415

    from sluice_local.emulation.moto_adapter.attributes import S3_BUCKET_PERMISSION, SERVER_APP  # noqa: PLC0415

    install_thread_inheritance()
    application = SERVER_APP.owner_class()
    bucket_class = S3_BUCKET_PERMISSION.owner_class()
    original_call = application.__call__
    original_send = Endpoint._send  # type: ignore[attr-defined]
    original_permission = bucket_class.get_permission

    def call(self: Any, environ: dict[str, Any], start_response: Any) -> Any:
        try:
            denied = enforcer.check(environ)
        except Exception as exc:  # a bug of the runtime's: refused, loudly, never let through unchecked
            log.exception("the local runtime failed to authorize a request")
            denied = (500, {"Content-Type": "text/plain"}, f"sluice local IAM: {exc!r}".encode())
        if denied is None:
            try:
                return original_call(self, environ, start_response)
            finally:
                if environ.get(CHANGES_POLICIES):
                    enforcer.policies_changed()
        status, headers, body = denied
        start_response(f"{status} {_REASONS.get(status, 'Error')}", list(headers.items()))
        return [body]

    def send(self: Endpoint, request: Any) -> Any:
        acting = current()
        if acting is not None:
            request.headers[PRINCIPAL_HEADER] = token_for(acting)
        return original_send(self, request)

    def permission(self: Any, action: str, resource: str) -> Any:
        # moto's S3 reads a bucket policy itself, ignoring its conditions (aws:SecureTransport over the
        # local http endpoint denies everything): the hook above decides, with them
        return PermissionResult.NEUTRAL

    application.__call__ = call
    Endpoint._send = send  # type: ignore[attr-defined]
    bucket_class.get_permission = permission

    def undo() -> None:
        application.__call__ = original_call
        Endpoint._send = original_send  # type: ignore[attr-defined]
        bucket_class.get_permission = original_permission

    return undo


CHANGES_POLICIES = "sluice.iam.changes_policies"
"""The WSGI environ key marking a request that may change a policy."""

_REASONS = {400: "Bad Request", 403: "Forbidden", 500: "Internal Server Error"}
