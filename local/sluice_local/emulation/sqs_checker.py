"""The local runtime's judge of what SQS refuses, read from its own table
(:mod:`sluice_local.emulation.sqs_rules_table`).

Written from AWS's documentation alone: nothing here imports the layer (``sluice``), whose
:mod:`sluice.sqs` checks the same rules before sending, so a misreading in the layer shows up
locally as a refusal instead of being shared by the test and the thing tested. Every limit is read
from :data:`~sluice_local.emulation.sqs_rules_table.RULES`; each refusal names the rule it applies
and answers with the error code SQS does.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from sluice_local.emulation.sqs_rules_table import RULE


def _int(rule_id: str) -> int:
    limit = RULE[rule_id].limit
    if not isinstance(limit, int):
        raise TypeError(f"rule {rule_id}: its limit is not a number")
    return limit


def _items(rule_id: str) -> list[object]:
    limit = RULE[rule_id].limit
    if not isinstance(limit, tuple):
        raise TypeError(f"rule {rule_id}: its limit is not a tuple")
    return list(limit)


def _pair(rule_id: str) -> tuple[int, int]:
    low, high = _items(rule_id)
    if not isinstance(low, int) or not isinstance(high, int):
        raise TypeError(f"rule {rule_id}: its limit is not a (low, high) pair")
    return low, high


def _character_class(rule_id: str) -> re.Pattern[str]:
    """A pattern matching the first character OUTSIDE the rule's allowed characters or ranges."""
    limit = RULE[rule_id].limit
    if isinstance(limit, str):
        return re.compile(f"[^{re.escape(limit)}]")
    ranges = ""
    for item in _items(rule_id):
        if not isinstance(item, tuple):
            raise TypeError(f"rule {rule_id}: its limit is not a tuple of (first, last) code points")
        first, last = re.escape(chr(item[0])), re.escape(chr(item[1]))
        ranges += first if first == last else f"{first}-{last}"
    return re.compile(f"[^{ranges}]")


# The checker's working values, read once from the table (tests replace them to show a wrong
# checker is caught).
MAX_MESSAGE_BYTES = _int("message.max-bytes")
MAX_ATTRIBUTES = _int("attributes.max-count")
MAX_NAME_LENGTH = _int("attribute.name.max-length")
MAX_TYPE_LENGTH = _int("attribute.type.max-length")
MAX_NUMBER_DIGITS = _int("attribute.number.precision")
NUMBER_EXPONENTS = _pair("attribute.number.range")
DELAY_SECONDS = _pair("message.delay-seconds")
MAX_BATCH_ENTRIES = _int("batch.entries.max")
MAX_BATCH_ID_LENGTH = _int("batch.id.max-length")
MAX_BATCH_BYTES = _int("batch.max-bytes")
MAX_FIFO_ID_LENGTH = _int("fifo.ids.max-length")
RESERVED_PREFIXES = tuple(str(p).lower() for p in _items("attribute.name.reserved-prefixes"))
LOGICAL_TYPES = tuple(str(t) for t in _items("attribute.type.logical"))
_BODY_REFUSED = _character_class("body.characters")
_VALUE_REFUSED = _character_class("attribute.value.characters")
_NAME_REFUSED = _character_class("attribute.name.characters")
_BATCH_ID_REFUSED = _character_class("batch.id.characters")
_FIFO_ID_REFUSED = _character_class("fifo.ids.characters")
_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
SYSTEM_ATTRIBUTE, SYSTEM_ATTRIBUTE_TYPE = (str(item) for item in _items("message.system-attributes"))
TRACE_VERSION, TRACE_TIME_DIGITS, TRACE_ID_DIGITS = (
    int(str(n)) for n in _items("message.system-attributes.trace-header")
)
_TRACE_ROOT = re.compile(
    f"Root={TRACE_VERSION}-[0-9a-fA-F]{{{TRACE_TIME_DIGITS}}}-[0-9a-fA-F]{{{TRACE_ID_DIGITS}}}"
)
_TRACE_FIELD = re.compile(r"[A-Za-z][A-Za-z0-9_-]*=[!-:<-~]*")  # Name=Value; no ';', space or control


