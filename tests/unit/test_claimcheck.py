"""Claim checks: pointer formats, the allowlist boundary, and the producer's offload decision."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from botocore.exceptions import ClientError

from sluice import claimcheck
from sluice.claimcheck import (
    EXTENDED_POINTER_CLASS,
    EXTENDED_SIZE_ATTRIBUTE,
    LEGACY_POINTER_CLASS,
    Pointer,
    authorize,
    fetch,
    parse_pointer,
    send,
)
from sluice.envelope import SendAttributes
from sluice.errors import PermanentError, TransientError
from sluice.sqs import attribute_bytes
from tests.doubles import FakeSqs

BUCKET = "sluice-claims"
PREFIX = "claim-check/"
QUEUE_URL = "https://sqs.us-east-1.amazonaws.com/123456789012/work"


class FakeS3:
    def __init__(self, error_code: str | None = None, body: bytes = b"{}") -> None:
        self.puts: list[dict[str, Any]] = []
        self._error_code = error_code
        self._body = body

    def put_object(self, **kwargs: Any) -> dict[str, str]:
        self.puts.append(kwargs)
        return {"ETag": '"etag"'}

    def get_object(self, **kwargs: Any) -> dict[str, Any]:
        if self._error_code is not None:
            raise ClientError({"Error": {"Code": self._error_code, "Message": "fake"}}, "GetObject")
        return {"Body": io.BytesIO(self._body)}


# --- parse_pointer -----------------------------------------------------------------------------


def test_given_an_extended_client_body_when_parsed_then_the_pointer_is_extended() -> None:
    body = json.dumps([EXTENDED_POINTER_CLASS, {"s3BucketName": BUCKET, "s3Key": PREFIX + "a"}])

    assert parse_pointer(body) == Pointer(BUCKET, PREFIX + "a", "extended")


def test_given_a_legacy_extended_client_body_when_parsed_then_the_pointer_is_legacy() -> None:
    body = f'  [ "{LEGACY_POINTER_CLASS}", {{"s3BucketName": "{BUCKET}", "s3Key": "{PREFIX}b"}}]'

    assert parse_pointer(body) == Pointer(BUCKET, PREFIX + "b", "legacy")


def test_given_a_simple_claim_check_body_when_parsed_then_the_pointer_is_simple() -> None:
    body = json.dumps({"__type": "CLAIM_CHECK", "s3_bucket": BUCKET, "s3_key": PREFIX + "c"})

    assert parse_pointer(body) == Pointer(BUCKET, PREFIX + "c", "simple")


@pytest.mark.parametrize(
    "body",
    [
        '{"order_id": "o-1", "amount": 12}',
        '[{"order_id": "o-1"}, {"order_id": "o-2"}]',
        "plain text, not JSON",
        "",
        '{"note": "mentions CLAIM_CHECK but is not one"}',
        '{"__type": "CLAIM_CHECK", broken',
        '["software.amazon.other.Class", {"s3BucketName": "b", "s3Key": "k"}]',
    ],
)
def test_given_an_ordinary_body_when_parsed_then_there_is_no_pointer(body: str) -> None:
    assert parse_pointer(body) is None


@pytest.mark.parametrize(
    "body",
    [
        '{"order_id": "o-1", "items": [1, 2, 3]}',
        "[1, 2, 3, " + "4, " * 100_000 + "5]",
        "x" * 1_000_000,
        '{"payload": "' + "y" * 1_000_000 + '"}',
    ],
)
def test_given_an_ordinary_body_when_parsed_then_it_is_not_json_decoded(
    body: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    class NoDecoding:
        @staticmethod
        def loads(*args: object, **kwargs: object) -> None:
            raise AssertionError("an ordinary body must not be JSON-decoded by parse_pointer")

    monkeypatch.setattr(claimcheck, "json", NoDecoding)

    assert parse_pointer(body) is None


@pytest.mark.parametrize(
    "body",
    [
        f'["{EXTENDED_POINTER_CLASS}"]',
        f'["{EXTENDED_POINTER_CLASS}", {{"s3BucketName": "{BUCKET}"}}]',
        f'["{EXTENDED_POINTER_CLASS}", ["not", "a", "map"]]',
        f'["{EXTENDED_POINTER_CLASS}", {{"s3BucketName": "{BUCKET}", "s3Key": ',
        f'["{EXTENDED_POINTER_CLASS}", {{"s3BucketName": "", "s3Key": "k"}}]',
        f'["{LEGACY_POINTER_CLASS}", {{"s3BucketName": 42, "s3Key": "k"}}]',
        '{"__type": "CLAIM_CHECK", "s3_bucket": "b"}',
        '{"__type": "CLAIM_CHECK", "s3_bucket": "b", "s3_key": null}',
    ],
)
def test_given_a_malformed_pointer_when_parsed_then_it_is_a_permanent_error(body: str) -> None:
    with pytest.raises(PermanentError):
        parse_pointer(body)


# --- authorize ---------------------------------------------------------------------------------


def test_given_a_pointer_inside_the_allowlist_when_authorized_then_it_passes() -> None:
    authorize(Pointer(BUCKET, PREFIX + "2024/06/a.json", "extended"), buckets=(BUCKET,), prefix=PREFIX)


@pytest.mark.parametrize(
    ("bucket", "key", "why"),
    [
        ("someone-elses-bucket", PREFIX + "a", "allowlist"),
        (BUCKET, "secrets/a", "outside the prefix"),
        (BUCKET, "claim-checkX/a", "outside the prefix"),
        (BUCKET, PREFIX + "../secrets/a", "outside the prefix"),
        (BUCKET, PREFIX + "a/../../b", "outside the prefix"),
        (BUCKET, PREFIX + "..", "outside the prefix"),
    ],
)
def test_given_a_pointer_outside_the_allowlist_when_authorized_then_it_is_a_permanent_error(
    bucket: str, key: str, why: str
) -> None:
    with pytest.raises(PermanentError, match=why):
        authorize(Pointer(bucket, key, "simple"), buckets=(BUCKET,), prefix=PREFIX)


def test_given_no_allowed_buckets_when_authorized_then_every_pointer_is_rejected() -> None:
    with pytest.raises(PermanentError, match="allowlist"):
        authorize(Pointer(BUCKET, PREFIX + "a", "simple"), buckets=(), prefix=PREFIX)


# --- fetch -------------------------------------------------------------------------------------


def test_given_an_existing_object_when_fetched_then_its_text_is_returned() -> None:
    s3 = FakeS3(body='{"name": "café"}'.encode())

    assert fetch(s3, Pointer(BUCKET, PREFIX + "a", "simple")) == '{"name": "café"}'  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("code", "error"),
    [
        ("NoSuchKey", TransientError),
        ("404", TransientError),
        ("SlowDown", TransientError),
        ("NoSuchBucket", PermanentError),
        ("InvalidBucketName", PermanentError),
    ],
)
def test_given_an_s3_error_when_fetching_then_it_is_classified(code: str, error: type[Exception]) -> None:
    with pytest.raises(error) as raised:
        fetch(FakeS3(error_code=code), Pointer(BUCKET, PREFIX + "a", "simple"))  # type: ignore[arg-type]

    assert type(raised.value) is error


def test_given_a_binary_payload_when_fetched_then_it_is_a_permanent_error() -> None:
    with pytest.raises(PermanentError, match="UTF-8"):
        fetch(FakeS3(body=b"\xff\xfe\x00"), Pointer(BUCKET, PREFIX + "a", "simple"))  # type: ignore[arg-type]


# --- attribute_bytes ---------------------------------------------------------------------------


def test_given_attributes_when_measured_then_name_type_and_value_bytes_are_counted() -> None:
    attributes: SendAttributes = {
        "tenant": {"DataType": "String", "StringValue": "café"},
        "n": {"DataType": "Number", "StringValue": "12"},
        "b": {"DataType": "Binary", "BinaryValue": b"\x00\x01\x02"},
    }

    assert attribute_bytes(attributes) == (6 + 6 + 5) + (1 + 6 + 2) + (1 + 6 + 3)


def test_given_no_attributes_when_measured_then_the_size_is_zero() -> None:
    assert attribute_bytes({}) == 0


# --- send --------------------------------------------------------------------------------------


def _send(body: str, *, threshold: int = 100, **kwargs: Any) -> tuple[FakeSqs, FakeS3, str]:
    sqs, s3 = FakeSqs(), FakeS3()
    message_id = send(
        sqs,  # type: ignore[arg-type]
        s3,  # type: ignore[arg-type]
        queue_url=QUEUE_URL,
        body=body,
        bucket=BUCKET,
        prefix=PREFIX,
        threshold=threshold,
        **kwargs,
    )
    return sqs, s3, message_id


def test_given_a_body_below_the_threshold_when_sent_then_it_travels_inline() -> None:
    sqs, s3, message_id = _send("x" * 99)

    assert message_id == "m-1"
    assert s3.puts == []
    assert sqs.sent == [{"QueueUrl": QUEUE_URL, "MessageBody": "x" * 99}]


def test_given_a_body_exactly_at_the_threshold_when_sent_then_it_travels_inline() -> None:
    sqs, s3, _ = _send("x" * 100)

    assert s3.puts == []
    assert sqs.sent[0]["MessageBody"] == "x" * 100


def test_given_a_body_above_the_threshold_when_sent_then_it_is_offloaded_with_an_extended_pointer() -> None:
    body = "é" * 60  # 60 characters, 120 bytes
    sqs, s3, _ = _send(body)

    assert len(s3.puts) == 1
    put = s3.puts[0]
    assert put["Bucket"] == BUCKET
    assert put["Key"].startswith(PREFIX)
    assert put["Body"] == body.encode()
    sent = sqs.sent[0]
    assert " " not in sent["MessageBody"]
    assert json.loads(sent["MessageBody"]) == [
        EXTENDED_POINTER_CLASS,
        {"s3BucketName": BUCKET, "s3Key": put["Key"]},
    ]
    assert sent["MessageAttributes"][EXTENDED_SIZE_ATTRIBUTE] == {"DataType": "Number", "StringValue": "120"}
    assert parse_pointer(sent["MessageBody"]) == Pointer(BUCKET, put["Key"], "extended")


def test_given_attributes_that_push_the_message_over_the_threshold_when_sent_then_the_body_is_offloaded() -> (
    None
):
    attributes = {"tenant": {"DataType": "String", "StringValue": "a" * 40}}
    sqs, s3, _ = _send("x" * 60, attributes=attributes)

    assert len(s3.puts) == 1
    sent_attributes = sqs.sent[0]["MessageAttributes"]
    assert sent_attributes["tenant"] == attributes["tenant"]
    assert sent_attributes[EXTENDED_SIZE_ATTRIBUTE]["StringValue"] == "60"


def test_given_two_offloaded_bodies_when_sent_then_each_gets_its_own_key() -> None:
    sqs, s3 = FakeSqs(), FakeS3()
    for _ in range(2):
        send(sqs, s3, queue_url=QUEUE_URL, body="z" * 500, bucket=BUCKET, threshold=100)  # type: ignore[arg-type]

    assert s3.puts[0]["Key"] != s3.puts[1]["Key"]


def test_given_a_threshold_above_the_sqs_limit_when_sending_a_larger_body_then_it_is_offloaded() -> None:
    _, s3, _ = _send("x" * (1024 * 1024 + 1), threshold=10 * 1024 * 1024)

    assert len(s3.puts) == 1


def test_given_ten_attributes_when_a_body_must_be_offloaded_then_sending_is_refused() -> None:
    attributes = {f"a{i}": {"DataType": "String", "StringValue": "v"} for i in range(10)}

    with pytest.raises(ValueError, match="attribute slot"):
        _send("x" * 500, attributes=attributes)


def test_given_a_delay_when_sent_then_it_is_passed_to_sqs() -> None:
    sqs, _, _ = _send("small", delay_seconds=30)

    assert sqs.sent[0]["DelaySeconds"] == 30


class Stream(io.BytesIO):
    """A response body that records how much was read from it."""

    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.asked: list[int | None] = []

    def read(self, size: int | None = -1) -> bytes:
        self.asked.append(size)
        return super().read(size)


class SizedS3(FakeS3):
    def __init__(self, body: bytes, content_length: int | None) -> None:
        super().__init__(body=body)
        self.stream = Stream(body)
        self.content_length = content_length

    def get_object(self, **kwargs: Any) -> dict[str, Any]:
        response: dict[str, Any] = {"Body": self.stream}
        if self.content_length is not None:
            response["ContentLength"] = self.content_length
        return response


def test_given_an_object_over_the_cap_when_fetched_then_it_is_refused_without_reading_its_body() -> None:
    s3 = SizedS3(b"x" * 10, content_length=100 * 1024 * 1024)
    with pytest.raises(
        PermanentError, match=r"104,857,600 bytes, over the 1,024-byte cap \(ClaimCheckMaxBytes\)"
    ):
        fetch(s3, Pointer(BUCKET, PREFIX + "a", "simple"), max_bytes=1024)  # type: ignore[arg-type]
    assert s3.stream.asked == []
    assert s3.stream.closed


def test_given_a_response_that_understates_its_size_when_fetched_then_the_read_stops_past_the_cap() -> None:
    s3 = SizedS3(b"x" * 5000, content_length=None)
    with pytest.raises(PermanentError, match="more than 1,024 bytes"):
        fetch(s3, Pointer(BUCKET, PREFIX + "a", "simple"), max_bytes=1024)  # type: ignore[arg-type]
    assert s3.stream.asked == [1025]


def test_given_an_object_exactly_at_the_cap_when_fetched_then_it_is_read() -> None:
    s3 = SizedS3(b"1" * 1024, content_length=1024)
    assert fetch(s3, Pointer(BUCKET, PREFIX + "a", "simple"), max_bytes=1024) == "1" * 1024  # type: ignore[arg-type]
