"""The IAM authorizations one request asks for, and the AccessDenied each service answers (issue 26).

Every request is the one boto3 really sends: a client pointed at an address nothing listens on, whose
``before-send`` hook captures the signed request (or answers it with :func:`access_denied`), so no server
is needed. Expected actions and ARNs are the Service Authorization Reference's.
"""

from __future__ import annotations

import base64
import functools
import json
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import boto3
import pytest
from botocore import parsers, serialize
from botocore.awsrequest import AWSResponse
from botocore.compat import HTTPHeaders
from botocore.config import Config
from botocore.exceptions import ClientError

from sluice_local.emulation.iam.actions import (
    HANDLERS,
    Call,
    Unmapped,
    access_denied,
    calls,
    credential_scope,
)

ACCOUNT = "123456789012"
REGION = "us-east-1"
QUEUE_URL = f"http://127.0.0.1:4566/{ACCOUNT}/orders"
QUEUE = f"arn:aws:sqs:{REGION}:{ACCOUNT}:orders"
KEY_ID = "1234abcd-12ab-34cd-56ef-1234567890ab"
KEY = f"arn:aws:kms:{REGION}:{ACCOUNT}:key/{KEY_ID}"
TOPIC = f"arn:aws:sns:{REGION}:{ACCOUNT}:alarms"
MACHINE = f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:redrive"
EXECUTION = f"arn:aws:states:{REGION}:{ACCOUNT}:execution:redrive:run-1"
FUNCTION = f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:consumer"
SECRET = f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:envelope-key-AbCdEf"
TABLE = f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/idempotency"
ROLE = f"arn:aws:iam::{ACCOUNT}:role/service-role/worker"
VIA_SQS = {"kms:viaservice": f"sqs.{REGION}.amazonaws.com", "kms:calleraccount": ACCOUNT}


@dataclass
class FakeLookup:
    """Answers as moto's backends would for one small account."""

    queue_keys: dict[str, str] = field(default_factory=dict)
    bucket_keys: dict[str, str] = field(default_factory=dict)
    topic_keys: dict[str, str] = field(default_factory=dict)

    def secret_arn(self, secret_id: str) -> str | None:
        return SECRET if secret_id in ("envelope-key", SECRET, SECRET[: -len("-AbCdEf")]) else None

    def key_arn(self, key_id_or_alias: str) -> str | None:
        known = (KEY_ID, KEY, "alias/sluice", f"arn:aws:kms:{REGION}:{ACCOUNT}:alias/sluice")
        return KEY if key_id_or_alias in known else None

    def queue_kms_key(self, queue_arn: str) -> str | None:
        return self.queue_keys.get(queue_arn)

    def bucket_kms_key(self, bucket: str) -> str | None:
        return self.bucket_keys.get(bucket)

    def topic_kms_key(self, topic_arn: str) -> str | None:
        return self.topic_keys.get(topic_arn)

    def function_arn(self, name_or_arn: str) -> str | None:
        return FUNCTION if name_or_arn in ("consumer", FUNCTION) else None

    def table_partition_key(self, table_arn: str) -> str | None:
        return {TABLE: "id", f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/effects": "effect_key"}.get(
            table_arn
        )


@dataclass(frozen=True)
class Sent:
    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes


class _Captured(Exception):  # noqa: N818 - a control-flow signal out of the client
    def __init__(self, sent: Sent) -> None:
        self.sent = sent


def _sent(request: Any) -> Sent:
    body = request.body
    if hasattr(body, "read"):
        body = body.read()
    if isinstance(body, str):
        body = body.encode()
    headers = {k: v.decode() if isinstance(v, bytes) else str(v) for k, v in request.headers.items()}
    url = urlsplit(request.url)
    return Sent(request.method, url.path, url.query, headers, body or b"")


@functools.cache
def _client(service: str) -> Any:
    session = boto3.Session(aws_access_key_id="AK", aws_secret_access_key="SK", region_name=REGION)
    config = Config(retries={"max_attempts": 1}, parameter_validation=False)
    return session.client(service, endpoint_url="http://127.0.0.1:1", config=config)  # type: ignore[call-overload]


def send(service: str, operation: str, **params: Any) -> Sent:
    client = _client(service)

    def capture(request: Any, **_: Any) -> None:
        raise _Captured(_sent(request))

    client.meta.events.register_first("before-send", capture, unique_id="capture")
    try:
        getattr(client, operation)(**params)
    except _Captured as captured:
        return captured.sent
    finally:
        client.meta.events.unregister("before-send", unique_id="capture")
    raise AssertionError("the client sent nothing")


def authorize(service: str, operation: str, lookup: FakeLookup | None = None, **params: Any) -> list[Call]:
    sent = send(service, operation, **params)
    scope = credential_scope(sent.headers)
    assert scope is not None
    return calls(
        scope[3],
        sent.method,
        sent.path,
        sent.query,
        sent.headers,
        sent.body,
        region=scope[2],
        account=ACCOUNT,
        lookup=lookup or FakeLookup(),
    )


def pairs(found: list[Call]) -> list[tuple[str, str]]:
    return [(call.action, call.resource) for call in found]


# --- SQS ------------------------------------------------------------------------------------------

