"""Small SQS helpers shared by every function."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING

from sluice.limits import MAX_ATTRIBUTES, MAX_MESSAGE_BYTES

if TYPE_CHECKING:
    from sluice.envelope import SendAttributes


def queue_identity(reference: str) -> tuple[str | None, str, str] | None:
    """(region or None, account, queue name) of a queue URL or ARN; None when it is neither.

    The region of a URL is read from an ``sqs.<region>.`` host; other hosts (VPC endpoints, local
    emulators) give None, which matches any region.
    """
    if reference.startswith("arn:"):
        parts = reference.split(":")
        if len(parts) == 6 and parts[2] == "sqs" and parts[4] and parts[5]:
            return parts[3] or None, parts[4], parts[5]
        return None
    if reference.startswith(("https://", "http://")):
        rest = reference.split("://", 1)[1].split("?", 1)[0].rstrip("/")
        host, _, path = rest.partition("/")
        segments = path.split("/")
        if len(segments) >= 2 and segments[-2] and segments[-1]:
            labels = host.split(".")
            region = labels[1] if len(labels) > 2 and labels[0] == "sqs" else None
            return region, segments[-2], segments[-1]
    return None


def same_queue(a: tuple[str | None, str, str], b: tuple[str | None, str, str]) -> bool:
    """Same account and name, and the same region where both tell it."""
    return a[1:] == b[1:] and (a[0] is None or b[0] is None or a[0] == b[0])


def queue_url_from_arn(arn: str, *, endpoint: str | None = None) -> str:
    """``arn:aws:sqs:eu-west-1:123456789012:name`` → ``https://sqs.eu-west-1.amazonaws.com/123456789012/name``.

    Pass the SQS client's ``meta.endpoint_url`` as ``endpoint`` so the URL matches whatever endpoint
    the client talks to (AWS, a VPC endpoint or a local emulator).
    """
    parts = arn.split(":")
    if len(parts) != 6 or parts[0] != "arn" or parts[2] != "sqs" or not all(parts[1:2] + parts[3:]):
        raise ValueError(f"not an SQS queue ARN: {arn!r}")
    _, partition, _, region, account, name = parts
    if endpoint:
        return f"{endpoint.rstrip('/')}/{account}/{name}"
    suffix = "amazonaws.com.cn" if partition == "aws-cn" else "amazonaws.com"
    return f"https://sqs.{region}.{suffix}/{account}/{name}"


def allowlisted(reference: str, allowlist: Iterable[str]) -> bool:
    """True when ``reference`` (queue ARN or URL) names a queue of ``allowlist`` (ARNs or URLs).

    An entry's queue name may hold ``*``: one workload name (letters and digits, at least one), so the
    stack allows every workload queue it creates with one entry, ``arn:...:<stack>-*-work``, and no queue
    of another stack whose name merely starts with its own (``<stack>-dev-Orders-work``)."""
    identity = queue_identity(reference)
    return identity is not None and any(
        entry is not None and _matches(identity, entry) for entry in map(queue_identity, allowlist)
    )


def _matches(identity: tuple[str | None, str, str], entry: tuple[str | None, str, str]) -> bool:
    if "*" not in entry[2]:
        return same_queue(identity, entry)
    pattern = "[A-Za-z0-9]+".join(re.escape(part) for part in entry[2].split("*"))
    return same_queue((identity[0], identity[1], ""), (entry[0], entry[1], "")) and bool(
        re.fullmatch(pattern, identity[2])
    )


def attribute_bytes(attributes: SendAttributes) -> int:
    """Size SQS counts for message attributes: name + type + value."""
    total = 0
    for name, value in attributes.items():
        total += len(str(name).encode("utf-8", "surrogatepass"))
        total += len(str(value.get("DataType", "")).encode("utf-8", "surrogatepass"))
        if value.get("BinaryValue") is not None:
            total += len(value["BinaryValue"])
        else:
            total += len(str(value.get("StringValue", "")).encode("utf-8", "surrogatepass"))
    return total


# --- what SQS accepts ----------------------------------------------------------------------------
# Written from the SendMessage API reference and the SQS developer guide (message attributes,
# quotas). moto accepts much of what SQS refuses, so sluice checks before it sends, and the local
# runtime refuses at its SQS boundary with these same rules.

_REFUSED_CHARACTER = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_NAME_REFUSED = re.compile(r"[^A-Za-z0-9_.\-]")
_DATA_TYPE = re.compile(r"(String|Number|Binary)(\..+)?", re.DOTALL)  # a label: any character of a body
_NUMBER = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")  # ASCII digits only, not \d
MAX_NAME_LENGTH = 256
MAX_DATA_TYPE_LENGTH = 256
MAX_NUMBER_DIGITS = 38
NUMBER_MAGNITUDES = (Decimal("1e-128"), Decimal("1e126"))
"""A Number's non-zero magnitude lies between 10^-128 and 10^+126 (the SQS developer guide)."""
RESERVED_NAME_PREFIXES = ("aws.", "amazon.")


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why SQS would refuse a message: the ``rule`` it breaks (a short stable id, e.g.
    ``attribute.number.range``) and SQS's answer, its error ``code`` and ``message``."""

    rule: str
    code: str
    message: str

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


def refused_character(text: str) -> str | None:
    """The first character SQS refuses in a body or string value, as ``#x..``; None when all are allowed."""
    match = _REFUSED_CHARACTER.search(text)
    return None if match is None else f"#x{ord(match.group()):X}"


def message_bytes(body: str, attributes: SendAttributes | None = None) -> int:
    """Size SQS counts against its limit: the body in UTF-8 plus every attribute's name, type and value."""
    return len(body.encode("utf-8", "surrogatepass")) + attribute_bytes(attributes or {})


