"""check_message: what SQS refuses, as SQS says it (the local runtime enforces the same rules)."""

from __future__ import annotations

from typing import Any

import pytest

from sluice.limits import MAX_MESSAGE_BYTES
from sluice.sqs import check_attribute, check_message, message_bytes


def s(value: str, data_type: str = "String") -> dict[str, Any]:
    return {"DataType": data_type, "StringValue": value}


ACCEPTED: list[tuple[str, str, dict[str, Any]]] = [
    ("plain json", '{"a": 1}', {}),
    ("tab newline carriage return", "a\tb\nc\rd", {}),
    ("last of the BMP before surrogates", "\ud7ff", {}),
    ("private use area", "\ue000\ufffd", {}),
    ("astral plane", "\U0001f600\U0010ffff", {}),
    ("exactly at the byte limit", "x" * MAX_MESSAGE_BYTES, {}),
    (
        "at the limit with an attribute",
        "x" * (MAX_MESSAGE_BYTES - len("k") - len("String") - 1),
        {"k": s("v")},
    ),
    ("ten attributes", "{}", {f"a{i}": s(str(i)) for i in range(10)}),
    ("custom type label", "{}", {"n": s("3", "Number.int"), "t": s("x", "String.json")}),
    # "The custom-type label has the same restrictions as the message body" (SQS developer guide)
    ("type label with a slash and a space", "{}", {"b": s("x", "String.image/png; v 2")}),
    ("type label beyond ASCII", "{}", {"n": s("3", "Number.µs")}),
    ("number at 10^126 and 10^-128", "{}", {"a": s("-1e126", "Number"), "b": s("1E-128", "Number")}),
    ("binary value", "{}", {"b": {"DataType": "Binary", "BinaryValue": b"\x00\x01"}}),
    ("number forms", "{}", {"a": s("-1.5e10", "Number"), "b": s(".5", "Number"), "c": s("0", "Number")}),
    ("38 significant digits", "{}", {"n": s("1" * 38, "Number")}),
    ("name with dots inside", "{}", {"a.b-c_d": s("v")}),
]

REFUSED: list[tuple[str, Any, dict[str, Any], str, str]] = [
    ("empty body", "", {}, "MissingParameter", "MessageBody"),
    ("NUL", "a\x00b", {}, "InvalidMessageContents", "#x0"),
    ("control character", "\x1f", {}, "InvalidMessageContents", "#x1F"),
    ("lone surrogate", "\ud800", {}, "InvalidMessageContents", "#xD800"),
    ("U+FFFE", "\ufffe", {}, "InvalidMessageContents", "#xFFFE"),
    ("one byte over", "x" * (MAX_MESSAGE_BYTES + 1), {}, "InvalidParameterValue", "shorter than"),
    (
        "over only with multibyte characters",
        "é" * (MAX_MESSAGE_BYTES // 2 + 1),
        {},
        "InvalidParameterValue",
        "shorter",
    ),
    (
        "over only with attributes",
        "x" * (MAX_MESSAGE_BYTES - 5),
        {"k": s("v")},
        "InvalidParameterValue",
        "shorter",
    ),
    ("eleven attributes", "{}", {f"a{i}": s("v") for i in range(11)}, "InvalidParameterValue", "[11]"),
    ("attribute without DataType", "{}", {"k": {"StringValue": "v"}}, "InvalidParameterValue", "type"),
    (
        "lower-case type",
        "{}",
        {"k": s("v", "string")},
        "InvalidParameterValue",
        "invalid message attribute type",
    ),
    ("empty string value", "{}", {"k": s("")}, "InvalidParameterValue", "non-empty"),
    ("string value with NUL", "{}", {"k": s("a\x00")}, "InvalidParameterValue", "#x0"),
    ("number that is not one", "{}", {"n": s("12abc", "Number")}, "InvalidParameterValue", "number"),
    ("number of 39 digits", "{}", {"n": s("1" * 39, "Number")}, "InvalidParameterValue", "number"),
    ("number beyond 10^126", "{}", {"n": s("1e127", "Number")}, "InvalidParameterValue", "number"),
    # "it can be between 10^-128 and 10^+126": 2 x 10^126 is not (the layer once allowed < 10^127)
    ("number just beyond 10^126", "{}", {"n": s("1.1e126", "Number")}, "InvalidParameterValue", "number"),
    ("number below 10^-128", "{}", {"n": s("-9.9e-129", "Number")}, "InvalidParameterValue", "number"),
    ("type label with a NUL", "{}", {"k": s("v", "String.a\x00")}, "InvalidParameterValue", "type"),
    ("binary given as string", "{}", {"b": s("x", "Binary")}, "InvalidParameterValue", "Binary"),
    ("reserved prefix", "{}", {"AWS.trace": s("v")}, "InvalidParameterValue", "reserved"),
    ("reserved prefix any case", "{}", {"amazon.X": s("v")}, "InvalidParameterValue", "reserved"),
    ("leading period", "{}", {".k": s("v")}, "InvalidParameterValue", "period"),
    ("double period", "{}", {"a..b": s("v")}, "InvalidParameterValue", "period"),
    ("space in name", "{}", {"a b": s("v")}, "InvalidParameterValue", "invalid"),
    ("name of 257 characters", "{}", {"k" * 257: s("v")}, "InvalidParameterValue", "invalid"),
]


@pytest.mark.parametrize(("case", "body", "attributes"), ACCEPTED, ids=[c[0] for c in ACCEPTED])
def test_given_a_message_sqs_accepts_when_checked_then_nothing_is_refused(
    case: str, body: str, attributes: dict[str, Any]
) -> None:
    assert check_message(body, attributes) is None, case


@pytest.mark.parametrize(("case", "body", "attributes", "code", "says"), REFUSED, ids=[c[0] for c in REFUSED])
def test_given_a_message_sqs_refuses_when_checked_then_the_refusal_is_sqs_own(
    case: str, body: Any, attributes: dict[str, Any], code: str, says: str
) -> None:
    refusal = check_message(body, attributes)
    assert refusal is not None, case
    assert refusal.code == code
    assert says in refusal.message


def test_given_a_queue_with_a_smaller_maximum_when_checked_then_its_maximum_applies() -> None:
    assert check_message("x" * 1025, max_bytes=1024) is not None
    assert check_message("x" * 1024, max_bytes=1024) is None


def test_given_attributes_when_sized_then_name_type_and_value_bytes_count() -> None:
    assert message_bytes("é", {"ké": s("vé")}) == 2 + (3 + 6 + 3)
    assert message_bytes("", {"b": {"DataType": "Binary", "BinaryValue": b"123"}}) == 1 + 6 + 3


def test_given_a_value_that_is_not_a_structure_when_checked_then_it_is_refused() -> None:
    refusal = check_attribute("k", "v")
    assert refusal is not None
    assert "structure" in refusal.message
