"""A stack of yours deployed locally for a test, and what became of each message sent to it.

:func:`start_stack` deploys a SAM template (yours; the project's template.yaml by default) into the
embedded AWS as ``sluice local up`` does, in a process of its own, so its moto state never mixes with a
test's in-process mocks. :meth:`RunningStack.send` sends a message to one of its workloads' queues
(``workload=``, needed when the stack runs several);
:meth:`RunningStack.outcome` waits until the message has an end:

- ``processed``: your processor ran it to success (the consumer's ``consumer.record_processed`` line,
  logged at DEBUG: the stack runs with ``LogLevel=DEBUG`` unless told otherwise);
- ``duplicate``: it had been processed before (same idempotency key), and was skipped;
- ``poison``: isolated in the poison queue, with the reason recorded in its envelope;
- ``dead-lettered``: in a workload's dead-letter queue, with the last error recorded.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from sluice.logevents import LogEvent
from sluice_local.app.observer import Stack, envelope_of
from sluice_local.emulation.cloud import ROOT
from sluice_local.testing.project import with_workloads

__all__ = ["Outcome", "RunningStack", "configure_existing_queue", "port_is_closed", "start_stack"]

Kind = Literal["processed", "duplicate", "poison", "dead-lettered"]
POLL_SECONDS = 0.2
"""Between two looks at the stack while waiting for an outcome (a condition polled, not a sleep)."""


@dataclass(frozen=True)
class Outcome:
    """Where a message ended: ``kind``, the id of the message it ended as, and the reason recorded."""

    kind: Kind
    message_id: str
    reason: str = ""
    error_type: str = ""


@dataclass
class RunningStack:
    stack: Stack
    process: subprocess.Popen[bytes]
    port: int
    output: Path

    @property
    def workloads(self) -> list[str]:
        """The stack's workloads (its ``WorkloadNames`` output), in the template's order."""
        return [name for name in self.stack.outputs.get("WorkloadNames", "").split(",") if name]

    def queue_url(self, workload: str | None = None) -> str:
        """The queue of ``workload``: the stack's only one when not named."""
        names = self.workloads
        if workload is None and len(names) == 1:
            workload = names[0]
        if workload not in names:
            raise ValueError(
                f"name a workload of the stack ({', '.join(names) or 'it has none'})"
                if workload is None
                else f"the stack runs no workload {workload!r} (it runs {', '.join(names) or 'none'})"
            )
        return self.stack.outputs[f"{workload}QueueUrl"]

    def configure_existing_queue(self, workload: str) -> None:
        """Set on ``workload``'s existing queue what docs/workloads.md asks of a team after the first
        deploy (:func:`configure_existing_queue`)."""
        configure_existing_queue(self.stack.client, self.stack.outputs, workload)

    def send(
        self,
        body: str | dict[str, Any] | list[Any],
        *,
        workload: str | None = None,
        attributes: dict[str, str] | None = None,
    ) -> str:
        """Send ``body`` (text, or sent as its JSON) to the queue of ``workload`` (the stack's only one
        when not named); its message id."""
        return str(
            self.stack.client("sqs").send_message(
                QueueUrl=self.queue_url(workload),
                MessageBody=body if isinstance(body, str) else json.dumps(body),
                MessageAttributes={
                    name: {"DataType": "String", "StringValue": value}
                    for name, value in (attributes or {}).items()
                },
            )["MessageId"]
        )

    def outcome(self, message_id: str, *, timeout: float = 60.0) -> Outcome:
        """Wait (at most ``timeout`` s, a deadline) for the end of the message sent as ``message_id``."""
        deadline = time.monotonic() + timeout
        while True:
            found = self._ended(message_id)
            if found is not None:
                return found
            if time.monotonic() > deadline:
                depths = {name: self.stack.queue_depths(f"{name}QueueUrl") for name in self.workloads}
                raise AssertionError(
                    f"message {message_id} reached no end within {timeout} s (processed, duplicate, poison "
                    f"or dead-lettered); the workloads' queues hold (visible, in flight) {depths}"
                )
            time.sleep(POLL_SECONDS)

    def _ended(self, message_id: str) -> Outcome | None:
        ends: dict[LogEvent, Kind] = {
            LogEvent.RECORD_PROCESSED: "processed",
            LogEvent.DUPLICATE_SKIPPED: "duplicate",
        }
        for line in self.stack.logged(*ends):
            if message_id in (line.get("message_id"), line.get("correlation_id")):
                return Outcome(ends[LogEvent(line["event"])], str(line["message_id"]))
        # The poison queue, nobody else receives from: every message, not the first few a receive
        # returns. The DLQ, which the redrive drains: looked at without holding anything (visibility 0).
        looks: tuple[tuple[Callable[[str], list[dict[str, Any]]], str, Kind], ...] = (
            (self.stack.every_message, "PoisonPillQueueUrl", "poison"),
            *((self.stack.peek, f"{name}DeadLetterQueueUrl", "dead-lettered") for name in self.workloads),
        )
        for look, output, kind in looks:
            for message in look(output):
                envelope = envelope_of(message)
                origin = envelope.origin_id if envelope is not None else None
                if message_id in (message["MessageId"], origin):
                    error = envelope.last_error if envelope is not None else None
                    return Outcome(
                        kind,
                        str(message["MessageId"]),
                        reason=error.message if error else "",
                        error_type=error.type if error else "",
                    )
        return None

    def stop(self, timeout: float = 60) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
                raise AssertionError(f"local stack did not stop within {timeout}s of SIGTERM") from None
        return int(self.process.returncode)


