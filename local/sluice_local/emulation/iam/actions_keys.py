"""Authorizations for KMS, Secrets Manager and Systems Manager parameters.

Each operation maps to the action and resource type the Service Authorization Reference gives it
("Actions, resources, and condition keys for AWS Key Management Service" / "... AWS Secrets Manager" /
"... AWS Systems Manager",
https://docs.aws.amazon.com/service-authorization/latest/reference/reference_policies_actions-resources-contextkeys.html).
KMS calls are marked ``resource_required``: the key policy must allow them, directly or by delegating to
IAM ("Key policies in AWS KMS", AWS KMS Developer Guide). A Decrypt without KeyId is authorized on the key
the ciphertext names. Secrets are authorized on their full ARN (with the 6-character suffix AWS adds),
parameters on ``arn:aws:ssm:REGION:ACCOUNT:parameter/NAME`` ("Working with parameters", AWS Systems
Manager User Guide: a name that starts with ``/`` gives no second slash).
"""

from __future__ import annotations

import base64
import binascii
import re

from .actions_base import Call, Handler, Req, Unmapped, star

__all__ = ["KEY_HANDLERS", "parameter_arn"]


# --- KMS ------------------------------------------------------------------------------------------


def _key(req: Req, key_id: str) -> str:
    found = req.lookup.key_arn(key_id)
    if found:
        return found
    if key_id.startswith("arn:"):
        return key_id
    return req.arn("kms", key_id if key_id.startswith("alias/") else f"key/{key_id}")


def _encryption_context(req: Req) -> dict[str, str | list[str]]:
    given = req.params.get("EncryptionContext")
    if not isinstance(given, dict) or not given:
        return {}
    context: dict[str, str | list[str]] = {
        f"kms:encryptioncontext:{k.lower()}": str(v) for k, v in given.items()
    }
    context["kms:encryptioncontextkeys"] = list(given)
    return context


def _kms_on_key(req: Req) -> list[Call]:
    key = _key(req, req.need("KeyId"))
    return [req.call(f"kms:{req.operation}", key, _encryption_context(req), required=True)]


def _ciphertext_key(req: Req, blob: str | None) -> str:
    """The key a symmetric ciphertext names (moto's blob starts with the 36-character key id)."""
    try:
        key_id = base64.b64decode(blob or "")[:36].decode("ascii")
    except (ValueError, binascii.Error):
        key_id = ""
    if not re.fullmatch(r"[0-9a-f-]{36}", key_id):
        raise Unmapped(
            req.service, req.operation, "the ciphertext names no key and the request gives no KeyId"
        )
    return key_id


def _kms_decrypt(req: Req) -> list[Call]:
    key = _key(req, req.text("KeyId") or _ciphertext_key(req, req.text("CiphertextBlob")))
    return [req.call("kms:Decrypt", key, _encryption_context(req), required=True)]


def _kms_reencrypt(req: Req) -> list[Call]:
    source = _key(req, req.text("SourceKeyId") or _ciphertext_key(req, req.text("CiphertextBlob")))
    destination = _key(req, req.need("DestinationKeyId"))
    return [
        req.call("kms:ReEncryptFrom", source, required=True),
        req.call("kms:ReEncryptTo", destination, required=True),
    ]


def _kms_alias(req: Req) -> list[Call]:
    alias = req.arn("kms", req.need("AliasName"))
    calls = [req.call(f"kms:{req.operation}", alias)]
    target = req.text("TargetKeyId")
    if target:
        calls.append(req.call(f"kms:{req.operation}", _key(req, target), required=True))
    return calls


