"""What SQS refuses, as AWS documents it: the local runtime's own table of SQS's rules, as data.

moto accepts much of what SQS refuses, so the local runtime refuses it at its SQS boundary
(:func:`sluice_local.emulation.moto_adapter.install_sqs_rules`). It judges with this module, written
from AWS's documentation and NOT from the layer's :mod:`sluice.sqs` (nothing here imports ``sluice``):
the layer checks messages before it sends them, and a misreading of SQS's rules in the layer must show
up locally as a refusal, not be shared by the test and the thing tested.

:data:`RULES` is the table, as data: each rule's id, what the documentation says and where, the
limit it sets and the error code SQS answers with. The checker,
:mod:`sluice_local.emulation.sqs_checker`, reads every limit from it;
``tests/unit/test_sqs_rules_table.py`` generates cases at, inside and outside each limit and holds
both the layer and that checker to them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

_API = "https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference"
_GUIDE = "https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide"
SEND_MESSAGE = f"{_API}/API_SendMessage.html"
SEND_MESSAGE_BATCH = f"{_API}/API_SendMessageBatch.html"
BATCH_ENTRY = f"{_API}/API_SendMessageBatchRequestEntry.html"
ATTRIBUTE_VALUE = f"{_API}/API_MessageAttributeValue.html"
METADATA = f"{_GUIDE}/sqs-message-metadata.html"
QUOTAS = f"{_GUIDE}/quotas-messages.html"
TIMERS = f"{_GUIDE}/sqs-message-timers.html"
XRAY_TRACE_IDS = "https://docs.aws.amazon.com/xray/latest/devguide/xray-api-sendingdata.html"
TOO_MANY_ENTRIES = (
    "https://docs.aws.amazon.com/botocore/latest/reference/services/sqs/client/exceptions/"
    "TooManyEntriesInBatchRequest.html"
)

Scope = Literal["message", "attribute", "batch", "fifo"]
Limit = int | str | tuple[int, ...] | tuple[str, ...] | tuple[tuple[int, int], ...] | None
ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
PUNCTUATION = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"


@dataclass(frozen=True, slots=True)
class Rule:
    """One documented rule: ``says`` is the documentation's own words, at ``source``."""

    id: str
    scope: Scope
    says: str
    source: str
    limit: Limit
    code: str


