"""``sluice dlq stats|peek|redrive|purge``: the work queue's dead-letter queue."""

from __future__ import annotations

import argparse
import getpass
import math
import socket
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, cast

from sluice.redrive.lease import SKEW_MARGIN_SECONDS, RunLease
from sluice.redrive.runner import Redriver
from sluice_cli import OK, PARTIAL_FAILURE, USAGE_ERROR, CliError
from sluice_cli.context import Context
from sluice_cli.messages import Received
from sluice_cli.runlog import CountingSink, StderrLog

if TYPE_CHECKING:
    from aws_lambda_powertools import Logger
    from mypy_boto3_sqs.literals import QueueAttributeNameType
    from mypy_boto3_sqs.type_defs import StartMessageMoveTaskRequestTypeDef

PEEK_VISIBILITY_SECONDS = 10
NATIVE_MAX_PER_SECOND = 500
"""StartMessageMoveTask's limit for MaxNumberOfMessagesPerSecond."""
SAFETY_MILLIS = 10_000
COUNTS: dict[str, QueueAttributeNameType] = {
    "visible": "ApproximateNumberOfMessages",
    "inFlight": "ApproximateNumberOfMessagesNotVisible",
    "delayed": "ApproximateNumberOfMessagesDelayed",
}


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def add_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    dlq = sub.add_parser("dlq", help="the work queue's dead-letter queue", parents=[common])
    commands = dlq.add_subparsers(dest="action", required=True, metavar="ACTION")
    stats = commands.add_parser(
        "stats", help="depth and age of the DLQ and the poison queue", parents=[common]
    )
    stats.add_argument(
        "--sample", type=int, default=50, metavar="N", help="messages sampled for the oldest age (0: none)"
    )
    stats.set_defaults(func=stats_command)
    peek = commands.add_parser("peek", help="look at DLQ messages without delaying them", parents=[common])
    peek.add_argument("-n", type=positive_int, default=10, dest="count", help="how many (default 10)")
    peek.add_argument(
        "--tenant", default=None, metavar="GROUP_ID", help="only this MessageGroupId's messages"
    )
    peek.set_defaults(func=peek_command)
    redrive = commands.add_parser("redrive", help="send DLQ messages back to their sources", parents=[common])
    redrive.add_argument("--max-per-second", type=positive_float, default=None, metavar="N")
    redrive.add_argument("--native", action="store_true", help="SQS StartMessageMoveTask instead of sluice")
    redrive.add_argument("--max", type=positive_int, default=None, dest="max_messages", metavar="N")
    redrive.add_argument("--timeout", type=positive_float, default=None, metavar="SECONDS")
    redrive.add_argument("--status", action="store_true", help="with --native: list the move tasks")
    redrive.add_argument("--cancel", default=None, metavar="TASK_HANDLE", help="with --native: cancel one")
    redrive.add_argument("--ignore-breaker", action="store_true", help="with --native: even when open")
    redrive.add_argument(
        "--yes", action="store_true", help="with --native: confirm moving the whole DLQ with no backoff"
    )
    redrive.add_argument("-v", "--verbose", action="store_true", help="log every re-driven message")
    redrive.set_defaults(func=redrive_command)
    purge = commands.add_parser("purge", help="delete every DLQ message (needs --yes)", parents=[common])
    purge.add_argument("--yes", action="store_true", help="really delete them all")
    purge.set_defaults(func=purge_command)


# --- stats -------------------------------------------------------------------------------------


def stats_command(ctx: Context, args: argparse.Namespace) -> int:
    queues = [
        queue_stats(ctx, "dead-letter", ctx.resources.require("dead_letter_queue_url"), args.sample),
        queue_stats(ctx, "poison", ctx.resources.require("poison_queue_url"), args.sample),
    ]

    def human() -> None:
        ctx.out.table(
            f"Queues of stack {ctx.resources.stack_name}"
            + (f", workload {ctx.resources.workload}" if ctx.resources.workload else ""),
            ("queue", "visible", "in flight", "delayed", "oldest (s)", "sampled", "url"),
            [
                (
                    q["queue"],
                    q["visible"],
                    q["inFlight"],
                    q["delayed"],
                    q["oldestAgeSeconds"],
                    q["sampled"],
                    q["url"],
                )
                for q in queues
            ],
        )

    ctx.out.emit(
        {"stack": ctx.resources.stack_name, "workload": ctx.resources.workload, "queues": queues}, human
    )
    return OK