def start_stack(
    workdir: Path,
    *,
    stack_name: str,
    template: Path | None = None,
    params: dict[str, str] | None = None,
    database_url: str | None = None,
    project: Path = ROOT,
    workloads: Sequence[str] = (),
    existing_queues: Sequence[str] = (),
    timeout: float = 180,  # a deadline, not a wait
) -> RunningStack:
    """Deploy ``template`` (default: ``project``/template.yaml) with the local runtime's fast settings
    and ``params`` over them, in its own process; returns once its endpoint answers. ``workloads``:
    only these of its workloads (a copy of the project whose workloads.yaml lists them);
    ``existing_queues``: queues the account has before the deploy, ``NAME`` or ``NAME:VISIBILITY``
    (``up --existing-queue``), for workloads with ``Queue: existing``."""
    if workloads:
        template = with_workloads(template or project / "template.yaml", workloads, workdir / "project")
    ready = workdir / f"{stack_name}.ready.json"
    log = workdir / f"{stack_name}.functions.log"
    output = workdir / f"{stack_name}.out"
    cmd = [
        sys.executable, "-m", "sluice_local", "up", "--fast",
        "--stack-name", stack_name, "--ready-file", str(ready), "--log-file", str(log),
        "--iam-usage", str(workdir / f"{stack_name}.iam.json"),
    ]  # fmt: skip
    if template is not None:
        cmd += ["--template", str(template)]
    for key, value in (params or {}).items():
        cmd += ["--param", f"{key}={value}"]
    if database_url is not None:
        cmd += ["--database-url", database_url]
    for queue in existing_queues:
        cmd += ["--existing-queue", queue]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "SLUICE_", "MOTO_"))}
    with output.open("wb") as sink:
        process = subprocess.Popen(cmd, cwd=project, env=env, stdout=sink, stderr=subprocess.STDOUT)
    try:
        _wait_ready(process, ready, output, timeout)
    except BaseException:  # the deadline, pytest-timeout or ^C: never leave the stack running
        process.kill()
        process.wait()
        raise
    info = json.loads(ready.read_text())
    stack = Stack(info["endpoint"], info["outputs"], log, info["region"], info.get("credentials", {}))
    return RunningStack(stack, process, int(info["endpoint"].rsplit(":", 1)[1]), output)


def _wait_ready(process: subprocess.Popen[bytes], ready: Path, output: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not ready.exists():
        if process.poll() is not None:
            tail = output.read_text()[-4000:]
            raise AssertionError(f"local stack exited with {process.returncode}:\n{tail}")
        if time.monotonic() > deadline:
            raise AssertionError(f"local stack not ready within {timeout}s:\n{output.read_text()[-4000:]}")
        time.sleep(0.1)  # polling the ready file, not standing in for it


def port_is_closed(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) != 0


def configure_existing_queue(client: Callable[[str], Any], outputs: dict[str, str], workload: str) -> None:
    """What docs/workloads.md asks of a team once the stack is deployed, on a workload's ``Queue:
    existing``, which the stack cannot set on a queue it does not own: the visibility timeout and the
    ``maxReceiveCount`` its consumer needs (read from the deployed consumer's own settings) and a
    redrive policy to the workload's dead-letter queue. ``client`` makes a boto3 client of the stack's
    endpoint; ``outputs``: the stack's."""
    function = outputs[f"{workload}ConsumerFunctionName"]
    config = client("lambda").get_function_configuration(FunctionName=function)
    variables = config.get("Environment", {}).get("Variables", {})
    policy = {
        "deadLetterTargetArn": outputs[f"{workload}DeadLetterQueueArn"],
        "maxReceiveCount": int(variables.get("SLUICE_MAX_RECEIVE_COUNT", "5")),
    }
    client("sqs").set_queue_attributes(
        QueueUrl=outputs[f"{workload}QueueUrl"],
        Attributes={
            "VisibilityTimeout": str(variables["SLUICE_VISIBILITY_TIMEOUT_SECONDS"]),
            "RedrivePolicy": json.dumps(policy),
        },
    )
