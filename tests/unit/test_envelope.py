"""The sluice envelope: one compact JSON message attribute carrying all of sluice's bookkeeping."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime

import pytest

from sluice.envelope import (
    ATTRIBUTE,
    MAX_ERROR_MESSAGE,
    Envelope,
    SendAttributes,
    decode,
    from_event_attributes,
    merge,
    split,
)
from sluice.errors import PermanentError, TransientError
from sluice.limits import MAX_ATTRIBUTES

WHEN = datetime(2024, 6, 1, 12, 30, tzinfo=UTC)


def _strings(count: int, prefix: str = "attr") -> SendAttributes:
    return {f"{prefix}{i:02d}": {"DataType": "String", "StringValue": f"value {i}"} for i in range(count)}


# --- encoding ----------------------------------------------------------------------------------


def test_given_an_envelope_when_encoded_then_the_json_is_compact() -> None:
    text = Envelope(origin_id="m-1", attempts=2, source="arn:aws:sqs:us-east-1:1:q").to_json()

    assert " " not in text
    assert "\n" not in text
    assert json.loads(text)["origin_id"] == "m-1"


def test_given_an_envelope_when_encoded_then_unset_fields_are_left_out() -> None:
    assert json.loads(Envelope().to_json()) == {"v": 1, "attempts": 0}


def test_given_a_full_envelope_when_encoded_and_decoded_then_it_round_trips() -> None:
    original = Envelope(
        origin_id="m-1",
        attempts=3,
        first_failure=WHEN,
        trace="Root=1-abc;Parent=def;Sampled=1",
        deliver_at=WHEN,
        source="arn:aws:sqs:us-east-1:123456789012:work",
    ).failed(TransientError("downstream down"), receives=3)

    decoded, problem = decode(original.to_json())

    assert problem is None
    assert decoded == original


def test_given_fields_from_a_newer_sluice_when_decoded_and_reencoded_then_they_are_kept() -> None:
    raw = json.dumps(
        {
            "v": 1,
            "origin_id": "m-1",
            "future_field": {"nested": [1, 2]},
            "last_error": {"type": "X", "message": "m", "at": "2024-06-01T12:30:00Z", "hint": "new"},
        }
    )

    decoded, problem = decode(raw)

    assert problem is None
    assert decoded is not None
    again = json.loads(decoded.to_json())
    assert again["future_field"] == {"nested": [1, 2]}
    assert again["last_error"]["hint"] == "new"


def test_given_no_attribute_when_decoded_then_there_is_neither_envelope_nor_problem() -> None:
    assert decode(None) == (None, None)


@pytest.mark.parametrize("version", [0, 2, "1", None])
def test_given_a_version_other_than_one_when_decoded_then_a_problem_is_reported(version: object) -> None:
    envelope, problem = decode(json.dumps({"v": version, "origin_id": "m-1"}))

    assert envelope is None
    assert problem is not None
    assert "v" in problem


@pytest.mark.parametrize(
    "raw",
    ["", "{", "not json", "null", "[]", '"text"', '{"attempts": -1}', '{"attempts": "many"}', "[" * 100_000],
)
def test_given_a_corrupt_attribute_when_decoded_then_a_problem_is_returned_not_raised(raw: str) -> None:
    envelope, problem = decode(raw)

    assert envelope is None
    assert problem is not None
    assert problem.startswith("ignoring unreadable sluice envelope")


# --- failures ----------------------------------------------------------------------------------


def test_given_a_fresh_envelope_when_failed_then_attempts_and_first_failure_are_set() -> None:
    failed = Envelope(origin_id="m-1").failed(PermanentError("bad order"), receives=1)

    assert failed.attempts == 1
    assert failed.first_failure is not None
    assert failed.last_error is not None
    assert failed.last_error.type == "PermanentError"
    assert failed.last_error.message == "bad order"
    assert failed.last_error.receives == 1
    assert failed.first_failure == failed.last_error.at


def test_given_a_failed_envelope_when_failed_again_then_attempts_grow_and_first_failure_is_kept() -> None:
    first = Envelope(first_failure=WHEN, attempts=4)

    again = first.failed(TransientError("timeout")).failed(ValueError("boom"))

    assert again.attempts == 6
    assert again.first_failure == WHEN
    assert again.last_error is not None
    assert again.last_error.type == "ValueError"
    assert again.last_error.at > WHEN


def test_given_an_envelope_when_failed_then_the_original_is_unchanged() -> None:
    original = Envelope(origin_id="m-1")

    original.failed(TransientError("x"))

    assert original.attempts == 0
    assert original.last_error is None


def test_given_a_long_error_message_when_failed_then_it_is_truncated_to_the_maximum() -> None:
    failed = Envelope().failed(PermanentError("x" * 10_000))

    assert failed.last_error is not None
    assert len(failed.last_error.message) == MAX_ERROR_MESSAGE
    assert failed.last_error.message.endswith("…")
    assert decode(failed.to_json())[0] == failed


def test_given_a_message_of_exactly_the_maximum_when_failed_then_it_is_kept_whole() -> None:
    failed = Envelope().failed(PermanentError("y" * MAX_ERROR_MESSAGE))

    assert failed.last_error is not None
    assert failed.last_error.message == "y" * MAX_ERROR_MESSAGE


def test_given_an_exception_without_message_when_failed_then_its_class_name_is_the_message() -> None:
    failed = Envelope().failed(TimeoutError())

    assert failed.last_error is not None
    assert failed.last_error.message == "TimeoutError"


# --- attribute shapes --------------------------------------------------------------------------


def test_given_lambda_event_attributes_when_converted_then_they_have_the_send_message_shape() -> None:
    event = {
        "tenant": {
            "stringValue": "acme",
            "stringListValues": [],
            "binaryListValues": [],
            "dataType": "String",
        },
        "amount": {
            "stringValue": "12.50",
            "stringListValues": [],
            "binaryListValues": [],
            "dataType": "Number",
        },
        "blob": {
            "binaryValue": base64.b64encode(b"\x00\xffraw").decode(),
            "stringListValues": [],
            "binaryListValues": [],
            "dataType": "Binary",
        },
        "kind": {"stringValue": "gold", "dataType": "String.tier"},
    }

    assert from_event_attributes(event) == {
        "tenant": {"DataType": "String", "StringValue": "acme"},
        "amount": {"DataType": "Number", "StringValue": "12.50"},
        "blob": {"DataType": "Binary", "BinaryValue": b"\x00\xffraw"},
        "kind": {"DataType": "String.tier", "StringValue": "gold"},
    }


def test_given_send_message_shaped_attributes_when_converted_then_they_are_unchanged() -> None:
    attributes = {
        "n": {"DataType": "Number", "StringValue": "7"},
        "b": {"DataType": "Binary", "BinaryValue": b"\x01\x02"},
    }

    assert from_event_attributes(attributes) == attributes


def test_given_no_attributes_when_converted_then_the_result_is_empty() -> None:
    assert from_event_attributes(None) == {}
    assert from_event_attributes({}) == {}


def test_given_few_user_attributes_when_merged_then_they_are_untouched_beside_one_envelope() -> None:
    user: SendAttributes = {**_strings(3), "bin": {"DataType": "Binary", "BinaryValue": b"\x00\x01"}}
    envelope = Envelope(origin_id="m-1")

    merged = merge(user, envelope, body="", seal=None)

    assert {k: v for k, v in merged.items() if k != ATTRIBUTE} == user
    assert merged[ATTRIBUTE] == {"DataType": "String", "StringValue": envelope.to_json()}
    assert "displaced" not in json.loads(merged[ATTRIBUTE]["StringValue"])


@pytest.mark.parametrize("count", [0, 1, 9, 10, 14])
def test_given_user_attributes_when_merged_then_sqs_limit_holds_and_split_restores_them(count: int) -> None:
    user = _strings(count)
    if count:
        user["attr00"] = {"DataType": "Binary", "BinaryValue": b"\x00\xfe\xff"}
        user[f"zz{count}"] = {"DataType": "Binary", "BinaryValue": b"\x80binary tail"}
    envelope = Envelope(origin_id="m-1", attempts=2)

    merged = merge(user, envelope, body="", seal=None)
    restored, decoded, problem = split(merged, body="", seal=None)

    assert len(merged) <= MAX_ATTRIBUTES
    assert list(merged).count(ATTRIBUTE) == 1
    assert problem is None
    assert restored == user
    assert decoded is not None
    assert decoded.origin_id == "m-1"
    assert decoded.attempts == 2


def test_given_ten_user_attributes_when_merged_then_exactly_one_travels_displaced() -> None:
    merged = merge(_strings(10), Envelope(), body="", seal=None)

    displaced = json.loads(merged[ATTRIBUTE]["StringValue"])["displaced"]
    assert list(displaced) == ["attr09"]
    assert "attr09" not in merged


def test_given_a_displaced_message_when_it_hops_again_then_the_envelope_is_not_nested_or_duplicated() -> None:
    user: SendAttributes = {**_strings(12), "zbin": {"DataType": "Binary", "BinaryValue": b"\x00\x01"}}
    merged = merge(user, Envelope(origin_id="m-1"), body="", seal=None)

    for hop in range(3):
        restored, envelope, _ = split(merged, body="", seal=None)
        assert envelope is not None
        merged = merge(restored, envelope.failed(TransientError(f"hop {hop}")), body="", seal=None)

    final_user, final_envelope, _ = split(merged, body="", seal=None)
    assert final_user == user
    assert ATTRIBUTE not in final_user
    assert final_envelope is not None
    assert final_envelope.attempts == 3
    assert final_envelope.displaced is not None
    assert ATTRIBUTE not in final_envelope.displaced
    assert len(merged[ATTRIBUTE]["StringValue"]) == len(
        merge(user, final_envelope, body="", seal=None)[ATTRIBUTE]["StringValue"]
    )


def test_given_a_displaced_envelope_when_few_attributes_remain_then_displaced_is_cleared() -> None:
    stale = Envelope(displaced={"gone": {"DataType": "String", "StringValue": "old"}})

    merged = merge(_strings(2), stale, body="", seal=None)

    assert "displaced" not in json.loads(merged[ATTRIBUTE]["StringValue"])
    assert split(merged, body="", seal=None)[0] == _strings(2)


def test_given_stale_displaced_attributes_when_merged_and_split_then_exactly_the_new_ones_return() -> None:
    earlier = Envelope(displaced={"zz-removed": {"DataType": "String", "StringValue": "stale"}})
    user = _strings(10)

    restored, _, _ = split(merge(user, earlier, body="", seal=None), body="", seal=None)

    assert restored == user


def test_given_user_attributes_holding_an_old_envelope_when_merged_then_only_the_new_one_travels() -> None:
    user = _strings(10)
    with_old_envelope = {
        **user,
        ATTRIBUTE: {"DataType": "String", "StringValue": Envelope(origin_id="old").to_json()},
    }

    merged = merge(with_old_envelope, Envelope(origin_id="new"), body="", seal=None)
    restored, envelope, _ = split(merged, body="", seal=None)

    assert envelope is not None
    assert envelope.origin_id == "new"
    assert ATTRIBUTE not in restored
    assert restored == user


def test_given_a_corrupt_envelope_when_split_then_user_attributes_survive_with_a_problem() -> None:
    attributes = {**_strings(2), ATTRIBUTE: {"DataType": "String", "StringValue": "{corrupt"}}

    user, envelope, problem = split(attributes, body="", seal=None)

    assert user == _strings(2)
    assert envelope is None
    assert problem is not None
