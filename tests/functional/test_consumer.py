"""The partial-batch consumer against in-process moto (Given / When / Then)."""

from __future__ import annotations

import io
import json
import time
import uuid

import pytest
from aws_lambda_powertools import Logger
from pydantic import BaseModel

from sluice import claimcheck
from sluice.consumer.batch import Consumer
from sluice.envelope import ATTRIBUTE, Envelope
from sluice.errors import ConfigurationError
from sluice.limits import MAX_MESSAGE_BYTES
from sluice.logevents import EVENT, LogEvent
from sluice_local.emulation.lambda_loader import LambdaContext
from sluice_local.emulation.sqs_events import drain, receive_event
from tests.conftest import make_resources
from tests.doubles import envelope_of, last_error_of, sealed

from .conftest import ScriptedProcessor

TRACE_HEADER = "Root=1-674a2f00-0123456789abcdef01234567;Parent=89abcdef01234567;Sampled=1"
TRACE_ID = "674a2f000123456789abcdef01234567"


class Order(BaseModel):
    order_id: str
    amount_cents: int


def order(order_id: str, **extra: object) -> dict[str, object]:
    return {"order_id": order_id, "customer_id": "c-1", "amount_cents": 1200, "currency": "EUR", **extra}


def failed_ids(response: dict) -> set[str]:
    return {f["itemIdentifier"] for f in response["batchItemFailures"]}


# --- idempotency -------------------------------------------------------------------------------


def test_duplicate_is_skipped_and_processor_called_once(aws, processor, build_consumer, metrics, context):
    # Given the same order delivered twice, in two separate batches
    consumer = build_consumer(processor)
    aws.send(order("o-1"))
    first = consumer.handle(receive_event(aws.sqs, aws.work_url, aws.work_arn, 1), context)
    aws.send(order("o-1"))
    # When the duplicate is consumed
    second = consumer.handle(receive_event(aws.sqs, aws.work_url, aws.work_arn, 1), context)
    # Then the processor ran once, both records succeeded, and the duplicate was counted
    assert processor.calls["o-1"] == 1
    assert failed_ids(first) == failed_ids(second) == set()
    assert metrics.values["RecordsProcessed"] == 1
    assert metrics.values["DuplicatesSkipped"] == 1


def test_given_a_forged_origin_id_when_consumed_then_it_is_not_skipped_as_a_duplicate(
    aws, processor, build_consumer, metrics, context
):
    # Given an order processed under its own identity (no key expression: the identity is the key)
    consumer = build_consumer(processor, idempotency_key_jmespath="")
    first_id = aws.send(order("o-1"))
    consumer.handle(receive_event(aws.sqs, aws.work_url, aws.work_arn, 1), context)
    # When a producer sends another order claiming that identity in a hand-written envelope
    forged = json.dumps({"v": 1, "origin_id": first_id, "attempts": 4})
    second_id = aws.send(
        order("o-2"), MessageAttributes={ATTRIBUTE: {"DataType": "String", "StringValue": forged}}
    )
    result = consumer.handle(receive_event(aws.sqs, aws.work_url, aws.work_arn, 1), context)
    # Then it is processed under its own identity (before the seal it was skipped: silently lost)
    assert failed_ids(result) == set()
    assert processor.calls["o-2"] == 1
    assert processor.records[-1].envelope.origin_id == second_id
    assert processor.records[-1].envelope.attempts == 0
    assert metrics.values["DuplicatesSkipped"] == 0
    assert metrics.values["EnvelopesCorrupt"] == 1


def test_duplicate_inside_one_batch_is_skipped_even_with_concurrency(
    aws, processor, build_consumer, metrics, context
):
    consumer = build_consumer(processor, concurrency=4)
    for _ in range(3):
        aws.send(order("o-dup"))
    response = consumer.handle(receive_event(aws.sqs, aws.work_url, aws.work_arn, 3), context)
    assert failed_ids(response) == set()
    assert processor.calls["o-dup"] == 1
    assert metrics.values["DuplicatesSkipped"] == 2


def test_dynamodb_requests_per_record_match_powertools(aws, processor, build_consumer, api_calls, context):
    consumer = build_consumer(processor)
    aws.send(order("o-ddb"))
    consumer.handle(receive_event(aws.sqs, aws.work_url, aws.work_arn, 1), context)
    new = {op: api_calls.count(op) for op in ("PutItem", "UpdateItem", "GetItem", "DeleteItem")}
    aws.send(order("o-ddb"))
    consumer.handle(receive_event(aws.sqs, aws.work_url, aws.work_arn, 1), context)
    total = {op: api_calls.count(op) for op in ("PutItem", "UpdateItem", "GetItem", "DeleteItem")}
    assert new == {"PutItem": 1, "UpdateItem": 1, "GetItem": 0, "DeleteItem": 0}
    assert {op: total[op] - new[op] for op in total} == {
        "PutItem": 1,
        "UpdateItem": 0,
        "GetItem": 0,
        "DeleteItem": 0,
    }