def queue_stats(ctx: Context, name: str, url: str, sample: int) -> dict[str, Any]:
    attributes = ctx.clients.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=list(COUNTS.values()))[
        "Attributes"
    ]
    counts = {key: int(attributes.get(attribute, "0")) for key, attribute in COUNTS.items()}
    sent: list[datetime] = []
    if sample > 0 and counts["visible"] > 0:
        with ctx.scan(url, visibility_seconds=PEEK_VISIBILITY_SECONDS, limit=sample) as scan:
            sent = [m.sent_at for m in scan.messages() if m.sent_at is not None]
        ctx.released(scan)
    oldest = min(sent, default=None)
    age = None if oldest is None else round((datetime.now(UTC) - oldest).total_seconds(), 1)
    return {"queue": name, "url": url, **counts, "oldestAgeSeconds": age, "sampled": len(sent)}


# --- peek --------------------------------------------------------------------------------------


def peek_command(ctx: Context, args: argparse.Namespace) -> int:
    url = ctx.resources.require("dead_letter_queue_url")
    with ctx.scan(url, visibility_seconds=PEEK_VISIBILITY_SECONDS, limit=args.count) as scan:
        messages = of_tenant(list(scan.messages()), args.tenant)
    ctx.released(scan)
    title = f"Dead-letter queue: {len(messages)} message(s)" + (
        f" of tenant {args.tenant}" if args.tenant else ""
    )
    show_messages(ctx, title, url, messages)
    return OK


def of_tenant(messages: list[Received], tenant: str | None) -> list[Received]:
    """``messages`` of one tenant (their group id: a fair queue's ``MessageGroupId``), or all of them."""
    return messages if tenant is None else [m for m in messages if m.group == tenant]


def show_messages(ctx: Context, title: str, url: str, messages: list[Received]) -> None:
    summaries = [m.summary() for m in messages]

    def human() -> None:
        ctx.out.table(
            title,
            ("message id", "sent as", "attempts", "first failure", "last error", "source", "body"),
            [
                (
                    s["messageId"],
                    s["originId"] if s["originId"] != s["messageId"] else "",  # the id its producer got
                    s["attempts"],
                    s["firstFailure"],
                    _error_text(s["lastError"]),
                    _queue_name(s["source"]),
                    s["bodyPreview"],
                )
                for s in summaries
            ],
        )

    ctx.out.emit({"queue": url, "count": len(summaries), "messages": summaries}, human)


def _error_text(error: dict[str, Any] | None) -> str | None:
    if not error:
        return None
    text = f"{error['type']}: {error['message']}"
    return text if len(text) <= 80 else text[:79] + "…"


def _queue_name(reference: str | None) -> str | None:
    return None if reference is None else reference.replace(":", "/").rsplit("/", 1)[-1]


# --- purge -------------------------------------------------------------------------------------


def purge_command(ctx: Context, args: argparse.Namespace) -> int:
    url = ctx.resources.require("dead_letter_queue_url")
    if not args.yes:
        raise CliError(f"refusing to purge {url} without --yes: every message in it is deleted", USAGE_ERROR)
    ctx.clients.sqs.purge_queue(QueueUrl=url)
    ctx.out.emit(
        {"queue": url, "purged": True},
        lambda: ctx.out.line(f"purge of {url} started (SQS takes up to 60 s to delete every message)"),
    )
    return OK


# --- redrive -----------------------------------------------------------------------------------


def redrive_command(ctx: Context, args: argparse.Namespace) -> int:
    if args.native:
        if args.max_messages is not None or args.timeout is not None:
            raise CliError("--max and --timeout apply to sluice's redrive, not to --native", USAGE_ERROR)
        if args.cancel:
            return native_cancel(ctx, args.cancel)
        if args.status:
            return native_status(ctx)
        return native_start(ctx, args)
    if args.status or args.cancel or args.ignore_breaker:
        raise CliError("--status, --cancel and --ignore-breaker need --native", USAGE_ERROR)
    return sluice_redrive(ctx, args)


