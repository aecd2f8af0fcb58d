"""``sluice breaker status|open --reason|close``: the redrive circuit breaker."""

from __future__ import annotations

import argparse
from typing import Any

from sluice.redrive.breaker import BreakerStatus
from sluice_cli import OK
from sluice_cli.context import Context


def add_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    breaker = sub.add_parser("breaker", help="the redrive circuit breaker", parents=[common])
    commands = breaker.add_subparsers(dest="action", required=True, metavar="ACTION")
    status = commands.add_parser("status", help="show the stored state", parents=[common])
    status.set_defaults(func=status_command)
    opened = commands.add_parser(
        "open", help="stop every redrive until an operator closes it", parents=[common]
    )
    opened.add_argument("--reason", required=True, help="why (stored with the state, shown in status)")
    opened.set_defaults(func=open_command)
    closed = commands.add_parser("close", help="let redrives run again", parents=[common])
    closed.add_argument("--reason", default="closed by an operator")
    closed.set_defaults(func=close_command)


def status_command(ctx: Context, args: argparse.Namespace) -> int:
    return _show(ctx, ctx.breaker().status(), "Redrive breaker")


def open_command(ctx: Context, args: argparse.Namespace) -> int:
    return _show(ctx, ctx.breaker().open(args.reason), "Redrive breaker opened")


def close_command(ctx: Context, args: argparse.Namespace) -> int:
    return _show(ctx, ctx.breaker().close(args.reason), "Redrive breaker closed")


def _show(ctx: Context, status: BreakerStatus, title: str) -> int:
    answer = status.to_dict()
    table = ctx.resources.require("breaker_table")
    data = {**answer, "version": status.version, "table": table, "breaker": ctx.resources.breaker_name}

    def human() -> None:
        ctx.out.fields(
            title,
            [
                ("state", answer["state"]),
                ("reason", answer["reason"]),
                ("opened by", answer["openedBy"]),
                ("since", answer["since"]),
                ("seen / bouncing", f"{answer['seen']} / {answer['bouncing']}"),
                ("table", table),
                ("breaker", ctx.resources.breaker_name),
            ],
        )

    ctx.out.emit(data, human)
    return OK
