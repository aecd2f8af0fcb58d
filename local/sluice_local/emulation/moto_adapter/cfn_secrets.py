"""CloudFormation creates ``AWS::SecretsManager::Secret`` as AWS does (moto 5.2.5 skips the type)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from typing import Any

from sluice_local.emulation.moto_adapter.attributes import CFN_RESOURCE_CLASS, Undo, replace


class _CfnSecret:
    """``AWS::SecretsManager::Secret`` for moto's CloudFormation (duck-typed: a CloudFormationModel
    subclass would stay in moto's cached model list after the patch is undone)."""

    def __init__(self, arn: str, name: str) -> None:
        self.arn, self.name = arn, name

    @property
    def physical_resource_id(self) -> str:
        return self.arn

    @staticmethod
    def cloudformation_name_type() -> str:
        return "Name"

    @staticmethod
    def cloudformation_type() -> str:
        return "AWS::SecretsManager::Secret"

    @classmethod
    def has_cfn_attr(cls, attr: str) -> bool:
        return attr == "Id"

    def get_cfn_attribute(self, attribute_name: str) -> str:
        return self.arn

    def is_created(self) -> bool:
        return True

    @classmethod
    def create_from_cloudformation_json(
        cls, resource_name: str, cloudformation_json: Any, account_id: str, region_name: str, **_: Any
    ) -> _CfnSecret:
        from moto.secretsmanager.models import secretsmanager_backends  # noqa: PLC0415

        props = cloudformation_json.get("Properties") or {}
        value = props.get("SecretString")
        if value is None and isinstance(props.get("GenerateSecretString"), Mapping):
            value = _generated_secret(props["GenerateSecretString"])
        created = json.loads(
            secretsmanager_backends[account_id][region_name].create_secret(
                name=str(props.get("Name") or resource_name),
                secret_string=value,
                secret_binary=None,
                description=props.get("Description"),
                tags=props.get("Tags"),
                kms_key_id=props.get("KmsKeyId"),
                client_request_token=None,
                replica_regions=[],
                force_overwrite=False,
            )
        )
        return cls(created["ARN"], created["Name"])

    @classmethod
    def update_from_cloudformation_json(cls, original_resource: Any, *_: Any, **__: Any) -> Any:
        return original_resource  # a generated key is kept across stack updates, as in AWS

    @classmethod
    def delete_from_cloudformation_json(
        cls, resource_name: str, cloudformation_json: Any, account_id: str, region_name: str
    ) -> None:
        from moto.secretsmanager.models import secretsmanager_backends  # noqa: PLC0415

        with contextlib.suppress(Exception):  # already gone
            secretsmanager_backends[account_id][region_name].delete_secret(resource_name, None, True)


def _generated_secret(spec: Mapping[str, Any]) -> str:
    """A value as ``GenerateSecretString`` makes it (``PasswordLength``, ``ExcludePunctuation``,
    ``ExcludeCharacters``)."""
    import secrets as random_source  # noqa: PLC0415
    import string  # noqa: PLC0415

    alphabet = string.ascii_letters + string.digits
    if str(spec.get("ExcludePunctuation", "false")).lower() != "true":
        alphabet += string.punctuation
    alphabet = "".join(c for c in alphabet if c not in str(spec.get("ExcludeCharacters", "")))
    return "".join(random_source.choice(alphabet) for _ in range(int(spec.get("PasswordLength", 32))))


def install_cloudformation_secrets() -> Undo:
    """CloudFormation creates ``AWS::SecretsManager::Secret`` as AWS does (moto 5.2.5 skips the type
    with a warning): ``SecretString`` as given, or ``GenerateSecretString``; ``Ref`` is the secret's ARN."""
    parsing = CFN_RESOURCE_CLASS.owner_class()
    original = parsing.resource_class_from_type

    def resource_class_from_type(resource_type: str) -> Any:
        return _CfnSecret if resource_type == _CfnSecret.cloudformation_type() else original(resource_type)

    return replace(parsing, "resource_class_from_type", resource_class_from_type)
