"""The observer: a deployed stack seen from outside, through AWS state and sluice's published names.

What it reads:

- the example processor's **ledger table** (output ``LedgerTableName``): one item per side effect
  performed (``examples/orders/processor.py``), so a charge that really happened twice shows as two
  items — this is how scenarios tell what was charged, and when;
- **queues** (peeked with visibility 0), their depths, **S3** objects;
- the redrive state machine's **executions and history** (``RedriveMode=stepfunctions``): the Plan
  task's output (the decision) and the Redrive task's ``sqs:sendMessage`` (the send);
- the functions' JSON **log lines**, found only by their ``event`` key (``sluice.logevents.LogEvent``,
  never by their message text), for what only the functions know: a duplicate skipped, a record
  retried or dead-lettered by the consumer, and in ``lambda`` mode the redriver's decisions and the
  end of each run.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from sluice.envelope import ATTRIBUTE, Envelope, Seal
from sluice.logevents import EVENT, LogEvent
from sluice.redrive.contracts import Action
from sluice.sealing import load_seal
from sluice_local.app.messages import ORDERS
from sluice_local.emulation.iam.acting import STAGING_ACCESS_KEY

CHARGE = "charge"
"""The example processor's charge, as its ledger names it (``processor.CHARGE``)."""
OBSERVER_CONNECT_SECONDS = 60
"""How long the observer waits for a PostgreSQL connection, one attempt or several while the server refuses
(the functions wait sluice's default, 5 s, once)."""

SENT_BACK: frozenset[Action] = frozenset({"redrive", "delay"})
STAGING = "staging"
"""``Stack.client(service, STAGING)``: the harness standing in for AWS itself."""
"""The redrive decisions that send a message back towards its source (the rest isolate it)."""


@dataclass(frozen=True)
class SideEffect:
    """One item of the ledger: a side effect the example processor performed."""

    order_id: str
    effect: str
    at: datetime
    request_id: str
    execution_id: str


@dataclass(frozen=True)
class Redrive:
    """One redrive decision or send, seen from outside."""

    origin_id: str
    attempt: int
    action: str
    """redrive (to the source, DelaySeconds or after a wait), delay (long-delay pipeline) or poison."""
    delay_seconds: int
    at: datetime
    received: datetime | None = None
    """lambda mode: when the redriver's receive of the message's batch returned (what its velocity limit
    paces; the send follows by the batch's handling time, which a loaded machine stretches)."""


@dataclass
class _Execution:
    """What one redrive state machine execution's history tells (kept once the execution ended)."""

    decisions: list[Redrive]
    sends: list[Redrive]