def test_side_effect_is_not_repeated_when_the_record_is_retried(aws, processor, build_consumer, context):
    # Given a processor that charges, then fails on its first attempt
    consumer = build_consumer(processor, backoff_floor_seconds=0, backoff_base_seconds=1)
    aws.send(order("o-fx", behave="charge_then_fail"))
    first = consumer.handle(receive_event(aws.sqs, aws.work_url, aws.work_arn, 1), context)
    assert len(first["batchItemFailures"]) == 1
    # When the record comes back and succeeds
    # (waits for the ≤ 1 s backoff to run out; returns as soon as the record is back)
    second = consumer.handle(receive_event(aws.sqs, aws.work_url, aws.work_arn, 1, timeout=30), context)
    # Then the record was processed twice but the card charged once
    assert failed_ids(second) == set()
    assert processor.calls["o-fx"] == 2
    assert processor.effects["charge:o-fx"] == 1


def test_same_key_with_a_different_payload_is_isolated(aws, processor, build_consumer, context):
    consumer = build_consumer(processor)
    aws.send(order("o-k"))
    consumer.handle(receive_event(aws.sqs, aws.work_url, aws.work_arn, 1), context)
    aws.send(order("o-k", amount_cents=999))
    response = consumer.handle(receive_event(aws.sqs, aws.work_url, aws.work_arn, 1), context)
    assert failed_ids(response) == set()
    [poisoned] = drain(aws.sqs, aws.poison_url)
    assert "different payload" in last_error_of(poisoned).message


# --- permanent / transient ---------------------------------------------------------------------


def test_permanent_error_goes_to_poison_queue_with_envelope_and_is_not_reported_failed(
    aws, processor, build_consumer, metrics, context
):
    consumer = build_consumer(processor)
    mid = aws.send(
        order("o-bad", behave="permanent"),
        MessageAttributes={"tenant": {"DataType": "String", "StringValue": "acme"}},
    )
    response = consumer.handle(receive_event(aws.sqs, aws.work_url, aws.work_arn, 1), context)
    assert failed_ids(response) == set()
    [poisoned] = drain(aws.sqs, aws.poison_url)
    assert json.loads(poisoned["Body"])["order_id"] == "o-bad"
    assert poisoned["MessageAttributes"]["tenant"] == {"DataType": "String", "StringValue": "acme"}
    env = envelope_of(poisoned)
    assert env.origin_id == mid
    assert env.attempts == 1
    assert env.source == aws.work_arn
    assert env.first_failure is not None
    assert env.last_error is not None
    assert env.last_error.type == "PermanentError"
    assert "cannot be settled" in env.last_error.message
    assert env.last_error.receives == 1
    assert metrics.values["RecordsIsolated"] == 1


@pytest.mark.parametrize("body", ["{not json", json.dumps({"order_id": "o-x", "amount_cents": "many"})])
def test_undecodable_or_invalid_bodies_are_isolated_with_a_clear_reason(aws, build_consumer, context, body):
    consumer = build_consumer(lambda r: None, model=Order)
    aws.send(body)
    response = consumer.handle(receive_event(aws.sqs, aws.work_url, aws.work_arn, 1), context)
    assert failed_ids(response) == set()
    [poisoned] = drain(aws.sqs, aws.poison_url)
    reason = last_error_of(poisoned).message
    assert "not valid JSON" in reason or "does not match Order" in reason


def test_transient_error_is_reported_with_visibility_inside_jitter_bounds(
    aws, processor, build_consumer, api_calls, metrics, context
):
    # (a floor of 5 s, not 1 s: a 1 s draw could expire before the drain below on a loaded machine)
    consumer = build_consumer(
        processor, backoff_base_seconds=10, backoff_cap_seconds=300, backoff_floor_seconds=5
    )
    mid = aws.send(order("o-t", behave="transient"))
    response = consumer.handle(receive_event(aws.sqs, aws.work_url, aws.work_arn, 1), context)
    assert failed_ids(response) == {mid}
    [change] = api_calls.params("ChangeMessageVisibility")
    # first receive: uniform(0, min(300, 10 * 2**0)) with a floor of 5, rounded up
    assert 5 <= change["VisibilityTimeout"] <= 10
    assert drain(aws.sqs, aws.work_url) == []  # still invisible
    assert metrics.values["RecordsFailed"] == 1


