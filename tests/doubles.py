"""Test doubles and readers shared by the whole suite: one recording stand-in per collaborator, one
reader per thing tests look at.

Each double records what it was asked and answers like AWS would; a test uses only the calls it needs.
"""

from __future__ import annotations

import copy
import threading
from collections import Counter
from collections.abc import Mapping
from typing import Any

from sluice.envelope import ATTRIBUTE, Envelope, ErrorInfo

__all__ = ["Failures", "FakeSqs", "RecordingMetrics", "envelope_of", "last_error_of"]

Failures = dict[str, tuple[str, bool]]
"""Per SendMessageBatch call: message body → (error code, sender fault) for the entries SQS refuses."""


class RecordingMetrics:
    """A metric sink (``add_metric``) that sums what it is given, safely from several threads.

    ``values`` is a Counter: a metric never emitted reads 0. ``unit``, when given, is the only unit
    accepted (an assertion, so a metric emitted with another unit fails the test).
    """

    def __init__(self, unit: str | None = None) -> None:
        self.values: Counter[str] = Counter()  # sums of ints stay ints, as the tests compare
        self._unit = unit
        self._lock = threading.Lock()

    def add_metric(self, name: str, unit: str, value: float) -> None:
        assert self._unit is None or unit == self._unit, f"{name} emitted in {unit}, expected {self._unit}"
        with self._lock:
            self.values[name] += value  # type: ignore[assignment]  # Counter holds floats too


class FakeSqs:
    """The SQS client calls sluice makes, recorded and answered in SQS's shapes.

    - ``send_message``: recorded in ``sent``; answers ids ``m-1``, ``m-2``, …
    - ``send_message_batch``: recorded (deep copies) in ``batch_calls``; follows ``script``, one step
      per call: a :data:`Failures` (those entries fail) or an exception (raised).
    - ``change_message_visibility_batch``: recorded as (queue URL, entries) in ``visibility_calls``;
      entries whose receipt handle is in ``refuse`` fail; ``error`` is raised instead when set;
      ``called`` is set on every call.
    """

    def __init__(
        self,
        *script: Failures | BaseException,
        refuse: set[str] | None = None,
        error: Exception | None = None,
    ) -> None:
        self.script = list(script)
        self.sent: list[dict[str, Any]] = []
        self.batch_calls: list[dict[str, Any]] = []
        self.visibility_calls: list[tuple[str, list[dict[str, Any]]]] = []
        self.refuse = refuse or set()
        self.error = error
        self.called = threading.Event()

    # --- SendMessage ---------------------------------------------------------------------------

    def send_message(self, **kwargs: Any) -> dict[str, str]:
        self.sent.append(kwargs)
        return {"MessageId": f"m-{len(self.sent)}"}

    # --- SendMessageBatch ----------------------------------------------------------------------

    def send_message_batch(self, **kwargs: Any) -> dict[str, Any]:
        self.batch_calls.append(copy.deepcopy(kwargs))
        step = self.script.pop(0) if self.script else {}
        if isinstance(step, BaseException):
            raise step
        successful, failed = [], []
        for entry in kwargs["Entries"]:
            if entry["MessageBody"] in step:
                code, sender_fault = step[entry["MessageBody"]]
                failed.append(
                    {
                        "Id": entry["Id"],
                        "Code": code,
                        "Message": f"{code} for {entry['Id']}",
                        "SenderFault": sender_fault,
                    }
                )
            else:
                successful.append(
                    {"Id": entry["Id"], "MessageId": f"id-{entry['Id']}", "MD5OfMessageBody": "x"}
                )
        return {"Successful": successful, "Failed": failed}

    def bodies(self) -> list[list[str]]:
        """The message bodies of each SendMessageBatch call."""
        return [[entry["MessageBody"] for entry in call["Entries"]] for call in self.batch_calls]

    # --- ChangeMessageVisibilityBatch ----------------------------------------------------------

    def change_message_visibility_batch(self, **kwargs: Any) -> dict[str, Any]:
        entries = [dict(entry) for entry in kwargs["Entries"]]
        self.visibility_calls.append((kwargs["QueueUrl"], entries))
        self.called.set()
        if self.error is not None:
            raise self.error
        return {
            "Successful": [{"Id": e["Id"]} for e in entries if e["ReceiptHandle"] not in self.refuse],
            "Failed": [
                {"Id": e["Id"], "Code": "ReceiptHandleIsInvalid", "SenderFault": True, "Message": "gone"}
                for e in entries
                if e["ReceiptHandle"] in self.refuse
            ],
        }

    def handles(self, call: int | None = None) -> list[str]:
        """The receipt handles of one visibility call (all calls when None)."""
        calls = self.visibility_calls if call is None else [self.visibility_calls[call]]
        return [entry["ReceiptHandle"] for _, entries in calls for entry in entries]