@dataclass(frozen=True, slots=True)
class Violation:
    """The rule a request breaks, and SQS's answer to it: its error ``code`` and ``message``."""

    rule: str
    code: str
    message: str

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


def _violation(rule_id: str, message: str) -> Violation:
    return Violation(rule_id, RULE[rule_id].code, message)


def _text_bytes(text: object) -> int:
    return len(str(text).encode("utf-8", "surrogatepass"))


def payload_bytes(body: object, attributes: Mapping[str, Any] | None = None) -> int:
    """What SQS counts against its size limit: the body, and each attribute's name, type and value."""
    total = _text_bytes(body)
    for name, value in (attributes or {}).items():
        total += _text_bytes(name)
        if isinstance(value, Mapping):
            total += _text_bytes(value.get("DataType") or "")
            binary = value.get("BinaryValue")
            total += (
                len(binary)
                if isinstance(binary, bytes | bytearray)
                else _text_bytes(value.get("StringValue") or "")
            )
    return total


def _shown(character: str) -> str:
    return f"#x{ord(character):X}"


def check_entry(
    body: object,
    attributes: Mapping[str, Any] | None = None,
    *,
    max_bytes: int = MAX_MESSAGE_BYTES,
    delay_seconds: object = None,
    system_attributes: object = None,
    fifo: bool = False,
    content_based_deduplication: bool = False,
    group_id: object = None,
    deduplication_id: object = None,
) -> Violation | None:
    """The rule one SendMessage (or one SendMessageBatch entry) breaks, or None.

    ``max_bytes`` is the queue's ``MaximumMessageSize``; binary attribute values are bytes;
    ``system_attributes`` is ``MessageSystemAttributes`` (not counted in the size).
    """
    if not isinstance(body, str) or not body:
        return _violation("body.required", "The request must contain the parameter MessageBody.")
    bad = _BODY_REFUSED.search(body)
    if bad is not None:
        return _violation(
            "body.characters",
            f"Invalid binary character '{_shown(bad.group())}' was found in the message body, the set of "
            "allowed characters is #x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF",
        )
    attributes = attributes or {}
    if len(attributes) > MAX_ATTRIBUTES:
        return _violation(
            "attributes.max-count",
            f"Number of message attributes [{len(attributes)}] exceeds the allowed maximum "
            f"[{MAX_ATTRIBUTES}].",
        )
    for name, value in attributes.items():
        violation = check_attribute(name, value)
        if violation is not None:
            return violation
    if payload_bytes(body, attributes) > min(max_bytes, MAX_MESSAGE_BYTES):
        return _violation(
            "message.max-bytes",
            f"One or more parameters are invalid. Reason: Message must be shorter than {max_bytes} bytes.",
        )
    return check_system_attributes(system_attributes) or _check_options(
        delay_seconds, fifo, content_based_deduplication, group_id, deduplication_id
    )


def check_system_attributes(system: object) -> Violation | None:
    """The rule a message's ``MessageSystemAttributes`` break (only a well-formed ``AWSTraceHeader`` of
    type String is allowed), or None."""
    if system is None:
        return None
    for name, value in system.items() if isinstance(system, Mapping) else [(system, None)]:
        data_type = value.get("DataType") if isinstance(value, Mapping) else None
        header = value.get("StringValue") if isinstance(value, Mapping) else None
        if name != SYSTEM_ATTRIBUTE or data_type != SYSTEM_ATTRIBUTE_TYPE or not isinstance(header, str):
            return _violation(
                "message.system-attributes",
                f"Message system attribute {name!r} is invalid: the only one supported is "
                f"{SYSTEM_ATTRIBUTE}, of type {SYSTEM_ATTRIBUTE_TYPE}.",
            )
        assert isinstance(value, Mapping)  # noqa: S101 - its DataType was read
        fields = header.split(";")
        if value.get("BinaryValue") is not None or not (
            all(_TRACE_FIELD.fullmatch(field) for field in fields)
            and any(_TRACE_ROOT.fullmatch(field) for field in fields)
        ):
            return _violation(
                "message.system-attributes.trace-header",
                f"Value {header!r} for message system attribute {SYSTEM_ATTRIBUTE} is invalid: not an X-Ray "
                "trace header (Root=1-<8 hex digits>-<24 hex digits>).",
            )
    return None