def test_retry_after_sets_exactly_the_requested_visibility(
    aws, processor, build_consumer, api_calls, context
):
    consumer = build_consumer(processor)
    aws.send(order("o-r", behave="retry_after", seconds=42))
    consumer.handle(receive_event(aws.sqs, aws.work_url, aws.work_arn, 1), context)
    assert [p["VisibilityTimeout"] for p in api_calls.params("ChangeMessageVisibility")] == [42]


def test_unexpected_exception_is_retried_not_isolated(aws, processor, build_consumer, context):
    consumer = build_consumer(processor)
    mid = aws.send(order("o-c", behave="crash"))
    response = consumer.handle(receive_event(aws.sqs, aws.work_url, aws.work_arn, 1), context)
    assert failed_ids(response) == {mid}
    assert drain(aws.sqs, aws.poison_url) == []


def test_poison_queue_failure_retries_the_record_instead_of_losing_it(
    aws, processor, build_consumer, context
):
    consumer = build_consumer(processor, poison_queue_url=aws.poison_url + "-missing")
    mid = aws.send(order("o-p", behave="permanent"))
    response = consumer.handle(receive_event(aws.sqs, aws.work_url, aws.work_arn, 1), context)
    assert failed_ids(response) == {mid}


def test_near_dead_letter_is_warned_and_counted(aws, processor, build_consumer, metrics, context):
    consumer = build_consumer(processor, max_receive_count=2)
    aws.send(order("o-n"))
    consumer.handle(receive_event(aws.sqs, aws.work_url, aws.work_arn, 1), context)
    assert metrics.values["NearDeadLetter"] == 1


# --- claim checks ------------------------------------------------------------------------------


def put_payload(aws, key: str, payload: dict) -> None:
    aws.s3.put_object(Bucket=aws.bucket, Key=key, Body=json.dumps(payload).encode())


def test_extended_client_pointer_is_resolved(aws, processor, build_consumer, metrics, context):
    consumer = build_consumer(processor)
    big = order("o-big", note="x" * 300_000)
    claimcheck.send(aws.sqs, aws.s3, queue_url=aws.work_url, body=json.dumps(big), bucket=aws.bucket)
    response = consumer.handle(receive_event(aws.sqs, aws.work_url, aws.work_arn, 1), context)
    assert failed_ids(response) == set()
    [record] = processor.records
    assert record.data["note"] == big["note"]
    assert record.attributes["ExtendedPayloadSize"]["StringValue"] == str(len(json.dumps(big)))
    assert metrics.values["ClaimChecksResolved"] == 1


def test_given_a_pointer_to_an_object_over_the_cap_then_it_is_isolated_unread_and_batch_mates_go_through(
    aws, processor, build_consumer, metrics, context
):
    consumer = build_consumer(processor, claim_check_max_bytes=64 * 1024)
    big = json.dumps(order("o-huge-object", note="x" * 100_000))
    claimcheck.send(aws.sqs, aws.s3, queue_url=aws.work_url, body=big, bucket=aws.bucket, threshold=1024)
    aws.send(order("o-mate"))
    response = consumer.handle(receive_event(aws.sqs, aws.work_url, aws.work_arn, 2), context)
    assert failed_ids(response) == set()
    assert [r.data["order_id"] for r in processor.records] == ["o-mate"]
    [poisoned] = drain(aws.sqs, aws.poison_url)
    assert "over the 65,536-byte cap (ClaimCheckMaxBytes); not read" in last_error_of(poisoned).message
    assert "PayloadS3Pointer" in poisoned["Body"]  # isolated as it came: the pointer, for a replay
    assert metrics.values["RecordsIsolated"] == 1
    assert metrics.values["ClaimChecksResolved"] == 0


@pytest.mark.parametrize("fmt", ["simple", "legacy"])
def test_simple_and_legacy_pointers_are_resolved(aws, processor, build_consumer, context, fmt):
    consumer = build_consumer(processor)
    put_payload(aws, "claim-check/p1", order("o-ptr"))
    if fmt == "simple":
        body = json.dumps({"__type": "CLAIM_CHECK", "s3_bucket": aws.bucket, "s3_key": "claim-check/p1"})
    else:
        body = json.dumps(
            [claimcheck.LEGACY_POINTER_CLASS, {"s3BucketName": aws.bucket, "s3Key": "claim-check/p1"}]
        )
    aws.send(body)
    response = consumer.handle(receive_event(aws.sqs, aws.work_url, aws.work_arn, 1), context)
    assert failed_ids(response) == set()
    assert processor.calls["o-ptr"] == 1