def check_message(
    body: object, attributes: SendAttributes | None = None, *, max_bytes: int = MAX_MESSAGE_BYTES
) -> Refusal | None:
    """What SQS would refuse about one message (SendMessage or one SendMessageBatch entry), or None.

    Checks the body (present, text, allowed characters), each attribute (name, ``DataType``, value),
    the attribute count and the size in bytes including attributes against ``max_bytes`` (the
    queue's ``MaximumMessageSize``, 1 MiB by default).
    """
    if not isinstance(body, str) or not body:
        return Refusal(
            "body.required", "MissingParameter", "The request must contain the parameter MessageBody."
        )
    bad = refused_character(body)
    if bad is not None:
        return Refusal(
            "body.characters",
            "InvalidMessageContents",
            f"Invalid binary character '{bad}' was found in the message body, the set of allowed "
            "characters is #x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF",
        )
    attributes = attributes or {}
    if len(attributes) > MAX_ATTRIBUTES:
        return Refusal(
            "attributes.max-count",
            "InvalidParameterValue",
            f"Number of message attributes [{len(attributes)}] exceeds the allowed maximum "
            f"[{MAX_ATTRIBUTES}].",
        )
    for name, value in attributes.items():
        refusal = check_attribute(name, value)
        if refusal is not None:
            return refusal
    size = message_bytes(body, attributes)
    if size > max_bytes:
        return Refusal(
            "message.max-bytes",
            "InvalidParameterValue",
            f"One or more parameters are invalid. Reason: Message must be shorter than {max_bytes} bytes.",
        )
    return None


def check_attribute(name: object, value: object) -> Refusal | None:  # noqa: PLR0911 - one rule per branch
    """What SQS would refuse about one message attribute (SendMessage shape), or None."""
    refusal = _check_name(name)
    if refusal is not None:
        return refusal
    if not isinstance(value, dict):
        return _invalid("attribute.type.required", f"The message attribute '{name}' is not a structure.")
    data_type = value.get("DataType")
    if not isinstance(data_type, str) or not data_type:
        return _invalid(
            "attribute.type.required",
            f"The message attribute '{name}' must contain non-empty message attribute type.",
        )
    if len(data_type) > MAX_DATA_TYPE_LENGTH:
        return _invalid(
            "attribute.type.max-length",
            f"The message attribute '{name}' has a type longer than {MAX_DATA_TYPE_LENGTH} characters.",
        )
    if not _DATA_TYPE.fullmatch(data_type) or refused_character(data_type) is not None:
        return _invalid(
            "attribute.type.logical",
            f"The message attribute '{name}' has an invalid message attribute type, the set of supported "
            "type prefixes is Binary, Number, and String.",
        )
    if data_type.startswith("Binary"):
        binary = value.get("BinaryValue")
        if value.get("StringValue") is not None or not isinstance(binary, bytes | bytearray) or not binary:
            return _invalid(
                "attribute.value.required",
                f"The message attribute '{name}' with type 'Binary' must use field 'Binary' "
                "with a non-empty value.",
            )
        return None
    string = value.get("StringValue")
    if value.get("BinaryValue") is not None or not isinstance(string, str) or not string:
        return _invalid(
            "attribute.value.required",
            f"The message attribute '{name}' with type '{data_type.split('.')[0]}' must use field 'String' "
            "with a non-empty value.",
        )
    bad = refused_character(string)
    if bad is not None:
        return _invalid(
            "attribute.value.characters",
            f"Message (user) attribute '{name}' value contains invalid binary character '{bad}'.",
        )
    broken = _number_rule(string) if data_type.startswith("Number") else None
    if broken is not None:
        return _invalid(broken, f"Can't cast the value of message (user) attribute '{name}' to a number.")
    return None


def _invalid(rule: str, message: str) -> Refusal:
    return Refusal(rule, "InvalidParameterValue", message)


def _check_name(name: object) -> Refusal | None:
    if not isinstance(name, str) or not name or _NAME_REFUSED.search(name):
        return _invalid(
            "attribute.name.characters",
            f"Message (user) attribute name {name!r} is invalid: up to 256 of A-Z a-z 0-9 _ - .",
        )
    if len(name) > MAX_NAME_LENGTH:
        return _invalid(
            "attribute.name.max-length",
            f"Message (user) attribute name '{name}' is invalid: longer than {MAX_NAME_LENGTH} characters.",
        )
    if name.startswith(".") or name.endswith(".") or ".." in name:
        return _invalid(
            "attribute.name.periods",
            f"Message (user) attribute name '{name}' must not start or end with a period or contain '..'.",
        )
    if name.lower().startswith(RESERVED_NAME_PREFIXES):
        return _invalid(
            "attribute.name.reserved-prefixes",
            f"Message (user) attribute name '{name}' is reserved for use by SQS (AWS. and Amazon. prefixes).",
        )
    return None


def _number_rule(text: str) -> str | None:
    """The rule a Number's value breaks (a decimal of at most 38 significant digits between 10^-128 and
    10^+126 in magnitude), or None."""
    if not _NUMBER.fullmatch(text):
        return "attribute.number.numeric"
    try:
        number = Decimal(text)
    except InvalidOperation:  # an exponent beyond what any decimal context holds
        return "attribute.number.numeric"
    if number.is_zero():
        return None
    significant = "".join(map(str, number.as_tuple().digits)).strip("0")  # exact: no context rounding
    if len(significant) > MAX_NUMBER_DIGITS:
        return "attribute.number.precision"
    smallest, largest = NUMBER_MAGNITUDES
    return None if smallest <= number.copy_abs() <= largest else "attribute.number.range"
