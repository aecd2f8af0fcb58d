"""The test kit's direct ways (docs/testing.md "Call your handler directly", "Test your processor alone"):
the Refunds example's handler started in a ``consumer_world`` and its processor given ``sluice_record``s,
as a team tests its own workload."""

from __future__ import annotations

import json
import os
import sys
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from aws_lambda_powertools import Logger, Metrics
from pydantic import ValidationError

from sluice.consumer import Consumer
from sluice.errors import PermanentError
from sluice_local.testing import (
    EffectLog,
    consumer_world,
    lambda_context,
    sluice_record,
    sqs_event,
    sqs_record,
)
from tests.conftest import create_ledger_table

ROOT = Path(__file__).resolve().parents[2]
REFUNDS = ROOT / "examples" / "refunds"
NOW = datetime.now(UTC)


def refund(refund_id: str, **extra: object) -> dict[str, object]:
    return {"refund_id": refund_id, "order_id": "o-1", "amount_cents": 500, "currency": "EUR", **extra}


def test_a_handler_started_in_a_consumer_world_processes_dedups_and_isolates() -> None:
    # Given the Refunds handler, started where its consumer finds everything the template gives it
    with consumer_world(key_path="refund_id", settings={"LEDGER_TABLE_NAME": "ledger"}) as world:
        create_ledger_table(world.client("dynamodb"), "ledger")
        handler = world.load(REFUNDS)
        # When a batch holds a refund, its redelivery under another message id, a fraud and a non-JSON body
        event = world.event(
            world.record(refund("r-1"), message_id="m-1"),
            world.record(refund("r-1"), message_id="m-2"),
            world.record(refund("r-2", reason="fraud"), message_id="m-3"),
            world.record("not json", message_id="m-4"),
        )
        assert {r["eventSourceARN"] for r in event["Records"]} == {world.queue_arn}
        response = handler(event, lambda_context("consumer", timeout_seconds=30))
        # Then nothing is retried, the money is repaid once, and both bad records are isolated with reasons
        assert response == {"batchItemFailures": []}
        items = world.client("dynamodb").scan(TableName="ledger")["Items"]
        assert [item["effect_key"]["S"] for item in items] == ["refund:r-1#repay"]
        poisoned = {ended.origin_id: ended for ended in world.poisoned()}
        assert set(poisoned) == {"m-3", "m-4"}
        assert "fraud" in poisoned["m-3"].reason
        assert poisoned["m-4"].error_type == "PermanentError"
        assert "JSON" in poisoned["m-4"].reason
        assert world.dead_lettered() == []
        assert len(world.poisoned()) == 2, "a look leaves the messages where they are"


def test_a_body_without_the_key_is_isolated_as_the_workload_says() -> None:
    with consumer_world(key_path="refund_id", settings={"LEDGER_TABLE_NAME": "ledger"}) as world:
        create_ledger_table(world.client("dynamodb"), "ledger")
        handler = world.load(REFUNDS)
        body = {"order_id": "o-1", "amount_cents": 5, "currency": "EUR", "refund_id": ""}
        handler(sqs_event(sqs_record(body, message_id="m-9")), lambda_context("consumer"))
        (ended,) = world.poisoned()
        assert ended.origin_id == "m-9"
        assert "refund_id" in ended.reason


def test_the_world_puts_the_environment_back() -> None:
    before = dict(os.environ)
    with consumer_world(key_path="id", settings={"MY_SETTING": "1"}) as world:
        assert os.environ["MY_SETTING"] == "1"
        assert os.environ["SLUICE_SOURCE_QUEUE_URL"] == world.queue_url
    assert dict(os.environ) == before


class FakeDynamoDB:
    def __init__(self) -> None:
        self.items: list[dict[str, object]] = []

    def put_item(self, **kwargs: object) -> None:
        self.items.append(kwargs)


def example_processor() -> ModuleType:
    """The Refunds example's processor.py, imported as a team imports its own (its folder on the path)."""
    sys.path.insert(0, str(REFUNDS))
    try:
        sys.modules.pop("processor", None)
        return __import__("processor")
    finally:
        sys.path.remove(str(REFUNDS))
        sys.modules.pop("processor", None)


