"""Authorizations for Amazon S3 requests (REST-XML: the operation is the method, the path and its
subresource).

Actions and resources follow "Actions, resources, and condition keys for Amazon S3" (Service
Authorization Reference) and "Required permissions for Amazon S3 API operations" (Amazon S3 User Guide):
bucket operations on ``arn:aws:s3:::BUCKET``, object operations on ``arn:aws:s3:::BUCKET/KEY``;
HeadObject needs ``s3:GetObject``; ListObjects(V2) and HeadBucket ``s3:ListBucket`` (with the
``s3:prefix``, ``s3:delimiter`` and ``s3:max-keys`` keys); DeleteObjects ``s3:DeleteObject`` per key;
CopyObject ``s3:PutObject`` on the target and ``s3:GetObject`` on the source; multipart uploads
``s3:PutObject``; a version named in the request makes it ``...Version``. With SSE-KMS ("Using
server-side encryption with AWS KMS keys", Amazon S3 User Guide) a write also needs
``kms:GenerateDataKey`` and a read ``kms:Decrypt`` on the key, as the caller via ``s3.REGION``; SSE-S3
needs nothing of the caller. The read's key is taken to be the bucket's default key (the object's own is
not looked up).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import replace
from urllib.parse import parse_qsl, unquote
from xml.etree import ElementTree as ET

from .actions_base import Call, Lookup, Req, Unmapped, implied_kms, partition

__all__ = ["s3_calls"]

# subresource → (action for GET, PUT, DELETE) on a bucket; None where the method has no operation
_BUCKET_SUB: dict[str, tuple[str | None, str | None, str | None]] = {
    "policy": ("GetBucketPolicy", "PutBucketPolicy", "DeleteBucketPolicy"),
    "notification": ("GetBucketNotification", "PutBucketNotification", None),
    "encryption": ("GetEncryptionConfiguration", "PutEncryptionConfiguration", "PutEncryptionConfiguration"),
    "tagging": ("GetBucketTagging", "PutBucketTagging", "PutBucketTagging"),
    "versioning": ("GetBucketVersioning", "PutBucketVersioning", None),
    "lifecycle": ("GetLifecycleConfiguration", "PutLifecycleConfiguration", "PutLifecycleConfiguration"),
    "logging": ("GetBucketLogging", "PutBucketLogging", None),
    "publicAccessBlock": (
        "GetBucketPublicAccessBlock",
        "PutBucketPublicAccessBlock",
        "PutBucketPublicAccessBlock",
    ),
    "ownershipControls": (
        "GetBucketOwnershipControls",
        "PutBucketOwnershipControls",
        "PutBucketOwnershipControls",
    ),
    "acl": ("GetBucketAcl", "PutBucketAcl", None),
    "cors": ("GetBucketCORS", "PutBucketCORS", "PutBucketCORS"),
    "location": ("GetBucketLocation", None, None),
    "policyStatus": ("GetBucketPolicyStatus", None, None),
    "website": ("GetBucketWebsite", "PutBucketWebsite", "DeleteBucketWebsite"),
    "object-lock": ("GetBucketObjectLockConfiguration", "PutBucketObjectLockConfiguration", None),
    "accelerate": ("GetAccelerateConfiguration", "PutAccelerateConfiguration", None),
    "requestPayment": ("GetBucketRequestPayment", "PutBucketRequestPayment", None),
    "replication": (
        "GetReplicationConfiguration",
        "PutReplicationConfiguration",
        "PutReplicationConfiguration",
    ),
}
# subresource → (action for GET, PUT, DELETE) on an object
_OBJECT_SUB: dict[str, tuple[str | None, str | None, str | None]] = {
    "tagging": ("GetObjectTagging", "PutObjectTagging", "DeleteObjectTagging"),
    "acl": ("GetObjectAcl", "PutObjectAcl", None),
    "retention": ("GetObjectRetention", "PutObjectRetention", None),
    "legal-hold": ("GetObjectLegalHold", "PutObjectLegalHold", None),
    "attributes": ("GetObjectAttributes", None, None),
}
_METHOD_INDEX = {"GET": 0, "PUT": 1, "DELETE": 2}
# Query parameters that are arguments, not a subresource naming another operation.
_LIST_ARGUMENTS = frozenset(
    {"prefix", "delimiter", "marker", "max-keys", "encoding-type", "list-type", "continuation-token"}
    | {
        "fetch-owner",
        "start-after",
        "key-marker",
        "version-id-marker",
        "upload-id-marker",
        "max-uploads",
        "x-id",
    }
)
_OBJECT_ARGUMENTS = frozenset({"versionId", "partNumber", "x-id"})
_VIRTUAL_HOST = re.compile(
    r"^(?P<bucket>.+?)\.s3(?:[.-][a-z0-9-]+)*\.amazonaws\.com(?:\.cn)?$|^(?P<local>.+)\.localhost$"
)


def _bucket_and_key(path: str, host: str) -> tuple[str, str]:
    """Bucket and key of a path-style (``/BUCKET/KEY``) or virtual-hosted (``BUCKET.s3...``) request."""
    name = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    virtual = None
    try:
        ipaddress.ip_address(name.strip("[]"))
    except ValueError:
        match = _VIRTUAL_HOST.match(name)
        virtual = match and (match.group("bucket") or match.group("local"))
    raw = path.lstrip("/")
    if virtual:
        return virtual, unquote(raw)
    bucket, _, key = raw.partition("/")
    return unquote(bucket), unquote(key)


def _object_arn(part: str, bucket: str, key: str) -> str:
    return f"arn:{part}:s3:::{bucket}/{key}"


class _S3:
    """One S3 request being mapped."""

    def __init__(
        self, method: str, path: str, query: str, *, headers: Mapping[str, str], body: bytes, req: Req
    ) -> None:
        self.method = method.upper()
        self.query = dict(parse_qsl(query, keep_blank_values=True))
        self.headers = headers
        self.body = body
        self.req = req
        self.bucket, self.key = _bucket_and_key(path, headers.get("host", ""))
        self.part = partition(req.region)

    @property
    def bucket_arn(self) -> str:
        return f"arn:{self.part}:s3:::{self.bucket}"

    def call(
        self, operation: str, action: str, resource: str, context: Mapping[str, str] | None = None
    ) -> Call:
        return self.req.call(f"s3:{action}", resource, context, operation=operation)

    def calls(self) -> list[Call]:
        if not self.bucket:
            if self.method == "GET":
                return [self.call("ListBuckets", "ListAllMyBuckets", "*")]
            raise Unmapped("s3", f"{self.method} /", "no bucket named")
        return self.on_object() if self.key else self.on_bucket()

    def on_bucket(self) -> list[Call]:
        sub = next((name for name in _BUCKET_SUB if name in self.query), None)
        if sub is None:
            return self.on_bucket_plain()
        index = _METHOD_INDEX.get(self.method)
        action = _BUCKET_SUB[sub][index] if index is not None else None
        if action is None:
            raise Unmapped("s3", f"{self.method} bucket?{sub}", f"bucket {self.bucket}")
        return [self.call(action, action, self.bucket_arn)]

    def on_bucket_plain(self) -> list[Call]:  # noqa: PLR0911 - one answer per S3 bucket operation
        method, query, bucket = self.method, self.query, self.bucket_arn
        if method == "POST" and "delete" in query:
            return self.delete_objects()
        if method == "GET" and "versions" in query:
            return [self.call("ListObjectVersions", "ListBucketVersions", bucket, self.list_context())]
        if method == "GET" and "uploads" in query:
            return [self.call("ListMultipartUploads", "ListBucketMultipartUploads", bucket)]
        if set(query) - _LIST_ARGUMENTS - {"versions", "uploads"}:
            raise Unmapped("s3", f"{method} bucket?{'&'.join(query)}", f"bucket {self.bucket}")
        if method == "GET":
            operation = "ListObjectsV2" if query.get("list-type") == "2" else "ListObjects"
            return [self.call(operation, "ListBucket", bucket, self.list_context())]
        if method == "HEAD":
            return [self.call("HeadBucket", "ListBucket", bucket)]
        if method == "PUT" and not query:
            return [self.call("CreateBucket", "CreateBucket", bucket)]
        if method == "DELETE" and not query:
            return [self.call("DeleteBucket", "DeleteBucket", bucket)]
        raise Unmapped("s3", f"{method} bucket?{'&'.join(query)}", f"bucket {self.bucket}")

    def list_context(self) -> dict[str, str]:
        keys = {"prefix": "s3:prefix", "delimiter": "s3:delimiter", "max-keys": "s3:max-keys"}
        return {context: self.query[name] for name, context in keys.items() if name in self.query}

    def delete_objects(self) -> list[Call]:
        try:
            root = ET.fromstring(self.body)  # noqa: S314 - a Delete document the caller sent
        except ET.ParseError as error:
            raise Unmapped("s3", "DeleteObjects", "the Delete document does not parse") from error
        calls = []
        for item in root.iter():
            if item.tag.rsplit("}", 1)[-1] != "Object":
                continue
            fields = {child.tag.rsplit("}", 1)[-1]: child.text or "" for child in item}
            action = "DeleteObjectVersion" if fields.get("VersionId") else "DeleteObject"
            calls.append(
                self.call("DeleteObjects", action, _object_arn(self.part, self.bucket, fields.get("Key", "")))
            )
        return calls

    def on_object(self) -> list[Call]:
        for sub, actions in _OBJECT_SUB.items():
            if sub in self.query:
                index = _METHOD_INDEX.get(self.method)
                action = actions[index] if index is not None else None
                if action is None:
                    raise Unmapped("s3", f"{self.method} object?{sub}", f"bucket {self.bucket}")
                resource = _object_arn(self.part, self.bucket, self.key)
                return [self.call(action, self.versioned(action), resource)]
        if "uploadId" in self.query or "uploads" in self.query:
            return self.multipart()
        return self.on_object_plain()

    def versioned(self, action: str) -> str:
        return f"{action}Version" if self.query.get("versionId") else action

    def on_object_plain(self) -> list[Call]:
        resource = _object_arn(self.part, self.bucket, self.key)
        unknown = {name for name in self.query if not name.startswith("response-")} - _OBJECT_ARGUMENTS
        if unknown:
            raise Unmapped("s3", f"{self.method} object?{'&'.join(sorted(unknown))}", f"bucket {self.bucket}")
        if self.method in ("GET", "HEAD"):
            operation = "GetObject" if self.method == "GET" else "HeadObject"
            calls = [self.call(operation, self.versioned("GetObject"), resource)]
            if self.method == "GET":
                calls += self.kms("GetObject", ("kms:Decrypt",))
            return calls
        if self.method == "PUT":
            source = self.headers.get("x-amz-copy-source")
            operation = "CopyObject" if source else "PutObject"
            calls = [self.call(operation, "PutObject", resource), *self.copy_source(operation, source)]
            return calls + self.kms(operation, ("kms:GenerateDataKey",))
        if self.method == "DELETE":
            return [self.call("DeleteObject", self.versioned("DeleteObject"), resource)]
        raise Unmapped("s3", f"{self.method} object", f"bucket {self.bucket}")

    def multipart(self) -> list[Call]:
        resource = _object_arn(self.part, self.bucket, self.key)
        if self.method == "POST" and "uploads" in self.query:
            calls = [self.call("CreateMultipartUpload", "PutObject", resource)]
            return calls + self.kms("CreateMultipartUpload", ("kms:GenerateDataKey",))
        if self.method == "POST":
            return [self.call("CompleteMultipartUpload", "PutObject", resource)]
        if self.method == "PUT":
            source = self.headers.get("x-amz-copy-source")
            operation = "UploadPartCopy" if source else "UploadPart"
            return [self.call(operation, "PutObject", resource), *self.copy_source(operation, source)]
        if self.method == "DELETE":
            return [self.call("AbortMultipartUpload", "AbortMultipartUpload", resource)]
        return [self.call("ListParts", "ListMultipartUploadParts", resource)]

    def copy_source(self, operation: str, source: str | None) -> list[Call]:
        if not source:
            return []
        location, _, version = unquote(source).lstrip("/").partition("?versionId=")
        bucket, _, key = location.partition("/")
        action = "GetObjectVersion" if version else "GetObject"
        calls = [self.call(operation, action, _object_arn(self.part, bucket, key))]
        key_arn = self.req.lookup.bucket_kms_key(bucket)
        return calls + implied_kms(replace(self.req, operation=operation), key_arn, "s3", ("kms:Decrypt",))

    def kms(self, operation: str, actions: tuple[str, ...]) -> list[Call]:
        requested = self.headers.get("x-amz-server-side-encryption")
        if requested in {"aws:kms", "aws:kms:dsse"}:
            key = self.headers.get("x-amz-server-side-encryption-aws-kms-key-id") or "alias/aws/s3"
        elif requested:
            key = None  # SSE-S3 asked for: no KMS key
        else:
            key = self.req.lookup.bucket_kms_key(self.bucket)
        return implied_kms(replace(self.req, operation=operation), key, "s3", actions)


def s3_calls(
    method: str,
    path: str,
    query: str,
    headers: Mapping[str, str],
    body: bytes,
    *,
    region: str,
    account: str,
    lookup: Lookup,
) -> list[Call]:
    """The S3 authorizations for one request; ``path`` as sent (percent-encoded), headers lower-cased."""
    req = Req("s3", "", {}, region, account, lookup, headers)
    return _S3(method, path, query, headers=headers, body=body, req=req).calls()
