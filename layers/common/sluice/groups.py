"""The message group id: the tenant of a fair queue, kept on every hop sluice sends a message on.

Since July 2025 a STANDARD queue whose messages carry ``MessageGroupId`` is a *fair queue*: SQS takes
the group id as the message's tenant and, when one tenant's backlog grows, delivers the quiet tenants'
messages first. That only holds if the id survives every hop, so wherever sluice sends a message it
received (redrive, the long-delay pipeline, claim-check sends, poison isolation, the CLI's replays) it
sends it again with the id it had.

Where the id comes from, first found wins (:func:`group_of`):

1. the ``MessageGroupId`` system attribute SQS delivered the message with (a Lambda record's
   ``attributes.MessageGroupId``, ReceiveMessage's ``Attributes.MessageGroupId``): SQS checked it;
2. the envelope's ``group`` field, where a hop cannot carry the SQS attribute (a body parked in S3, a
   schedule's input) or a producer wrote it (:func:`sluice.delay.send_delayed`'s ``group_id``).

The envelope's field is producer-writable, so it is untrusted: :func:`check_group_id` applies SQS's
rule (1 to 128 characters of letters, digits and ``!"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~``). A malformed
one is dropped with a problem the hop logs with the message id and counts in ``EnvelopesCorrupt``;
the message goes on without a group (a fair queue then treats it as its own tenant), never refused by
SQS for it nor lost.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping
from typing import Any

from sluice.errors import InvalidEventError

__all__ = [
    "GROUP_ID",
    "MAX_GROUP_ID",
    "MalformedGroupId",
    "check_group_id",
    "group_of",
    "group_param",
    "sendable_group",
]

GROUP_ID = "MessageGroupId"
"""The SQS parameter and the system attribute a message's group id travels in."""
MAX_GROUP_ID = 128
"""SQS's limit on a ``MessageGroupId`` (characters)."""
_ALLOWED = re.compile("[" + re.escape(string.ascii_letters + string.digits + string.punctuation) + "]+")


class MalformedGroupId(InvalidEventError):  # noqa: N818 - reads as the fact it reports
    """A group id SQS would refuse: empty, longer than 128 characters, or a character outside its set."""


def check_group_id(value: object) -> str | None:
    """``value`` when it is a group id SQS accepts, None for None; raises :class:`MalformedGroupId`
    naming what is wrong (never echoing more than 40 characters of it)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise MalformedGroupId(f"a MessageGroupId must be a string, got {type(value).__name__}")
    shown = repr(value[:40]) + ("…" if len(value) > 40 else "")
    if not value:
        raise MalformedGroupId("a MessageGroupId must not be empty")
    if len(value) > MAX_GROUP_ID:
        raise MalformedGroupId(
            f"a MessageGroupId is at most {MAX_GROUP_ID} characters, got {len(value)}: {shown}"
        )
    if not _ALLOWED.fullmatch(value):
        raise MalformedGroupId(f"a MessageGroupId takes only letters, digits and ASCII punctuation: {shown}")
    return value


def group_of(system: Mapping[str, Any] | None, carried: object) -> tuple[str | None, str | None]:
    """(group id, problem): SQS's ``MessageGroupId`` in ``system`` when it delivered one, else the
    envelope's ``carried`` one if it is well-formed; a malformed one is dropped and ``problem`` says why."""
    delivered = (system or {}).get(GROUP_ID)
    if isinstance(delivered, str) and delivered:
        try:
            return check_group_id(delivered), None
        except MalformedGroupId as exc:  # only a hand-made event gets here: SQS checks what it takes
            return None, f"ignoring the delivered group id: {exc}"
    try:
        return check_group_id(carried), None
    except MalformedGroupId as exc:
        return None, f"ignoring the envelope's group id: {exc}"


def sendable_group(value: object) -> str | None:
    """An envelope's ``group`` as a send carries it: itself when SQS accepts it, else None (a hop's
    :class:`~sluice.arrival.Arrival` already dropped a malformed one and said so: this never raises)."""
    try:
        return check_group_id(value)
    except MalformedGroupId:
        return None


def group_param(group: object) -> dict[str, str]:
    """``{"MessageGroupId": group}`` to add to a SendMessage call or batch entry when ``group`` is a
    group id SQS accepts (:func:`sendable_group`), else nothing."""
    checked = sendable_group(group)
    return {} if checked is None else {GROUP_ID: checked}