def test_a_processor_alone_runs_each_side_effect_once_per_key() -> None:
    processor = example_processor()
    dynamodb = FakeDynamoDB()
    refunds = processor.Refunds("ledger", dynamodb)
    effects = EffectLog()
    # When the same refund arrives twice (a redelivery: same key, another message)
    for message_id in ("m-1", "m-2"):
        record = sluice_record(
            refund("r-1"),
            model=processor.Refund,
            key_path="refund_id",
            message_id=message_id,
            effects=effects,
        )
        refunds.process(record)
    # Then it is repaid once, under the key the consumer would give it
    assert effects.ran == [('body:"r-1"', "repay")]
    assert len(dynamodb.items) == 1
    # And a fraud is a permanent error; a body the model refuses fails where the consumer would isolate it
    with pytest.raises(PermanentError, match="fraud"):
        refunds.process(sluice_record(refund("r-2", reason="fraud"), model=processor.Refund))
    with pytest.raises(ValidationError):
        sluice_record({"refund_id": "r-3"}, model=processor.Refund)
    # And the keys are the consumer's: by the key path's JSON value, else by the message's identity
    assert sluice_record({"n": 42}, key_path="n").idempotency_key == "body:42"
    assert sluice_record({"n": 42}, message_id="m-7").idempotency_key == "msg:m-7"
    with pytest.raises(ValueError, match="finds nothing"):
        sluice_record({"n": ""}, key_path="n")


def test_an_effects_first_run_gets_its_own_result_and_a_repeat_the_stored_json_as_powertools_gives() -> None:
    # Given an effect whose result JSON changes (a tuple comes back a list), as record.once stores it
    effects = EffectLog()
    key = json.dumps(["body:1", "charge"])
    # When it runs, then runs again under the same key
    first = effects.once(key, lambda: ("ch-1", 200))
    again = effects.once(key, lambda: pytest.fail("a repeat must not run the effect"))
    # Then the first run got its own object back, the repeat what was stored, and it ran once
    assert first == ("ch-1", 200)
    assert again == ["ch-1", 200]
    assert effects.ran == [("body:1", "charge")]
    # And a result that is not JSON fails where the store would refuse it
    with pytest.raises(TypeError):
        effects.once(json.dumps(["body:2", "charge"]), object)


def test_record_later_is_recorded_alone_and_sent_to_the_delay_queue_in_a_world() -> None:
    effects = EffectLog()
    record = sluice_record({"id": "a"}, effects=effects)
    record.later("follow-up", delay_seconds=3 * 86400)
    assert [(d.body, d.delay_seconds) for d in effects.delayed] == [("follow-up", 3 * 86400)]

    with consumer_world(key_path="id") as world:
        consumer = Consumer.from_env(
            lambda r: r.later(json.dumps({"id": "b"}), delay_seconds=3600),
            logger=Logger(),
            metrics_sink=Metrics(),
        )
        event = sqs_event(sqs_record({"id": "a"}, queue_arn=world.queue_arn))
        consumer.handle(event, lambda_context("consumer"))
        (delayed,) = world.delayed()
        assert json.loads(delayed.body) == {"id": "b"}
        assert delayed.envelope is not None
        assert delayed.envelope.deliver_at is not None
        assert delayed.envelope.target == world.queue_url


@pytest.mark.parametrize(
    "asked",
    [
        {},
        {"delay_seconds": 10**9},
        {"deliver_at": datetime(2030, 1, 1)},
        {"delay_seconds": 1, "deliver_at": NOW},
    ],
)
def test_record_later_alone_refuses_what_the_real_one_refuses(asked: dict[str, Any]) -> None:
    effects = EffectLog()
    with pytest.raises(ValueError):  # noqa: PT011 - the message is send_delayed's own
        sluice_record({"id": "a"}, effects=effects).later("x", **asked)
    assert effects.delayed == []