def sluice_redrive(ctx: Context, args: argparse.Namespace) -> int:
    """Run the redriver engine (the one the deployed Lambda runs) with the deployed settings, under the
    workload's run lease as the Lambda's runs are: never beside another run (the velocity is one run's)."""
    loaded = ctx.settings()
    settings = loaded.settings
    if ctx.receive_wait_seconds is not None:
        settings = settings.model_copy(update={"receive_wait_seconds": ctx.receive_wait_seconds})
    sink = CountingSink()
    redriver = Redriver(
        settings=settings,
        sqs=ctx.clients.sqs,
        breaker=ctx.breaker(settings),
        lease=RunLease.from_settings(settings, ctx.clients.dynamodb),
        logger=cast("Logger", StderrLog(ctx.out, verbose=args.verbose)),
        metrics_sink=sink,
        seal=ctx.seal(required=True),
        offload=settings.offloader(lambda: ctx.clients.s3),  # as deployed: bodies that outgrow SQS
    )
    report = redriver.run(
        _remaining_millis(args.timeout),
        max_messages=args.max_messages,
        max_per_second=args.max_per_second,
        holder=_operator(),
    )
    data = {
        "engine": "sluice",
        "stackRedriveMode": ctx.resources.redrive_mode,
        "settings": loaded.to_dict(),
        **report.to_dict(),
        "metrics": dict(sink.values),
    }

    def human() -> None:
        ctx.out.fields(
            "Redrive",
            [
                ("received", report.received),
                ("re-driven", report.redriven),
                ("delayed (long-delay pipeline)", report.delayed),
                ("isolated (poison)", report.isolated),
                ("failed (left in the DLQ)", report.failed),
                ("bouncing", report.bouncing),
                ("stopped", report.stopped),
                ("breaker", report.breaker["state"] if report.breaker else None),
                ("seconds", report.elapsed_seconds),
                ("settings from", loaded.origin),
            ],
        )

    ctx.out.emit(data, human)
    if report.stopped == "another_run" and report.other_run:
        ctx.out.error(
            f"another redrive run holds the lease ({report.other_run['holder']}, until "
            f"{report.other_run['until']} unless it renews it); nothing was re-driven. It drains the DLQ "
            "at the velocity limit: try again once it has ended"
        )
        return PARTIAL_FAILURE
    if report.stopped == "lease_lost":
        ctx.out.error(
            "another redrive run took the lease over, so this one stopped: a batch stalled past the "
            f"lease, or this machine's clock is more than {SKEW_MARGIN_SECONDS:g} s off AWS's"
        )
        return PARTIAL_FAILURE
    if report.stopped == "breaker_open":
        reason = report.breaker["reason"] if report.breaker else None
        ctx.out.error(
            f"the redrive breaker is open ({reason}); nothing was re-driven. Once the downstream is "
            "healthy: sluice breaker close, then redrive again"
        )
        return PARTIAL_FAILURE
    return PARTIAL_FAILURE if report.failed else OK


def _operator() -> str:
    """Who runs it, as the lease names the run to another that finds it held."""
    try:
        user = getpass.getuser()
    except (OSError, KeyError):  # no user name in the environment or the password database
        user = "?"
    return f"sluice dlq redrive by {user}@{socket.gethostname()}"


def _remaining_millis(timeout: float | None) -> Callable[[], int] | None:
    if timeout is None:
        return None
    deadline = time.monotonic() + timeout

    def remaining() -> int:  # the redriver keeps SAFETY_MILLIS for a Lambda's shutdown: give them back
        return math.floor((deadline - time.monotonic()) * 1000) + SAFETY_MILLIS

    return remaining


