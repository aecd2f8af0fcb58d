"""What one HTTP request to (emulated) AWS asks IAM, and the AccessDenied answer each service sends.

:func:`calls` turns a request into the authorizations AWS makes for it (:class:`Call`: action, resource,
request context keys), :func:`access_denied` builds the refusal as that service sends it, in the protocol
the request used. Action names, resource types and ARN formats follow the Service Authorization
Reference, "Actions, resources, and condition keys for AWS services"
(https://docs.aws.amazon.com/service-authorization/latest/reference/reference_policies_actions-resources-contextkeys.html),
one page per service, e.g. "Actions, resources, and condition keys for Amazon SQS"
(https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazonsqs.html); the
per-service modules cite theirs (``actions_data``, ``actions_keys``, ``actions_compute``, ``actions_s3``).

The request is read the way the service reads it: the service is the SigV4 credential scope's
(:func:`credential_scope`); a JSON-protocol request names its operation in ``X-Amz-Target``
(``AmazonSQS.SendMessage``), a Smithy RPC v2 CBOR request in its path, a query-protocol request in
``Action=`` (older SQS clients, SNS, STS, CloudFormation, IAM), a REST-JSON request (Lambda, X-Ray,
Scheduler) by its method and path matched against botocore's service model, S3 by method, path and
subresource. An operation not mapped raises :class:`Unmapped`: the runtime refuses what it cannot check.
Implied calls: a service that uses a customer managed KMS key on the caller's behalf (SQS, SNS, S3) adds
the KMS calls AWS makes as the caller, with ``kms:ViaService``. Same-account only, like the evaluator.
"""

from __future__ import annotations

import functools
import json
import re
import uuid
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl, unquote
from xml.sax.saxutils import escape

import botocore.session
from botocore import parsers
from botocore.model import OperationModel, ServiceModel

from .actions_base import Call, Lookup, Req, Unmapped
from .actions_compute import COMPUTE_HANDLERS
from .actions_data import DATA_HANDLERS
from .actions_keys import KEY_HANDLERS
from .actions_s3 import s3_calls

__all__ = ["Call", "Lookup", "Unmapped", "access_denied", "calls", "credential_scope", "iam_prefix"]

HANDLERS = {**DATA_HANDLERS, **KEY_HANDLERS, **COMPUTE_HANDLERS}

# SigV4 signing names (and botocore's client names) that differ from the IAM service prefix.
_PREFIX = {"monitoring": "cloudwatch", "stepfunctions": "states", "sfn": "states"}
_BOTOCORE_NAME = {"states": "stepfunctions"}
_QUERY = frozenset({"sqs", "sns", "sts", "cloudformation", "iam", "cloudwatch"})
_REST_JSON = frozenset({"lambda", "xray", "scheduler"})
_CREDENTIAL = re.compile(r"Credential=([^/,\s]+)/(\d{8})/([^/]+)/([^/]+)/aws4_request")


def iam_prefix(service: str) -> str:
    """The IAM service prefix for a SigV4 signing name or a botocore client name."""
    return _PREFIX.get(service, service)


def credential_scope(headers: Mapping[str, str], query: str = "") -> tuple[str, str, str, str] | None:
    """``(access key, date, region, service)`` from the SigV4 ``Authorization`` header or a presigned
    URL's ``X-Amz-Credential``; None for an unsigned request."""
    lower = {name.lower(): value for name, value in headers.items()}
    match = _CREDENTIAL.search(lower.get("authorization", ""))
    if match is None:
        presigned = dict(parse_qsl(query)).get("X-Amz-Credential")
        match = _CREDENTIAL.search(f"Credential={presigned}") if presigned else None
    if match is None:
        return None
    access_key, date, region, service = match.groups()
    return access_key, date, region, service


