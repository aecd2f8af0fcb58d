"""``sluice poison list|show ID|replay ID…|replay --all``: the poison-pill queue."""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from sluice.batchsend import Outgoing, send_batch
from sluice.envelope import Seal, merge
from sluice.errors import PermanentError
from sluice.limits import MAX_BATCH_ENTRIES
from sluice.redrive.plan import source_queue
from sluice.redrive.settings import RedriveSettings
from sluice.sqs import allowlisted, queue_url_from_arn
from sluice_cli import OK, PARTIAL_FAILURE, USAGE_ERROR, CliError
from sluice_cli.context import Context
from sluice_cli.dlq import of_tenant, positive_int, show_messages
from sluice_cli.messages import QueueScan, Received
from sluice_cli.output import to_json

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

LIST_VISIBILITY_SECONDS = 30
REPLAY_VISIBILITY_SECONDS = 60
"""Held while a batch is sent and deleted; long enough for send_batch's retries."""

CLOCK_SKEW_SECONDS = 5.0
"""How far this machine's clock may run ahead of SQS's ``SentTimestamp`` before a pill isolated during a
replay is taken for one that was already there (the two are only told apart in the report)."""


def add_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    poison = sub.add_parser("poison", help="the poison-pill queue", parents=[common])
    commands = poison.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = commands.add_parser("list", help="every poison pill, one line each", parents=[common])
    listing.add_argument("--max", type=positive_int, default=1000, dest="limit", metavar="N")
    listing.add_argument(
        "--tenant", default=None, metavar="GROUP_ID", help="only this MessageGroupId's pills"
    )
    listing.set_defaults(func=list_command)
    show = commands.add_parser("show", help="one message: envelope, attributes, body", parents=[common])
    show.add_argument("id", metavar="ID", help="SQS message id or the envelope's origin_id")
    show.set_defaults(func=show_command)
    replay = commands.add_parser(
        "replay", help="send messages back to their source queue (allowlisted only)", parents=[common]
    )
    replay.add_argument("ids", nargs="*", metavar="ID", help="SQS message ids or origin_ids")
    replay.add_argument("--all", action="store_true", help="every message in the queue (needs --yes)")
    replay.add_argument("--reset-attempts", action="store_true", help="attempts to 0, redriven_at cleared")
    replay.add_argument("--yes", action="store_true", help="confirm --all")
    replay.set_defaults(func=replay_command)


def _scan(ctx: Context, visibility: int, limit: int | None = None, *, writes: bool = False) -> QueueScan:
    url = ctx.resources.require("poison_queue_url")
    return ctx.scan(url, visibility_seconds=visibility, limit=limit, writes=writes)


# --- list / show -------------------------------------------------------------------------------


def list_command(ctx: Context, args: argparse.Namespace) -> int:
    with _scan(ctx, LIST_VISIBILITY_SECONDS, args.limit) as scan:
        messages = of_tenant(list(scan.messages()), args.tenant)
    ctx.released(scan)
    url = ctx.resources.require("poison_queue_url")
    title = f"Poison queue: {len(messages)} message(s)" + (f" of tenant {args.tenant}" if args.tenant else "")
    show_messages(ctx, title, url, messages)
    return OK


def show_command(ctx: Context, args: argparse.Namespace) -> int:
    found: Received | None = None
    with _scan(ctx, LIST_VISIBILITY_SECONDS) as scan:
        for message in scan.messages():
            if message.matches(args.id):
                found = message
                break
    ctx.released(scan)
    if found is None:
        raise CliError(f"no message {args.id!r} in the poison queue", PARTIAL_FAILURE)
    detail = found.detail()
    ctx.out.emit(detail, lambda: _show_human(ctx, found))
    return OK


def _show_human(ctx: Context, message: Received) -> None:
    summary = message.summary()
    error = summary["lastError"] or {}
    env = message.envelope
    ctx.out.fields(
        f"Poison pill {message.message_id}",
        [
            ("origin id", summary["originId"]),
            ("attempts", summary["attempts"]),
            ("first failure", summary["firstFailure"]),
            ("last error", error.get("type")),
            ("  message", error.get("message")),
            ("  at", error.get("at")),
            ("  receives", error.get("receives")),
            ("source", summary["source"]),
            ("redriven at", summary["redrivenAt"]),
            ("trace", env.trace if env else None),
            ("sent at", summary["sentAt"]),
            ("receives here", summary["receives"]),
            ("envelope problem", summary["envelopeProblem"]),
        ],
    )
    detail = message.detail()
    ctx.out.table(
        "User attributes",
        ("name", "type", "value"),
        [
            (name, value.get("DataType"), value.get("StringValue", value.get("BinaryValue")))
            for name, value in sorted(detail["attributes"].items())
        ],
    )
    ctx.out.text(to_json(detail["envelope"]), title="Envelope")
    ctx.out.text(message.body, title="Body")


