"""``up --existing-queue NAME[:SECONDS]``: a queue the account has before the deploy (docs/local.md)."""

from __future__ import annotations

import pytest
from moto import mock_aws

from sluice_local.__main__ import main
from sluice_local.emulation.existing import ExistingQueue


@pytest.mark.parametrize(
    ("spec", "name", "visibility"),
    [("invoices", "invoices", None), ("invoices:5", "invoices", 5), ("a_b-1:43200", "a_b-1", 43200)],
)
def test_a_name_and_an_optional_visibility(spec, name, visibility):
    queue = ExistingQueue.parse(spec)
    assert (queue.name, queue.visibility) == (name, visibility)


@pytest.mark.parametrize(
    "spec", ["", "inv:", "inv:x", "inv:43201", "a.b", "x" * 81, "inv:5:6", "arn:aws:sqs"]
)
def test_anything_else_is_refused_saying_what_is_taken(spec):
    with pytest.raises(ValueError, match="NAME or NAME:VISIBILITY"):
        ExistingQueue.parse(spec)


def test_up_refuses_a_bad_one_before_deploying_anything(capsys):
    with pytest.raises(SystemExit, match="--existing-queue 'inv:x'"):
        main(["up", "--existing-queue", "inv:x"])


class _Cloud:
    def __init__(self, sqs: object) -> None:
        self._sqs = sqs

    def client(self, service: str) -> object:
        assert service == "sqs"
        return self._sqs


def test_attached_it_is_created_with_that_visibility_and_nothing_else():
    with mock_aws():
        import boto3  # noqa: PLC0415

        sqs = boto3.client("sqs", region_name="us-east-1")
        short, default = ExistingQueue("invoices", 5), ExistingQueue("refunds")
        for queue in (short, default):
            queue.attach(_Cloud(sqs))  # type: ignore[arg-type]
        found = [
            sqs.get_queue_attributes(QueueUrl=q.url, AttributeNames=["All"])["Attributes"]
            for q in (short, default)
        ]
    assert [f["VisibilityTimeout"] for f in found] == ["5", "30"]
    assert not any("RedrivePolicy" in f for f in found)