def calls(  # noqa: PLR0917 - the shared interface (notes/iam-spec.md) fixes this signature
    service: str,
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
    """The authorizations AWS makes for one request, in the order it makes them.

    ``service`` is the credential scope's signing name (or the IAM prefix), ``path`` the path as sent
    (percent-encoded, as in the request line), ``query`` the raw query string. An empty list means AWS
    authorizes nothing (``sts:GetCallerIdentity``). Raises :class:`Unmapped` for an operation not known.
    """
    prefix = iam_prefix(service)
    lower = {name.lower(): value for name, value in headers.items()}
    if prefix == "s3":
        return s3_calls(method, path, query, lower, body, region=region, account=account, lookup=lookup)
    operation, params = _decode(prefix, method, path, query, headers=lower, body=body)
    handler = HANDLERS.get(prefix, {}).get(operation)
    if handler is None:
        raise Unmapped(prefix, operation)
    return handler(Req(prefix, operation, params, region, account, lookup, lower))


def _decode(
    prefix: str, method: str, path: str, query: str, *, headers: Mapping[str, str], body: bytes
) -> tuple[str, dict[str, Any]]:
    target = headers.get("x-amz-target")
    if target:
        return target.rsplit(".", 1)[-1], _json(body)
    if "cbor" in headers.get("content-type", "") or headers.get("smithy-protocol") == "rpc-v2-cbor":
        return path.rstrip("/").rsplit("/operation/", 1)[-1], _cbor(body)
    if prefix in _QUERY:
        form = dict(parse_qsl(query, keep_blank_values=True))
        if "x-www-form-urlencoded" in headers.get("content-type", "") or (body and "Action" not in form):
            form.update(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))
        if "Action" in form:
            if prefix == "sqs" and "QueueUrl" not in form and path.strip("/").count("/") == 1:
                form["QueueUrl"] = (
                    f"http://{headers.get('host', 'localhost')}{path}"  # sent to the queue's URL
                )
            return form.pop("Action"), dict(form)
    if prefix in _REST_JSON:
        return _rest_json(prefix, method, path, query, body)
    raise Unmapped(prefix, f"{method} {path}", "the request's protocol is not one this service speaks")


def _json(body: bytes) -> dict[str, Any]:
    if not body:
        return {}
    try:
        parsed = json.loads(body)
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _cbor(body: bytes) -> dict[str, Any]:
    if not body:
        return {}
    parser = parsers.RpcV2CBORParser()
    parsed = parser.parse_data_item(parser.get_peekable_stream_from_bytes(body))
    return parsed if isinstance(parsed, dict) else {}


@functools.cache
def _model(prefix: str) -> ServiceModel:
    return botocore.session.get_session().get_service_model(_BOTOCORE_NAME.get(prefix, prefix))


@functools.cache
def _routes(prefix: str) -> list[tuple[int, str, re.Pattern[str], dict[str, str], OperationModel]]:
    """(specificity, method, path pattern, required query literals, operation) for a REST service."""
    routes = []
    model = _model(prefix)
    for name in model.operation_names:
        operation = model.operation_model(name)
        uri, _, literal = str(operation.http["requestUri"]).partition("?")
        pattern = re.sub(r"\\\{(\w+)\\\+\\\}", r"(?P<\1>.+)", re.escape(uri))
        pattern = re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>[^/]+)", pattern)
        required = dict(parse_qsl(literal, keep_blank_values=True))
        specificity = len(re.sub(r"\{[^}]*\}", "", uri)) + len(required)
        routes.append(
            (specificity, str(operation.http["method"]), re.compile(f"^{pattern}/?$"), required, operation)
        )
    routes.sort(key=lambda route: -route[0])
    return routes


def _rest_json(prefix: str, method: str, path: str, query: str, body: bytes) -> tuple[str, dict[str, Any]]:
    arguments = dict(parse_qsl(query, keep_blank_values=True))
    for _, verb, pattern, required, operation in _routes(prefix):
        match = pattern.match(path)
        if verb != method.upper() or match is None:
            continue
        if any(arguments.get(name) != value for name, value in required.items() if value):
            continue
        if any(name not in arguments for name in required):
            continue
        return operation.name, _rest_params(operation, match.groupdict(), arguments, body)
    raise Unmapped(prefix, f"{method} {path}", "no operation of the service has this method and path")


def _rest_params(
    operation: OperationModel, labels: dict[str, str], arguments: dict[str, str], body: bytes
) -> dict[str, Any]:
    shape = operation.input_shape
    if shape is None:
        return {}
    params: dict[str, Any] = {}
    if not shape.serialization.get("payload"):
        params.update(_json(body))  # a body that is a payload (Invoke's) is the function's, not input
    for member_name, member in shape.members.items():
        location, wire = member.serialization.get("location"), member.serialization.get("name", member_name)
        if location == "uri" and wire in labels:
            params[member_name] = unquote(labels[wire])
        elif location == "querystring" and wire in arguments:
            params[member_name] = arguments[wire]
    return params


# --- the refusal ----------------------------------------------------------------------------------

_MESSAGE = re.compile(r"not authorized to perform: (\S+)")
_XML_NAMESPACE = {
    "sqs": "http://queue.amazonaws.com/doc/2012-11-05/",
    "sns": "http://sns.amazonaws.com/doc/2010-03-31/",
    "sts": "https://sts.amazonaws.com/doc/2011-06-15/",
    "cloudformation": "http://cloudformation.amazonaws.com/doc/2010-05-15/",
    "iam": "https://iam.amazonaws.com/doc/2010-05-08/",
    "cloudwatch": "http://monitoring.amazonaws.com/doc/2010-08-01/",
}