ENTRY = {"Id": "1", "ReceiptHandle": "rh"}
SQS_CASES: list[tuple[str, dict[str, Any], list[tuple[str, str]]]] = [
    ("send_message", {"QueueUrl": QUEUE_URL, "MessageBody": "x"}, [("sqs:SendMessage", QUEUE)]),
    (
        "send_message_batch",
        {"QueueUrl": QUEUE_URL, "Entries": [{"Id": "1", "MessageBody": "x"}]},
        [("sqs:SendMessage", QUEUE)],
    ),
    ("receive_message", {"QueueUrl": QUEUE_URL}, [("sqs:ReceiveMessage", QUEUE)]),
    ("delete_message", {"QueueUrl": QUEUE_URL, "ReceiptHandle": "rh"}, [("sqs:DeleteMessage", QUEUE)]),
    ("delete_message_batch", {"QueueUrl": QUEUE_URL, "Entries": [ENTRY]}, [("sqs:DeleteMessage", QUEUE)]),
    (
        "change_message_visibility",
        {"QueueUrl": QUEUE_URL, "ReceiptHandle": "rh", "VisibilityTimeout": 5},
        [("sqs:ChangeMessageVisibility", QUEUE)],
    ),
    (
        "change_message_visibility_batch",
        {"QueueUrl": QUEUE_URL, "Entries": [{**ENTRY, "VisibilityTimeout": 5}]},
        [("sqs:ChangeMessageVisibility", QUEUE)],
    ),
    ("get_queue_attributes", {"QueueUrl": QUEUE_URL}, [("sqs:GetQueueAttributes", QUEUE)]),
    (
        "set_queue_attributes",
        {"QueueUrl": QUEUE_URL, "Attributes": {"VisibilityTimeout": "5"}},
        [("sqs:SetQueueAttributes", QUEUE)],
    ),
    ("get_queue_url", {"QueueName": "orders"}, [("sqs:GetQueueUrl", QUEUE)]),
    (
        "get_queue_url",
        {"QueueName": "orders", "QueueOwnerAWSAccountId": "111122223333"},
        [("sqs:GetQueueUrl", f"arn:aws:sqs:{REGION}:111122223333:orders")],
    ),
    ("create_queue", {"QueueName": "orders"}, [("sqs:CreateQueue", QUEUE)]),
    ("list_queues", {}, [("sqs:ListQueues", "*")]),
    ("purge_queue", {"QueueUrl": QUEUE_URL}, [("sqs:PurgeQueue", QUEUE)]),
    ("delete_queue", {"QueueUrl": QUEUE_URL}, [("sqs:DeleteQueue", QUEUE)]),
    ("list_dead_letter_source_queues", {"QueueUrl": QUEUE_URL}, [("sqs:ListDeadLetterSourceQueues", QUEUE)]),
    ("list_message_move_tasks", {"SourceArn": QUEUE}, [("sqs:ListMessageMoveTasks", QUEUE)]),
    (
        "start_message_move_task",
        {"SourceArn": f"{QUEUE}-dlq", "DestinationArn": QUEUE},
        [
            ("sqs:StartMessageMoveTask", f"{QUEUE}-dlq"),
            ("sqs:ReceiveMessage", f"{QUEUE}-dlq"),
            ("sqs:DeleteMessage", f"{QUEUE}-dlq"),
            ("sqs:GetQueueAttributes", f"{QUEUE}-dlq"),
            ("sqs:SendMessage", QUEUE),
        ],
    ),
    (
        "cancel_message_move_task",
        {"TaskHandle": base64.b64encode(json.dumps({"taskId": "t", "sourceArn": QUEUE}).encode()).decode()},
        [("sqs:CancelMessageMoveTask", QUEUE)],
    ),
]


@pytest.mark.parametrize(("operation", "params", "expected"), SQS_CASES)
def test_sqs_operations(operation, params, expected):
    assert pairs(authorize("sqs", operation, **params)) == expected


def test_sqs_queue_arn_from_an_aws_queue_url():
    url = "https://sqs.eu-west-1.amazonaws.com/111122223333/payments"
    found = authorize("sqs", "get_queue_attributes", QueueUrl=url)
    assert pairs(found) == [("sqs:GetQueueAttributes", "arn:aws:sqs:eu-west-1:111122223333:payments")]
    assert found[0].service == "sqs"
    assert found[0].operation == "GetQueueAttributes"


def test_sqs_customer_managed_key_adds_the_kms_calls_sqs_makes_as_the_caller():
    lookup = FakeLookup(queue_keys={QUEUE: KEY})
    sent = authorize("sqs", "send_message", lookup, QueueUrl=QUEUE_URL, MessageBody="x")
    assert pairs(sent) == [("sqs:SendMessage", QUEUE), ("kms:GenerateDataKey", KEY), ("kms:Decrypt", KEY)]
    assert all(call.context == VIA_SQS and call.resource_required for call in sent[1:])
    assert sent[1].operation == "SendMessage"
    received = authorize("sqs", "receive_message", lookup, QueueUrl=QUEUE_URL)
    assert pairs(received) == [("sqs:ReceiveMessage", QUEUE), ("kms:Decrypt", KEY)]
    # SSE-SQS (no key) and the AWS managed key need nothing of the caller
    managed = FakeLookup(queue_keys={QUEUE: "alias/aws/sqs"})
    assert pairs(authorize("sqs", "receive_message", managed, QueueUrl=QUEUE_URL)) == [
        ("sqs:ReceiveMessage", QUEUE)
    ]


