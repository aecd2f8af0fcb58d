"""Reading a queue without disturbing it: receive, hold briefly, always give the messages back.

Every message a scan receives stays invisible only while the scan runs (a short visibility timeout)
and is released with ``ChangeMessageVisibility 0`` when the scan ends, so consumers see it again at
once. Receiving does increase a message's ``ApproximateReceiveCount``.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from sluice.arrival import Arrival
from sluice.envelope import Envelope, Seal, SendAttributes

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_sqs.type_defs import MessageTypeDef

SQS_MAX_BATCH = 10
PREVIEW_CHARS = 120


@dataclass(frozen=True)
class Received:
    """One received message, as :meth:`sluice.arrival.Arrival.from_message` reads it: body, user
    attributes and the sluice envelope as it travels, split apart."""

    arrival: Arrival
    receipt_handle: str

    @classmethod
    def from_api(cls, message: MessageTypeDef, seal: Seal | None) -> Received:
        """``seal`` None shows the envelope unverified (the operator cannot read the key)."""
        arrival = Arrival.from_message(message, seal=seal)
        return cls(arrival, str(message["ReceiptHandle"]))

    @property
    def message_id(self) -> str:
        return self.arrival.message_id

    @property
    def body(self) -> str:
        return self.arrival.body

    @property
    def user_attributes(self) -> SendAttributes:
        return self.arrival.attributes

    @property
    def envelope(self) -> Envelope | None:
        """The envelope as it travels (none filled in for a message that carried none)."""
        return self.arrival.carried_envelope

    @property
    def group(self) -> str | None:
        """Its group id (a fair queue's tenant): the ``MessageGroupId`` SQS delivered it with, else its
        envelope's well-formed ``group`` (:func:`sluice.groups.group_of`); a replay sends it again."""
        return self.arrival.group

    @property
    def envelope_problem(self) -> str | None:
        return self.arrival.problem

    @property
    def system(self) -> Mapping[str, Any]:
        return self.arrival.system

    @property
    def sent_at(self) -> datetime | None:
        return self.arrival.sent_at

    @property
    def receives(self) -> int | None:
        return self.arrival.receives

    def matches(self, identifier: str) -> bool:
        """Its SQS message id, or the envelope's ``origin_id`` (the id of the first delivery)."""
        origin = self.envelope.origin_id if self.envelope else None
        return identifier in {self.message_id, origin}

    def preview(self, chars: int = PREVIEW_CHARS) -> str:
        flat = " ".join(self.body.split())
        return flat if len(flat) <= chars else flat[: chars - 1] + "…"

    def summary(self) -> dict[str, Any]:
        env = self.envelope
        error = env.last_error if env else None
        return {
            "messageId": self.message_id,
            "originId": env.origin_id if env else None,
            "attempts": env.attempts if env else None,
            "firstFailure": _iso(env.first_failure) if env else None,
            "lastError": None
            if error is None
            else {
                "type": error.type,
                "message": error.message,
                "at": _iso(error.at),
                "receives": error.receives,
            },
            "source": env.source if env else None,
            "tenant": self.group,
            "redrivenAt": _iso(env.redriven_at) if env else None,
            "sentAt": _iso(self.sent_at),
            "receives": self.receives,
            "bodyPreview": self.preview(),
            "envelopeProblem": self.envelope_problem,
        }

    def detail(self) -> dict[str, Any]:
        """Everything: the full forensic envelope, the user attributes, SQS's attributes, the body."""
        return {
            "messageId": self.message_id,
            "envelope": None
            if self.envelope is None
            else self.envelope.model_dump(mode="json", exclude_none=True),
            "envelopeProblem": self.envelope_problem,
            "attributes": {name: _attribute_json(value) for name, value in self.user_attributes.items()},
            "systemAttributes": dict(self.system),
            "body": self.body,
        }


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat().replace("+00:00", "Z")


def _attribute_json(value: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(value)
    if isinstance(out.get("BinaryValue"), bytes | bytearray):
        out["BinaryValue"] = base64.b64encode(out["BinaryValue"]).decode()
    return out


class QueueScan:
    """Pages through a queue in receives of 10, deduplicated by message id; releases on exit.

    The scan stops at ``limit`` messages, when a receive comes back empty, or after a run of receives
    bringing only messages already seen (:meth:`batches`). Messages the caller deletes must be passed to
    :meth:`forget`.
    """

    def __init__(
        self,
        sqs: SQSClient,
        queue_url: str,
        *,
        visibility_seconds: int = 30,
        wait_seconds: int = 1,
        limit: int | None = None,
        seal: Seal | None = None,
    ) -> None:
        self._sqs = sqs
        self._seal = seal
        self._url = queue_url
        self._visibility = visibility_seconds
        self._wait = wait_seconds
        self._limit = limit
        self._seen: set[str] = set()
        self._held: dict[str, str] = {}
        self.release_failures: list[str] = []

    @property
    def queue_url(self) -> str:
        return self._url

    def __enter__(self) -> QueueScan:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()

    def batches(self) -> Iterator[list[Received]]:
        """The queue's messages, batch by batch, each once. A receive that brings only messages already
        seen (held ones whose visibility ran out while the scan went on: they are held again) does not end
        the scan, or a queue where most messages are left where they are (another workload's pills) would
        hide the rest; it ends on an empty receive, or after as many receives in a row as it would take
        to go through every message seen twice over brought nothing new."""
        stale = 0
        while self._limit is None or len(self._seen) < self._limit:
            wanted = (
                SQS_MAX_BATCH if self._limit is None else min(SQS_MAX_BATCH, self._limit - len(self._seen))
            )
            got, new = self._receive(wanted)
            if not got:
                return
            if not new:
                stale += 1
                if stale > 2 * (len(self._seen) // SQS_MAX_BATCH + 1):
                    return
                continue
            stale = 0
            yield new

    def messages(self) -> Iterator[Received]:
        for batch in self.batches():
            yield from batch

    def receipt(self, message_id: str) -> str:
        """The latest receipt handle of a held message (a re-received message gets a new one)."""
        return self._held[message_id]

    def forget(self, message_id: str) -> None:
        """The message was deleted: nothing to release."""
        self._held.pop(message_id, None)

    def release(self) -> None:
        """Make every held message visible again now (failures are kept in ``release_failures``)."""
        held = list(self._held.items())
        self._held.clear()
        for start in range(0, len(held), SQS_MAX_BATCH):
            chunk = held[start : start + SQS_MAX_BATCH]
            entries: list[Any] = [
                {"Id": str(i), "ReceiptHandle": handle, "VisibilityTimeout": 0}
                for i, (_, handle) in enumerate(chunk)
            ]
            try:
                response = self._sqs.change_message_visibility_batch(QueueUrl=self._url, Entries=entries)
            except (ClientError, BotoCoreError) as exc:
                self.release_failures.extend(f"{message_id}: {exc}" for message_id, _ in chunk)
                continue
            for failure in response.get("Failed", []):
                message_id = chunk[int(failure["Id"])][0]
                why = f"{failure.get('Code')} {failure.get('Message', '')}"
                self.release_failures.append(f"{message_id}: {why}")

    def _receive(self, wanted: int) -> tuple[int, list[Received]]:
        """How many messages the receive brought, and those not seen before."""
        response = self._sqs.receive_message(
            QueueUrl=self._url,
            MaxNumberOfMessages=wanted,
            VisibilityTimeout=self._visibility,
            WaitTimeSeconds=self._wait,
            MessageSystemAttributeNames=["All"],
            MessageAttributeNames=["All"],
        )
        new: list[Received] = []
        for message in response.get("Messages", []):
            received = Received.from_api(message, self._seal)
            self._held[received.message_id] = received.receipt_handle
            if received.message_id not in self._seen:
                self._seen.add(received.message_id)
                new.append(received)
        return len(response.get("Messages", [])), new