@pytest.mark.parametrize(
    ("bucket", "key", "reason"),
    [
        ("someone-elses-bucket", "claim-check/p1", "not in the allowlist"),
        (None, "secrets/p1", "outside the prefix"),
    ],
)
def test_pointer_outside_the_allowlist_is_rejected_as_permanent(
    aws, processor, build_consumer, context, bucket, key, reason
):
    consumer = build_consumer(processor)
    aws.s3.create_bucket(Bucket="someone-elses-bucket")
    put_payload(aws, key, order("o-evil"))
    aws.send(json.dumps({"__type": "CLAIM_CHECK", "s3_bucket": bucket or aws.bucket, "s3_key": key}))
    response = consumer.handle(receive_event(aws.sqs, aws.work_url, aws.work_arn, 1), context)
    assert failed_ids(response) == set()
    assert processor.calls["o-evil"] == 0
    [poisoned] = drain(aws.sqs, aws.poison_url)
    assert reason in last_error_of(poisoned).message


def test_missing_claim_check_object_is_transient(aws, processor, build_consumer, context):
    consumer = build_consumer(processor)
    mid = aws.send(
        json.dumps({"__type": "CLAIM_CHECK", "s3_bucket": aws.bucket, "s3_key": "claim-check/not-yet"})
    )
    response = consumer.handle(receive_event(aws.sqs, aws.work_url, aws.work_arn, 1), context)
    assert failed_ids(response) == {mid}
    assert drain(aws.sqs, aws.poison_url) == []


# --- envelope ----------------------------------------------------------------------------------


def test_corrupt_envelope_is_tolerated(aws, processor, build_consumer, metrics, context):
    consumer = build_consumer(processor)
    mid = aws.send(
        order("o-env"), MessageAttributes={ATTRIBUTE: {"DataType": "String", "StringValue": "{oops"}}
    )
    response = consumer.handle(receive_event(aws.sqs, aws.work_url, aws.work_arn, 1), context)
    assert failed_ids(response) == set()
    assert processor.records[0].envelope.origin_id == mid
    assert metrics.values["EnvelopesCorrupt"] == 1


def test_given_a_record_that_cannot_be_read_then_it_is_retried_with_the_ids_and_count_sqs_gave_it(
    aws, processor, metrics, session, context
):
    # Given a record whose message attributes are not what SQS sends, on a trace, at its 4th receive
    mid = aws.send(order("o-unreadable"))
    event = receive_event(aws.sqs, aws.work_url, aws.work_arn, 1)
    [raw] = event["Records"]
    raw["messageAttributes"] = {"tenant": "not an attribute"}
    raw["attributes"].update({"AWSTraceHeader": TRACE_HEADER, "ApproximateReceiveCount": "4"})
    log = io.StringIO()
    consumer = Consumer.from_env(
        processor,
        logger=Logger(service=f"sluice-test-{uuid.uuid4().hex}", stream=log),
        metrics_sink=metrics,
        environ=aws.env(),
        session=session,
    )
    # When the consumer handles it
    response = consumer.handle(event, context)
    # Then it is retried, never processed, and its retry line carries what sluice.arrival.fallback_ids
    # read of it: its id, the trace it arrived on and its receive count
    assert failed_ids(response) == {mid}
    assert processor.records == []
    [retried] = [
        line
        for line in map(json.loads, log.getvalue().splitlines())
        if line.get(EVENT) == LogEvent.RECORD_RETRIED
    ]
    assert retried["message_id"] == mid
    assert retried["correlation_id"] == TRACE_ID
    assert retried["receive_count"] == 4


def test_envelope_identity_is_kept_across_hops(aws, processor, build_consumer, context):
    # Given a message re-sent by sluice: its envelope names the first hop's id
    consumer = build_consumer(processor, idempotency_key_jmespath="")
    env = Envelope(origin_id="first-hop-id", attempts=2)
    body = json.dumps(order("o-h"))
    aws.send(body, MessageAttributes={ATTRIBUTE: {"DataType": "String", "StringValue": sealed(env, body)}})
    consumer.handle(receive_event(aws.sqs, aws.work_url, aws.work_arn, 1), context)
    [record] = processor.records
    assert record.envelope.origin_id == "first-hop-id"
    assert record.idempotency_key == "msg:first-hop-id"