def test_sqs_query_protocol_of_older_clients():
    body = f"Action=SendMessage&Version=2012-11-05&QueueUrl={QUEUE_URL}&MessageBody=x".encode()
    headers = {"Content-Type": "application/x-www-form-urlencoded; charset=utf-8", "Host": "127.0.0.1:4566"}
    found = calls("sqs", "POST", "/", "", headers, body, region=REGION, account=ACCOUNT, lookup=FakeLookup())
    assert pairs(found) == [("sqs:SendMessage", QUEUE)]
    # posted to the queue's own URL, without a QueueUrl parameter
    body = b"Action=DeleteMessageBatch&DeleteMessageBatchRequestEntry.1.Id=1"
    path = f"/{ACCOUNT}/orders"
    found = calls("sqs", "POST", path, "", headers, body, region=REGION, account=ACCOUNT, lookup=FakeLookup())
    assert pairs(found) == [("sqs:DeleteMessage", QUEUE)]


# --- S3 -------------------------------------------------------------------------------------------

OBJECT = "arn:aws:s3:::claims/delayed/a b.json"
S3_CASES: list[tuple[str, dict[str, Any], list[tuple[str, str]]]] = [
    ("put_object", {"Bucket": "claims", "Key": "delayed/a b.json", "Body": b"x"}, [("s3:PutObject", OBJECT)]),
    ("get_object", {"Bucket": "claims", "Key": "delayed/a b.json"}, [("s3:GetObject", OBJECT)]),
    (
        "get_object",
        {"Bucket": "claims", "Key": "delayed/a b.json", "VersionId": "v1"},
        [("s3:GetObjectVersion", OBJECT)],
    ),
    ("head_object", {"Bucket": "claims", "Key": "delayed/a b.json"}, [("s3:GetObject", OBJECT)]),
    ("delete_object", {"Bucket": "claims", "Key": "delayed/a b.json"}, [("s3:DeleteObject", OBJECT)]),
    (
        "delete_objects",
        {"Bucket": "claims", "Delete": {"Objects": [{"Key": "a&b"}, {"Key": "c", "VersionId": "v"}]}},
        [("s3:DeleteObject", "arn:aws:s3:::claims/a&b"), ("s3:DeleteObjectVersion", "arn:aws:s3:::claims/c")],
    ),
    ("list_objects_v2", {"Bucket": "claims"}, [("s3:ListBucket", "arn:aws:s3:::claims")]),
    ("list_objects", {"Bucket": "claims"}, [("s3:ListBucket", "arn:aws:s3:::claims")]),
    (
        "copy_object",
        {"Bucket": "claims", "Key": "b", "CopySource": {"Bucket": "delays", "Key": "k 1", "VersionId": "v1"}},
        [("s3:PutObject", "arn:aws:s3:::claims/b"), ("s3:GetObjectVersion", "arn:aws:s3:::delays/k 1")],
    ),
    ("create_bucket", {"Bucket": "claims"}, [("s3:CreateBucket", "arn:aws:s3:::claims")]),
    ("head_bucket", {"Bucket": "claims"}, [("s3:ListBucket", "arn:aws:s3:::claims")]),
    ("delete_bucket", {"Bucket": "claims"}, [("s3:DeleteBucket", "arn:aws:s3:::claims")]),
    ("list_buckets", {}, [("s3:ListAllMyBuckets", "*")]),
    ("get_bucket_location", {"Bucket": "claims"}, [("s3:GetBucketLocation", "arn:aws:s3:::claims")]),
    (
        "put_bucket_policy",
        {"Bucket": "claims", "Policy": "{}"},
        [("s3:PutBucketPolicy", "arn:aws:s3:::claims")],
    ),
    (
        "create_multipart_upload",
        {"Bucket": "claims", "Key": "delayed/a b.json"},
        [("s3:PutObject", OBJECT)],
    ),
    (
        "abort_multipart_upload",
        {"Bucket": "claims", "Key": "delayed/a b.json", "UploadId": "u"},
        [("s3:AbortMultipartUpload", OBJECT)],
    ),
]


@pytest.mark.parametrize(("operation", "params", "expected"), S3_CASES)
def test_s3_operations(operation, params, expected):
    assert pairs(authorize("s3", operation, **params)) == expected


def test_s3_list_carries_the_prefix_condition_keys():
    (found,) = authorize("s3", "list_objects_v2", Bucket="delays", Prefix="delayed/", Delimiter="/")
    assert found.operation == "ListObjectsV2"
    assert found.context == {"s3:prefix": "delayed/", "s3:delimiter": "/"}


def test_s3_sse_kms_adds_the_kms_calls_s3_makes_as_the_caller():
    lookup = FakeLookup(bucket_keys={"claims": KEY})
    via = {"kms:viaservice": f"s3.{REGION}.amazonaws.com", "kms:calleraccount": ACCOUNT}
    put = authorize("s3", "put_object", lookup, Bucket="claims", Key="k", Body=b"x")
    assert pairs(put) == [("s3:PutObject", "arn:aws:s3:::claims/k"), ("kms:GenerateDataKey", KEY)]
    assert put[1].context == via
    assert put[1].resource_required
    get = authorize("s3", "get_object", lookup, Bucket="claims", Key="k")
    assert pairs(get) == [("s3:GetObject", "arn:aws:s3:::claims/k"), ("kms:Decrypt", KEY)]
    # a key named in the request wins over the bucket default; SSE-S3 asked for needs none
    named = authorize(
        "s3",
        "put_object",
        Bucket="other",
        Key="k",
        Body=b"x",
        ServerSideEncryption="aws:kms",
        SSEKMSKeyId=KEY_ID,
    )
    assert pairs(named)[1] == ("kms:GenerateDataKey", KEY)
    sse_s3 = authorize(
        "s3", "put_object", lookup, Bucket="claims", Key="k", Body=b"x", ServerSideEncryption="AES256"
    )
    assert len(sse_s3) == 1