@dataclass
class Stack:
    """A deployed stack seen from outside: endpoint, outputs and the functions' log file."""

    endpoint: str
    outputs: dict[str, str]
    log_path: Path
    region: str = "us-east-1"
    credentials: dict[str, dict[str, str]] = field(default_factory=dict)
    """Who else acts on the stack (``producer``, ``operator``): their ``AWS_*`` credentials."""
    _clients: dict[tuple[str, str | None], Any] = field(default_factory=dict)
    _job_store: Any = None
    _log_entries: list[dict[str, Any]] = field(default_factory=list)
    _log_offset: int = 0
    _log_partial: bytes = b""
    _finished: dict[str, _Execution] = field(default_factory=dict)
    _failures: dict[str, tuple[str, str]] = field(default_factory=dict)

    def client(self, service: str, who: str | None = None) -> Any:
        """A client of the administrator (who deployed the stack and watches it), or of ``who``
        (``producer``: sends, ``operator``: runs the CLI), with their own credentials; ``staging``:
        the harness putting state where only AWS itself puts it (a message in a dead-letter queue)."""
        key = (service, who)
        if key not in self._clients:
            from sluice_local.emulation.endpoint import endpoint_client  # noqa: PLC0415 - it imports boto3

            credentials = self.credentials[who] if who not in {None, STAGING} else None
            if who == STAGING:  # the harness standing in for AWS itself (a DLQ move): not authorized
                credentials = {"AWS_ACCESS_KEY_ID": STAGING_ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": "staging"}
            self._clients[key] = endpoint_client(service, self.endpoint, self.region, credentials)
        return self._clients[key]

    def seal(self) -> Seal:
        """The stack's envelope key, as its functions load it: for writing what sluice itself writes."""
        return load_seal(self.outputs["EnvelopeKeySecretArn"], client=self.client("secretsmanager"))

    # --- the ledger ------------------------------------------------------------------------------

    def side_effects(self, prefix: str, effect: str = CHARGE) -> list[SideEffect]:
        """Every ``effect`` the example processor performed for an order id starting with ``prefix``."""
        kwargs: dict[str, Any] = {
            "TableName": self.outputs["LedgerTableName"],
            "FilterExpression": "begins_with(order_id, :prefix) AND effect = :effect",
            "ExpressionAttributeValues": {":prefix": {"S": prefix}, ":effect": {"S": effect}},
            "ConsistentRead": True,
        }
        found: list[SideEffect] = []
        while True:
            page = self.client("dynamodb").scan(**kwargs)
            found += [
                SideEffect(
                    order_id=item["order_id"]["S"],
                    effect=item["effect"]["S"],
                    at=datetime.fromisoformat(item["performed_at"]["S"]),
                    request_id=item["request_id"]["S"],
                    execution_id=item["execution_id"]["S"],
                )
                for item in page.get("Items", [])
            ]
            if "LastEvaluatedKey" not in page:
                return found
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def job_store(self) -> Any:
        """A :class:`sluice.jobs.JobStore` on the stack's job store (its DSN read from the stack's secret,
        as the job functions read it); None when the stack has no database."""
        arn = self.outputs.get("DatabaseSecretArn")
        if not arn:
            return None
        if self._job_store is None:
            from sluice.errors import JobStoreUnavailable  # noqa: PLC0415
            from sluice.jobs import Connector, JobStore, dsn_from_secret  # noqa: PLC0415 - psycopg only with jobs

            dsn = dsn_from_secret(
                self.client("secretsmanager").get_secret_value(SecretId=arn)["SecretString"]
            )

            # the observer produces and reads as a test's tool: a loaded machine may take longer than the
            # functions' connect timeout to fork a backend, or have every connection slot taken for a
            # while by the stacks beside it ("too many clients"), and a seed must not die of that
            class Patient(Connector):
                def _connect(self) -> Any:
                    deadline = time.monotonic() + OBSERVER_CONNECT_SECONDS
                    while True:
                        try:
                            return super()._connect()
                        except JobStoreUnavailable:
                            if time.monotonic() >= deadline:
                                raise
                            time.sleep(0.5)  # between attempts, under the deadline above

            connector = Patient(
                lambda _refresh: dsn,
                application_name="sluice-observer",
                connect_timeout_seconds=OBSERVER_CONNECT_SECONDS,
            )
            self._job_store = JobStore(connector, schema=self.outputs["JobsSchema"], worker="observer")
        return self._job_store

    def charges(self, prefix: str) -> Counter[str]:
        """Order id → how many times it was charged, for order ids starting with ``prefix``."""
        return Counter(e.order_id for e in self.side_effects(prefix, CHARGE))

    # --- queues ----------------------------------------------------------------------------------

    def peek(self, output: str) -> list[dict[str, Any]]:
        """Messages on a queue, looked at without taking them (visibility 0)."""
        sqs = self.client("sqs")
        seen: dict[str, dict[str, Any]] = {}
        for _ in range(3):
            for m in sqs.receive_message(
                QueueUrl=self.outputs[output],
                MaxNumberOfMessages=10,
                VisibilityTimeout=0,
                MessageAttributeNames=["All"],
                MessageSystemAttributeNames=["All"],
            ).get("Messages", []):
                seen[m["MessageId"]] = m
        return list(seen.values())

    def every_message(self, output: str) -> list[dict[str, Any]]:
        """Every message on the queue of ``output`` (:func:`every_message`)."""
        return every_message(self.client("sqs"), self.outputs[output])

    def queue_depths(self, output: str) -> tuple[int, int]:
        attrs = self.client("sqs").get_queue_attributes(
            QueueUrl=self.outputs[output],
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        return int(attrs["ApproximateNumberOfMessages"]), int(attrs["ApproximateNumberOfMessagesNotVisible"])

    # --- the functions' log lines ----------------------------------------------------------------

    def logs(self) -> list[dict[str, Any]]:
        """Every JSON log line so far (read incrementally: only what was appended since the last call)."""
        try:
            size = self.log_path.stat().st_size
        except FileNotFoundError:
            return self._log_entries
        if size < self._log_offset:  # a new file: start over
            self._log_entries, self._log_offset, self._log_partial = [], 0, b""
        with self.log_path.open("rb") as f:
            f.seek(self._log_offset)
            chunk = f.read()
        self._log_offset += len(chunk)
        *lines, self._log_partial = (self._log_partial + chunk).split(b"\n")
        for raw in lines:
            line = raw.decode("utf-8", errors="replace")
            if line.startswith("{"):
                try:
                    self._log_entries.append(json.loads(line))
                except ValueError:
                    continue
        return self._log_entries

    def logged(self, *events: LogEvent) -> list[dict[str, Any]]:
        """The log lines whose ``event`` is one of ``events``."""
        return [e for e in self.logs() if e.get(EVENT) in events]

    # --- the redrive -----------------------------------------------------------------------------

    @property
    def redrive_mode(self) -> str:
        return self.outputs.get("RedriveMode", "lambda")

    def redrive_decisions(self) -> list[Redrive]:
        """What the redrive decided per dead-lettered message (``at`` = when decided).

        lambda mode: the redriver's log lines (re-driven, isolated); stepfunctions mode: the Plan
        task's output in the executions' history.
        """
        if self.redrive_mode == "stepfunctions":
            return [d for execution in self._executions_seen() for d in execution.decisions]
        out = []
        for e in self.logged(LogEvent.MESSAGE_REDRIVEN, LogEvent.MESSAGE_ISOLATED):
            at = logged_at(e)
            if e.get("origin_id") and e.get("attempt") is not None and at is not None:
                received = e.get("received_at")
                out.append(
                    Redrive(
                        str(e["origin_id"]),
                        int(e["attempt"]),
                        str(e.get("action")),
                        int(e.get("delay_seconds") or 0),
                        at,
                        datetime.fromisoformat(received) if isinstance(received, str) else None,
                    )
                )
        return out

    def redrive_sends(self) -> list[Redrive]:
        """Messages sent back to their source queue, with the time of the send.

        lambda mode: the redriver logs a re-driven message right after its SendMessageBatch;
        stepfunctions mode: the Redrive task (``sqs:sendMessage``) of the redrive state machine's
        executions, from their history (the Plan step is earlier by the whole backoff).
        """
        if self.redrive_mode == "stepfunctions":
            return [s for execution in self._executions_seen() for s in execution.sends]
        return [d for d in self.redrive_decisions() if d.action in SENT_BACK]

    def redrive_runs(self) -> list[tuple[datetime, bool]]:
        """(when, stopped by the open circuit breaker) for every redrive run that has ended.

        lambda mode: the redriver's run-finished line (stopped by the breaker when its last check
        found it open); stepfunctions mode: every finished execution, blocked when it FAILED with
        ``CircuitBreakerOpen``.
        """
        if self.redrive_mode != "stepfunctions":
            return [
                (at, bool((e.get("breaker") or {}).get("isOpen")))
                for e in self.logged(LogEvent.RUN_FINISHED)
                if (at := logged_at(e)) is not None
            ]
        return [
            (execution["stopDate"], self._failure(execution)[0] == "CircuitBreakerOpen")
            for execution in self.executions()
            if execution["status"] != "RUNNING"
        ]

    def redrive_failures(self, since: datetime) -> list[str]:
        """stepfunctions mode: why executions started since ``since`` failed, other than by the breaker
        (a healthy redrive has none); lambda mode: always empty."""
        if self.redrive_mode != "stepfunctions":
            return []
        return [
            f"{execution['executionArn'].rsplit(':', 1)[-1]}: {error}: {cause[:240]}"
            for execution in self.executions()
            if execution["startDate"] >= since and execution["status"] == "FAILED"
            for error, cause in [self._failure(execution)]
            if error != "CircuitBreakerOpen"
        ]

    def start_redrive(self) -> None:
        """Start a redrive run now, as the backstop schedule does (Lambda Invoke / StartExecution API)."""
        if self.redrive_mode == "stepfunctions":
            self.client("stepfunctions").start_execution(
                stateMachineArn=self.outputs[ORDERS + "RedriveStateMachineArn"],
                name=f"manual-{uuid.uuid4()}",
                input='{"manual": true}',
            )
        else:
            self.client("lambda").invoke(
                FunctionName=self.outputs[ORDERS + "RedriverFunctionName"],
                InvocationType="Event",
                Payload=b'{"manual": true}',
            )

    def executions(self) -> list[dict[str, Any]]:
        """The redrive state machine's executions (stepfunctions mode), oldest first."""
        sfn = self.client("stepfunctions")
        out: list[dict[str, Any]] = []
        kwargs: dict[str, Any] = {
            "stateMachineArn": self.outputs[ORDERS + "RedriveStateMachineArn"],
            "maxResults": 1000,
        }
        while True:
            page = sfn.list_executions(**kwargs)
            out += page.get("executions", [])
            if not page.get("nextToken"):
                break
            kwargs["nextToken"] = page["nextToken"]
        return sorted(out, key=lambda e: e["startDate"])

    def _executions_seen(self) -> list[_Execution]:
        """Every execution's decisions and sends (a finished execution's history is read once)."""
        plan_function = self.outputs[ORDERS + "RedrivePlanFunctionName"]
        out: list[_Execution] = []
        for execution in self.executions():
            arn = execution["executionArn"]
            seen = self._finished.get(arn)
            if seen is None:
                events = self._history(arn)
                seen = _Execution(_plans_in(events, plan_function), _sends_in(events))
                if execution["status"] != "RUNNING":
                    self._finished[arn] = seen
            out.append(seen)
        return out

    def _failure(self, execution: dict[str, Any]) -> tuple[str, str]:
        """(error, cause) of a finished execution; ("", "") unless it FAILED."""
        arn = execution["executionArn"]
        if arn not in self._failures:
            if execution["status"] != "FAILED":
                return "", ""
            answer = self.client("stepfunctions").describe_execution(executionArn=arn)
            self._failures[arn] = (str(answer.get("error") or ""), str(answer.get("cause") or ""))
        return self._failures[arn]

    def _history(self, execution_arn: str) -> list[dict[str, Any]]:
        sfn = self.client("stepfunctions")
        events: list[dict[str, Any]] = []
        kwargs: dict[str, Any] = {"executionArn": execution_arn, "maxResults": 1000}
        while True:
            page = sfn.get_execution_history(**kwargs)
            events += page.get("events", [])
            if not page.get("nextToken"):
                return events
            kwargs["nextToken"] = page["nextToken"]


def every_message(sqs: Any, url: str) -> list[dict[str, Any]]:
    """Every message on a queue, not just the first 10 a receive returns: each batch is held briefly so
    the next receive returns the ones after it, then all are released (left where they were)."""
    messages: list[dict[str, Any]] = []
    try:
        while batch := sqs.receive_message(
            QueueUrl=url,
            MaxNumberOfMessages=10,
            VisibilityTimeout=30,
            MessageAttributeNames=["All"],
            MessageSystemAttributeNames=["All"],
        ).get("Messages", []):
            messages += batch
    finally:
        for start in range(0, len(messages), 10):
            entries = [
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"], "VisibilityTimeout": 0}
                for i, m in enumerate(messages[start : start + 10])
            ]
            sqs.change_message_visibility_batch(QueueUrl=url, Entries=entries)
    return messages


def envelope_of(message: dict[str, Any]) -> Envelope | None:
    """The sluice envelope a received message carries (None without one, or unreadable)."""
    return _envelope_in(message.get("MessageAttributes"))


def origin_ids(messages: Collection[dict[str, Any]]) -> set[str]:
    """The envelopes' ``origin_id`` of received messages (those that have one)."""
    return {env.origin_id for m in messages if (env := envelope_of(m)) is not None and env.origin_id}


def logged_at(entry: dict[str, Any]) -> datetime | None:
    """When a Powertools JSON log line was written."""
    try:
        return datetime.strptime(str(entry.get("timestamp")), "%Y-%m-%d %H:%M:%S,%f%z")
    except ValueError:
        return None


def _envelope_in(attributes: dict[str, Any] | None) -> Envelope | None:
    raw = (attributes or {}).get(ATTRIBUTE, {}).get("StringValue")
    if not raw:
        return None
    try:
        return Envelope.model_validate_json(raw)
    except ValueError:
        return None


def _scheduled(by_id: dict[int, dict[str, Any]], succeeded: dict[str, Any]) -> dict[str, Any] | None:
    """The TaskScheduled event of a TaskSucceeded one (TaskScheduled → TaskStarted → TaskSucceeded)."""
    started = by_id.get(succeeded.get("previousEventId", -1))
    scheduled = by_id.get(started.get("previousEventId", -1)) if started else None
    return scheduled if scheduled and scheduled["type"] == "TaskScheduled" else None


def _plans_in(events: list[dict[str, Any]], plan_function: str) -> list[Redrive]:
    """The Plan task's decisions in one execution history: its ``lambda:invoke`` of the plan function
    (named by the stack's outputs) returns the plan, whose attributes carry the updated envelope."""
    by_id = {e["id"]: e for e in events}
    out = []
    for e in events:
        if e["type"] != "TaskSucceeded" or e["taskSucceededEventDetails"].get("resourceType") != "lambda":
            continue
        scheduled = _scheduled(by_id, e)
        params = json.loads((scheduled or {}).get("taskScheduledEventDetails", {}).get("parameters") or "{}")
        invoked = str(params.get("FunctionName", "")).rsplit(":function:", 1)[-1].split(":", 1)[0]
        if invoked != plan_function:
            continue
        plan = json.loads(e["taskSucceededEventDetails"].get("output") or "{}").get("Payload") or {}
        env = _envelope_in(plan.get("messageAttributes"))
        if env is None or env.origin_id is None or plan.get("attempt") is None:
            continue
        delay = int(plan.get("delaySeconds") or 0)
        out.append(
            Redrive(env.origin_id, int(plan["attempt"]), str(plan.get("action")), delay, e["timestamp"])
        )
    return out


def _sends_in(events: list[dict[str, Any]]) -> list[Redrive]:
    """The Redrive task's ``sqs:sendMessage`` calls in one execution history: envelope and time."""
    by_id = {e["id"]: e for e in events}
    out = []
    for e in events:
        if e["type"] != "TaskSucceeded" or e["taskSucceededEventDetails"].get("resource") != "sendMessage":
            continue
        scheduled = _scheduled(by_id, e)
        if scheduled is None:
            continue
        params = json.loads(scheduled["taskScheduledEventDetails"].get("parameters") or "{}")
        entered = by_id.get(scheduled.get("previousEventId", -1))
        state = json.loads((entered or {}).get("stateEnteredEventDetails", {}).get("input") or "{}")
        env = _envelope_in(params.get("MessageAttributes"))
        if env is None or env.origin_id is None:
            continue
        delay = int((state.get("plan") or {}).get("delaySeconds") or 0)
        out.append(Redrive(env.origin_id, env.attempts, "redrive", delay, e["timestamp"]))
    return out