def test_ten_user_attributes_survive_isolation(aws, processor, build_consumer, context):
    consumer = build_consumer(processor)
    attrs = {f"a{i}": {"DataType": "String", "StringValue": f"v{i}"} for i in range(10)}
    aws.send(order("o-10", behave="permanent"), MessageAttributes=attrs)
    consumer.handle(receive_event(aws.sqs, aws.work_url, aws.work_arn, 1), context)
    [poisoned] = drain(aws.sqs, aws.poison_url)
    assert len(poisoned["MessageAttributes"]) == 10  # SQS's limit, envelope included
    from sluice.envelope import split  # noqa: PLC0415

    user, _, problem = split(poisoned["MessageAttributes"], body="", seal=None)
    assert problem is None
    assert user == attrs


# --- heartbeat & concurrency -------------------------------------------------------------------


@pytest.mark.slow
def test_heartbeat_keeps_every_unfinished_record_of_a_slow_batch_invisible(
    aws, processor, build_consumer, metrics, context
):
    # Given a queue whose visibility timeout (6 s) is shorter than the batch (3 records, 2.5 s each), and
    # a heartbeat every 1.2 s: the first beat may come up to 4.8 s late and still be in time. (With 3 s
    # and 0.6 s, a CI run on a loaded 2-core machine started the batch more than 2.4 s after its receive:
    # every record showed again before the first beat.)
    aws.sqs.set_queue_attributes(QueueUrl=aws.work_url, Attributes={"VisibilityTimeout": "6"})
    consumer = build_consumer(processor, visibility_timeout_seconds=6, heartbeat_fraction=0.2)
    for i in range(3):
        aws.send(order(f"o-slow-{i}", behave="slow", seconds=2.5))
    event = receive_event(aws.sqs, aws.work_url, aws.work_arn, 3)
    seen: list[dict] = []
    import threading  # noqa: PLC0415

    stop = threading.Event()

    def spy() -> None:  # another consumer polling the queue during the batch
        while not stop.is_set():
            seen.extend(
                aws.sqs.receive_message(QueueUrl=aws.work_url, MaxNumberOfMessages=10).get("Messages", [])
            )
            time.sleep(0.1)

    thread = threading.Thread(target=spy)
    thread.start()
    try:
        response = consumer.handle(event, context)  # 7.5 s > 6 s visibility
    finally:
        stop.set()
        thread.join()
    # Then no record was ever visible to the other consumer, and the heartbeat extended them
    assert failed_ids(response) == set()
    assert seen == []
    assert metrics.values["VisibilityExtended"] >= 3


def test_concurrency_4_gives_the_same_outcomes_as_concurrency_1(aws, build_consumer, context):
    behaviours = ["ok", "permanent", "transient", "ok", "crash", "ok", "retry_after", "ok", "permanent", "ok"]
    outcomes = {}
    for concurrency in (1, 4):
        # each run gets its own queues and table: a record the first run failed with a short backoff
        # must not come back into the second run's batch
        res = make_resources(suffix=f"-c{concurrency}")
        processor = ScriptedProcessor()
        consumer = build_consumer(processor, resources=res, concurrency=concurrency)
        ids = {}
        for i, behave in enumerate(behaviours):
            oid = f"o-{concurrency}-{i}"
            ids[res.send(order(oid, behave=behave, seconds=60))] = behave
        response = consumer.handle(receive_event(res.sqs, res.work_url, res.work_arn, 10), context)
        poisoned = drain(res.sqs, res.poison_url)
        outcomes[concurrency] = (
            sorted(ids[i] for i in failed_ids(response)),
            sorted(json.loads(p["Body"])["behave"] for p in poisoned),
            sorted(processor.calls.values()),
        )
    assert outcomes[1] == outcomes[4]
    assert outcomes[1][0] == ["crash", "retry_after", "transient"]
    assert outcomes[1][1] == ["permanent", "permanent"]


def test_a_batch_of_10_mixed_records_fails_exactly_the_right_ids(aws, processor, build_consumer, context):
    consumer = build_consumer(processor)
    expected_failed = set()
    plan = ["ok", "transient", "ok", "permanent", "ok", "crash", "ok", "ok", "retry_after", "ok"]
    for i, behave in enumerate(plan):
        mid = aws.send(order(f"o-m-{i}", behave=behave, seconds=30))
        if behave in {"transient", "crash", "retry_after"}:
            expected_failed.add(mid)
    response = consumer.handle(receive_event(aws.sqs, aws.work_url, aws.work_arn, 10), context)
    assert failed_ids(response) == expected_failed


