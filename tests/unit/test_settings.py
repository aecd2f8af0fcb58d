"""ConsumerSettings.from_env: defaults, parsing, and errors that name the SLUICE_ variable."""

from __future__ import annotations

import pytest

from sluice.consumer.settings import ConsumerSettings
from sluice.errors import ConfigurationError
from tests.conftest import ENVELOPE_KEY_ARN

POISON_URL = "https://sqs.us-east-1.amazonaws.com/123456789012/poison"
REQUIRED = {
    "SLUICE_IDEMPOTENCY_TABLE": "idempotency",
    "SLUICE_POISON_QUEUE_URL": POISON_URL,
    "SLUICE_ENVELOPE_KEY_SECRET": ENVELOPE_KEY_ARN,
}


def _settings(**overrides: str) -> ConsumerSettings:
    return ConsumerSettings.from_env({**REQUIRED, **overrides})


def test_given_only_required_variables_when_read_then_the_defaults_apply() -> None:
    settings = _settings()

    assert settings.idempotency_table == "idempotency"
    assert settings.poison_queue_url == POISON_URL
    assert settings.claim_check_buckets == ()
    assert (
        settings.claim_check_prefix == ""
    )  # any key in the allowed buckets: the Extended Clients write at the root
    assert settings.max_receive_count == 5
    assert settings.backoff_base_seconds == 2.0
    assert settings.backoff_cap_seconds == 300.0
    assert settings.backoff_floor_seconds == 1.0
    assert settings.visibility_timeout_seconds == 180
    assert settings.batch_window_seconds == 0
    assert settings.heartbeat_fraction == 0.5
    assert settings.concurrency == 1
    assert settings.idempotency_key_jmespath == ""
    assert settings.idempotency_key_missing == "poison"
    assert settings.idempotency_ttl_seconds == 14 * 24 * 3600


def test_given_string_values_when_read_then_they_are_converted_to_their_types() -> None:
    settings = _settings(
        SLUICE_VISIBILITY_TIMEOUT_SECONDS="360",
        SLUICE_BACKOFF_BASE_SECONDS="0.5",
        SLUICE_CONCURRENCY="8",
        SLUICE_IDEMPOTENCY_KEY_JMESPATH="order.id",
    )

    assert settings.visibility_timeout_seconds == 360
    assert settings.backoff_base_seconds == 0.5
    assert settings.concurrency == 8
    assert settings.idempotency_key_jmespath == "order.id"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("claims", ("claims",)),
        ("a,b", ("a", "b")),
        (" a , b ,, c ,", ("a", "b", "c")),
        ("", ()),
    ],
)
def test_given_a_csv_bucket_list_when_read_then_it_becomes_a_tuple_of_names(
    raw: str, expected: tuple[str, ...]
) -> None:
    assert _settings(SLUICE_CLAIM_CHECK_BUCKETS=raw).claim_check_buckets == expected


def test_given_unrelated_variables_when_read_then_they_are_ignored() -> None:
    settings = _settings(SLUICE_SOMETHING_ELSE="x", PATH="/usr/bin")

    assert settings.concurrency == 1


def test_given_settings_when_read_then_they_are_immutable() -> None:
    settings = _settings()

    with pytest.raises(ValueError, match="frozen"):
        settings.concurrency = 4


def test_given_no_idempotency_table_when_read_then_the_error_names_the_variable() -> None:
    with pytest.raises(ConfigurationError, match="SLUICE_IDEMPOTENCY_TABLE"):
        ConsumerSettings.from_env({"SLUICE_POISON_QUEUE_URL": POISON_URL})


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("SLUICE_CONCURRENCY", "0"),
        ("SLUICE_CONCURRENCY", "65"),
        ("SLUICE_CONCURRENCY", "many"),
        ("SLUICE_HEARTBEAT_FRACTION", "1.5"),
        ("SLUICE_HEARTBEAT_FRACTION", "0"),
        ("SLUICE_POISON_QUEUE_URL", "poison"),
        ("SLUICE_POISON_QUEUE_URL", "arn:aws:sqs:us-east-1:123456789012:poison"),
        ("SLUICE_IDEMPOTENCY_TABLE", "ab"),
        ("SLUICE_VISIBILITY_TIMEOUT_SECONDS", "43201"),
        ("SLUICE_BACKOFF_BASE_SECONDS", "0"),
        ("SLUICE_MAX_RECEIVE_COUNT", "0"),
        ("SLUICE_IDEMPOTENCY_TTL_SECONDS", "59"),
        ("SLUICE_IDEMPOTENCY_KEY_MISSING", "fallback"),
    ],
)
def test_given_a_bad_value_when_read_then_the_error_names_the_variable(variable: str, value: str) -> None:
    with pytest.raises(ConfigurationError, match=variable):
        _settings(**{variable: value})


def test_given_a_floor_above_the_cap_when_read_then_the_error_names_both_variables() -> None:
    with pytest.raises(ConfigurationError) as raised:
        _settings(SLUICE_BACKOFF_FLOOR_SECONDS="60", SLUICE_BACKOFF_CAP_SECONDS="30")

    assert "SLUICE_BACKOFF_FLOOR_SECONDS" in str(raised.value)
    assert "SLUICE_BACKOFF_CAP_SECONDS" in str(raised.value)


def test_given_a_floor_equal_to_the_cap_when_read_then_it_is_accepted() -> None:
    settings = _settings(SLUICE_BACKOFF_FLOOR_SECONDS="30", SLUICE_BACKOFF_CAP_SECONDS="30")

    assert settings.backoff_floor_seconds == settings.backoff_cap_seconds == 30


def test_given_a_prefix_starting_with_a_slash_when_read_then_the_error_names_the_variable() -> None:
    with pytest.raises(ConfigurationError, match="SLUICE_CLAIM_CHECK_PREFIX"):
        _settings(SLUICE_CLAIM_CHECK_PREFIX="/claim-check/")


def test_given_several_bad_values_when_read_then_every_variable_is_named() -> None:
    with pytest.raises(ConfigurationError) as raised:
        ConsumerSettings.from_env({"SLUICE_CONCURRENCY": "0"})

    message = str(raised.value)
    for variable in ("SLUICE_IDEMPOTENCY_TABLE", "SLUICE_POISON_QUEUE_URL", "SLUICE_CONCURRENCY"):
        assert variable in message


def test_given_an_invalid_key_expression_when_read_then_the_error_names_the_variable() -> None:
    with pytest.raises(ConfigurationError, match=r"SLUICE_IDEMPOTENCY_KEY_JMESPATH: .*not a valid JMESPath"):
        _settings(SLUICE_IDEMPOTENCY_KEY_JMESPATH="order_id[")


def test_given_a_valid_key_expression_when_read_then_it_is_kept() -> None:
    settings = _settings(SLUICE_IDEMPOTENCY_KEY_JMESPATH="detail.order_id")
    assert settings.idempotency_key_jmespath == "detail.order_id"


@pytest.mark.parametrize("outcome", ["poison", "message-identity"])
def test_given_an_outcome_for_a_missing_key_when_read_then_it_is_kept(outcome: str) -> None:
    # Given SLUICE_IDEMPOTENCY_KEY_MISSING set to one of its outcomes, When read, Then it is that outcome
    assert _settings(SLUICE_IDEMPOTENCY_KEY_MISSING=outcome).idempotency_key_missing == outcome
