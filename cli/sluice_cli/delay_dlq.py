"""``sluice delay-dlq peek|redrive|purge``: the delay queue's dead-letter queue.

A delay request lands there when the batch-delay function failed it ``MaxReceiveCount`` times (S3 or
Step Functions down, a bug). Once the cause is fixed, ``redrive`` sends each request back to the delay
queue with its envelope re-sealed; a request whose due time passed while it waited is due *now* (it
was valid when sent: the wait is sluice's, and the batch-delay function would otherwise refuse it as
"in the past" when it was sent). The batch-delay function then checks it as any new request
(allowlist, due time).
"""

from __future__ import annotations

import argparse
from datetime import datetime
from typing import Any

from sluice.batchsend import Outgoing
from sluice.envelope import Seal, utcnow
from sluice.errors import PermanentError
from sluice.fit import Offload, UnfittableError, fit
from sluice_cli import OK, PARTIAL_FAILURE, USAGE_ERROR, CliError
from sluice_cli.context import Context
from sluice_cli.dlq import PEEK_VISIBILITY_SECONDS, positive_int, show_messages
from sluice_cli.messages import Received
from sluice_cli.poison import REPLAY_VISIBILITY_SECONDS, Planned, ReplayResult, replay_human, send_back


def add_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    parser = sub.add_parser("delay-dlq", help="the delay queue's dead-letter queue", parents=[common])
    commands = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    peek = commands.add_parser("peek", help="look at failed delay requests", parents=[common])
    peek.add_argument("-n", type=positive_int, default=10, dest="count", help="how many (default 10)")
    peek.set_defaults(func=peek_command)
    redrive = commands.add_parser(
        "redrive",
        help="send failed delay requests back to the delay queue (overdue: due now)",
        parents=[common],
    )
    redrive.add_argument("--max", type=positive_int, default=None, dest="max_messages", metavar="N")
    redrive.set_defaults(func=redrive_command)
    purge = commands.add_parser(
        "purge", help="delete every failed delay request (needs --yes)", parents=[common]
    )
    purge.add_argument("--yes", action="store_true", help="really delete them all")
    purge.set_defaults(func=purge_command)


def peek_command(ctx: Context, args: argparse.Namespace) -> int:
    url = ctx.resources.require("delay_dead_letter_queue_url")
    with ctx.scan(url, visibility_seconds=PEEK_VISIBILITY_SECONDS, limit=args.count) as scan:
        messages = list(scan.messages())
    ctx.released(scan)
    show_messages(ctx, f"Delay dead-letter queue: {len(messages)} message(s)", url, messages)
    return OK


def redrive_command(ctx: Context, args: argparse.Namespace) -> int:
    url = ctx.resources.require("delay_dead_letter_queue_url")
    delay_queue = ctx.resources.require("delay_queue_url")
    seal = ctx.seal(required=True)
    offload = ctx.settings().settings.offloader(lambda: ctx.clients.s3)  # as the deployed functions do
    result = ReplayResult()

    def plan(message: Received) -> Planned:  # "now" per message: a long scan never sends a stale "now"
        return resubmission(message, delay_queue=delay_queue, now=utcnow(), seal=seal, offload=offload)

    with ctx.scan(
        url, visibility_seconds=REPLAY_VISIBILITY_SECONDS, limit=args.max_messages, writes=True
    ) as scan:
        for batch in scan.batches():
            send_back(ctx.clients.sqs, scan, batch, plan=plan, result=result)
    ctx.released(scan)
    ctx.out.emit(
        {"queue": url, "destination": delay_queue, **result.to_dict()}, lambda: replay_human(ctx, result)
    )
    return OK if result.complete else PARTIAL_FAILURE


def resubmission(
    message: Received, *, delay_queue: str, now: datetime, seal: Seal | None, offload: Offload | None = None
) -> Planned:
    """The request as it goes back to the delay queue: due time kept, or now when it has passed; its
    body offloaded through the claim check when the identity it now carries makes it too large."""
    env = message.envelope
    if env is None or env.deliver_at is None:
        why = message.envelope_problem or "it carries no delay request (deliver_at)"
        raise PermanentError(f"not a delay request: {why}")
    update: dict[str, Any] = {}
    if env.deliver_at < now:
        update["deliver_at"] = now
    if env.origin_id is None:
        # Its identity is the id SQS gave it on the delay queue (kept in the DLQ): had batch-delay parked
        # it before failing, the parked copy is delivered under that id, and the consumer's idempotency
        # then absorbs whichever of the two comes second.
        update["origin_id"] = message.message_id
    update["group"] = message.group  # its fair-queue tenant, kept through the delay (a malformed one dropped)
    env = env.model_copy(update=update)
    try:
        fitted = fit(message.body, message.user_attributes, env, seal=seal, offload=offload)
    except UnfittableError as exc:
        raise PermanentError(str(exc)) from exc
    group = message.group
    outgoing = Outgoing(message.message_id, fitted.body, fitted.attributes, trace=env.trace, group=group)
    return Planned(message, delay_queue, outgoing, env.attempts)


def purge_command(ctx: Context, args: argparse.Namespace) -> int:
    url = ctx.resources.require("delay_dead_letter_queue_url")
    if not args.yes:
        raise CliError(
            f"refusing to purge {url} without --yes: every delay request in it is deleted", USAGE_ERROR
        )
    ctx.clients.sqs.purge_queue(QueueUrl=url)
    ctx.out.emit({"queue": url, "purged": True}, lambda: ctx.out.line(f"purge of {url} started"))
    return OK
