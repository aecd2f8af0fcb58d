"""A workload's extra variables (workloads.yaml's ``Environment``, ``SLUICE_WORKLOAD_ENVIRONMENT``): parsed
into variables, put in the environment, and never overriding one of sluice's, Powertools', Lambda's or
one the function already has."""

from __future__ import annotations

import pytest

from sluice.consumer.settings import ConsumerSettings
from sluice.errors import ConfigurationError
from sluice.workload_environment import VARIABLE, apply, parse
from tests.unit.test_settings import REQUIRED


def test_given_name_value_lines_then_each_is_a_variable_and_a_value_may_hold_equals_signs() -> None:
    text = "CARRIER_URL=https://carrier.example/rates?from=eu&to=us\n\nGREETING=\ncarrier_timeout=5"
    assert parse(text) == {
        "CARRIER_URL": "https://carrier.example/rates?from=eu&to=us",
        "GREETING": "",
        "carrier_timeout": "5",
    }
    assert parse("") == {}


@pytest.mark.parametrize(
    ("entry", "said"),
    [
        ("SLUICE_IDEMPOTENCY_TABLE=mine", "SLUICE_IDEMPOTENCY_TABLE is reserved"),
        ("SLUICE_HEARTBEAT_FRACTION=0.9", "SLUICE_HEARTBEAT_FRACTION is reserved"),  # unset, still sluice's
        ("POWERTOOLS_SERVICE_NAME=other", "POWERTOOLS_SERVICE_NAME is reserved"),
        ("AWS_REGION=eu-west-1", "AWS_REGION is reserved"),
        ("LAMBDA_TASK_ROOT=/tmp", "LAMBDA_TASK_ROOT is reserved"),
        ("_HANDLER=x.y", "_HANDLER is reserved"),
        ("sluice_lower=1", "sluice_lower is reserved"),
        ("NO_EQUALS_SIGN", "'NO_EQUALS_SIGN' is not NAME=value"),
        ("1ST=x", "'1ST=x' is not NAME=value"),
        ("A-B=x", "'A-B=x' is not NAME=value"),
        ("TWICE=1\nTWICE=2", "TWICE is given twice"),
    ],
)
def test_given_a_reserved_or_malformed_entry_then_it_is_refused_by_name(entry: str, said: str) -> None:
    with pytest.raises(ConfigurationError, match=VARIABLE) as refused:
        parse(entry)
    assert said in str(refused.value)


def test_given_a_variable_the_function_has_then_another_value_is_refused_and_nothing_applied() -> None:
    environ = {"LOG_LEVEL": "INFO", "LEDGER_TABLE_NAME": "ledger", VARIABLE: "GREETING=hi\nLOG_LEVEL=DEBUG"}
    with pytest.raises(ConfigurationError, match=r"would override LOG_LEVEL, already set"):
        apply(environ)
    assert "GREETING" not in environ  # all or nothing
    assert environ["LOG_LEVEL"] == "INFO"


def test_given_the_workloads_variables_then_they_are_applied_and_applying_again_changes_nothing() -> None:
    environ = {"LOG_LEVEL": "INFO", VARIABLE: "GREETING=hi\nLOG_LEVEL=INFO"}  # the same value: no override
    assert apply(environ) == {"GREETING": "hi", "LOG_LEVEL": "INFO"}
    assert apply(environ) == {"GREETING": "hi", "LOG_LEVEL": "INFO"}
    assert environ == {"LOG_LEVEL": "INFO", VARIABLE: "GREETING=hi\nLOG_LEVEL=INFO", "GREETING": "hi"}


def test_given_a_reserved_name_in_the_consumers_settings_then_the_cold_start_fails_naming_it() -> None:
    with pytest.raises(ConfigurationError, match="SLUICE_MAX_RECEIVE_COUNT is reserved"):
        ConsumerSettings.from_env({**REQUIRED, VARIABLE: "SLUICE_MAX_RECEIVE_COUNT=1"})
    settings = ConsumerSettings.from_env({**REQUIRED, VARIABLE: "GREETING=hi"})
    assert settings.workload_environment == "GREETING=hi"