# --- configuration -----------------------------------------------------------------------------


def test_a_bad_setting_fails_the_cold_start_naming_the_variable(aws, build_consumer):
    with pytest.raises(ConfigurationError, match="SLUICE_CONCURRENCY"):
        build_consumer(lambda r: None, concurrency=0)
    with pytest.raises(ConfigurationError, match="SLUICE_POISON_QUEUE_URL"):
        build_consumer(lambda r: None, poison_queue_url="not-a-url")


# --- dead-lettering with the error -------------------------------------------------------------


def test_given_the_last_receive_when_a_record_fails_then_the_consumer_dead_letters_it_with_its_error(
    aws, processor, build_consumer, metrics, context
):
    consumer = build_consumer(processor, max_receive_count=1, dead_letter_queue_url=aws.dlq_url)
    tenant = {"tenant": {"DataType": "String", "StringValue": "acme"}}
    mid = aws.send(order("o-dl", behave="transient"), MessageAttributes=tenant)
    response = consumer.handle(receive_event(aws.sqs, aws.work_url, aws.work_arn, 1), context)
    assert failed_ids(response) == set()  # reported done: Lambda deletes it from the work queue
    [dead] = drain(aws.sqs, aws.dlq_url)
    envelope = envelope_of(dead)
    assert envelope.origin_id == mid
    assert envelope.source == aws.work_arn
    assert envelope.attempts == 0  # the redriver counts the cycle, whichever path brought it
    assert envelope.last_error is not None
    assert (envelope.last_error.type, envelope.last_error.receives) == ("TransientError", 1)
    assert envelope.last_error.message == "payment gateway unavailable"
    assert envelope.first_failure == envelope.last_error.at
    assert dead["MessageAttributes"]["tenant"]["StringValue"] == "acme"
    assert json.loads(dead["Body"])["order_id"] == "o-dl"
    assert metrics.values["RecordsDeadLettered"] == 1
    assert metrics.values["RecordsFailed"] == 0


DELAY_ARN = "arn:aws:sqs:us-east-1:123456789012:delay"


def delivered_by_the_delay_pipeline(aws, body: dict, origin: str) -> str:
    """A message as the batch-delay function or the rehydrator forwards it to the work queue: its
    envelope names the delay queue, its first hop, as ``source``."""
    text = json.dumps(body)
    envelope = Envelope(origin_id=origin, source=DELAY_ARN, target=aws.work_url)
    return aws.send(
        body, MessageAttributes={ATTRIBUTE: {"DataType": "String", "StringValue": sealed(envelope, text)}}
    )


def test_given_a_delayed_message_when_its_last_receive_fails_then_its_source_is_the_queue_it_failed_on(
    aws, processor, build_consumer, context
):
    # Given a message that came through the long-delay pipeline (source: the delay queue)
    consumer = build_consumer(processor, max_receive_count=1, dead_letter_queue_url=aws.dlq_url)
    delivered_by_the_delay_pipeline(aws, order("o-late", behave="transient"), "origin-late")
    # When the consumer dead-letters it itself (SendMessage: no DeadLetterQueueSourceArn)
    consumer.handle(receive_event(aws.sqs, aws.work_url, aws.work_arn, 1), context)
    # Then its envelope names the work queue it failed on, so a redrive takes it back there
    [dead] = drain(aws.sqs, aws.dlq_url)
    envelope = envelope_of(dead)
    assert envelope.source == aws.work_arn
    assert envelope.origin_id == "origin-late"  # its identity is kept
    assert envelope.last_error is not None
    assert envelope.last_error.type == "TransientError"


def test_given_a_delayed_message_when_it_fails_permanently_then_its_poison_source_is_the_queue_it_failed_on(
    aws, processor, build_consumer, context
):
    # Given a message that came through the long-delay pipeline (source: the delay queue)
    consumer = build_consumer(processor)
    delivered_by_the_delay_pipeline(aws, order("o-late-p", behave="permanent"), "origin-late-p")
    # When the consumer isolates it
    consumer.handle(receive_event(aws.sqs, aws.work_url, aws.work_arn, 1), context)
    # Then the poison pill names the work queue, where `sluice poison replay` sends it back
    [poisoned] = drain(aws.sqs, aws.poison_url)
    envelope = envelope_of(poisoned)
    assert (envelope.source, envelope.origin_id, envelope.attempts) == (aws.work_arn, "origin-late-p", 1)


