"""fit: a re-sent message made acceptable to SQS without losing anything."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from sluice.envelope import ATTRIBUTE, Envelope, ErrorInfo, split
from sluice.fit import MAX_UNKNOWN_FIELD_BYTES, UnfittableError, fit
from sluice.limits import MAX_MESSAGE_BYTES
from sluice.sqs import check_message, message_bytes

AT = datetime(2026, 11, 24, tzinfo=UTC)
ENVELOPE = Envelope(
    origin_id="m-1",
    source="arn:aws:sqs:us-east-1:123456789012:work",
    attempts=2,
    last_error=ErrorInfo.of("PermanentError", "x" * 500, at=AT, receives=3),
)


class Offloads:
    def __init__(self) -> None:
        self.bodies: list[str] = []

    def __call__(self, body: str) -> tuple[str, dict[str, Any]]:
        self.bodies.append(body)
        pointer = json.dumps(
            ["software.amazon.payloadoffloading.PayloadS3Pointer", {"s3BucketName": "b", "s3Key": "k"}]
        )
        return pointer, {
            "ExtendedPayloadSize": {"DataType": "Number", "StringValue": str(len(body.encode()))}
        }


def envelope_in(attributes: dict[str, Any]) -> Envelope:
    return Envelope.model_validate_json(attributes[ATTRIBUTE]["StringValue"])


def test_given_a_message_that_fits_when_fitted_then_nothing_changes() -> None:
    user = {"tenant": {"DataType": "String", "StringValue": "acme"}}
    fitted = fit('{"a": 1}', user, ENVELOPE, seal=None)
    assert fitted.body == '{"a": 1}'
    assert fitted.attributes["tenant"] == user["tenant"]
    assert envelope_in(fitted.attributes) == ENVELOPE
    assert fitted.changes == ()


@pytest.mark.parametrize(
    "bad",
    [
        {"StringValue": "no type"},
        {"DataType": "String", "StringValue": ""},
        {"DataType": "Number", "StringValue": "twelve"},
        {"DataType": "Binary", "BinaryValue": "not bytes"},
    ],
    ids=["no DataType", "empty value", "not a number", "binary as text"],
)
def test_given_an_attribute_sqs_refuses_when_fitted_for_the_poison_queue_then_it_travels_in_the_envelope(
    bad: dict[str, Any],
) -> None:
    user = {"ok": {"DataType": "String", "StringValue": "kept"}, "bad": bad}
    fitted = fit("{}", user, ENVELOPE, quarantine=True, seal=None)
    assert check_message(fitted.body, fitted.attributes) is None
    assert fitted.attributes["ok"] == user["ok"]
    assert "bad" not in fitted.attributes
    kept = envelope_in(fitted.attributes).refused_attributes
    assert kept is not None
    assert kept["bad"]["value"] == bad
    assert kept["bad"]["reason"]
    assert fitted.changes == (f"attribute 'bad' moved into the envelope ({kept['bad']['reason']})",)


def test_given_an_attribute_sqs_refuses_when_fitted_for_another_queue_then_it_is_unfittable() -> None:
    with pytest.raises(UnfittableError, match="type"):
        fit("{}", {"bad": {"StringValue": "no type"}}, ENVELOPE, seal=None)


def test_given_a_body_at_the_limit_when_the_envelope_is_added_then_the_body_is_offloaded() -> None:
    body = "x" * MAX_MESSAGE_BYTES  # SQS took it without attributes; the envelope no longer fits
    offload = Offloads()
    fitted = fit(body, {}, ENVELOPE, quarantine=True, offload=offload, seal=None)
    assert offload.bodies == [body]
    assert "PayloadS3Pointer" in fitted.body
    assert fitted.attributes["ExtendedPayloadSize"]["StringValue"] == str(MAX_MESSAGE_BYTES)
    assert check_message(fitted.body, fitted.attributes) is None
    assert "body offloaded to the claim check" in fitted.changes


def test_given_a_body_at_the_limit_and_nowhere_to_offload_when_fitted_then_it_is_unfittable() -> None:
    with pytest.raises(UnfittableError, match="shorter than"):
        fit("x" * MAX_MESSAGE_BYTES, {}, ENVELOPE, seal=None)


def test_given_a_body_that_fits_once_the_error_text_is_shortened_then_nothing_is_offloaded() -> None:
    room = MAX_MESSAGE_BYTES - message_bytes("", fit("{}", {}, ENVELOPE, seal=None).attributes) + 2
    body = "x" * (room + 200)  # 200 bytes over with the full error text (500 characters)
    offload = Offloads()
    fitted = fit(body, {}, ENVELOPE, offload=offload, seal=None)
    assert offload.bodies == []
    assert fitted.body == body
    error = envelope_in(fitted.attributes).last_error
    assert error is not None
    assert len(error.message) < 500
    assert error.type == "PermanentError"


def test_given_an_oversized_unknown_envelope_field_when_fitted_then_it_is_capped_with_a_marker() -> None:
    forged = Envelope.model_validate({"origin_id": "m-1", "junk": "y" * 100_000, "small": "kept"})
    fitted = fit("{}", {}, forged, seal=None)
    written = envelope_in(fitted.attributes).model_extra or {}
    assert written["junk"] == {"capped": True, "bytes": 100_002}
    assert written["small"] == "kept"
    assert len(fitted.attributes[ATTRIBUTE]["StringValue"]) < 2 * MAX_UNKNOWN_FIELD_BYTES


def test_given_ten_user_attributes_when_fitted_then_all_survive_the_round_trip() -> None:
    user = {f"a{i}": {"DataType": "String", "StringValue": str(i)} for i in range(10)}
    fitted = fit("{}", user, ENVELOPE, quarantine=True, seal=None)
    assert check_message(fitted.body, fitted.attributes) is None
    restored, envelope, problem = split(fitted.attributes, body="", seal=None)
    assert problem is None
    assert envelope is not None
    assert restored == user
