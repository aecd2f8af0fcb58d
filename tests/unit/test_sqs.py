"""queue_url_from_arn: the queue URL for an event source ARN."""

from __future__ import annotations

import pytest

from sluice.sqs import queue_url_from_arn


@pytest.mark.parametrize(
    ("arn", "url"),
    [
        (
            "arn:aws:sqs:eu-west-1:123456789012:work",
            "https://sqs.eu-west-1.amazonaws.com/123456789012/work",
        ),
        (
            "arn:aws:sqs:us-east-1:123456789012:orders.fifo",
            "https://sqs.us-east-1.amazonaws.com/123456789012/orders.fifo",
        ),
        (
            "arn:aws-cn:sqs:cn-north-1:123456789012:work",
            "https://sqs.cn-north-1.amazonaws.com.cn/123456789012/work",
        ),
        (
            "arn:aws-us-gov:sqs:us-gov-west-1:123456789012:work",
            "https://sqs.us-gov-west-1.amazonaws.com/123456789012/work",
        ),
    ],
)
def test_given_a_queue_arn_when_no_endpoint_is_known_then_the_public_url_is_built(arn: str, url: str) -> None:
    assert queue_url_from_arn(arn) == url


@pytest.mark.parametrize(
    "endpoint",
    ["http://localhost:4566", "http://localhost:4566/", "https://vpce-1.sqs.eu-west-1.vpce.amazonaws.com"],
)
def test_given_a_custom_endpoint_when_building_then_the_url_uses_it(endpoint: str) -> None:
    url = queue_url_from_arn("arn:aws:sqs:eu-west-1:123456789012:work", endpoint=endpoint)

    assert url == endpoint.rstrip("/") + "/123456789012/work"


def test_given_an_empty_endpoint_when_building_then_the_public_url_is_used() -> None:
    url = queue_url_from_arn("arn:aws:sqs:eu-west-1:123456789012:work", endpoint="")

    assert url == "https://sqs.eu-west-1.amazonaws.com/123456789012/work"


@pytest.mark.parametrize(
    "arn",
    [
        "",
        "work",
        "https://sqs.eu-west-1.amazonaws.com/123456789012/work",
        "arn:aws:sns:eu-west-1:123456789012:topic",
        "arn:aws:sqs:eu-west-1:123456789012",
        "arn:aws:sqs:eu-west-1:123456789012:work:extra",
        "urn:aws:sqs:eu-west-1:123456789012:work",
    ],
)
def test_given_something_other_than_a_queue_arn_when_building_then_it_is_rejected(arn: str) -> None:
    with pytest.raises(ValueError, match="not an SQS queue ARN"):
        queue_url_from_arn(arn)


@pytest.mark.parametrize(
    "arn",
    [
        "arn:aws:sqs:eu-west-1:123456789012:",
        "arn:aws:sqs:eu-west-1::work",
        "arn:aws:sqs::123456789012:work",
    ],
)
def test_given_a_queue_arn_with_an_empty_part_when_building_then_it_is_rejected(arn: str) -> None:
    with pytest.raises(ValueError, match="not an SQS queue ARN"):
        queue_url_from_arn(arn)
