"""What the request-to-authorization mapping shares: :class:`Call`, :class:`Lookup`, :class:`Unmapped`.

``actions.py`` is the interface (it re-exports these three); the per-service modules
(``actions_data.py``, ``actions_compute.py``, ``actions_s3.py``) turn one decoded request (:class:`Req`)
into the :class:`Call` s AWS authorizes for it. ARNs are built the way the Service Authorization Reference
gives each resource type (https://docs.aws.amazon.com/service-authorization/latest/reference/).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = [
    "Call",
    "Handler",
    "Lookup",
    "Req",
    "Unmapped",
    "attribute_text",
    "implied_kms",
    "partition",
    "pass_role",
    "star",
]

Context = Mapping[str, str | Sequence[str]]


@dataclass(frozen=True)
class Call:
    """One authorization AWS makes for a request: ``action`` on ``resource`` with ``context``.

    ``context`` holds the request's own condition keys, lower-cased (``kms:viaservice``,
    ``cloudwatch:namespace``, ``s3:prefix``, ``dynamodb:leadingkeys``); the evaluator adds the
    principal's. ``resource_required`` marks a KMS key: its key policy must grant (or delegate to IAM).
    """

    service: str
    operation: str
    action: str
    resource: str
    context: Context = field(default_factory=dict)
    resource_required: bool = False


class Lookup(Protocol):
    """Answers from moto's backends (the runtime implements it): names and settings a request leaves out."""

    def secret_arn(self, secret_id: str) -> str | None: ...
    def key_arn(self, key_id_or_alias: str) -> str | None: ...
    def queue_kms_key(self, queue_arn: str) -> str | None: ...
    def bucket_kms_key(self, bucket: str) -> str | None: ...
    def topic_kms_key(self, topic_arn: str) -> str | None: ...
    def function_arn(self, name_or_arn: str) -> str | None: ...
    def table_partition_key(self, table_arn: str) -> str | None: ...


class Unmapped(Exception):  # noqa: N818 - the name the shared interface gives it
    """A request whose authorization this mapping does not know: the runtime refuses it (fails closed)."""

    def __init__(self, service: str, operation: str, detail: str = "") -> None:
        self.service = service
        self.operation = operation
        self.detail = detail
        why = f" ({detail})" if detail else ""
        super().__init__(
            f"the local runtime does not know which IAM authorization AWS makes for {service} "
            f"{operation}{why}: refused rather than let through unchecked"
        )


def partition(region: str) -> str:
    if region.startswith("cn-"):
        return "aws-cn"
    if region.startswith("us-gov-"):
        return "aws-us-gov"
    return "aws"


@dataclass(frozen=True)
class Req:
    """One request, decoded: its IAM service prefix, API operation name and input parameters.

    ``params`` is the operation's input as the protocol carried it: a JSON object, or a query
    protocol's flat form (``AlarmNames.member.1``), or a REST request's labels, query and body merged.
    """

    service: str
    operation: str
    params: Mapping[str, Any]
    region: str
    account: str
    lookup: Lookup
    headers: Mapping[str, str] = field(default_factory=dict)  # lower-cased names

    @property
    def partition(self) -> str:
        return partition(self.region)

    def text(self, name: str) -> str | None:
        value = self.params.get(name)
        if value is None or isinstance(value, dict | list):
            return None
        return str(value)

    def need(self, name: str) -> str:
        value = self.text(name)
        if not value:
            raise Unmapped(self.service, self.operation, f"the request has no {name}")
        return value

    def items(self, name: str) -> list[Any]:
        """A list parameter: a JSON array, or the query protocol's ``Name.member.N`` / ``Name.N``."""
        value = self.params.get(name)
        if isinstance(value, list):
            return value
        numbered: list[tuple[int, Any]] = []
        for key, item in self.params.items():
            for prefix in (f"{name}.member.", f"{name}."):
                rest = key[len(prefix) :] if key.startswith(prefix) else ""
                if rest.isdigit():
                    numbered.append((int(rest), item))
        return [item for _, item in sorted(numbered)]

    def arn(
        self, service: str, resource: str, *, region: str | None = None, account: str | None = None
    ) -> str:
        where = self.region if region is None else region
        owner = self.account if account is None else account
        return f"arn:{self.partition}:{service}:{where}:{owner}:{resource}"

    def call(
        self,
        action: str,
        resource: str,
        context: Context | None = None,
        *,
        operation: str | None = None,
        required: bool = False,
    ) -> Call:
        prefix = action.split(":", 1)[0]
        return Call(
            service=prefix,
            operation=operation or self.operation,
            action=action,
            resource=resource,
            context=dict(context or {}),
            resource_required=required,
        )


Handler = Callable[[Req], list[Call]]


def star(action: str | None = None) -> Handler:
    """An action AWS authorizes on no resource (the reference lists none): Resource ``"*"``."""

    def handle(req: Req) -> list[Call]:
        return [req.call(action or f"{req.service}:{req.operation}", "*")]

    return handle


def implied_kms(req: Req, key: str | None, via: str, actions: Sequence[str]) -> list[Call]:
    """The KMS calls a service makes on the caller's behalf with a customer managed key.

    AWS checks them as the caller, with ``kms:ViaService`` set to the calling service's endpoint
    name and ``kms:CallerAccount`` to the caller's account; an AWS managed key (``alias/aws/...``)
    or no key (SSE-SQS, SSE-S3) needs no permission of the caller's, so gives no call.
    """
    if not key or key.startswith("alias/aws/") or ":alias/aws/" in key:
        return []
    resolved = req.lookup.key_arn(key) or key
    context = {"kms:viaservice": f"{via}.{req.region}.amazonaws.com", "kms:calleraccount": req.account}
    return [req.call(action, resolved, context, required=True) for action in actions]


def pass_role(req: Req, role_arn: str | None, service_principal: str) -> list[Call]:
    """``iam:PassRole`` on the role a request hands to a service (``iam:PassedToService``)."""
    if not role_arn:
        return []
    return [req.call("iam:PassRole", role_arn, {"iam:passedtoservice": service_principal})]


def attribute_text(value: Any) -> str | None:
    """A DynamoDB attribute value's text (``{"S": "a"}`` → ``a``) as condition keys compare it."""
    if isinstance(value, dict) and len(value) == 1:
        inner = next(iter(value.values()))
        if isinstance(inner, str | int | float):
            return str(inner)
    return None