def test_s3_virtual_hosted_request():
    headers = {"Host": "claims.s3.us-east-1.amazonaws.com"}
    found = calls(
        "s3", "GET", "/a%2Fb.json", "", headers, b"", region=REGION, account=ACCOUNT, lookup=FakeLookup()
    )
    assert pairs(found) == [("s3:GetObject", "arn:aws:s3:::claims/a/b.json")]


# --- DynamoDB -------------------------------------------------------------------------------------

KEY_ITEM = {"id": {"S": "fn.consumer#m1"}}
LEADING = {"dynamodb:leadingkeys": ["fn.consumer#m1"]}


@pytest.mark.parametrize(
    ("operation", "params"),
    [
        ("get_item", {"TableName": "idempotency", "Key": KEY_ITEM}),
        ("put_item", {"TableName": "idempotency", "Item": {**KEY_ITEM, "status": {"S": "done"}}}),
        ("update_item", {"TableName": "idempotency", "Key": KEY_ITEM, "UpdateExpression": "SET a = :a"}),
        ("delete_item", {"TableName": "idempotency", "Key": KEY_ITEM}),
    ],
)
def test_dynamodb_item_operations_carry_the_leading_keys(operation, params):
    (found,) = authorize("dynamodb", operation, **params)
    action = "dynamodb:" + "".join(part.title() for part in operation.split("_"))
    assert (found.action, found.resource, found.context) == (action, TABLE, LEADING)


def test_dynamodb_query_scan_and_index():
    query = authorize(
        "dynamodb",
        "query",
        TableName="effects",
        IndexName="by-execution",
        KeyConditionExpression="#k = :k AND execution_id > :e",
        ExpressionAttributeNames={"#k": "effect_key"},
        ExpressionAttributeValues={":k": {"S": "redrive"}, ":e": {"S": "0"}},
    )
    index = f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/effects/index/by-execution"
    assert pairs(query) == [("dynamodb:Query", index)]
    assert query[0].context == {"dynamodb:leadingkeys": ["redrive"]}
    assert pairs(authorize("dynamodb", "scan", TableName="idempotency")) == [("dynamodb:Scan", TABLE)]
    assert pairs(authorize("dynamodb", "describe_table", TableName="idempotency")) == [
        ("dynamodb:DescribeTable", TABLE)
    ]
    assert pairs(authorize("dynamodb", "list_tables")) == [("dynamodb:ListTables", "*")]


def test_dynamodb_batches_per_table_and_transactions_per_item():
    other = f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/ledger"
    batch = authorize(
        "dynamodb",
        "batch_write_item",
        RequestItems={
            "idempotency": [{"PutRequest": {"Item": KEY_ITEM}}],
            "ledger": [{"DeleteRequest": {"Key": {"pk": {"S": "a"}}}}],
        },
    )
    assert pairs(batch) == [("dynamodb:BatchWriteItem", TABLE), ("dynamodb:BatchWriteItem", other)]
    assert batch[0].context == LEADING
    get = authorize("dynamodb", "batch_get_item", RequestItems={"idempotency": {"Keys": [KEY_ITEM]}})
    assert pairs(get) == [("dynamodb:BatchGetItem", TABLE)]
    transaction = authorize(
        "dynamodb",
        "transact_write_items",
        TransactItems=[
            {"Put": {"TableName": "idempotency", "Item": KEY_ITEM}},
            {"Update": {"TableName": "ledger", "Key": {"pk": {"S": "a"}}, "UpdateExpression": "SET a = :a"}},
            {"Delete": {"TableName": "ledger", "Key": {"pk": {"S": "b"}}}},
            {
                "ConditionCheck": {
                    "TableName": "ledger",
                    "Key": {"pk": {"S": "c"}},
                    "ConditionExpression": "x",
                }
            },
        ],
    )
    assert pairs(transaction) == [
        ("dynamodb:PutItem", TABLE),
        ("dynamodb:UpdateItem", other),
        ("dynamodb:DeleteItem", other),
        ("dynamodb:ConditionCheckItem", other),
    ]
    assert transaction[0].context == {"dynamodb:enclosingoperation": "TransactWriteItems", **LEADING}
    # the ledger's key schema is unknown, but a one-attribute key can only be the partition key
    assert transaction[1].context["dynamodb:leadingkeys"] == ["a"]