def test_given_receives_left_when_a_record_fails_then_it_is_retried_not_dead_lettered(
    aws, processor, build_consumer, context
):
    consumer = build_consumer(processor, max_receive_count=2, dead_letter_queue_url=aws.dlq_url)
    mid = aws.send(order("o-dl2", behave="transient"))
    response = consumer.handle(receive_event(aws.sqs, aws.work_url, aws.work_arn, 1), context)
    assert failed_ids(response) == {mid}
    assert drain(aws.sqs, aws.dlq_url) == []


def test_given_no_dead_letter_url_when_the_last_receive_fails_then_sqs_moves_it_as_before(
    aws, processor, build_consumer, context
):
    consumer = build_consumer(processor, max_receive_count=1)
    mid = aws.send(order("o-dl3", behave="transient"))
    response = consumer.handle(receive_event(aws.sqs, aws.work_url, aws.work_arn, 1), context)
    assert failed_ids(response) == {mid}
    assert drain(aws.sqs, aws.dlq_url) == []


def test_given_the_dead_letter_send_fails_when_the_last_receive_fails_then_the_record_is_retried(
    aws, processor, build_consumer, metrics, context
):
    consumer = build_consumer(processor, max_receive_count=1, dead_letter_queue_url=aws.dlq_url + "-missing")
    mid = aws.send(order("o-dl4", behave="transient"))
    response = consumer.handle(receive_event(aws.sqs, aws.work_url, aws.work_arn, 1), context)
    assert failed_ids(response) == {mid}  # the redrive policy still moves it, never lost
    assert metrics.values["RecordsDeadLettered"] == 0
    assert metrics.values["RecordsFailed"] == 1


# --- messages at SQS's size limit ----------------------------------------------------------------


def at_the_limit(order_id: str, behave: str) -> str:
    """An order whose body is exactly 1 MiB: SQS takes it, but not with an envelope beside it."""
    body = json.dumps(order(order_id, behave=behave, pad=""))
    return json.dumps(order(order_id, behave=behave, pad="p" * (MAX_MESSAGE_BYTES - len(body))))


def offloaded(aws, message: dict) -> str:
    [_, pointer] = json.loads(message["Body"])
    assert pointer["s3BucketName"] == aws.bucket
    assert pointer["s3Key"].startswith(aws.prefix)  # where the consumer reads claim checks
    return aws.s3.get_object(Bucket=pointer["s3BucketName"], Key=pointer["s3Key"])["Body"].read().decode()


def test_given_a_message_at_the_size_limit_when_it_fails_permanently_then_it_is_isolated_offloaded(
    aws, processor, build_consumer, metrics, context
):
    consumer = build_consumer(processor)
    body = at_the_limit("o-huge", "permanent")
    assert len(body.encode()) == MAX_MESSAGE_BYTES
    mid = aws.sqs.send_message(QueueUrl=aws.work_url, MessageBody=body)["MessageId"]
    response = consumer.handle(receive_event(aws.sqs, aws.work_url, aws.work_arn, 1), context)
    assert failed_ids(response) == set()
    [poisoned] = drain(aws.sqs, aws.poison_url)
    assert offloaded(aws, poisoned) == body  # nothing lost: the whole body is in the claim check
    assert poisoned["MessageAttributes"]["ExtendedPayloadSize"]["StringValue"] == str(MAX_MESSAGE_BYTES)
    env = envelope_of(poisoned)
    assert (env.origin_id, env.attempts) == (mid, 1)
    assert last_error_of(poisoned).type == "PermanentError"
    assert metrics.values["RecordsIsolated"] == 1


def test_given_a_message_at_the_size_limit_when_its_last_receive_fails_then_it_is_dead_lettered_offloaded(
    aws, processor, build_consumer, context
):
    consumer = build_consumer(processor, max_receive_count=1, dead_letter_queue_url=aws.dlq_url)
    body = at_the_limit("o-huge-dl", "transient")
    aws.sqs.send_message(QueueUrl=aws.work_url, MessageBody=body)
    response = consumer.handle(receive_event(aws.sqs, aws.work_url, aws.work_arn, 1), context)
    assert failed_ids(response) == set()
    [dead] = drain(aws.sqs, aws.dlq_url)
    assert offloaded(aws, dead) == body
    assert last_error_of(dead).type == "TransientError"


