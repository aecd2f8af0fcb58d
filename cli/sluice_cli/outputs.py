"""``sluice outputs [NAME]``: the stack's outputs, its nested stacks' with them (the workloads', the long
delays', the job store's): what CloudFormation shows stack by stack, as one list."""

from __future__ import annotations

import argparse
from typing import Any

from sluice_cli import OK, USAGE_ERROR, CliError
from sluice_cli.context import Context
from sluice_cli.resources import stack_outputs


def add_commands(sub: Any, common: argparse.ArgumentParser) -> None:
    outputs = sub.add_parser(
        "outputs",
        help="the stack's outputs with its nested stacks' (one value with NAME, for a shell variable)",
        parents=[common],
    )
    outputs.add_argument("name", nargs="?", metavar="NAME", help="print only this output's value")
    outputs.set_defaults(func=outputs_command)


def outputs_command(ctx: Context, args: argparse.Namespace) -> int:
    found = stack_outputs(ctx.clients.cloudformation, ctx.stack_name)
    if args.name is not None:
        if args.name not in found:
            raise CliError(
                f"stack {ctx.stack_name!r} has no output {args.name!r} (it has: {', '.join(sorted(found))})",
                USAGE_ERROR,
            )
        ctx.out.emit({args.name: found[args.name]}, lambda: ctx.out.text(found[args.name]))
        return OK
    ctx.out.emit(
        found,
        lambda: ctx.out.table(f"Outputs of {ctx.stack_name}", ("output", "value"), sorted(found.items())),
    )
    return OK
