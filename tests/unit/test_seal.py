"""The envelope seal: sluice's own bookkeeping is tamper-evident, producers' fields stay settable."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from moto import mock_aws

from sluice.envelope import ATTRIBUTE, SEALED_FIELDS, Envelope, ErrorInfo, Seal, merge, split
from sluice.errors import ConfigurationError
from sluice.sealing import load_seal

KEY = b"k" * 32
OTHER = b"o" * 32
SEAL = Seal((KEY,))
BODY = '{"order_id": "o-1"}'
WHEN = datetime(2026, 11, 25, 6, 0, tzinfo=UTC)
HISTORY = Envelope(
    origin_id="m-1",
    source="arn:aws:sqs:us-east-1:123456789012:work",
    attempts=3,
    first_failure=WHEN,
    last_error=ErrorInfo.of("TransientError", "downstream 503", at=WHEN, receives=5),
    redriven_at=WHEN + timedelta(minutes=5),
    trace="Root=1-abc",
)


def _raw(attributes: dict[str, Any]) -> dict[str, Any]:
    return dict(json.loads(attributes[ATTRIBUTE]["StringValue"]))


def _with(raw: dict[str, Any]) -> dict[str, Any]:
    return {ATTRIBUTE: {"DataType": "String", "StringValue": json.dumps(raw)}}


def test_given_sealed_bookkeeping_when_read_with_the_key_then_it_is_kept_whole() -> None:
    # Given
    attributes = merge({}, HISTORY, body=BODY, seal=SEAL)

    # When
    _, env, problem = split(attributes, body=BODY, seal=SEAL)

    # Then
    assert problem is None
    assert env is not None
    assert env.model_dump(exclude={"sig"}) == HISTORY.model_dump(exclude={"sig"})
    assert str(_raw(attributes)["sig"]).startswith("hs256:")


@pytest.mark.parametrize("field", SEALED_FIELDS)
def test_given_one_sealed_field_altered_when_read_then_all_bookkeeping_is_ignored_with_a_reason(
    field: str,
) -> None:
    # Given: a producer edits one field of a genuine envelope
    raw = _raw(merge({}, HISTORY, body=BODY, seal=SEAL))
    forged: dict[str, Any] = {
        "origin_id": "someone-else",
        "source": "arn:aws:sqs:us-east-1:123456789012:other",
        "attempts": 99,
        "first_failure": "2020-01-01T00:00:00Z",
        "last_error": {**raw["last_error"], "message": "forged"},
        "redriven_at": "2099-01-01T00:00:00Z",
    }
    raw[field] = forged[field]

    # When
    _, env, problem = split(_with(raw), body=BODY, seal=SEAL)

    # Then: none of the sealed fields survive; the producer-settable trace does
    assert problem is not None
    assert "forged or altered" in problem
    assert env is not None
    assert env.attempts == 0
    assert all(getattr(env, name) in (None, 0) for name in SEALED_FIELDS)
    assert env.trace == "Root=1-abc"


def test_given_an_envelope_written_without_a_seal_when_read_then_its_bookkeeping_is_ignored() -> None:
    # Given: what any producer can write: attempts and a far-future redrive time, no sig
    raw = {"v": 1, "attempts": 7, "redriven_at": "2099-01-01T00:00:00Z", "origin_id": "victim"}

    # When
    _, env, problem = split(_with(raw), body=BODY, seal=SEAL)

    # Then: treated as absent
    assert env is None
    assert problem is not None
    assert "has no seal" in problem


def test_given_a_genuine_envelope_copied_onto_another_body_when_read_then_it_is_ignored() -> None:
    # Given: an envelope lifted from one message (e.g. read from a queue) and put on a new one:
    # it would borrow that message's identity (idempotency key) and history
    attributes = merge({}, HISTORY, body=BODY, seal=SEAL)

    # When
    _, env, problem = split(attributes, body='{"order_id": "o-2"}', seal=SEAL)

    # Then
    assert problem is not None
    assert "does not match" in problem
    assert env is not None
    assert env.origin_id is None
    assert env.attempts == 0


def test_given_a_producers_envelope_when_read_then_its_due_time_and_target_need_no_seal() -> None:
    # Given: what sluice.delay.send_delayed writes in a producer's process
    raw = {"v": 1, "deliver_at": "2026-12-01T00:00:00Z", "target": "https://sqs/q", "trace": "Root=1"}

    # When
    _, env, problem = split(_with(raw), body=BODY, seal=SEAL)

    # Then
    assert problem is None
    assert env is not None
    assert env.target == "https://sqs/q"
    assert env.deliver_at is not None


def test_given_a_key_rotation_when_read_then_the_previous_key_still_verifies_and_the_new_one_signs() -> None:
    # Given: a message sealed before the rotation
    old = merge({}, HISTORY, body=BODY, seal=Seal((OTHER,)))
    rotated = Seal((KEY, OTHER))

    # When
    _, env, problem = split(old, body=BODY, seal=rotated)
    resealed = merge({}, HISTORY, body=BODY, seal=rotated)

    # Then
    assert problem is None
    assert env is not None
    assert env.attempts == 3
    assert split(resealed, body=BODY, seal=SEAL)[2] is None  # signed with the current key


def test_given_another_stacks_key_when_read_then_the_bookkeeping_is_ignored() -> None:
    attributes = merge({}, HISTORY, body=BODY, seal=Seal((OTHER,)))

    _, env, problem = split(attributes, body=BODY, seal=SEAL)

    assert problem is not None
    assert env is not None
    assert env.attempts == 0


def test_given_no_seal_when_merged_then_a_stale_sig_is_dropped() -> None:
    # Given: an envelope read as it travels (with its seal) and re-written by a tool without the key
    env = Envelope.model_validate(_raw(merge({}, HISTORY, body=BODY, seal=SEAL)))
    assert env.sig is not None

    # When
    raw = _raw(merge({}, env, body=BODY, seal=None))

    # Then: never a sig that no longer matches what it covers; and a read drops the wire-format sig
    assert "sig" not in raw
    assert split(merge({}, HISTORY, body=BODY, seal=SEAL), body=BODY, seal=SEAL)[1] == HISTORY


def test_given_a_short_key_when_a_seal_is_made_then_it_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 32 bytes"):
        Seal((b"short",))
    assert repr(SEAL) == "Seal(keys=1)"  # never prints key material


@mock_aws
def test_given_the_stacks_secret_when_loaded_then_current_and_previous_keys_verify() -> None:
    # Given: a secret, rotated once
    client = boto3.client("secretsmanager", region_name="us-east-1")
    arn = client.create_secret(Name="envelope-key", SecretString=OTHER.decode())["ARN"]
    client.put_secret_value(SecretId=arn, SecretString=KEY.decode())

    # When
    seal = load_seal(arn, client=client)

    # Then
    assert seal.keys == (KEY, OTHER)


@mock_aws
def test_given_a_missing_or_weak_secret_when_loaded_then_the_cold_start_fails_naming_the_variable() -> None:
    client = boto3.client("secretsmanager", region_name="us-east-1")
    with pytest.raises(ConfigurationError, match="SLUICE_ENVELOPE_KEY_SECRET: cannot read"):
        load_seal("arn:aws:secretsmanager:us-east-1:123456789012:secret:missing", client=client)
    arn = client.create_secret(Name="weak", SecretString="short")["ARN"]
    with pytest.raises(ConfigurationError, match="shorter than 32 bytes"):
        load_seal(arn, client=client)


def test_given_a_binary_sluice_attribute_when_read_then_it_is_ignored_with_a_reason() -> None:
    attributes = {ATTRIBUTE: {"DataType": "Binary", "BinaryValue": b"\x00"}}

    user, env, problem = split(attributes, body=BODY, seal=SEAL)

    assert user == {}
    assert env is None
    assert problem == "ignoring the sluice attribute: it is not a String"


@pytest.mark.parametrize("sig", ["hs256:é", "hs256:\ud800", "", "hs256:" + "A" * 10_000])
def test_given_a_sig_of_any_text_when_read_then_it_is_a_mismatch_never_a_crash(sig: str) -> None:
    # Given a producer's sig that is not ASCII (compare_digest refuses non-ASCII str), or empty, or huge
    raw = _raw(merge({}, HISTORY, body=BODY, seal=SEAL))
    raw["sig"] = sig

    # When
    _, env, problem = split(_with(raw), body=BODY, seal=SEAL)

    # Then: its bookkeeping is ignored (a lone surrogate makes the whole envelope unreadable)
    assert problem is not None
    assert env is None or env.attempts == 0


def test_given_an_error_with_a_none_extra_when_sealed_then_it_verifies_after_travelling() -> None:
    # Given a last error carrying an extra field set to None (dropped from the wire form)
    error = ErrorInfo.model_validate({"type": "T", "message": "m", "at": WHEN, "detail": None})
    env = Envelope(origin_id="m-1", attempts=1, last_error=error)

    # When it travels and is read
    _, read, problem = split(merge({}, env, body=BODY, seal=SEAL), body=BODY, seal=SEAL)

    # Then the seal holds
    assert problem is None
    assert read is not None
    assert read.attempts == 1