# --- replay ------------------------------------------------------------------------------------


@dataclass
class ReplayResult:
    replayed: list[dict[str, Any]] = field(default_factory=list)
    refused: list[dict[str, Any]] = field(default_factory=list)
    failed: list[dict[str, Any]] = field(default_factory=list)
    not_deleted: list[dict[str, Any]] = field(default_factory=list)
    not_found: list[str] = field(default_factory=list)
    other_workloads: list[dict[str, Any]] = field(default_factory=list)
    """``--all``: pills of another workload of the stack, left for its own replay (not a failure)."""
    came_back: list[dict[str, Any]] = field(default_factory=list)
    """Pills isolated again while this replay ran (a message it replayed failed again): left, never
    replayed twice by one command (a replay of every pill must end)."""
    isolated_twice: list[dict[str, Any]] = field(default_factory=list)
    """Pills of an origin this replay already took that were on the queue before it began: one failure
    isolated twice (an Isolate task retried after its send). Left, as the replayed one stands for it."""

    @property
    def complete(self) -> bool:
        return not (self.refused or self.failed or self.not_deleted or self.not_found)

    def to_dict(self) -> dict[str, Any]:
        lists: dict[str, list[Any]] = {
            "replayed": self.replayed,
            "refused": self.refused,
            "failed": self.failed,
            "notDeleted": self.not_deleted,
            "notFound": self.not_found,
            "otherWorkloads": self.other_workloads,
            "cameBack": self.came_back,
            "isolatedTwice": self.isolated_twice,
        }
        return {**lists, "counts": {name: len(items) for name, items in lists.items()}}


def replay_command(ctx: Context, args: argparse.Namespace) -> int:
    if args.all == bool(args.ids):
        raise CliError("give the IDs to replay, or --all (not both)", USAGE_ERROR)
    if args.all and not args.yes:
        raise CliError("refusing to replay every poison pill without --yes", USAGE_ERROR)
    loaded = ctx.settings()
    result = ReplayResult()
    wanted = list(dict.fromkeys(args.ids))
    found: set[str] = set()
    seal = ctx.seal(required=True)
    taken: set[str] = set()  # the origins this command has replayed or left: each one once
    began = time.time() - CLOCK_SKEW_SECONDS  # a pill SQS stamped after this was isolated during the replay
    others = ctx.resources.other_workload_queues if args.all else ()
    with _scan(ctx, REPLAY_VISIBILITY_SECONDS, writes=True) as scan:
        for batch in scan.batches():
            chosen = []
            for message in batch:
                if not (args.all or _claim(message, wanted, found)):
                    continue
                entry = {"messageId": message.message_id, "originId": _origin(message)}
                if _origin(message) in taken:
                    sent = int(message.arrival.system.get("SentTimestamp") or 0) / 1000
                    (result.came_back if sent >= began else result.isolated_twice).append(entry)
                    continue
                taken.add(_origin(message))
                env = message.envelope
                if others and env is not None and env.source and allowlisted(env.source, others):
                    result.other_workloads.append({**entry, "source": env.source})
                    continue
                chosen.append(message)
            send_back(
                ctx.clients.sqs,
                scan,
                chosen,
                plan=partial(
                    _plan, ctx.clients.sqs, settings=loaded.settings, reset=args.reset_attempts, seal=seal
                ),
                result=result,
            )
            if not args.all and len(found) == len(wanted):
                break
    ctx.released(scan)
    result.not_found = [i for i in wanted if i not in found]
    data = {
        "queue": ctx.resources.require("poison_queue_url"),
        "resetAttempts": args.reset_attempts,
        "settings": loaded.to_dict(),
        **result.to_dict(),
    }
    ctx.out.emit(data, lambda: replay_human(ctx, result))
    return OK if result.complete else PARTIAL_FAILURE


def _origin(message: Received) -> str:
    """The message's identity across hops: its envelope's ``origin_id``, else its own id."""
    env = message.envelope
    return (env.origin_id if env is not None else None) or message.message_id


def _claim(message: Received, wanted: list[str], found: set[str]) -> bool:
    hits = [i for i in wanted if message.matches(i)]
    found.update(hits)
    return bool(hits)


@dataclass(frozen=True)
class Planned:
    message: Received
    destination: str
    outgoing: Outgoing
    attempts: int

    def entry(self) -> dict[str, Any]:
        env = self.message.envelope
        return {
            "messageId": self.message.message_id,
            "originId": env.origin_id if env else None,
            "destination": self.destination,
            "attempts": self.attempts,
        }