RULES: tuple[Rule, ...] = (
    # --- the body ---------------------------------------------------------------------------------
    Rule(
        "body.required", "message", "The minimum size is one character.", SEND_MESSAGE, 1, "MissingParameter"
    ),
    Rule(
        "body.characters",
        "message",
        "The following Unicode characters are allowed: #x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD "
        "| #x10000 to #x10FFFF. If a message contains characters outside the allowed set, Amazon SQS "
        "rejects the message and returns an InvalidMessageContents error.",
        SEND_MESSAGE,
        ((0x9, 0x9), (0xA, 0xA), (0xD, 0xD), (0x20, 0xD7FF), (0xE000, 0xFFFD), (0x10000, 0x10FFFF)),
        "InvalidMessageContents",
    ),
    Rule(
        "message.max-bytes",
        "message",
        "The maximum size is 1 MiB or 1,048,576 bytes. All parts of the message attribute, including "
        "Name, Type, and Value, are part of the message size restriction (1 MiB or 1,048,576 bytes).",
        ATTRIBUTE_VALUE,
        1_048_576,
        "InvalidParameterValue",
    ),
    Rule(
        "attributes.max-count",
        "message",
        "Each message can have up to 10 attributes.",
        METADATA,
        10,
        "InvalidParameterValue",
    ),
    # --- each message attribute -------------------------------------------------------------------
    Rule(
        "attribute.name.characters",
        "attribute",
        "The message attribute name can contain the following characters: A-Z, a-z, 0-9, "
        "underscore (_), hyphen (-), and period (.).",
        METADATA,
        ALNUM + "_-.",
        "InvalidParameterValue",
    ),
    Rule(
        "attribute.name.max-length",
        "attribute",
        "[The name] can be up to 256 characters long.",
        METADATA,
        256,
        "InvalidParameterValue",
    ),
    Rule(
        "attribute.name.reserved-prefixes",
        "attribute",
        "[The name] must not start with AWS-reserved prefixes such as AWS. or Amazon. "
        "(or any casing variants).",
        METADATA,
        ("AWS.", "Amazon."),
        "InvalidParameterValue",
    ),
    Rule(
        "attribute.name.periods",
        "attribute",
        "[The name] must not start or end with a period (.), and it should not have periods in "
        "succession (..).",
        METADATA,
        ".",
        "InvalidParameterValue",
    ),
    Rule(
        "attribute.type.required",
        "attribute",
        "Name, type, value and the message body must not be empty or null.",
        ATTRIBUTE_VALUE,
        1,
        "InvalidParameterValue",
    ),
    Rule(
        "attribute.type.logical",
        "attribute",
        "Amazon SQS supports the logical data types String, Number, and Binary with the optional "
        "custom data type labels with the format .custom-data-type. The custom-type label has the "
        "same restrictions as the message body.",
        METADATA,
        ("String", "Number", "Binary"),
        "InvalidParameterValue",
    ),
    Rule(
        "attribute.type.max-length",
        "attribute",
        "[The type] can be up to 256 characters long. [It] is case-sensitive.",
        METADATA,
        256,
        "InvalidParameterValue",
    ),
    Rule(
        "attribute.value.required",
        "attribute",
        "Name, type, value and the message body must not be empty or null. For the Number data type, "
        "you must use StringValue. Binary type attributes can store any binary data.",
        ATTRIBUTE_VALUE,
        1,
        "InvalidParameterValue",
    ),
    Rule(
        "attribute.value.characters",
        "attribute",
        "For string data types, the Value attribute has the same restrictions on the content as the "
        "message body.",
        ATTRIBUTE_VALUE,
        ((0x9, 0x9), (0xA, 0xA), (0xD, 0xD), (0x20, 0xD7FF), (0xE000, 0xFFFD), (0x10000, 0x10FFFF)),
        "InvalidParameterValue",
    ),
    Rule(
        "attribute.number.numeric",
        "attribute",
        "The message attribute data type instructs Amazon SQS how to handle the corresponding message "
        "attribute value. For example, if the type is Number, Amazon SQS validates numerical values.",
        METADATA,
        None,
        "InvalidParameterValue",
    ),
    Rule(
        "attribute.number.precision",
        "attribute",
        "A number can have up to 38 digits of precision. Amazon SQS trims leading and trailing zeroes.",
        METADATA,
        38,
        "InvalidParameterValue",
    ),
    Rule(
        "attribute.number.range",
        "attribute",
        "Number attributes can store positive or negative numerical values. [A number] can be between "
        "10^-128 and 10^+126.",
        METADATA,
        (-128, 126),
        "InvalidParameterValue",
    ),
    # --- the message's system attributes (MessageSystemAttributes) -------------------------------
    Rule(
        "message.system-attributes",
        "message",
        "Currently, the only supported message system attribute is AWSTraceHeader. Its type must be "
        "String and its value must be a correctly formatted X-Ray trace header string.",
        SEND_MESSAGE,
        ("AWSTraceHeader", "String"),
        "InvalidParameterValue",
    ),
    # The header carries it in its Root field, fields Name=Value joined by ';' (the X-Ray developer
    # guide's tracing header, xray-concepts.html#xray-concepts-tracingheader:
    # Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1).
    Rule(
        "message.system-attributes.trace-header",
        "message",
        "A trace_id consists of three numbers separated by hyphens. For example, "
        "1-58406520-a006649127e371903a2de979. This includes: The version number, that is, 1. The time of "
        "the original request, in Unix epoch time, in 8 hexadecimal digits. [...] A 96-bit identifier for "
        "the trace, globally unique, in 24 hexadecimal digits.",
        XRAY_TRACE_IDS,
        (1, 8, 24),
        "InvalidParameterValue",
    ),
    # --- a SendMessageBatch call ------------------------------------------------------------------
    Rule(
        "batch.entries.min",
        "batch",
        "EmptyBatchRequest: The batch request doesn't contain any entries.",
        SEND_MESSAGE_BATCH,
        1,
        "EmptyBatchRequest",
    ),
    Rule(
        "batch.entries.max",
        "batch",
        "The maximum number of entries you can include in a single SendMessageBatch, "
        "DeleteMessageBatch, or ChangeMessageVisibilityBatch request is 10.",
        TOO_MANY_ENTRIES,
        10,
        "TooManyEntriesInBatchRequest",
    ),
    Rule(
        "batch.id.max-length",
        "batch",
        "This identifier can have up to 80 characters.",
        BATCH_ENTRY,
        80,
        "InvalidBatchEntryId",
    ),
    Rule(
        "batch.id.characters",
        "batch",
        "The following characters are accepted: alphanumeric characters, hyphens(-), and underscores (_).",
        BATCH_ENTRY,
        ALNUM + "-_",
        "InvalidBatchEntryId",
    ),
    Rule(
        "batch.id.distinct",
        "batch",
        "The Ids of a batch request need to be unique within a request.",
        BATCH_ENTRY,
        None,
        "BatchEntryIdsNotDistinct",
    ),
    Rule(
        "batch.max-bytes",
        "batch",
        "The maximum allowed individual message size and the maximum total payload size (the sum of "
        "the individual lengths of all of the batched messages) are both 1 MiB 1,048,576 bytes.",
        SEND_MESSAGE_BATCH,
        1_048_576,
        "BatchRequestTooLong",
    ),
    # --- per-message delay, FIFO fields -----------------------------------------------------------
    Rule(
        "message.delay-seconds",
        "message",
        "The length of time, in seconds, for which to delay a specific message. Valid values: 0 to 900.",
        SEND_MESSAGE,
        (0, 900),
        "InvalidParameterValue",
    ),
    Rule(
        "fifo.delay-seconds",
        "fifo",
        "When you set FifoQueue, you can't set DelaySeconds per message. You can set this parameter "
        "only on a queue level.",
        SEND_MESSAGE,
        None,
        "InvalidParameterValue",
    ),
    Rule(
        "fifo.group-id.required",
        "fifo",
        "MessageGroupId is required for FIFO queues. If you don't provide a MessageGroupId when sending "
        "a message to a FIFO queue, the action fails.",
        QUOTAS,
        None,
        "MissingParameter",
    ),
    Rule(
        "fifo.deduplication-id.required",
        "fifo",
        "If you don't provide a MessageDeduplicationId and the queue doesn't have "
        "ContentBasedDeduplication set, the action fails with an error.",
        SEND_MESSAGE,
        None,
        "InvalidParameterValue",
    ),
    Rule(
        "fifo.ids.max-length",
        "fifo",
        "The maximum length of MessageDeduplicationId [and of MessageGroupId] is 128 characters.",
        SEND_MESSAGE,
        128,
        "InvalidParameterValue",
    ),
    Rule(
        "fifo.ids.characters",
        "fifo",
        "MessageDeduplicationId [and MessageGroupId] can contain alphanumeric characters (a-z, A-Z, "
        "0-9) and punctuation (!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~).",
        SEND_MESSAGE,
        ALNUM + PUNCTUATION,
        "InvalidParameterValue",
    ),
)
"""AWS's documented SQS rules for sending, one record each (the documentation's words abridged
with ``[...]`` where a bullet list was joined into one sentence)."""

RULE = {rule.id: rule for rule in RULES}


__all__ = ["ALNUM", "PUNCTUATION", "RULE", "RULES", "Limit", "Rule", "Scope"]