# --- Lambda, Step Functions -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("operation", "params", "expected"),
    [
        ("invoke", {"FunctionName": "consumer"}, [("lambda:InvokeFunction", FUNCTION)]),
        ("invoke", {"FunctionName": "consumer:live"}, [("lambda:InvokeFunction", f"{FUNCTION}:live")]),
        (
            "invoke",
            {"FunctionName": FUNCTION, "Qualifier": "7"},
            [("lambda:InvokeFunction", f"{FUNCTION}:7")],
        ),
        (
            "invoke",
            {"FunctionName": f"{ACCOUNT}:function:other"},
            [("lambda:InvokeFunction", f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:other")],
        ),
        ("get_function", {"FunctionName": "consumer"}, [("lambda:GetFunction", FUNCTION)]),
        (
            "get_function_configuration",
            {"FunctionName": "consumer"},
            [("lambda:GetFunctionConfiguration", FUNCTION)],
        ),
        (
            "get_function_concurrency",
            {"FunctionName": "consumer"},
            [("lambda:GetFunctionConcurrency", FUNCTION)],
        ),
        (
            "update_function_configuration",
            {"FunctionName": "consumer", "Timeout": 30},
            [("lambda:UpdateFunctionConfiguration", FUNCTION)],
        ),
        ("list_functions", {}, [("lambda:ListFunctions", "*")]),
        ("list_event_source_mappings", {}, [("lambda:ListEventSourceMappings", "*")]),
        (
            "create_function",
            {"FunctionName": "consumer", "Role": ROLE, "Code": {"ZipFile": b"x"}, "Runtime": "python3.13"},
            [("lambda:CreateFunction", FUNCTION), ("iam:PassRole", ROLE)],
        ),
    ],
)
def test_lambda_operations(operation, params, expected):
    assert pairs(authorize("lambda", operation, **params)) == expected


def test_lambda_payload_is_not_read_as_parameters():
    payload = json.dumps({"FunctionName": "someone-else", "Qualifier": "x"}).encode()
    assert pairs(authorize("lambda", "invoke", FunctionName="consumer", Payload=payload)) == [
        ("lambda:InvokeFunction", FUNCTION)
    ]


def test_lambda_pass_role_names_the_service():
    found = authorize("lambda", "create_function", FunctionName="f", Role=ROLE, Code={"ZipFile": b"x"})
    assert found[1].context == {"iam:passedtoservice": "lambda.amazonaws.com"}


@pytest.mark.parametrize(
    ("operation", "params", "expected"),
    [
        ("start_execution", {"stateMachineArn": MACHINE}, [("states:StartExecution", MACHINE)]),
        ("describe_execution", {"executionArn": EXECUTION}, [("states:DescribeExecution", EXECUTION)]),
        ("stop_execution", {"executionArn": EXECUTION}, [("states:StopExecution", EXECUTION)]),
        ("get_execution_history", {"executionArn": EXECUTION}, [("states:GetExecutionHistory", EXECUTION)]),
        ("list_executions", {"stateMachineArn": MACHINE}, [("states:ListExecutions", MACHINE)]),
        ("describe_state_machine", {"stateMachineArn": MACHINE}, [("states:DescribeStateMachine", MACHINE)]),
        (
            "update_state_machine",
            {"stateMachineArn": MACHINE, "definition": "{}"},
            [("states:UpdateStateMachine", MACHINE)],
        ),
        (
            "create_state_machine",
            {"name": "redrive", "definition": "{}", "roleArn": ROLE},
            [("states:CreateStateMachine", MACHINE), ("iam:PassRole", ROLE)],
        ),
        ("list_state_machines", {}, [("states:ListStateMachines", "*")]),
        ("send_task_success", {"taskToken": "t", "output": "{}"}, [("states:SendTaskSuccess", "*")]),
    ],
)
def test_step_functions_operations(operation, params, expected):
    assert pairs(authorize("stepfunctions", operation, **params)) == expected


# --- SNS, KMS, Secrets Manager, SSM ---------------------------------------------------------------


def test_sns():
    assert pairs(authorize("sns", "publish", TopicArn=TOPIC, Message="m")) == [("sns:Publish", TOPIC)]
    keyed = authorize("sns", "publish", FakeLookup(topic_keys={TOPIC: KEY}), TopicArn=TOPIC, Message="m")
    assert pairs(keyed) == [("sns:Publish", TOPIC), ("kms:GenerateDataKey", KEY), ("kms:Decrypt", KEY)]
    assert keyed[1].context["kms:viaservice"] == f"sns.{REGION}.amazonaws.com"
    subscribed = authorize("sns", "subscribe", TopicArn=TOPIC, Protocol="sqs", Endpoint=QUEUE)
    assert pairs(subscribed) == [("sns:Subscribe", TOPIC)]
    assert subscribed[0].context == {"sns:protocol": "sqs", "sns:endpoint": QUEUE}
    assert pairs(authorize("sns", "list_topics")) == [("sns:ListTopics", "*")]


def test_kms():
    found = authorize(
        "kms", "encrypt", KeyId="alias/sluice", Plaintext=b"x", EncryptionContext={"app": "sluice"}
    )
    assert pairs(found) == [("kms:Encrypt", KEY)]
    assert found[0].resource_required
    assert found[0].context == {"kms:encryptioncontext:app": "sluice", "kms:encryptioncontextkeys": ["app"]}
    assert pairs(authorize("kms", "generate_data_key", KeyId=KEY_ID, KeySpec="AES_256")) == [
        ("kms:GenerateDataKey", KEY)
    ]
    assert pairs(authorize("kms", "describe_key", KeyId=KEY)) == [("kms:DescribeKey", KEY)]
    blob = KEY_ID.encode() + bytes(28) + b"ciphertext"  # moto's: key id, IV, tag, then the ciphertext
    assert pairs(authorize("kms", "decrypt", CiphertextBlob=blob)) == [("kms:Decrypt", KEY)]
    assert pairs(authorize("kms", "list_keys")) == [("kms:ListKeys", "*")]


@pytest.mark.parametrize("secret_id", ["envelope-key", SECRET, SECRET[: -len("-AbCdEf")]])
def test_secrets_by_name_or_partial_arn(secret_id):
    (found,) = authorize("secretsmanager", "get_secret_value", SecretId=secret_id)
    assert (found.action, found.resource) == ("secretsmanager:GetSecretValue", SECRET)
    assert found.context == {"secretsmanager:secretid": SECRET}


def test_secrets_other_operations():
    assert pairs(authorize("secretsmanager", "describe_secret", SecretId="envelope-key")) == [
        ("secretsmanager:DescribeSecret", SECRET)
    ]
    assert pairs(
        authorize("secretsmanager", "put_secret_value", SecretId="envelope-key", SecretString="s")
    ) == [("secretsmanager:PutSecretValue", SECRET)]
    created = f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:jobs-db-??????"
    assert pairs(authorize("secretsmanager", "create_secret", Name="jobs-db", SecretString="s")) == [
        ("secretsmanager:CreateSecret", created)
    ]


def test_ssm_parameters():
    parameter = f"arn:aws:ssm:{REGION}:{ACCOUNT}:parameter"
    assert pairs(authorize("ssm", "get_parameter", Name="/sluice/dev/layer")) == [
        ("ssm:GetParameter", f"{parameter}/sluice/dev/layer")
    ]
    assert pairs(authorize("ssm", "get_parameter", Name="plain:3")) == [
        ("ssm:GetParameter", f"{parameter}/plain")
    ]
    assert pairs(authorize("ssm", "get_parameters", Names=["/a", "b"])) == [
        ("ssm:GetParameters", f"{parameter}/a"),
        ("ssm:GetParameters", f"{parameter}/b"),
    ]
    assert pairs(authorize("ssm", "get_parameters_by_path", Path="/sluice/dev")) == [
        ("ssm:GetParametersByPath", f"{parameter}/sluice/dev")
    ]


# --- CloudWatch, Logs, X-Ray, STS, CloudFormation, EventBridge, Scheduler, IAM --------------------

ALARM = f"arn:aws:cloudwatch:{REGION}:{ACCOUNT}:alarm"


def test_cloudwatch():
    (put,) = authorize("cloudwatch", "put_metric_data", Namespace="Sluice", MetricData=[{"MetricName": "m"}])
    assert (put.action, put.resource, put.context) == (
        "cloudwatch:PutMetricData",
        "*",
        {"cloudwatch:namespace": "Sluice"},
    )
    assert pairs(
        authorize("cloudwatch", "get_metric_data", MetricDataQueries=[], StartTime=0, EndTime=1)
    ) == [("cloudwatch:GetMetricData", "*")]
    assert pairs(authorize("cloudwatch", "describe_alarms", AlarmNames=["a"])) == [
        ("cloudwatch:DescribeAlarms", f"{ALARM}:*")
    ]
    assert pairs(
        authorize("cloudwatch", "set_alarm_state", AlarmName="backlog", StateValue="ALARM", StateReason="r")
    ) == [("cloudwatch:SetAlarmState", f"{ALARM}:backlog")]
    assert pairs(authorize("cloudwatch", "delete_alarms", AlarmNames=["a", "b"])) == [
        ("cloudwatch:DeleteAlarms", f"{ALARM}:a"),
        ("cloudwatch:DeleteAlarms", f"{ALARM}:b"),
    ]


def test_cloudwatch_in_the_smithy_rpc_v2_cbor_protocol():
    model = _client("cloudwatch").meta.service_model
    request = serialize.create_serializer("smithy-rpc-v2-cbor").serialize_to_request(
        {"Namespace": "Sluice", "MetricData": [{"MetricName": "m", "Value": 1.0}]},
        model.operation_model("PutMetricData"),
    )
    headers = {k: str(v) for k, v in request["headers"].items()}
    (found,) = calls(
        "monitoring", "POST", request["url_path"], "", headers, request["body"],
        region=REGION, account=ACCOUNT, lookup=FakeLookup(),
    )  # fmt: skip
    assert (found.action, found.context) == ("cloudwatch:PutMetricData", {"cloudwatch:namespace": "Sluice"})
    status, out, body = access_denied("monitoring", headers, "User: u is not authorized to perform: x")
    parsed = parsers.create_parser("smithy-rpc-v2-cbor").parse(
        {"status_code": status, "headers": out, "body": body},
        model.operation_model("GetMetricData").output_shape,
    )
    assert parsed["Error"]["Code"] == "AccessDenied"
    assert parsed["Error"]["Message"] == "User: u is not authorized to perform: x"


def test_logs_xray_sts():
    group = f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:/aws/lambda/consumer"
    assert pairs(
        authorize("logs", "create_log_stream", logGroupName="/aws/lambda/consumer", logStreamName="s")
    ) == [("logs:CreateLogStream", f"{group}:log-stream:s")]
    assert pairs(
        authorize(
            "logs", "put_log_events", logGroupName="/aws/lambda/consumer", logStreamName="s", logEvents=[]
        )
    ) == [("logs:PutLogEvents", f"{group}:log-stream:s")]
    assert pairs(authorize("xray", "put_trace_segments", TraceSegmentDocuments=[])) == [
        ("xray:PutTraceSegments", "*")
    ]
    assert authorize("sts", "get_caller_identity") == []


def test_cloudformation_events_scheduler_iam():
    stack = f"arn:aws:cloudformation:{REGION}:{ACCOUNT}:stack/sluice-dev/*"
    assert pairs(authorize("cloudformation", "describe_stacks", StackName="sluice-dev")) == [
        ("cloudformation:DescribeStacks", stack)
    ]
    assert pairs(authorize("cloudformation", "describe_stacks")) == [("cloudformation:DescribeStacks", "*")]
    assert pairs(authorize("cloudformation", "list_stack_resources", StackName="sluice-dev")) == [
        ("cloudformation:ListStackResources", stack)
    ]
    assert pairs(authorize("cloudformation", "create_stack", StackName="sluice-dev", RoleARN=ROLE)) == [
        ("cloudformation:CreateStack", stack),
        ("iam:PassRole", ROLE),
    ]
    bus = f"arn:aws:events:{REGION}:{ACCOUNT}:event-bus/default"
    (put,) = authorize(
        "events", "put_events", Entries=[{"Source": "sluice", "DetailType": "d", "Detail": "{}"}]
    )
    assert (put.action, put.resource, put.context["events:source"]) == ("events:PutEvents", bus, ["sluice"])
    assert pairs(authorize("events", "put_rule", Name="tick", ScheduleExpression="rate(1 minute)")) == [
        ("events:PutRule", f"arn:aws:events:{REGION}:{ACCOUNT}:rule/tick")
    ]
    target = {"Arn": FUNCTION, "RoleArn": ROLE}
    schedule = authorize(
        "scheduler", "create_schedule", Name="tick", ScheduleExpression="rate(1 minute)",
        FlexibleTimeWindow={"Mode": "OFF"}, Target=target,
    )  # fmt: skip
    assert pairs(schedule) == [
        ("scheduler:CreateSchedule", f"arn:aws:scheduler:{REGION}:{ACCOUNT}:schedule/default/tick"),
        ("iam:PassRole", ROLE),
    ]
    assert schedule[1].context == {"iam:passedtoservice": "scheduler.amazonaws.com"}
    assert pairs(
        authorize(
            "iam", "create_role", RoleName="worker", Path="/service-role/", AssumeRolePolicyDocument="{}"
        )
    ) == [("iam:CreateRole", ROLE)]


# --- what is not known fails closed ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("service", "operation", "params", "named"),
    [
        ("dynamodb", "execute_statement", {"Statement": "SELECT * FROM t"}, "dynamodb ExecuteStatement"),
        ("sqs", "cancel_message_move_task", {"TaskHandle": "not-a-handle"}, "sqs CancelMessageMoveTask"),
        ("s3", "get_bucket_analytics_configuration", {"Bucket": "b", "Id": "i"}, "s3 GET bucket?analytics"),
        ("lambda", "list_layers", {}, "lambda ListLayers"),
    ],
)
def test_unknown_operations_are_refused(service, operation, params, named):
    with pytest.raises(Unmapped, match=re.escape(named)):
        authorize(service, operation, **params)


