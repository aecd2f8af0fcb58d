"""The policies that decide a request, read from the embedded AWS as they are deployed.

Identity policies: a role's inline policies and its attached managed policies (an AWS managed policy
moto does not hold is read from moto's copy of AWS's managed policies); a user's likewise. Resource
policies: a queue's ``Policy`` attribute, a bucket policy, a topic policy, a key policy, a secret's
resource policy, a function's permissions, a role's trust policy (for ``sts:AssumeRole``). Each
document is parsed once per text (:class:`~.policy.Policy` objects are cached by it), so a policy
changed through the API applies to the next request.

Labels (:func:`stable_name`) name a role or resource without the random suffix CloudFormation gives a
generated name, so a statement is named the same way in every deploy of a stack (the least-privilege
report and the mutation run compare them across runs).
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Mapping
from typing import Any

from sluice_local.emulation.iam.policy import Policy, PolicyError
from sluice_local.emulation.moto_adapter.cfn_policies import MANAGED_ARNS

__all__ = ["ADMIN_ARN", "PolicyStore", "lambda_backend", "stable_name"]

ADMIN_ARN_TEMPLATE = "arn:aws:iam::{account}:user/sluice-local-admin"
ADMIN_ARN = ADMIN_ARN_TEMPLATE.format(account="123456789012")
"""Who calls with the runtime's default credentials (``testing``): the person running the stack, as
``sam deploy``'s credentials are in AWS, with an administrator's identity policy. Resource policies
still apply to it (an explicit deny in a queue policy denies it too)."""

_ADMIN_POLICY = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
_GENERATED_SUFFIX = re.compile(r"-[A-Za-z0-9]{12,13}$")


def stable_name(name: str) -> str:
    """``stack-LogicalId-1A2B3C4D5E6F`` → ``stack-LogicalId`` (names sluice gives itself are kept)."""
    return _GENERATED_SUFFIX.sub("", name)


def _backend(module: str, account: str, region: str) -> Any:
    import importlib  # noqa: PLC0415 - moto's backends are imported when the runtime is running

    if module == "awslambda":  # the runtime runs moto's Lambda without Docker: its "simple" backend
        from moto.awslambda_simple.models import lambda_simple_backends  # noqa: PLC0415

        return lambda_simple_backends[account][region]
    backends = getattr(importlib.import_module(f"moto.{module}.models"), f"{module}_backends")
    return backends[account][region]


def lambda_backend(account: str, region: str) -> Any:
    """moto's Lambda backend the runtime's functions are deployed into."""
    return _backend("awslambda", account, region)


class PolicyStore:
    def __init__(self, account: str) -> None:
        self.account = account
        self._parsed: dict[tuple[str, str, str], Policy] = {}
        self._lock = threading.Lock()
        self._aws_managed: dict[str, Any] | None = None
        self._partition_keys: dict[str, str] = {}
        self._identities: dict[str, list[Policy]] = {}
        self._resources: dict[str, Policy | None] = {}

    # --- parsing, cached by text -------------------------------------------------------------------

    def _policy(self, document: str | Mapping[str, Any], source: str, kind: str) -> Policy:
        text = document if isinstance(document, str) else json.dumps(document, sort_keys=True)
        key = (text, source, kind)
        found = self._parsed.get(key)
        if found is None:
            try:
                found = Policy.parse(text, source=source, kind=kind)  # type: ignore[arg-type]
            except PolicyError as exc:
                raise PolicyError(f"{source}: {exc}") from exc
            with self._lock:
                if len(self._parsed) > 4096:  # documents replaced over a long run
                    self._parsed.clear()
                self._parsed[key] = found
        return found

    # --- identity policies ---------------------------------------------------------------------------

    def forget(self) -> None:
        """A policy may have changed: read them afresh."""
        self._identities.clear()
        self._resources.clear()

    def identity(self, identity_arn: str) -> list[Policy]:
        """The identity policies of a role or user ARN (kept until :meth:`forget`)."""
        found = self._identities.get(identity_arn)
        if found is None:
            found = self._identities[identity_arn] = self._read_identity(identity_arn)
        return found

    def _read_identity(self, identity_arn: str) -> list[Policy]:
        """The identity policies of a role or user ARN; the local administrator's is ``Allow *``."""
        iam = _backend("iam", self.account, "global")
        kind, _, rest = identity_arn.split(":", 5)[5].partition("/")
        name = rest.rsplit("/", 1)[-1]
        if identity_arn == ADMIN_ARN_TEMPLATE.format(account=self.account):
            return [self._policy(_ADMIN_POLICY, "user:sluice-local-admin/administrator", "identity")]
        try:
            holder = iam.get_role(name) if kind == "role" else iam.get_user(name)
        except Exception:  # noqa: BLE001 - a deleted role has no policies: everything is denied
            return []
        label = f"{kind}:{stable_name(name)}"
        policies = [
            self._policy(document, f"{label}/{policy_name}", "identity")
            for policy_name, document in sorted(holder.policies.items())
        ]
        for managed in holder.managed_policies.values():
            document = getattr(managed, "document", None)
            if document:
                policies.append(self._policy(document, f"{label}/{managed.name}", "identity"))
        for arn in getattr(holder, MANAGED_ARNS, []):
            found = self._managed(iam, arn)
            if found is not None:
                policies.append(self._policy(found, f"{label}/{arn.rsplit('/', 1)[-1]}", "identity"))
        return policies

    def _managed(self, iam: Any, arn: str) -> str | Mapping[str, Any] | None:
        """A managed policy's document: an AWS managed one from moto's copy, the account's from IAM."""
        if ":iam::aws:policy/" in arn:
            if self._aws_managed is None:
                from moto.iam.aws_managed_policies import aws_managed_policies_data  # noqa: PLC0415

                self._aws_managed = json.loads(aws_managed_policies_data)
            entry = self._aws_managed.get(arn.rsplit("/", 1)[-1])
            return entry["Document"] if entry else None
        try:
            policy = iam.get_policy(arn)
            return str(iam.get_policy_version(arn, policy.default_version_id).document)
        except Exception:  # noqa: BLE001 - a policy that does not exist grants nothing
            return None

    # --- resource policies ---------------------------------------------------------------------------

    def resource(self, arn: str) -> Policy | None:
        """The resource policy that applies to ``arn`` (an object's is its bucket's; kept until
        :meth:`forget`); None: it has none."""
        holder = arn.split("/", 1)[0] if arn.startswith("arn:aws:s3:::") else arn
        if holder not in self._resources:
            self._resources[holder] = self._read_resource(holder)
        return self._resources[holder]

    def _read_resource(self, arn: str) -> Policy | None:
        parts = arn.split(":", 5)
        if len(parts) < 6:
            return None
        service, region = parts[2], parts[3]
        try:
            found = self._resource_document(service, region, parts[5], arn)
        except Exception:  # noqa: BLE001 - the resource does not exist (yet): no policy applies to it
            return None
        if found is None:
            return None
        document, label = found
        return self._policy(document, label, "resource")

    def _resource_document(  # noqa: PLR0911 - one return per service
        self, service: str, region: str, rest: str, arn: str
    ) -> tuple[str | Mapping[str, Any], str] | None:
        if service == "sqs":
            queue = _backend("sqs", self.account, region).queues[rest]
            return (queue.policy, f"queue:{rest}") if queue.policy else None
        if service == "s3":
            bucket_name = rest.split("/", 1)[0]
            bucket = _backend("s3", self.account, "global").buckets[bucket_name]
            return (bucket.policy.decode(), f"bucket:{stable_name(bucket_name)}") if bucket.policy else None
        if service == "sns":
            topic = _backend("sns", self.account, region).topics[arn]
            return (topic.policy, f"topic:{stable_name(rest)}")
        if service == "kms":
            key = _backend("kms", self.account, region).keys[rest.split("/", 1)[-1]]
            return (key.policy, f"key:{key.description or key.id}")
        if service == "secretsmanager":
            secrets = _backend("secretsmanager", self.account, region)
            secret = secrets.secrets[arn]
            name = getattr(secret, "name", rest)
            return (secret.policy, f"secret:{stable_name(name)}") if secret.policy else None
        if service == "lambda":
            name = rest.split(":")[1]
            function = _backend("awslambda", self.account, region).get_function(name)
            # moto keeps the AddPermission request beside each statement: the statement elements only
            elements = ("Sid", "Effect", "Principal", "NotPrincipal", "Action", "Resource", "Condition")
            statements = [
                {**{k: s[k] for k in elements if k in s}, "Sid": _permission_sid(s)}
                for s in function.policy.statements
            ]
            if not statements:
                return None
            return ({"Version": "2012-10-17", "Statement": statements}, f"function:{name}")
        if service == "iam" and rest.startswith("role/"):
            role = _backend("iam", self.account, "global").get_role(rest.rsplit("/", 1)[-1])
            return (role.assume_role_policy_document, f"trust:{stable_name(role.name)}")
        return None

    # --- the lookups a request's authorizations need (:class:`~.actions.Lookup`) ---------------------

    def secret_arn(self, secret_id: str, region: str) -> str | None:
        """A secret's ARN from its name, ARN or partial ARN (without the random suffix)."""
        if secret_id.startswith("arn:"):
            region = secret_id.split(":")[3]
        secrets = _backend("secretsmanager", self.account, region)
        for arn, secret in list(secrets.secrets.items()):
            if secret_id in {arn, getattr(secret, "name", None)} or arn.startswith(secret_id + "-"):
                return str(arn)
        return None

    def key_arn(self, key_id: str, region: str) -> str | None:
        kms = _backend("kms", self.account, region)
        try:
            key = kms.describe_key(key_id)
        except Exception:  # noqa: BLE001 - an unknown key: the service answers NotFound itself
            return None
        return str(key.arn)

    def queue_kms_key(self, queue_arn: str) -> str | None:
        region, _, name = queue_arn.split(":")[3:6]
        queue = _backend("sqs", self.account, region).queues.get(name)
        key = getattr(queue, "kms_master_key_id", None) if queue is not None else None
        if not key or key == "alias/aws/sqs":
            return None
        return self.key_arn(key, region)

    def bucket_kms_key(self, bucket: str, region: str) -> str | None:
        found = _backend("s3", self.account, "global").buckets.get(bucket)
        encryption = getattr(found, "encryption", None) or {}
        rules = encryption.get("Rule", []) if isinstance(encryption, dict) else []
        for rule in rules if isinstance(rules, list) else [rules]:  # moto keeps one rule as a mapping
            default = rule.get("ApplyServerSideEncryptionByDefault", {})
            if default.get("SSEAlgorithm") == "aws:kms" and default.get("KMSMasterKeyID"):
                return self.key_arn(default["KMSMasterKeyID"], region)
        return None

    def object_exists(self, bucket: str, key: str) -> bool:
        """Whether ``key`` is in ``bucket`` (a missing bucket: S3 answers NoSuchBucket itself)."""
        found = _backend("s3", self.account, "global").buckets.get(bucket)
        if found is None:
            return True
        return found.keys.get(key) is not None

    def topic_kms_key(self, topic_arn: str) -> str | None:
        region = topic_arn.split(":")[3]
        topic = _backend("sns", self.account, region).topics.get(topic_arn)
        key = getattr(topic, "kms_master_key_id", None) if topic is not None else None
        if not key or key == "alias/aws/sns":
            return None
        return self.key_arn(key, region)

    def function_arn(self, name_or_arn: str, region: str) -> str | None:
        try:
            function = _backend("awslambda", self.account, region).get_function(name_or_arn)
        except Exception:  # noqa: BLE001 - an unknown function: the service answers NotFound itself
            return None
        return str(function.function_arn)

    def table_partition_key(self, table_arn: str) -> str | None:
        known = self._partition_keys.get(table_arn)
        if known is not None:
            return known  # a table's key schema never changes
        region, name = table_arn.split(":")[3], table_arn.rsplit("/", 1)[-1]
        table = _backend("dynamodb", self.account, region).tables.get(name)
        key = getattr(table, "hash_key_attr", None) if table is not None else None
        if key:
            self._partition_keys[table_arn] = str(key)
        return str(key) if key else None


def _permission_sid(statement: Mapping[str, Any]) -> str:
    """A function permission's Sid, the same in every deploy: CloudFormation's AWS::Lambda::Permission
    has none of its own (moto makes a random one), so it is named after who may invoke, for what."""
    principal = statement.get("Principal") or {}
    who = (
        principal.get("Service") or principal.get("AWS") or "any"
        if isinstance(principal, dict)
        else principal
    )
    source = ""
    for values in (statement.get("Condition") or {}).values():
        for key, value in values.items():
            if key.lower() == "aws:sourcearn":
                source = stable_name(str(value).rsplit("/", 1)[-1].rsplit(":", 1)[-1])
    return f"{who}:{source}" if source else str(who)