def native_start(ctx: Context, args: argparse.Namespace) -> int:
    source = ctx.resources.require("dead_letter_queue_arn")
    # The consumer dead-letters most messages itself (SendMessage), so they carry no
    # DeadLetterQueueSourceArn and "back to the original source" would have nowhere to send them.
    destination = ctx.resources.require("work_queue_arn")
    if not args.yes:
        raise CliError(
            "--native moves every DLQ message to the work queue at once, with no backoff and no "
            "poison-pill isolation; add --yes to confirm",
            USAGE_ERROR,
        )
    _check_breaker(ctx, ignore=args.ignore_breaker)
    request: StartMessageMoveTaskRequestTypeDef = {"SourceArn": source, "DestinationArn": destination}
    rate = args.max_per_second
    if rate is not None:
        if rate != int(rate) or not 1 <= rate <= NATIVE_MAX_PER_SECOND:
            raise CliError(
                f"--native needs a whole --max-per-second within 1..{NATIVE_MAX_PER_SECOND}, got {rate:g}",
                USAGE_ERROR,
            )
        request["MaxNumberOfMessagesPerSecond"] = int(rate)
    handle = ctx.clients.sqs.start_message_move_task(**request)["TaskHandle"]
    data = {
        "engine": "native",
        "taskHandle": handle,
        "sourceArn": source,
        "destinationArn": destination,
        "maxNumberOfMessagesPerSecond": request.get("MaxNumberOfMessagesPerSecond"),
    }
    ctx.out.emit(
        data,
        lambda: ctx.out.fields(
            "Native redrive started",
            [
                ("task handle", handle),
                ("source", source),
                ("destination", destination),
                ("max per second", data["maxNumberOfMessagesPerSecond"] or "SQS default"),
            ],
        ),
    )
    return OK


def _check_breaker(ctx: Context, *, ignore: bool) -> None:
    """A native move bypasses sluice entirely: never start one while an operator holds the breaker open."""
    if ctx.resources.breaker_table is None:
        ctx.out.warn(
            f"stack {ctx.resources.stack_name!r} has no output BreakerTableName: breaker not checked"
        )
        return
    status = ctx.breaker().status()
    if status.is_open and not ignore:
        raise CliError(
            f"the redrive breaker is open ({status.reason}); close it first (sluice breaker close) "
            "or pass --ignore-breaker",
            USAGE_ERROR,
        )


def native_status(ctx: Context) -> int:
    source = ctx.resources.require("dead_letter_queue_arn")
    results = ctx.clients.sqs.list_message_move_tasks(SourceArn=source, MaxResults=10).get("Results", [])
    tasks = [
        {
            "taskHandle": t.get("TaskHandle"),
            "status": t.get("Status"),
            "moved": t.get("ApproximateNumberOfMessagesMoved"),
            "toMove": t.get("ApproximateNumberOfMessagesToMove"),
            "maxNumberOfMessagesPerSecond": t.get("MaxNumberOfMessagesPerSecond"),
            "destinationArn": t.get("DestinationArn"),
            "startedAt": None
            if t.get("StartedTimestamp") is None
            else datetime.fromtimestamp(int(t["StartedTimestamp"]) / 1000, UTC).isoformat(),
            "failureReason": t.get("FailureReason"),
        }
        for t in results
    ]
    ctx.out.emit(
        {"sourceArn": source, "tasks": tasks},
        lambda: ctx.out.table(
            f"Message move tasks of {source}",
            ("status", "moved", "to move", "per second", "started", "failure", "task handle"),
            [
                (
                    t["status"],
                    t["moved"],
                    t["toMove"],
                    t["maxNumberOfMessagesPerSecond"],
                    t["startedAt"],
                    t["failureReason"],
                    t["taskHandle"],
                )
                for t in tasks
            ],
        ),
    )
    return OK


def native_cancel(ctx: Context, handle: str) -> int:
    moved = ctx.clients.sqs.cancel_message_move_task(TaskHandle=handle).get(
        "ApproximateNumberOfMessagesMoved"
    )
    ctx.out.emit(
        {"taskHandle": handle, "cancelled": True, "moved": moved},
        lambda: ctx.out.line(f"cancelled {handle} after about {moved} message(s) moved"),
    )
    return OK