def _check_options(
    delay_seconds: object, fifo: bool, content_based: bool, group_id: object, deduplication_id: object
) -> Violation | None:
    violation = _check_delay(delay_seconds, fifo)
    if violation is not None:
        return violation
    for parameter, token in (("MessageGroupId", group_id), ("MessageDeduplicationId", deduplication_id)):
        violation = _check_fifo_id(parameter, token)
        if violation is not None:
            return violation
    if fifo and not group_id:
        return _violation("fifo.group-id.required", "The request must contain the parameter MessageGroupId.")
    if fifo and not deduplication_id and not content_based:
        return _violation(
            "fifo.deduplication-id.required",
            "The queue should either have ContentBasedDeduplication enabled or MessageDeduplicationId "
            "provided explicitly",
        )
    return None


def _check_delay(delay_seconds: object, fifo: bool) -> Violation | None:
    if delay_seconds is not None:
        lowest, highest = DELAY_SECONDS
        delay = delay_seconds if isinstance(delay_seconds, int) else None
        if isinstance(delay_seconds, str) and re.fullmatch(r"-?[0-9]+", delay_seconds):
            delay = int(delay_seconds)
        if delay is None or not lowest <= delay <= highest:
            return _violation(
                "message.delay-seconds",
                f"Value {delay_seconds} for parameter DelaySeconds is invalid. "
                f"Reason: DelaySeconds must be >= {lowest} and <= {highest}.",
            )
        if fifo and delay > 0:
            return _violation(
                "fifo.delay-seconds",
                f"Value {delay_seconds} for parameter DelaySeconds is invalid. Reason: The request include "
                "parameter that is not valid for this queue type.",
            )
    return None


def _check_fifo_id(parameter: str, token: object) -> Violation | None:
    if token is None or token == "":
        return None
    if not isinstance(token, str) or len(token) > MAX_FIFO_ID_LENGTH:
        return _violation(
            "fifo.ids.max-length",
            f"Value {token} for parameter {parameter} is invalid. Reason: longer than "
            f"{MAX_FIFO_ID_LENGTH} characters.",
        )
    if _FIFO_ID_REFUSED.search(token):
        return _violation(
            "fifo.ids.characters",
            f"Value {token} for parameter {parameter} is invalid. Reason: only alphanumeric and "
            "punctuation characters are allowed.",
        )
    return None


def check_attribute(name: object, value: object) -> Violation | None:  # noqa: PLR0911 - one rule a branch
    """The rule one message attribute (SendMessage shape, binary values as bytes) breaks, or None."""
    if not isinstance(name, str) or not name or _NAME_REFUSED.search(name):
        return _violation(
            "attribute.name.characters",
            f"Message (user) attribute name {name!r} is invalid: only A-Z a-z 0-9 _ - . are allowed.",
        )
    if len(name) > MAX_NAME_LENGTH:
        return _violation(
            "attribute.name.max-length",
            f"Message (user) attribute name '{name}' is invalid: longer than {MAX_NAME_LENGTH} characters.",
        )
    if name.startswith(".") or name.endswith(".") or ".." in name:
        return _violation(
            "attribute.name.periods",
            f"Message (user) attribute name '{name}' must not start or end with a period or contain '..'.",
        )
    if name.lower().startswith(RESERVED_PREFIXES):
        return _violation(
            "attribute.name.reserved-prefixes",
            f"Message (user) attribute name '{name}' is reserved for use by SQS (AWS. and Amazon. prefixes).",
        )
    data_type = value.get("DataType") if isinstance(value, Mapping) else None
    if not isinstance(data_type, str) or not data_type:
        return _violation(
            "attribute.type.required",
            f"The message attribute '{name}' must contain non-empty message attribute type.",
        )
    assert isinstance(value, Mapping)  # noqa: S101 - a DataType was read from it
    if len(data_type) > MAX_TYPE_LENGTH:
        return _violation(
            "attribute.type.max-length",
            f"The message attribute '{name}' has a type longer than {MAX_TYPE_LENGTH} characters.",
        )
    logical, dot, label = data_type.partition(".")
    if logical not in LOGICAL_TYPES or (dot and (not label or _BODY_REFUSED.search(label))):
        return _violation(
            "attribute.type.logical",
            f"The message attribute '{name}' has an invalid message attribute type, the set of supported "
            "type prefixes is Binary, Number, and String.",
        )
    field, other = ("BinaryValue", "StringValue") if logical == "Binary" else ("StringValue", "BinaryValue")
    given = value.get(field)
    kind = (bytes, bytearray) if logical == "Binary" else (str,)
    if value.get(other) is not None or not isinstance(given, kind) or not given:
        return _violation(
            "attribute.value.required",
            f"The message attribute '{name}' with type '{logical}' must use field "
            f"'{field.removesuffix('Value')}' with a non-empty value.",
        )
    if logical == "Binary":
        return None
    assert isinstance(given, str)  # noqa: S101
    bad = _VALUE_REFUSED.search(given)
    if bad is not None:
        return _violation(
            "attribute.value.characters",
            f"Message (user) attribute '{name}' value contains invalid binary character "
            f"'{_shown(bad.group())}'.",
        )
    return _check_number(name, given) if logical == "Number" else None