def test_credential_scope():
    sent = send("stepfunctions", "list_state_machines")
    assert credential_scope(sent.headers) == ("AK", sent.headers["X-Amz-Date"][:8], REGION, "states")
    assert credential_scope({}) is None


# --- the refusal, as boto3 reads it ---------------------------------------------------------------


class _Raw:
    def __init__(self, body: bytes) -> None:
        self.body = body

    def stream(self, **_: Any) -> Any:
        yield self.body


def refused(service: str, operation: str, message: str, **params: Any) -> dict[str, Any]:
    client = _client(service)

    def answer(request: Any, **_: Any) -> AWSResponse:
        sent = _sent(request)
        scope = credential_scope(sent.headers)
        assert scope is not None
        status, headers, body = access_denied(scope[3], sent.headers, message)
        wire = HTTPHeaders()
        for name, value in headers.items():
            wire[name] = value
        return AWSResponse(request.url, status, wire, _Raw(b"" if sent.method == "HEAD" else body))

    client.meta.events.register_first("before-send", answer, unique_id="refuse")
    try:
        getattr(client, operation)(**params)
    except ClientError as error:
        return dict(error.response["Error"])
    finally:
        client.meta.events.unregister("before-send", unique_id="refuse")
    raise AssertionError("no error raised")


def _message(action: str, resource: str) -> str:
    return (
        f"User: arn:aws:sts::{ACCOUNT}:assumed-role/ConsumerRole/consumer is not authorized to perform: "
        f"{action} on resource: {resource} because no identity-based policy allows the {action} action"
    )