def test_given_an_offloaded_message_when_it_comes_back_then_the_consumer_reads_its_body(
    aws, processor, build_consumer, context
):
    consumer = build_consumer(processor, max_receive_count=1, dead_letter_queue_url=aws.dlq_url)
    body = at_the_limit("o-back", "transient")
    aws.sqs.send_message(QueueUrl=aws.work_url, MessageBody=body)
    consumer.handle(receive_event(aws.sqs, aws.work_url, aws.work_arn, 1), context)
    [dead] = drain(aws.sqs, aws.dlq_url)
    # re-driven as it lies in the DLQ: pointer body, size attribute and envelope
    aws.sqs.send_message(
        QueueUrl=aws.work_url, MessageBody=dead["Body"], MessageAttributes=dead["MessageAttributes"]
    )
    consumer.handle(receive_event(aws.sqs, aws.work_url, aws.work_arn, 1), context)
    assert [r.body for r in processor.records] == [body, body]  # the processor saw the whole body again
    assert processor.records[1].envelope.origin_id == processor.records[0].envelope.origin_id


# --- the invocation's deadline ---------------------------------------------------------------------


class ShortOnTime(LambdaContext):
    """30 s left until the processor has run once, then half a second (less than the 1 s margin)."""

    def __init__(self, processor: ScriptedProcessor) -> None:
        super().__init__(function_name="sluice-test-consumer", timeout_seconds=30)
        self.processor = processor

    def get_remaining_time_in_millis(self) -> int:
        return 500 if sum(self.processor.calls.values()) else 30_000


def test_given_too_little_time_left_then_records_not_started_are_handed_back_at_once(
    aws, processor, build_consumer, metrics
):
    # Given a batch of three whose invocation runs out of time once the first is processed, and a
    # backoff floor of 0 s (a record not started is handed back after the floor)
    consumer = build_consumer(processor, backoff_floor_seconds=0)
    ids = [aws.send(order(f"o-late-{i}")) for i in range(3)]
    event = receive_event(aws.sqs, aws.work_url, aws.work_arn, 3)
    first = event["Records"][0]["messageId"]

    # When it is consumed
    response = consumer.handle(event, ShortOnTime(processor))

    # Then the first is processed, the two not started are reported failed, counted as deferred, not as
    # failures, and visible again at once (not after the queue's visibility timeout)
    assert sum(processor.calls.values()) == 1
    assert failed_ids(response) == set(ids) - {first}
    assert metrics.values["RecordsProcessed"] == 1
    assert metrics.values["RecordsDeferred"] == 2
    assert metrics.values["RecordsFailed"] == 0
    again = aws.sqs.receive_message(QueueUrl=aws.work_url, MaxNumberOfMessages=10)["Messages"]
    assert {m["MessageId"] for m in again} == set(ids) - {first}


def test_given_too_little_time_left_on_their_last_receives_then_records_are_still_processed(
    aws, processor, build_consumer, metrics
):
    # Given three records on their last receive (a deferral would send them to the DLQ untried)
    consumer = build_consumer(processor, max_receive_count=2)
    for i in range(3):
        aws.send(order(f"o-last-{i}"))
    first_receive: set[str] = set()
    while len(first_receive) < 3:
        got = aws.sqs.receive_message(QueueUrl=aws.work_url, MaxNumberOfMessages=10, VisibilityTimeout=0)
        first_receive |= {m["MessageId"] for m in got.get("Messages", [])}
    event = receive_event(aws.sqs, aws.work_url, aws.work_arn, 3)

    # When they are consumed with too little time left after the first
    response = consumer.handle(event, ShortOnTime(processor))

    # Then every one of them went through the consumer
    assert failed_ids(response) == set()
    assert sum(processor.calls.values()) == 3
    assert metrics.values["RecordsDeferred"] == 0


def test_given_the_workloads_environment_then_the_cold_start_applies_it_or_refuses_an_override(
    aws, processor, metrics, session
):
    logger = Logger(service=f"sluice-test-{uuid.uuid4().hex}", stream=io.StringIO())
    # Given the workload's Environment as the template passes it, NAME=value a line
    environ = aws.env(workload_environment="GREETING=hello\nCARRIER_URL=https://carrier.example/?a=b")
    # When the consumer is built at cold start
    Consumer.from_env(processor, logger=logger, metrics_sink=metrics, environ=environ, session=session)
    # Then the team's code finds each variable in the environment
    assert (environ["GREETING"], environ["CARRIER_URL"]) == ("hello", "https://carrier.example/?a=b")
    # ... and one that would change a variable the function already has stops the cold start, named
    clashing = {**aws.env(workload_environment="GREETING=hello\nLOG_LEVEL=DEBUG"), "LOG_LEVEL": "INFO"}
    with pytest.raises(ConfigurationError, match="would override LOG_LEVEL"):
        Consumer.from_env(processor, logger=logger, metrics_sink=metrics, environ=clashing, session=session)
    assert "GREETING" not in clashing
