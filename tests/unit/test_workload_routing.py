"""One allowlist entry for every workload queue the stack creates (``<stack>-*-work``), and one breaker
per workload: what a workload's redrive and the delay pipeline read."""

from __future__ import annotations

import pytest

from sluice.redrive.breaker import DEFAULT_NAME
from sluice.redrive.settings import BreakerSettings
from sluice.sqs import allowlisted

PATTERN = "arn:aws:sqs:us-east-1:123456789012:shop-*-work"


@pytest.mark.parametrize(
    ("reference", "allowed"),
    [
        ("arn:aws:sqs:us-east-1:123456789012:shop-Orders-work", True),
        ("https://sqs.us-east-1.amazonaws.com/123456789012/shop-Refunds-work", True),
        ("arn:aws:sqs:us-east-1:123456789012:shop-Orders-dlq", False),  # a DLQ is never a target
        ("arn:aws:sqs:us-east-1:123456789012:shop-poison", False),
        ("arn:aws:sqs:us-east-1:123456789012:shop-delay", False),
        ("arn:aws:sqs:us-east-1:210987654321:shop-Orders-work", False),  # another account
        ("arn:aws:sqs:eu-west-1:123456789012:shop-Orders-work", False),  # another region
        ("arn:aws:sqs:us-east-1:123456789012:other-Orders-work", False),  # another stack
        ("arn:aws:sqs:us-east-1:123456789012:shop-dev-Orders-work", False),  # another stack named shop-…
        ("arn:aws:sqs:us-east-1:123456789012:shop--work", False),  # no workload name at all
    ],
)
def test_given_the_stacks_queue_pattern_then_only_its_workload_queues_are_allowed(reference, allowed) -> None:
    assert allowlisted(reference, [PATTERN]) is allowed


def test_given_an_exact_entry_then_a_star_in_a_reference_matches_nothing_else() -> None:
    assert not allowlisted(
        "arn:aws:sqs:us-east-1:123456789012:shop-*-work", ["arn:aws:sqs:us-east-1:123456789012:x"]
    )


def test_given_a_workload_then_its_breaker_is_its_own_item_and_the_default_stays_redrive() -> None:
    assert BreakerSettings.from_env({"SLUICE_BREAKER_TABLE": "t-b"}).breaker_name == DEFAULT_NAME == "redrive"
    named = BreakerSettings.from_env({"SLUICE_BREAKER_TABLE": "t-b", "SLUICE_BREAKER_NAME": "Refunds"})
    assert named.breaker_name == "Refunds"