@pytest.mark.parametrize(
    ("service", "operation", "params", "action", "code"),
    [
        (
            "sqs",
            "send_message",
            {"QueueUrl": QUEUE_URL, "MessageBody": "x"},
            "sqs:SendMessage",
            "AccessDenied",
        ),
        (
            "sqs",
            "send_message",
            {"QueueUrl": QUEUE_URL, "MessageBody": "x"},
            "kms:GenerateDataKey",
            "KMS.AccessDeniedException",
        ),
        ("s3", "put_object", {"Bucket": "b", "Key": "k", "Body": b"x"}, "s3:PutObject", "AccessDenied"),
        ("s3", "list_objects_v2", {"Bucket": "b"}, "s3:ListBucket", "AccessDenied"),
        ("sns", "publish", {"TopicArn": TOPIC, "Message": "m"}, "sns:Publish", "AuthorizationError"),
        ("sns", "publish", {"TopicArn": TOPIC, "Message": "m"}, "kms:Decrypt", "KMSAccessDenied"),
        (
            "dynamodb",
            "get_item",
            {"TableName": "t", "Key": KEY_ITEM},
            "dynamodb:GetItem",
            "AccessDeniedException",
        ),
        ("kms", "decrypt", {"CiphertextBlob": b"x"}, "kms:Decrypt", "AccessDeniedException"),
        (
            "secretsmanager",
            "get_secret_value",
            {"SecretId": "s"},
            "secretsmanager:GetSecretValue",
            "AccessDeniedException",
        ),
        ("lambda", "invoke", {"FunctionName": "consumer"}, "lambda:InvokeFunction", "AccessDeniedException"),
        (
            "stepfunctions",
            "start_execution",
            {"stateMachineArn": MACHINE},
            "states:StartExecution",
            "AccessDeniedException",
        ),
        ("ssm", "get_parameter", {"Name": "/p"}, "ssm:GetParameter", "AccessDeniedException"),
        ("logs", "describe_log_groups", {}, "logs:DescribeLogGroups", "AccessDeniedException"),
        ("events", "put_events", {"Entries": []}, "events:PutEvents", "AccessDeniedException"),
        (
            "xray",
            "put_trace_segments",
            {"TraceSegmentDocuments": []},
            "xray:PutTraceSegments",
            "AccessDeniedException",
        ),
        ("scheduler", "list_schedules", {}, "scheduler:ListSchedules", "AccessDeniedException"),
        (
            "cloudwatch",
            "put_metric_data",
            {"Namespace": "N", "MetricData": []},
            "cloudwatch:PutMetricData",
            "AccessDenied",
        ),
        ("sts", "assume_role", {"RoleArn": ROLE, "RoleSessionName": "s"}, "sts:AssumeRole", "AccessDenied"),
        ("cloudformation", "describe_stacks", {}, "cloudformation:DescribeStacks", "AccessDenied"),
        ("iam", "get_role", {"RoleName": "r"}, "iam:GetRole", "AccessDenied"),
    ],
)
def test_access_denied_reads_back_as_boto3_raises_it(service, operation, params, action, code):
    message = _message(action, "arn:aws:service:::resource")
    error = refused(service, operation, message, **params)
    assert (error["Code"], error["Message"]) == (code, message)