def _codes(prefix: str, kms_caused: bool) -> tuple[int, str, str]:
    """(HTTP status, query-protocol code, JSON ``__type``) of the service's access-denied error."""
    if prefix == "sqs":
        if kms_caused:
            return 400, "KMS.AccessDeniedException", "com.amazonaws.sqs#KmsAccessDenied"
        return 403, "AccessDenied", "com.amazon.coral.service#AccessDeniedException"
    if prefix == "sns":
        return (400, "KMSAccessDenied", "KMSAccessDenied") if kms_caused else (403, "AuthorizationError", "")
    if prefix in ("cloudwatch", "sts", "cloudformation", "iam"):
        return 403, "AccessDenied", "com.amazon.coral.service#AccessDeniedException"
    if prefix == "dynamodb":
        return 400, "", "com.amazonaws.dynamodb.v20120810#AccessDeniedException"
    return 400, "", "AccessDeniedException"


def access_denied(
    service: str, headers: Mapping[str, str], message: str, *, action: str | None = None
) -> tuple[int, dict[str, str], bytes]:
    """The access-denied response as ``service`` sends it, in the protocol of the request's ``headers``.

    SQS: ``AccessDenied`` (a refused implied KMS call: ``KMS.AccessDeniedException``); SNS:
    ``AuthorizationError`` (``KMSAccessDenied``); S3, CloudWatch, STS, CloudFormation, IAM:
    ``AccessDenied``; DynamoDB, KMS, Secrets Manager, SSM, Step Functions, Logs, EventBridge, Lambda,
    X-Ray, Scheduler: ``AccessDeniedException``. ``action`` (default: the one the message names) tells
    a refused implied KMS call from the service's own.
    """
    prefix = iam_prefix(service)
    lower = {name.lower(): value for name, value in headers.items()}
    request_id = str(uuid.uuid4())
    named = _MESSAGE.search(message)
    denied = action or (named.group(1) if named else "")
    kms_caused = prefix != "kms" and denied.lower().startswith("kms:")
    if prefix == "s3":
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>AccessDenied</Code>'
            f"<Message>{escape(message)}</Message><RequestId>{request_id}</RequestId>"
            f"<HostId>{request_id}</HostId></Error>"
        )
        return 403, {"Content-Type": "application/xml", "x-amz-request-id": request_id}, body.encode()
    if prefix in _REST_JSON:
        answer = {"Type": "User", "Message": message}
        out = {"Content-Type": "application/json", "x-amzn-ErrorType": "AccessDeniedException"}
        return 403, {**out, "x-amzn-RequestId": request_id}, json.dumps(answer).encode()
    status, query_code, json_type = _codes(prefix, kms_caused)
    cbor = "cbor" in lower.get("content-type", "") or lower.get("smithy-protocol") == "rpc-v2-cbor"
    if (lower.get("x-amz-target") or cbor) and json_type:
        out = {"x-amzn-RequestId": request_id}
        if query_code:
            out["x-amzn-query-error"] = f"{query_code};Sender"
        key = "Message" if prefix == "secretsmanager" else "message"
        if cbor:
            out |= {"Content-Type": "application/cbor", "smithy-protocol": "rpc-v2-cbor"}
            return status, out, _cbor_text_map({"__type": json_type, key: message})
        out["Content-Type"] = (
            "application/x-amz-json-1.0"
            if prefix in ("sqs", "dynamodb", "cloudwatch", "states")
            else "application/x-amz-json-1.1"
        )
        return status, out, json.dumps({"__type": json_type, key: message}).encode()
    namespace, code = _XML_NAMESPACE.get(prefix, ""), query_code or "AccessDenied"
    body = (
        f'<ErrorResponse xmlns="{namespace}"><Error><Type>Sender</Type><Code>{code}</Code>'
        f"<Message>{escape(message)}</Message></Error><RequestId>{request_id}</RequestId></ErrorResponse>"
    )
    return status, {"Content-Type": "text/xml", "x-amzn-RequestId": request_id}, body.encode()


def _cbor_text_map(values: Mapping[str, str]) -> bytes:
    """A CBOR map of text strings (RFC 8949 major types 5 and 3): all an error body needs."""

    def head(major: int, length: int) -> bytes:
        if length < 24:
            return bytes([major << 5 | length])
        for info, size in ((24, 1), (25, 2), (26, 4), (27, 8)):
            if length < 1 << (8 * size):
                return bytes([major << 5 | info]) + length.to_bytes(size, "big")
        raise ValueError(length)

    out = bytearray(head(5, len(values)))
    for key, value in values.items():
        for text in (key, value):
            encoded = text.encode()
            out += head(3, len(encoded)) + encoded
    return bytes(out)