_KMS: dict[str, Handler] = {
    "Decrypt": _kms_decrypt,
    "ReEncrypt": _kms_reencrypt,
    "CreateKey": star(),
    "ListKeys": star(),
    "ListAliases": star(),
    "GenerateRandom": star(),
    "CreateAlias": _kms_alias,
    "UpdateAlias": _kms_alias,
    "DeleteAlias": _kms_alias,
}
for _name in (
    "Encrypt",
    "GenerateDataKey",
    "GenerateDataKeyWithoutPlaintext",
    "GenerateDataKeyPair",
    "GenerateMac",
    "VerifyMac",
    "Sign",
    "Verify",
    "DescribeKey",
    "GetPublicKey",
    "GetKeyPolicy",
    "PutKeyPolicy",
    "GetKeyRotationStatus",
    "EnableKeyRotation",
    "DisableKeyRotation",
    "EnableKey",
    "DisableKey",
    "ScheduleKeyDeletion",
    "CancelKeyDeletion",
    "CreateGrant",
    "ListGrants",
    "TagResource",
    "UntagResource",
    "ListResourceTags",
):
    _KMS[_name] = _kms_on_key


# --- Secrets Manager ------------------------------------------------------------------------------


def _secret(req: Req, secret_id: str) -> str:
    """The secret's full ARN; one not found keeps its ARN or gets the name's with AWS's 6-character tail."""
    found = req.lookup.secret_arn(secret_id)
    if found:
        return found
    if secret_id.startswith("arn:"):
        return secret_id
    return req.arn("secretsmanager", f"secret:{secret_id}-??????")


def _secret_call(req: Req) -> list[Call]:
    secret = _secret(req, req.need("SecretId"))
    return [req.call(f"secretsmanager:{req.operation}", secret, {"secretsmanager:secretid": secret})]


def _secret_create(req: Req) -> list[Call]:
    return [req.call("secretsmanager:CreateSecret", _secret(req, req.need("Name")))]


def _secret_batch(req: Req) -> list[Call]:
    names = req.items("SecretIdList")
    if not names:
        raise Unmapped(req.service, req.operation, "secrets chosen by filters")
    calls = [req.call("secretsmanager:BatchGetSecretValue", "*")]
    for name in names:
        secret = _secret(req, str(name))
        calls.append(req.call("secretsmanager:GetSecretValue", secret, {"secretsmanager:secretid": secret}))
    return calls


_SECRETS: dict[str, Handler] = {
    "CreateSecret": _secret_create,
    "ListSecrets": star(),
    "GetRandomPassword": star(),
    "BatchGetSecretValue": _secret_batch,
}
for _name in (
    "GetSecretValue",
    "DescribeSecret",
    "PutSecretValue",
    "UpdateSecret",
    "DeleteSecret",
    "RestoreSecret",
    "RotateSecret",
    "CancelRotateSecret",
    "GetResourcePolicy",
    "PutResourcePolicy",
    "DeleteResourcePolicy",
    "ListSecretVersionIds",
    "UpdateSecretVersionStage",
    "TagResource",
    "UntagResource",
):
    _SECRETS[_name] = _secret_call


# --- Systems Manager parameters -------------------------------------------------------------------


def parameter_arn(req: Req, name: str) -> str:
    """``arn:aws:ssm:REGION:ACCOUNT:parameter/NAME``: a leading ``/`` is not doubled; ``:label`` dropped."""
    if name.startswith("arn:"):
        return name.rsplit(":", 1)[0] if name.count(":") > 5 else name
    return req.arn("ssm", f"parameter/{name.split(':', 1)[0].lstrip('/')}")


def _ssm_one(parameter: str) -> Handler:
    def handle(req: Req) -> list[Call]:
        return [req.call(f"ssm:{req.operation}", parameter_arn(req, req.need(parameter)))]

    return handle


def _ssm_many(req: Req) -> list[Call]:
    return [req.call(f"ssm:{req.operation}", parameter_arn(req, str(name))) for name in req.items("Names")]


_SSM: dict[str, Handler] = {
    "GetParameter": _ssm_one("Name"),
    "PutParameter": _ssm_one("Name"),
    "DeleteParameter": _ssm_one("Name"),
    "GetParameterHistory": _ssm_one("Name"),
    "LabelParameterVersion": _ssm_one("Name"),
    "GetParameters": _ssm_many,
    "DeleteParameters": _ssm_many,
    "GetParametersByPath": _ssm_one("Path"),
    "DescribeParameters": star(),
}


KEY_HANDLERS: dict[str, dict[str, Handler]] = {
    "kms": _KMS,
    "secretsmanager": _SECRETS,
    "ssm": _SSM,
}