def test_access_denied_to_a_head_request_is_a_bare_403():
    # HTTP carries no body in the answer to HEAD (S3 sends none): boto3 can only tell the status
    error = refused("s3", "head_object", _message("s3:GetObject", "arn:aws:s3:::b/k"), Bucket="b", Key="k")
    assert error["Code"] == "403"


def test_access_denied_in_the_query_protocol():
    message = _message("sqs:SendMessage", QUEUE)
    headers = {"Content-Type": "application/x-www-form-urlencoded"}
    shape = _client("sns").meta.service_model.operation_model("Publish").output_shape
    assert shape is not None  # the error parse does not use it
    for service, code in (("sqs", "AccessDenied"), ("sns", "AuthorizationError")):
        status, out, body = access_denied(service, headers, message)
        parsed = parsers.create_parser("query").parse(
            {"status_code": status, "headers": out, "body": body}, shape
        )
        assert (status, parsed["Error"]["Code"], parsed["Error"]["Message"]) == (403, code, message)


# Every operation sluice makes at runtime, from its CLI, state machines, local runtime, examples and tests
# (inventoried from boto3 calls and the ASL Task resources): each has its mapping, so none is refused as
# unknown once the runtime enforces IAM. S3's are exercised above.
SLUICE_USES = {
    "sqs": "SendMessage SendMessageBatch ReceiveMessage DeleteMessage DeleteMessageBatch"
    " ChangeMessageVisibility ChangeMessageVisibilityBatch GetQueueAttributes SetQueueAttributes"
    " GetQueueUrl CreateQueue DeleteQueue"
    " ListQueues PurgeQueue StartMessageMoveTask ListMessageMoveTasks CancelMessageMoveTask",
    "dynamodb": "GetItem PutItem UpdateItem DeleteItem Query Scan CreateTable DescribeTable",
    "lambda": "Invoke InvokeAsync GetFunction GetFunctionConfiguration GetFunctionConcurrency CreateFunction"
    " DeleteFunction UpdateFunctionConfiguration ListFunctions ListEventSourceMappings",
    "states": "StartExecution DescribeExecution StopExecution ListExecutions GetExecutionHistory"
    " CreateStateMachine UpdateStateMachine DescribeStateMachine",
    "sns": "Publish Subscribe",
    "secretsmanager": "GetSecretValue DescribeSecret CreateSecret DeleteSecret PutSecretValue",
    "ssm": "GetParameter GetParameters",
    "cloudwatch": "PutMetricData GetMetricData GetMetricStatistics DescribeAlarms PutMetricAlarm"
    " SetAlarmState",
    "cloudformation": "CreateStack DescribeStacks DescribeStackEvents ListStackResources",
    "events": "PutEvents PutRule",
    "iam": "CreateRole",
    "sts": "GetCallerIdentity",
}


@pytest.mark.parametrize("service", sorted(SLUICE_USES))
def test_every_operation_sluice_makes_is_mapped(service):
    assert set(SLUICE_USES[service].split()) - set(HANDLERS[service]) == set()