# --- readers -----------------------------------------------------------------------------------


def envelope_of(message: Mapping[str, Any]) -> Envelope:
    """The sluice envelope of an SQS API message or batch entry (``MessageAttributes``) or of a
    redrive plan (``messageAttributes``); fails the test when there is none."""
    attributes = message.get("MessageAttributes") or message.get("messageAttributes") or {}
    assert ATTRIBUTE in attributes, f"no sluice envelope among {sorted(attributes)}"
    return Envelope.model_validate_json(attributes[ATTRIBUTE]["StringValue"]).model_copy(update={"sig": None})


def last_error_of(message: Mapping[str, Any]) -> ErrorInfo:
    """The last error the message's envelope records; fails the test when it records none."""
    error = envelope_of(message).last_error
    assert error is not None, "the envelope records no error"
    return error


def sealed(envelope: Envelope, body: str) -> str:
    """The envelope attribute's value as sluice's functions write it (sealed with the tests' key for
    ``body``): what a test puts on a queue to stand for a message sluice already handled."""
    from tests.conftest import TEST_SEAL  # noqa: PLC0415 - conftest imports boto3 and moto

    return TEST_SEAL.sign(envelope, body).to_json()


def seal_envelopes(event: Any) -> Any:
    """``event`` with every sluice envelope in it sealed for the body beside it, as sluice wrote it.

    The files in events/ carry readable, unsealed envelopes (a deployed stack seals with its own key);
    a test that runs one through its handler seals them with the tests' key first.
    """
    if isinstance(event, list):
        return [seal_envelopes(item) for item in event]
    if not isinstance(event, dict):
        return event
    out = {key: seal_envelopes(value) for key, value in event.items()}
    body = out.get("body", out.get("Body"))
    attributes = out.get("messageAttributes") or out.get("MessageAttributes")
    if isinstance(body, str) and isinstance(attributes, dict) and isinstance(attributes.get(ATTRIBUTE), dict):
        value = dict(attributes[ATTRIBUTE])
        field = "stringValue" if "stringValue" in value else "StringValue"
        if isinstance(value.get(field), str):
            value[field] = sealed(Envelope.model_validate_json(value[field]), body)
            attributes = {**attributes, ATTRIBUTE: value}
            out["messageAttributes" if "messageAttributes" in out else "MessageAttributes"] = attributes
    return out


def extended_client_session() -> Any:
    """The AWS Extended Client for Python's session class (``amazon-sqs-extended-client``).

    Importing the package replaces ``boto3.Session`` process-wide (its README's setup); that is undone
    at once, so only the clients a test makes from this class are extended."""
    import boto3  # noqa: PLC0415

    saved = (boto3.Session, boto3.session.Session, boto3.DEFAULT_SESSION)
    try:
        from sqs_extended_client.client import SQSExtendedClientSession  # noqa: PLC0415
    finally:
        boto3.Session, boto3.session.Session, boto3.DEFAULT_SESSION = saved  # type: ignore[misc]
    return SQSExtendedClientSession


class RunsEachJob:
    """A stand-in job worker's ``run_batch``: its own ``run`` for each delivery, in order; what a run
    raises is that delivery's result (the job consumer raises it in the record's pass)."""

    def run(self, job_id: Any, *, deadline: float | None = None, trace: str | None = None) -> Any:
        raise NotImplementedError  # each stand-in says what a run does

    def run_batch(self, deliveries: Any, *, deadline: float | None = None) -> list[Any]:
        results: list[Any] = []
        for delivery in deliveries:
            try:
                results.append(self.run(delivery.job_id, deadline=deadline, trace=delivery.trace))
            except Exception as exc:  # noqa: BLE001 - the delivery's result
                results.append(exc)
        return results
