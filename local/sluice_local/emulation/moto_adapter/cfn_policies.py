"""CloudFormation creates queue, bucket and topic policies, as AWS does (moto 5.2.5 skips the three
types with a warning): ``AWS::SQS::QueuePolicy`` sets each queue's ``Policy`` attribute,
``AWS::S3::BucketPolicy`` the bucket policy, ``AWS::SNS::TopicPolicy`` each topic's ``Policy``, with
every intrinsic resolved by moto's CloudFormation. The local runtime's IAM enforcement
(:mod:`sluice_local.emulation.iam`) then decides with them, as SQS, S3 and SNS do.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from sluice_local.emulation.moto_adapter.attributes import CFN_RESOURCE_CLASS, ROLE_FROM_CFN, Undo, replace

__all__ = [
    "MANAGED_ARNS",
    "POLICY_TYPES",
    "install_cloudformation_policies",
    "install_role_managed_policies",
    "refused_roles",
]


def _document(props: dict[str, Any]) -> str:
    document = props.get("PolicyDocument") or {}
    return document if isinstance(document, str) else json.dumps(document)


def _queues(props: dict[str, Any], account: str, region: str) -> list[Any]:
    from moto.sqs.models import sqs_backends  # noqa: PLC0415

    backend = sqs_backends[account][region]
    return [backend.get_queue(str(url).rstrip("/").rsplit("/", 1)[-1]) for url in props.get("Queues") or []]


def _topics(props: dict[str, Any], account: str, region: str) -> list[Any]:
    from moto.sns.models import sns_backends  # noqa: PLC0415

    backend = sns_backends[account][region]
    return [backend.get_topic(str(arn)) for arn in props.get("Topics") or []]


def _bucket(props: dict[str, Any], account: str) -> Any:
    from moto.s3.models import s3_backends  # noqa: PLC0415

    return s3_backends[account]["global"].get_bucket(str(props["Bucket"]))


def _apply(kind: str, props: dict[str, Any], account: str, region: str, document: str | None) -> None:
    if kind == "AWS::SQS::QueuePolicy":
        for queue in _queues(props, account, region):
            queue.policy = document
    elif kind == "AWS::SNS::TopicPolicy":
        for topic in _topics(props, account, region):
            if document is None:
                topic.policy = json.dumps(topic._create_default_topic_policy(region, account, topic.name))
            else:
                topic.policy = document
    else:
        _bucket(props, account).policy = document.encode() if document is not None else None


class _CfnPolicy:
    """One of the three policy types (duck-typed, as :mod:`.cfn_secrets` explains)."""

    kind = ""

    def __init__(self, name: str) -> None:
        self.name = name

    @property
    def physical_resource_id(self) -> str:
        return self.name

    @staticmethod
    def cloudformation_name_type() -> str:
        return ""

    @classmethod
    def cloudformation_type(cls) -> str:
        return cls.kind

    @classmethod
    def has_cfn_attr(cls, attr: str) -> bool:
        return attr == "Id"

    def get_cfn_attribute(self, attribute_name: str) -> str:
        return self.name

    def is_created(self) -> bool:
        return True

    @classmethod
    def create_from_cloudformation_json(
        cls, resource_name: str, cloudformation_json: Any, account_id: str, region_name: str, **_: Any
    ) -> _CfnPolicy:
        props = cloudformation_json.get("Properties") or {}
        _apply(cls.kind, props, account_id, region_name, _document(props))
        return cls(resource_name)

    @classmethod
    def update_from_cloudformation_json(
        cls,
        original_resource: Any,
        new_resource_name: str,
        cloudformation_json: Any,
        account_id: str,
        region_name: str,
    ) -> Any:
        props = cloudformation_json.get("Properties") or {}
        _apply(cls.kind, props, account_id, region_name, _document(props))
        return original_resource

    @classmethod
    def delete_from_cloudformation_json(
        cls, resource_name: str, cloudformation_json: Any, account_id: str, region_name: str
    ) -> None:
        props = cloudformation_json.get("Properties") or {}
        with contextlib.suppress(Exception):  # the queue, topic or bucket is gone already
            _apply(cls.kind, props, account_id, region_name, None)


class _QueuePolicy(_CfnPolicy):
    kind = "AWS::SQS::QueuePolicy"


class _BucketPolicy(_CfnPolicy):
    kind = "AWS::S3::BucketPolicy"


class _TopicPolicy(_CfnPolicy):
    kind = "AWS::SNS::TopicPolicy"


POLICY_TYPES = {c.kind: c for c in (_QueuePolicy, _BucketPolicy, _TopicPolicy)}


def install_cloudformation_policies() -> Undo:
    """CloudFormation creates the three policy types (see the module)."""
    parsing = CFN_RESOURCE_CLASS.owner_class()
    original = parsing.resource_class_from_type

    def resource_class_from_type(resource_type: str) -> Any:
        return POLICY_TYPES.get(resource_type) or original(resource_type)

    return replace(parsing, "resource_class_from_type", resource_class_from_type)


REFUSED: list[str] = []
"""Roles whose create CloudFormation would fail (a managed policy that cannot be attached): moto
creates them anyway, and the runtime fails the deploy with these (:func:`refused_roles`)."""


def refused_roles() -> list[str]:
    """The refusals since the last call."""
    found = list(REFUSED)
    REFUSED.clear()
    return found


MANAGED_ARNS = "_sluice_managed_policy_arns"
"""The attribute of a moto role holding its template's ``ManagedPolicyArns`` (moto's CloudFormation
drops them: it attaches nothing, and holds no AWS managed policy unless told to load them all)."""


def install_role_managed_policies() -> Undo:
    """A role CloudFormation creates keeps its ``ManagedPolicyArns`` (:data:`MANAGED_ARNS`), read by
    the IAM enforcement: an AWS managed policy's document from moto's copy of them, a customer managed
    one's from the account."""
    role_class = ROLE_FROM_CFN.owner_class()
    original = role_class.create_from_cloudformation_json.__func__

    def create(
        cls: Any,
        /,
        resource_name: str,
        cloudformation_json: Any,
        account_id: str,
        region_name: str,
        **kwargs: Any,
    ) -> Any:
        arns = [
            str(arn)
            for arn in (cloudformation_json.get("Properties") or {}).get("ManagedPolicyArns") or []
            if arn
        ]
        for arn in arns:  # IAM refuses to attach a policy that does not exist: the role's create fails
            if not _attachable(arn, account_id):
                REFUSED.append(f"{resource_name}: Policy {arn} does not exist or is not attachable.")
        role = original(cls, resource_name, cloudformation_json, account_id, region_name, **kwargs)
        setattr(role, MANAGED_ARNS, arns)
        return role

    return replace(role_class, "create_from_cloudformation_json", classmethod(create))


def _attachable(arn: str, account: str) -> bool:
    """An AWS managed policy moto knows of, or a policy of the account."""
    if ":iam::aws:policy/" in arn:
        from moto.iam.aws_managed_policies import aws_managed_policies_data  # noqa: PLC0415

        return f'"{arn.rsplit("/", 1)[-1]}"' in aws_managed_policies_data
    from moto.iam.models import iam_backends  # noqa: PLC0415

    try:
        iam_backends[account]["global"].get_policy(arn)
    except Exception:  # noqa: BLE001 - moto's NoSuchEntity
        return False
    return True