def _check_number(name: str, text: str) -> Violation | None:
    message = f"Can't cast the value of message (user) attribute '{name}' to a number."
    if not _NUMBER.fullmatch(text):
        return _violation("attribute.number.numeric", message)
    mantissa = re.split("[eE]", text)[0]
    digits = re.sub("[^0-9]", "", mantissa).strip("0")
    if len(digits) > MAX_NUMBER_DIGITS:
        return _violation("attribute.number.precision", message)
    try:
        magnitude = Decimal(text).copy_abs()
    except InvalidOperation:  # an exponent beyond what any decimal context holds: not a number
        return _violation("attribute.number.numeric", message)
    lowest, highest = NUMBER_EXPONENTS
    if magnitude and not Decimal(f"1e{lowest}") <= magnitude <= Decimal(f"1e{highest}"):
        return _violation("attribute.number.range", message)
    return None


def check_batch(entries: Sequence[Mapping[str, Any]]) -> Violation | None:  # noqa: PLR0911 - a rule a branch
    """The rule a SendMessageBatch call as a whole breaks, or None (each entry: :func:`check_entry`).

    Binary attribute values are bytes.
    """
    if len(entries) < _int("batch.entries.min"):
        return _violation(
            "batch.entries.min", "There should be at least one SendMessageBatchRequestEntry in the request."
        )
    if len(entries) > MAX_BATCH_ENTRIES:
        return _violation(
            "batch.entries.max",
            f"Maximum number of entries per request are {MAX_BATCH_ENTRIES}. You have sent {len(entries)}.",
        )
    refused_id = (
        "A batch entry id can only contain alphanumeric characters, hyphens and underscores. "
        f"It can be at most {MAX_BATCH_ID_LENGTH} letters long."
    )
    seen: set[str] = set()
    for entry in entries:
        entry_id = entry.get("Id")
        if not isinstance(entry_id, str) or not entry_id or len(entry_id) > MAX_BATCH_ID_LENGTH:
            return _violation("batch.id.max-length", refused_id)
        if _BATCH_ID_REFUSED.search(entry_id):
            return _violation("batch.id.characters", refused_id)
        if entry_id in seen:
            return _violation("batch.id.distinct", f"Id {entry_id} repeated.")
        seen.add(entry_id)
    total = sum(payload_bytes(e.get("MessageBody") or "", e.get("MessageAttributes")) for e in entries)
    if total > MAX_BATCH_BYTES:
        return _violation(
            "batch.max-bytes",
            f"Batch requests cannot be longer than {MAX_BATCH_BYTES} bytes. You have sent {total} bytes.",
        )
    return None


__all__ = ["check_attribute", "check_batch", "check_entry", "check_system_attributes", "payload_bytes"]
