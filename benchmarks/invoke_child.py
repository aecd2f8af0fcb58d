"""One whole cold invocation, run by ``cold_start.py --invoke`` as ``python -c <this file's text> SPEC``.

The parent sets the Lambda-like environment, PYTHONPATH (the handler's code directory first, then
the layer) and cwd (the code directory). Here, untimed: moto's ``mock_aws`` is started, the queues,
the idempotency table and the claim-check bucket named by the SLUICE_* settings and the stack's envelope
key (a Secrets Manager secret, its ARN handed to the handler in SLUICE_ENVELOPE_KEY_SECRET as
template.yaml does) are created with a separate boto3 session (boto3's default session, which the
handler uses, stays unbuilt), one conditional PutItem/UpdateItem/GetItem and one GetSecretValue warm
moto's DynamoDB and Secrets Manager code paths, and an SQS event of
``records`` new records (fresh ids) is built; the example processor's ledger table too when
``LEDGER_TABLE_NAME`` is set. Timed with ``perf_counter``: ``import app`` and its first
``lambda_handler(event, context)``. Then, untimed, the idempotency (and ledger) items are counted,
so the parent can check that both handlers did the same work. The last stdout line is
``BENCH {json}``.

moto needs botocore patched before any client exists, so boto3/botocore (and jmespath, dateutil,
urllib3) are imported before the timed region, on both sides alike: the timed region holds
everything else the handler imports, every client it builds and all of its first invocation.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

SPEC_DEFAULTS: dict[str, Any] = {"records": 10, "profile": ""}
WARMUP_KEY = "bench-warmup"
ENVELOPE_KEY_NAME = "sluice-envelope-key"
ENVELOPE_KEY = "bench-envelope-key-" + "0" * 32
"""The stack's envelope key (template.yaml EnvelopeKey; at least 32 bytes): sluice's handler reads it at
import (``sluice.sealing.load_seal``, current and previous version); the anchor reads it once (Powertools'
``parameters.get_secret``), the equivalent it has."""


@dataclass
class Context:
    """What the Lambda runtime passes as ``context`` (the fields Powertools reads)."""

    function_name: str = field(default_factory=lambda: os.environ["AWS_LAMBDA_FUNCTION_NAME"])
    function_version: str = "$LATEST"
    memory_limit_in_mb: int = 512
    timeout_seconds: float = 30.0
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    log_group_name: str = "/aws/lambda/bench"
    log_stream_name: str = "bench"
    _started: float = field(default_factory=time.monotonic)

    @property
    def invoked_function_arn(self) -> str:
        return f"arn:aws:lambda:us-east-1:123456789012:function:{self.function_name}"

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self.timeout_seconds - (time.monotonic() - self._started)) * 1000))


def queue_name(url: str) -> str:
    return url.rstrip("/").rsplit("/", 1)[-1]


def create_resources(session: Any) -> tuple[str, str]:
    """The queues, table, bucket and envelope key of the consumer's SLUICE_* settings; returns the work
    queue's ARN and the envelope key's."""
    sqs = session.client("sqs")
    work_url = sqs.create_queue(QueueName="sluice-work", Attributes={"VisibilityTimeout": "180"})["QueueUrl"]
    work_arn: str = sqs.get_queue_attributes(QueueUrl=work_url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    for variable in ("SLUICE_POISON_QUEUE_URL", "SLUICE_DEAD_LETTER_QUEUE_URL"):
        if os.environ.get(variable):
            sqs.create_queue(QueueName=queue_name(os.environ[variable]))
    table = os.environ["SLUICE_IDEMPOTENCY_TABLE"]
    ddb = session.client("dynamodb")
    ddb.create_table(
        TableName=table,
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        BillingMode="PAY_PER_REQUEST",
    )
    if os.environ.get("LEDGER_TABLE_NAME"):  # the example processor's ledger (template.yaml LedgerTable)
        ddb.create_table(
            TableName=os.environ["LEDGER_TABLE_NAME"],
            AttributeDefinitions=[
                {"AttributeName": "effect_key", "AttributeType": "S"},
                {"AttributeName": "execution_id", "AttributeType": "S"},
            ],
            KeySchema=[
                {"AttributeName": "effect_key", "KeyType": "HASH"},
                {"AttributeName": "execution_id", "KeyType": "RANGE"},
            ],
            BillingMode="PAY_PER_REQUEST",
        )
    for bucket in filter(None, os.environ.get("SLUICE_CLAIM_CHECK_BUCKETS", "").split(",")):
        session.client("s3").create_bucket(Bucket=bucket.strip())
    # The calls the idempotency layer makes, once, so moto's own lazy imports are not timed.
    key = {"id": {"S": WARMUP_KEY}}
    ddb.put_item(
        TableName=table,
        Item={**key, "status": {"S": "INPROGRESS"}, "expiration": {"N": "1"}},
        ConditionExpression="attribute_not_exists(#id) OR #expiry < :now",
        ExpressionAttributeNames={"#id": "id", "#expiry": "expiration"},
        ExpressionAttributeValues={":now": {"N": str(int(time.time()))}},
    )
    ddb.update_item(
        TableName=table,
        Key=key,
        UpdateExpression="SET #status = :status",
        ExpressionAttributeNames={"#status": "status"},
        ExpressionAttributeValues={":status": {"S": "COMPLETED"}},
    )
    ddb.get_item(TableName=table, Key=key, ConsistentRead=True)
    secrets = session.client("secretsmanager")
    key_arn: str = secrets.create_secret(Name=ENVELOPE_KEY_NAME, SecretString=ENVELOPE_KEY)["ARN"]
    secrets.get_secret_value(SecretId=key_arn)
    return work_arn, key_arn


def make_event(queue_arn: str, size: int) -> dict[str, Any]:
    """A Lambda SQS event of ``size`` new orders, shaped as the event source mapping sends them."""
    now_ms = str(int(time.time() * 1000))
    records = []
    for _ in range(size):
        message_id = str(uuid.uuid4())
        body = json.dumps(
            {"order_id": f"o-{uuid.uuid4()}", "customer_id": "c-1", "amount_cents": 1200, "currency": "EUR"}
        )
        records.append(
            {
                "messageId": message_id,
                "receiptHandle": "AQEB" + uuid.uuid4().hex + uuid.uuid4().hex,
                "body": body,
                "attributes": {
                    "ApproximateReceiveCount": "1",
                    "SentTimestamp": now_ms,
                    "SenderId": "AIDAIENQZJOLO23YVJ4VO",
                    "ApproximateFirstReceiveTimestamp": now_ms,
                },
                "messageAttributes": {
                    "tenant": {
                        "stringValue": "acme",
                        "stringListValues": [],
                        "binaryListValues": [],
                        "dataType": "String",
                    }
                },
                "md5OfBody": hashlib.md5(body.encode(), usedforsecurity=False).hexdigest(),
                "eventSource": "aws:sqs",
                "eventSourceARN": queue_arn,
                "awsRegion": "us-east-1",
            }
        )
    return {"Records": records}


def count_items(session: Any) -> dict[str, Any]:
    """Idempotency items per status (the warm-up item left out) and ledger items per effect."""
    ddb = session.client("dynamodb")
    idempotency: dict[str, int] = {}
    for page in ddb.get_paginator("scan").paginate(TableName=os.environ["SLUICE_IDEMPOTENCY_TABLE"]):
        for item in page["Items"]:
            if item["id"]["S"] != WARMUP_KEY:
                status = item.get("status", {}).get("S", "?")
                idempotency[status] = idempotency.get(status, 0) + 1
    counts: dict[str, Any] = {"idempotency": idempotency}
    if os.environ.get("LEDGER_TABLE_NAME"):
        ledger: dict[str, int] = {}
        for page in ddb.get_paginator("scan").paginate(TableName=os.environ["LEDGER_TABLE_NAME"]):
            for item in page["Items"]:
                effect = item.get("effect", {}).get("S", "?")
                ledger[effect] = ledger.get(effect, 0) + 1
        counts["ledger"] = ledger
    return counts


def main() -> int:
    spec = {**SPEC_DEFAULTS, **(json.loads(sys.argv[1]) if len(sys.argv) > 1 else {})}
    import boto3  # noqa: PLC0415 - after the spec, like everything of the child
    from moto import mock_aws  # noqa: PLC0415

    with mock_aws():
        setup = boto3.Session(region_name=os.environ["AWS_REGION"])
        work_arn, key_arn = create_resources(setup)
        os.environ["SLUICE_ENVELOPE_KEY_SECRET"] = key_arn  # as template.yaml's Globals hand it over
        event = make_event(work_arn, spec["records"])
        context = Context()
        # The runtime sets the trace header of each invocation in the environment (Tracing: Active).
        os.environ["_X_AMZN_TRACE_ID"] = (
            f"Root=1-{int(time.time()):08x}-{uuid.uuid4().hex[:24]};Parent={uuid.uuid4().hex[:16]};Sampled=1"
        )
        profiles = None
        if spec["profile"]:
            import cProfile  # noqa: PLC0415 - only when asked

            profiles = (cProfile.Profile(), cProfile.Profile())  # import, first invocation
            profiles[0].enable()
        cpu_started, started = time.process_time(), time.perf_counter()
        import app  # noqa: PLC0415 - the cold start being measured

        imported, cpu_imported = time.perf_counter(), time.process_time()
        if profiles is not None:
            profiles[0].disable()
            profiles[1].enable()
        cpu_invoked_at, invoked_at = time.process_time(), time.perf_counter()
        response = app.lambda_handler(event, context)
        finished, cpu_finished = time.perf_counter(), time.process_time()
        if profiles is not None:
            profiles[1].disable()
            profiles[0].dump_stats(spec["profile"] + ".import")
            profiles[1].dump_stats(spec["profile"] + ".invoke")
        failures = response.get("batchItemFailures") if isinstance(response, dict) else response
        items = count_items(setup)
    result = {
        "import_ms": (imported - started) * 1000,
        "invoke_ms": (finished - invoked_at) * 1000,
        "total_ms": (imported - started + finished - invoked_at) * 1000,
        # the process's CPU time over the same two regions (every thread's, moto's in-process calls too)
        "cpu_total_ms": (cpu_imported - cpu_started + cpu_finished - cpu_invoked_at) * 1000,
        "failures": failures,
        "items": items,
    }
    sys.stdout.flush()
    print("BENCH " + json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