def send_back(
    sqs: SQSClient,
    scan: QueueScan,
    messages: list[Received],
    *,
    plan: Callable[[Received], Planned],
    result: ReplayResult,
) -> None:
    """Send each message where ``plan`` says (a PermanentError: refused, left where it is); delete it
    from the scanned queue only once its send succeeded."""
    groups: dict[str, list[Planned]] = defaultdict(list)
    for message in messages:
        try:
            planned = plan(message)
        except PermanentError as exc:
            result.refused.append({"messageId": message.message_id, "reason": str(exc)})
            continue
        except (ClientError, BotoCoreError) as exc:  # e.g. the offload's PutObject: left, tried next run
            result.failed.append({"messageId": message.message_id, "reason": f"could not prepare it: {exc}"})
            continue
        groups[planned.destination].append(planned)
    for destination, group in groups.items():
        refused = {r.message.key: r for r in send_batch(sqs, destination, [p.outgoing for p in group])}
        for p in group:
            r = refused.get(p.message.message_id)
            if r is not None:
                result.failed.append({**p.entry(), "reason": f"{r.code}: {r.reason}"})
        _delete(sqs, scan, [p for p in group if p.message.message_id not in refused], result)


def _plan(
    sqs: SQSClient, message: Received, *, settings: RedriveSettings, reset: bool, seal: Seal | None
) -> Planned:
    """Where the message goes (its recorded source, only if allowlisted: else refused, left in the
    poison queue) and exactly what is sent."""
    env = message.envelope
    if env is None:
        why = message.envelope_problem or "it has no sluice envelope"
        raise PermanentError(f"no source queue to replay to: {why}")
    source = source_queue({}, recorded=env.source, allowlist=settings.allowlist)
    destination = (
        queue_url_from_arn(source, endpoint=sqs.meta.endpoint_url) if source.startswith("arn:") else source
    )
    if reset:
        env = env.model_copy(update={"attempts": 0, "redriven_at": None})
    env = env.model_copy(update={"group": message.group})  # a malformed carried one is not sent on
    outgoing = Outgoing(
        message.message_id,
        message.body,
        merge(message.user_attributes, env, body=message.body, seal=seal),
        trace=env.trace,  # the replay stays on the message's trace (AWSTraceHeader)
        group=message.group,  # and on its fair-queue tenant (MessageGroupId)
    )
    return Planned(message, destination, outgoing, env.attempts)


def _delete(sqs: SQSClient, scan: QueueScan, sent: list[Planned], result: ReplayResult) -> None:
    for start in range(0, len(sent), MAX_BATCH_ENTRIES):
        chunk = sent[start : start + MAX_BATCH_ENTRIES]
        response = sqs.delete_message_batch(
            QueueUrl=scan.queue_url,
            Entries=[
                {"Id": str(i), "ReceiptHandle": scan.receipt(p.message.message_id)}
                for i, p in enumerate(chunk)
            ],
        )
        failures = {int(f["Id"]): f for f in response.get("Failed", [])}
        for i, p in enumerate(chunk):
            f = failures.get(i)
            if f is None:
                scan.forget(p.message.message_id)
                result.replayed.append(p.entry())
                continue
            reason = (
                f"{f.get('Code')}: {f.get('Message', '')}; sent, but still in {scan.queue_url}: "
                "delete it there or it will be sent again"
            )
            result.not_deleted.append({**p.entry(), "reason": reason})


def replay_human(ctx: Context, result: ReplayResult) -> None:
    rows: list[tuple[str, str, str | None]] = []
    rows += [(r["messageId"], "replayed", r["destination"]) for r in result.replayed]
    rows += [(r["messageId"], "refused", r["reason"]) for r in result.refused]
    rows += [(r["messageId"], "send failed", r["reason"]) for r in result.failed]
    rows += [(r["messageId"], "not deleted", r["reason"]) for r in result.not_deleted]
    rows += [(i, "not found", None) for i in result.not_found]
    rows += [(r["messageId"], "another workload's", r["source"]) for r in result.other_workloads]
    again = "isolated again during this replay: left"
    rows += [(r["messageId"], "came back", again) for r in result.came_back]
    twice = "a second isolation of a message this replay sent back: left (delete it by hand)"
    rows += [(r["messageId"], "isolated twice", twice) for r in result.isolated_twice]
    counts = result.to_dict()["counts"]
    ctx.out.table(
        "Replay: " + ", ".join(f"{n} {name}" for name, n in counts.items()),
        ("message id", "outcome", "destination / reason"),
        rows,
    )
