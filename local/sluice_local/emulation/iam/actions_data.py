"""Authorizations for SQS, SNS and DynamoDB.

Each operation maps to the action and resource type the Service Authorization Reference gives it
("Actions, resources, and condition keys for Amazon SQS" / "... Amazon SNS" / "... Amazon DynamoDB",
https://docs.aws.amazon.com/service-authorization/latest/reference/reference_policies_actions-resources-contextkeys.html).
Where AWS authorizes one API operation as another action, the service's own guide says so:
SQS batch operations need the single-message action ("Amazon SQS API permissions: Actions and resource
reference"); DynamoDB transactions need the item action per item, with ``dynamodb:EnclosingOperation``
("Using IAM with DynamoDB transactions"); an SQS producer on a queue with a customer managed key needs
``kms:GenerateDataKey`` and ``kms:Decrypt``, a consumer ``kms:Decrypt`` ("Amazon SQS key management").
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import Any
from urllib.parse import urlsplit

from .actions_base import Call, Handler, Req, Unmapped, attribute_text, implied_kms, star

__all__ = ["DATA_HANDLERS", "queue_arn"]


# --- SQS ------------------------------------------------------------------------------------------

_SQS_HOST = re.compile(r"^(?:sqs\.)?([a-z0-9-]+)\.(?:queue\.)?amazonaws\.com(?:\.cn)?$")


def queue_arn(req: Req, url: str) -> str:
    """``arn:aws:sqs:REGION:ACCOUNT:NAME`` from a queue URL (``http://host:port/ACCOUNT/NAME``)."""
    parts = urlsplit(url)
    segments = [segment for segment in parts.path.split("/") if segment]
    if len(segments) != 2 or not segments[0].isdigit():
        raise Unmapped(req.service, req.operation, f"queue URL {url!r} names no account and queue")
    host = _SQS_HOST.match(parts.hostname or "")
    region = host.group(1) if host and host.group(1) not in ("sqs", "queue") else req.region
    return req.arn("sqs", segments[1], region=region, account=segments[0])


def _sqs_on_queue(action: str | None = None) -> Handler:
    def handle(req: Req) -> list[Call]:
        return [req.call(action or f"sqs:{req.operation}", queue_arn(req, req.need("QueueUrl")))]

    return handle


def _sqs_send(req: Req) -> list[Call]:
    queue = queue_arn(req, req.need("QueueUrl"))
    key = req.lookup.queue_kms_key(queue)
    implied = implied_kms(req, key, "sqs", ("kms:GenerateDataKey", "kms:Decrypt"))
    return [req.call("sqs:SendMessage", queue), *implied]


def _sqs_receive(req: Req) -> list[Call]:
    queue = queue_arn(req, req.need("QueueUrl"))
    implied = implied_kms(req, req.lookup.queue_kms_key(queue), "sqs", ("kms:Decrypt",))
    return [req.call("sqs:ReceiveMessage", queue), *implied]


def _sqs_by_name(req: Req) -> list[Call]:
    owner = req.text("QueueOwnerAWSAccountId") or req.account
    return [req.call(f"sqs:{req.operation}", req.arn("sqs", req.need("QueueName"), account=owner))]


def _sqs_on_source(req: Req) -> list[Call]:
    source = req.need("SourceArn")
    calls = [req.call(f"sqs:{req.operation}", source)]
    if req.operation == "StartMessageMoveTask":
        # The redrive reads and deletes from the source and sends to the destination as the caller.
        calls += [req.call(f"sqs:{name}", source) for name in ("ReceiveMessage", "DeleteMessage")]
        calls.append(req.call("sqs:GetQueueAttributes", source))
        destination = req.text("DestinationArn")
        if destination:
            calls.append(req.call("sqs:SendMessage", destination))
    return calls


def _sqs_cancel_move(req: Req) -> list[Call]:
    handle = req.need("TaskHandle")
    try:
        source = json.loads(base64.b64decode(handle + "=" * (-len(handle) % 4))).get("sourceArn")
    except (ValueError, binascii.Error, AttributeError):
        source = None
    if not isinstance(source, str) or not source.startswith("arn:"):
        raise Unmapped(req.service, req.operation, "the task handle names no source queue")
    return [req.call("sqs:CancelMessageMoveTask", source)]


_SQS: dict[str, Handler] = {
    "SendMessage": _sqs_send,
    "SendMessageBatch": _sqs_send,
    "ReceiveMessage": _sqs_receive,
    "DeleteMessage": _sqs_on_queue(),
    "DeleteMessageBatch": _sqs_on_queue("sqs:DeleteMessage"),
    "ChangeMessageVisibility": _sqs_on_queue(),
    "ChangeMessageVisibilityBatch": _sqs_on_queue("sqs:ChangeMessageVisibility"),
    "GetQueueUrl": _sqs_by_name,
    "CreateQueue": _sqs_by_name,
    "ListQueues": star(),
    "StartMessageMoveTask": _sqs_on_source,
    "ListMessageMoveTasks": _sqs_on_source,
    "CancelMessageMoveTask": _sqs_cancel_move,
}
for _name in (
    "GetQueueAttributes",
    "SetQueueAttributes",
    "DeleteQueue",
    "PurgeQueue",
    "ListDeadLetterSourceQueues",
    "ListQueueTags",
    "TagQueue",
    "UntagQueue",
    "AddPermission",
    "RemovePermission",
):
    _SQS[_name] = _sqs_on_queue()


# --- SNS ------------------------------------------------------------------------------------------


def _sns_publish(req: Req) -> list[Call]:
    topic = req.text("TopicArn") or req.text("TargetArn")
    if not topic:
        return [req.call("sns:Publish", "*")]  # an SMS to a phone number names no topic
    implied = implied_kms(req, req.lookup.topic_kms_key(topic), "sns", ("kms:GenerateDataKey", "kms:Decrypt"))
    return [req.call("sns:Publish", topic), *implied]


def _sns_on(parameter: str, action: str | None = None) -> Handler:
    def handle(req: Req) -> list[Call]:
        return [req.call(action or f"sns:{req.operation}", req.need(parameter))]

    return handle


def _sns_subscribe(req: Req) -> list[Call]:
    context = {"sns:protocol": req.text("Protocol") or "", "sns:endpoint": req.text("Endpoint") or ""}
    return [req.call("sns:Subscribe", req.need("TopicArn"), {k: v for k, v in context.items() if v})]


def _sns_on_subscription(req: Req) -> list[Call]:
    subscription = req.need("SubscriptionArn")
    return [req.call(f"sns:{req.operation}", subscription.rsplit(":", 1)[0])]  # the topic's ARN


_SNS: dict[str, Handler] = {
    "Publish": _sns_publish,
    "PublishBatch": _sns_publish,
    "Subscribe": _sns_subscribe,
    "CreateTopic": lambda req: [req.call("sns:CreateTopic", req.arn("sns", req.need("Name")))],
    "ListTopics": star(),
    "ListSubscriptions": star(),
    "Unsubscribe": _sns_on_subscription,
    "GetSubscriptionAttributes": _sns_on_subscription,
    "SetSubscriptionAttributes": _sns_on_subscription,
    "TagResource": _sns_on("ResourceArn"),
    "UntagResource": _sns_on("ResourceArn"),
    "ListTagsForResource": _sns_on("ResourceArn"),
}
for _name in (
    "DeleteTopic",
    "GetTopicAttributes",
    "SetTopicAttributes",
    "ListSubscriptionsByTopic",
    "ConfirmSubscription",
    "AddPermission",
    "RemovePermission",
):
    _SNS[_name] = _sns_on("TopicArn")


# --- DynamoDB -------------------------------------------------------------------------------------


def _table(req: Req, name: str, index: str | None = None) -> str:
    arn = name if name.startswith("arn:") else req.arn("dynamodb", f"table/{name}")
    return f"{arn}/index/{index}" if index else arn


def _leading(req: Req, table: str, keys: list[Any]) -> dict[str, list[str]]:
    """``dynamodb:LeadingKeys``: the partition key values of the items a request touches."""
    if not keys:
        return {}
    name = req.lookup.table_partition_key(table)
    values: list[str] = []
    for key in keys:
        if not isinstance(key, dict):
            continue
        value = attribute_text(key.get(name)) if name else None
        if value is None and not name and len(key) == 1:  # a key of one attribute is the partition key
            value = attribute_text(next(iter(key.values())))
        if value is None:
            return {}
        values.append(value)
    return {"dynamodb:leadingkeys": values}


def _ddb_item(req: Req) -> list[Call]:
    table = _table(req, req.need("TableName"))
    key = req.params.get("Item") if req.operation == "PutItem" else req.params.get("Key")
    return [req.call(f"dynamodb:{req.operation}", table, _leading(req, table, [key] if key else []))]


_EQUALS = re.compile(r"([#:]?[\w.]+)\s*=\s*([#:]?[\w.]+)")


def _query_leading(req: Req, table: str) -> dict[str, list[str]]:
    name = req.lookup.table_partition_key(table.split("/index/", maxsplit=1)[0])
    if not name:
        return {}
    conditions = req.params.get("KeyConditions")
    if isinstance(conditions, dict) and isinstance(conditions.get(name), dict):
        listed = conditions[name].get("AttributeValueList") or []
        value = attribute_text(listed[0]) if listed else None
        return {"dynamodb:leadingkeys": [value]} if value is not None else {}
    names: dict[str, str] = req.params.get("ExpressionAttributeNames") or {}
    values: dict[str, Any] = req.params.get("ExpressionAttributeValues") or {}
    for left, right in _EQUALS.findall(req.text("KeyConditionExpression") or ""):
        for attribute, placeholder in ((left, right), (right, left)):
            if names.get(attribute, attribute) == name and placeholder in values:
                value = attribute_text(values[placeholder])
                if value is not None:
                    return {"dynamodb:leadingkeys": [value]}
    return {}


def _ddb_read_many(req: Req) -> list[Call]:
    table = _table(req, req.need("TableName"), req.text("IndexName"))
    context = _query_leading(req, table) if req.operation == "Query" else {}
    return [req.call(f"dynamodb:{req.operation}", table, context)]


def _ddb_batch(req: Req) -> list[Call]:
    calls = []
    for name, entry in (req.params.get("RequestItems") or {}).items():
        table = _table(req, name)
        if req.operation == "BatchGetItem":
            keys = list(entry.get("Keys") or [])
        else:
            keys = [
                (write.get("PutRequest") or {}).get("Item") or (write.get("DeleteRequest") or {}).get("Key")
                for write in entry
            ]
        calls.append(req.call(f"dynamodb:{req.operation}", table, _leading(req, table, keys)))
    return calls


_TRANSACT = {
    "Put": "PutItem",
    "Update": "UpdateItem",
    "Delete": "DeleteItem",
    "ConditionCheck": "ConditionCheckItem",
}


def _ddb_transact(req: Req) -> list[Call]:
    calls = []
    for item in req.params.get("TransactItems") or []:
        for kind, body in item.items():
            action = "GetItem" if kind == "Get" else _TRANSACT.get(kind)
            if action is None:
                raise Unmapped(req.service, req.operation, f"transaction item {kind!r}")
            table = _table(req, body["TableName"])
            key = body.get("Item") if kind == "Put" else body.get("Key")
            context: dict[str, str | list[str]] = {"dynamodb:enclosingoperation": req.operation}
            context.update(_leading(req, table, [key] if key else []))
            calls.append(req.call(f"dynamodb:{action}", table, context))
    return calls


def _ddb_table(req: Req) -> list[Call]:
    return [req.call(f"dynamodb:{req.operation}", _table(req, req.need("TableName")))]


def _ddb_resource(req: Req) -> list[Call]:
    return [req.call(f"dynamodb:{req.operation}", req.need("ResourceArn"))]


_DYNAMODB: dict[str, Handler] = {
    "GetItem": _ddb_item,
    "PutItem": _ddb_item,
    "UpdateItem": _ddb_item,
    "DeleteItem": _ddb_item,
    "Query": _ddb_read_many,
    "Scan": _ddb_read_many,
    "BatchGetItem": _ddb_batch,
    "BatchWriteItem": _ddb_batch,
    "TransactWriteItems": _ddb_transact,
    "TransactGetItems": _ddb_transact,
    "ListTables": star(),
    "DescribeLimits": star(),
    "DescribeEndpoints": star(),
    "TagResource": _ddb_resource,
    "UntagResource": _ddb_resource,
    "ListTagsOfResource": _ddb_resource,
}
for _name in (
    "CreateTable",
    "DescribeTable",
    "UpdateTable",
    "DeleteTable",
    "DescribeTimeToLive",
    "UpdateTimeToLive",
    "DescribeContinuousBackups",
    "UpdateContinuousBackups",
):
    _DYNAMODB[_name] = _ddb_table


DATA_HANDLERS: dict[str, dict[str, Handler]] = {
    "sqs": _SQS,
    "sns": _SNS,
    "dynamodb": _DYNAMODB,
}
