"""Long delays (up to a year) whose orchestration cost depends on due-time buckets, not on volume.

A producer puts a message on the delay queue with :func:`send_delayed` (target queue and due time in
the envelope). The batch-delay function either sends it straight to its target with the exact
residual ``DelaySeconds`` (due within the direct-send threshold, ≤ 900 s) or parks it in S3 under
``<prefix><bucket>/`` and makes sure ONE delay state machine execution exists for that bucket
(deterministic name and input, so a second start is a no-op). The execution waits until the bucket
opens and invokes the rehydrator, which sends every parked message with its residual delay — so
delivery is accurate to seconds, not to the bucket width — and deletes an object only once all its
messages were accepted. A scheduled sweep rehydrates any bucket whose time has passed (stragglers,
failed executions), so nothing parked can be orphaned.

At-least-once: a crash between sending and deleting may resend messages; each keeps its envelope's
``origin_id``, so the consumer's idempotency absorbs the duplicate.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from sluice.batchsend import Outgoing, residual_seconds
from sluice.delay.contracts import DelayExecution
from sluice.envelope import (
    ATTRIBUTE,
    Envelope,
    Seal,
    SendAttributes,
    decode,
    merge,
    split,
    string_value,
    utcnow,
)
from sluice.errors import PermanentError
from sluice.fit import Offload, fit
from sluice.groups import check_group_id, group_of, group_param, sendable_group
from sluice.limits import MAX_LONG_DELAY_SECONDS, MAX_MESSAGE_BYTES
from sluice.sqs import allowlisted, message_bytes, queue_identity
from sluice.tracing import system_attributes

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

MAX_DELAY = timedelta(seconds=MAX_LONG_DELAY_SECONDS)
OBJECT_VERSION = 1


# --- producer ----------------------------------------------------------------------------------


def requested_due(sent: datetime, *, deliver_at: datetime | None, delay_seconds: float | None) -> datetime:
    """When a delay asked for at ``sent`` is due: exactly one of ``deliver_at`` (timezone-aware) or
    ``delay_seconds``, at most 365 days away; anything else is a :class:`ValueError` saying why (what
    :func:`send_delayed` and ``record.later`` refuse, before anything is sent)."""
    if (deliver_at is None) == (delay_seconds is None):
        raise ValueError("give exactly one of deliver_at or delay_seconds")
    if delay_seconds is not None and not 0 <= delay_seconds <= MAX_LONG_DELAY_SECONDS:
        raise ValueError(f"delay_seconds {delay_seconds} is outside 0 to 365 days")
    due = deliver_at if deliver_at is not None else sent + timedelta(seconds=float(delay_seconds or 0))
    if due.tzinfo is None:
        raise ValueError("deliver_at must be timezone-aware (UTC)")
    if due - sent > MAX_DELAY:  # batch-delay would isolate it; refused here, where the caller can see why
        raise ValueError(f"deliver_at {due.isoformat()} is more than 365 days away")
    return due


def send_delayed(
    sqs: SQSClient,
    *,
    delay_queue_url: str,
    target: str,
    body: str,
    deliver_at: datetime | None = None,
    delay_seconds: float | None = None,
    attributes: SendAttributes | None = None,
    keep_identity: bool = False,
    seal: Seal | None = None,
    group_id: str | None = None,
    now: Callable[[], datetime] = utcnow,
) -> str:
    """Ask for ``body`` to be delivered to queue ``target`` at ``deliver_at`` (or after ``delay_seconds``),
    at most 365 days away (further, or a negative ``delay_seconds``: :class:`ValueError`).

    The delayed message is a NEW message with its own identity, even when ``attributes`` carry the
    envelope of the message being handled (a follow-up, a "check again later"): otherwise it would share
    that message's idempotency key and be skipped as a duplicate. ``keep_identity=True`` is for
    re-sending the SAME message later (a redrive, a replay): its envelope is kept and updated, and
    its bookkeeping survives only when ``seal`` holds the stack's key (:func:`sluice.sealing.load_seal`);
    a producer without it sends an unsealed envelope, whose bookkeeping sluice ignores.

    ``group_id`` is the message's ``MessageGroupId`` (its tenant on a fair queue): it travels in the
    envelope's ``group`` through the park and is sent with the message to ``target``; a re-send with
    ``keep_identity`` keeps the group its envelope has when none is given. A group id SQS would refuse
    is a :class:`~sluice.groups.MalformedGroupId` (a ``ValueError``), raised before anything is sent.
    """
    group = check_group_id(group_id)
    due = requested_due(now(), deliver_at=deliver_at, delay_seconds=delay_seconds)
    user, envelope, _ = split(dict(attributes or {}), body=body, seal=seal)
    if not keep_identity or envelope is None:  # a new message, on the same trace as the one handled
        envelope = Envelope(
            trace=envelope.trace if envelope is not None else None,
            traceparent=envelope.traceparent if envelope is not None else None,
        )
    group = group or sendable_group(envelope.group)
    envelope = envelope.model_copy(update={"deliver_at": due, "target": target, "group": group})
    response = sqs.send_message(
        QueueUrl=delay_queue_url,
        MessageBody=body,
        MessageAttributes=merge(user, envelope, body=body, seal=seal),  # type: ignore[arg-type]
        MessageSystemAttributes=system_attributes(envelope.trace),  # type: ignore[arg-type]
        **group_param(group),  # type: ignore[arg-type]
    )
    return response["MessageId"]


# --- planning ----------------------------------------------------------------------------------


def check_target(target: str | None, allowlist: Iterable[str]) -> str:
    """The target must be a queue URL naming an allowed queue (allowlist entries are queue URLs or ARNs,
    compared by account and queue name): a message must not route itself anywhere."""
    if not target:
        raise PermanentError("delayed message has no target queue in its envelope")
    identity = queue_identity(target) if target.startswith(("https://", "http://")) else None
    if identity is None:
        raise PermanentError(f"delay target {target!r} is not a queue URL")
    if not allowlisted(target, allowlist):
        raise PermanentError(f"delay target {target!r} is not in the allowlist")
    return target


def due_time(
    envelope: Envelope, *, now: datetime, grace_seconds: int, sent_at: datetime | None = None
) -> datetime:
    """The message's due time, validated: within a year, and not further in the past than the grace
    **when it was sent** (``sent_at``, SQS's ``SentTimestamp``; ``now`` when unknown). A request that was
    valid when sent and is overdue only because its delivery was retried (a failed invocation returns
    it after the delay queue's visibility timeout) is due now, never poisoned for the wait."""
    due = envelope.deliver_at
    if due is None:
        raise PermanentError("delayed message has no deliver_at in its envelope")
    if due.tzinfo is None:
        raise PermanentError(f"deliver_at {due.isoformat()} has no time zone")
    if due - now > MAX_DELAY:
        raise PermanentError(f"deliver_at {due.isoformat()} is more than 365 days away")
    if min(now, sent_at or now) - due > timedelta(seconds=grace_seconds):
        raise PermanentError(
            f"deliver_at {due.isoformat()} was more than {grace_seconds}s in the past when it was sent"
        )
    return due


def bucket_of(due: datetime, width: int) -> int:
    """Epoch second at which ``due``'s bucket opens (buckets are ``width`` seconds wide)."""
    epoch = int(due.timestamp())
    return epoch - epoch % width


def bucket_prefix(prefix: str, bucket: int) -> str:
    return f"{prefix}{bucket}/"


def execution_name(bucket: int) -> str:
    return f"bucket-{bucket}"


def execution_arn(state_machine_arn: str, name: str) -> str:
    """``arn:…:stateMachine:M`` + ``name`` → ``arn:…:execution:M:name``."""
    head, sep, machine = state_machine_arn.rpartition(":stateMachine:")
    if not sep:
        raise ValueError(f"not a state machine ARN: {state_machine_arn!r}")
    return f"{head}:execution:{machine}:{name}"


def execution_input(prefix: str, bucket: int) -> str:
    """Deterministic (same bucket → same bytes), so a repeated StartExecution is recognised."""
    wake_at = datetime.fromtimestamp(bucket, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    execution: DelayExecution = {
        "bucket": bucket,
        "prefix": bucket_prefix(prefix, bucket),
        "wake_at": wake_at,
    }
    return json.dumps(execution, sort_keys=True)


# --- parked objects ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Parked:
    """A message at rest in S3: where it goes, when, and everything needed to send it unchanged."""

    key: str
    target: str
    due: datetime
    body: str
    attributes: SendAttributes  # user attributes + the envelope, SendMessage shape (binary base64)
    tries: int = 0  # rehydration cycles in which the target refused this message

    def outgoing(self, now: datetime) -> Outgoing:
        """The message as sent at ``now``, with the ``MessageGroupId`` its envelope's ``group`` carried
        through the park (an S3 object or a schedule's input has no SQS attribute to keep it)."""
        attributes = _decode_binary(self.attributes)
        group = sendable_group(self.group)
        return Outgoing(
            self.key, self.body, attributes, residual_seconds(self.due, now), group=group, due=self.due
        )

    @property
    def group(self) -> object:
        """Its envelope's ``group`` as parked (untrusted: :func:`sluice.groups.sendable_group` checks it)."""
        raw = string_value(self.attributes, ATTRIBUTE)
        envelope, _ = decode(raw)
        return None if envelope is None else envelope.group

    def sendable(self, now: datetime, *, seal: Seal | None, offload: Offload) -> tuple[Outgoing, str | None]:
        """The message as it is sent now, and why its seal did not verify (None when it did: every
        parked message is checked as it leaves). A body parked inline that is too large beside its
        envelope is offloaded at this moment, never at parking, so its claim-check object outlives the
        delay. Raises :class:`~sluice.fit.UnfittableError` when SQS would refuse it however it is sent."""
        out = self.outgoing(now)
        user, envelope, problem = split(out.attributes, body=out.body, seal=seal)
        out = replace(out, trace=envelope.trace if envelope is not None else None)  # one trace, end to end
        if self.group is not None and out.group is None:  # parked by a producer-written envelope
            _, why = group_of(None, self.group)
            problem = "; ".join(p for p in (problem, why) if p)
        if message_bytes(out.body, out.attributes) <= MAX_MESSAGE_BYTES:
            return out, problem  # sent as parked: a seal that failed here fails at the consumer too
        base = envelope or Envelope(origin_id=self.key, target=self.target, deliver_at=self.due)
        fitted = fit(out.body, user, base, seal=seal, offload=offload)
        return replace(out, body=fitted.body, attributes=fitted.attributes), problem


def encode_object(bucket: int, messages: Iterable[Parked]) -> bytes:
    doc = {
        "v": OBJECT_VERSION,
        "bucket": bucket,
        "messages": [
            {
                "key": m.key,
                "target": m.target,
                "due": m.due.isoformat(),
                "body": m.body,
                "attributes": _encode_binary(m.attributes),
                **({"tries": m.tries} if m.tries else {}),
            }
            for m in messages
        ],
    }
    return json.dumps(doc, separators=(",", ":")).encode()


def decode_object(data: bytes) -> list[Parked]:
    doc = json.loads(data)
    if doc.get("v") != OBJECT_VERSION:
        raise ValueError(f"unknown parked-object version {doc.get('v')!r}")
    return [
        Parked(
            m["key"],
            m["target"],
            datetime.fromisoformat(m["due"]),
            m["body"],
            m.get("attributes") or {},
            int(m.get("tries", 0)),
        )
        for m in doc["messages"]
    ]


def _encode_binary(attributes: Mapping[str, Mapping[str, Any]]) -> SendAttributes:
    import base64  # noqa: PLC0415

    out: SendAttributes = {}
    for name, value in attributes.items():
        item = dict(value)
        if isinstance(item.get("BinaryValue"), bytes | bytearray):
            item["BinaryValue"] = {"b64": base64.b64encode(item["BinaryValue"]).decode()}
        out[name] = item
    return out


def _decode_binary(attributes: Mapping[str, Mapping[str, Any]]) -> SendAttributes:
    import base64  # noqa: PLC0415

    out: SendAttributes = {}
    for name, value in attributes.items():
        item = dict(value)
        if isinstance(item.get("BinaryValue"), dict):
            item["BinaryValue"] = base64.b64decode(item["BinaryValue"]["b64"])
        out[name] = item
    return out
