"""``sluice``: operate a deployed sluice stack (or the local runtime's).

Resources come from the stack's outputs. Exit codes: 0 ok, 1 failure or partial failure, 2 usage
error (including a dangerous action without --yes).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TextIO

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from sluice_cli import PARTIAL_FAILURE, USAGE_ERROR, CliError, breaker, delay_dlq, dlq, jobs, outputs, poison
from sluice_cli.clients import DEFAULT_REGION, Clients
from sluice_cli.context import Context
from sluice_cli.output import Output
from sluice_cli.resources import DEFAULT_STACK_NAME, SAMCONFIG, Resources, samconfig

GLOBAL_DEFAULTS: dict[str, object] = {
    "stack_name": None,
    "workload": None,
    "config_env": "default",
    "region": None,
    "endpoint_url": None,
    "json": False,
    "receive_wait": None,
}
EPILOG = """examples:
  sluice dlq stats
  sluice --workload Refunds dlq redrive                 (a stack of several workloads: name one)
  sluice --stack-name sluice-local dlq peek -n 5        (with the local runtime's exports)
  sluice poison replay 5fea7756-0ea4-451a-a703-a558b933e274 --reset-attempts
  sluice breaker open --reason "payments API down" --json
  sluice jobs stats                                  (the job store: DSN from the stack's secret)
  sluice outputs DelayBucketName                     (one output of the stack or its nested stacks)
see docs/operations.md"""


def global_options() -> argparse.ArgumentParser:
    """Options accepted before or after the command (``sluice --json dlq stats`` = ``... stats --json``)."""
    common = argparse.ArgumentParser(add_help=False)
    group = common.add_argument_group("global options")
    s = argparse.SUPPRESS
    group.add_argument("--stack-name", default=s, help="the stack (default: samconfig.toml's, else sluice)")
    group.add_argument(
        "--workload",
        default=s,
        help="the workload whose queues to act on (required when the stack runs several)",
    )
    group.add_argument("--config-env", default=s, help="samconfig.toml environment (default: default)")
    group.add_argument("--region", default=s, help="AWS region (default: samconfig.toml's, else boto3's)")
    group.add_argument("--endpoint-url", default=s, help="AWS endpoint (default: $AWS_ENDPOINT_URL)")
    group.add_argument("--json", action="store_true", default=s, help="machine-readable JSON on stdout only")
    group.add_argument(
        "--receive-wait", type=int, choices=range(21), default=s, metavar="SECONDS",
        help="long-poll wait of each receive (default: 1; redrive: the deployed setting)",
    )  # fmt: skip
    return common


def build_parser() -> argparse.ArgumentParser:
    common = global_options()
    parser = argparse.ArgumentParser(
        prog="sluice",
        description="Operate a sluice stack: dead-letter queue, poison queue, redrive breaker, job store.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[common],
    )
    sub = parser.add_subparsers(dest="group", required=True, metavar="COMMAND")
    dlq.add_commands(sub, common)
    delay_dlq.add_commands(sub, common)
    poison.add_commands(sub, common)
    breaker.add_commands(sub, common)
    jobs.add_commands(sub, common)
    outputs.add_commands(sub, common)
    return parser


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    args = build_parser().parse_args(argv)
    for name, default in GLOBAL_DEFAULTS.items():
        if not hasattr(args, name):
            setattr(args, name, default)
    return args


def make_context(
    args: argparse.Namespace,
    out: Output,
    *,
    clients: Clients | None = None,
    resources: Resources | None = None,
    cwd: Path | None = None,
) -> Context:
    """Stack name: --stack-name, samconfig.toml, ``sluice``. Region: --region, samconfig.toml, boto3."""
    config = samconfig((cwd or Path.cwd()) / SAMCONFIG, args.config_env)
    stack_name = args.stack_name or config.get("stack_name") or DEFAULT_STACK_NAME
    if clients is None:
        region = args.region or config.get("region") or boto3.Session().region_name or DEFAULT_REGION
        clients = Clients.from_session(boto3.Session(region_name=region), endpoint_url=args.endpoint_url)
    return Context(
        clients=clients,
        out=out,
        stack_name=stack_name,
        workload=args.workload,
        receive_wait_seconds=args.receive_wait,
        given_resources=resources,
    )


def main(
    argv: Sequence[str] | None = None,
    *,
    clients: Clients | None = None,
    resources: Resources | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """Run one command; returns the exit code. Tests inject clients, resources and streams."""
    try:
        args = parse(argv)
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
        return exc.code if isinstance(exc.code, int) else USAGE_ERROR if exc.code else 0
    out = Output(json_mode=args.json, stdout=stdout or sys.stdout, stderr=stderr or sys.stderr)
    command: Callable[[Context, argparse.Namespace], int] = args.func
    try:
        return command(make_context(args, out, clients=clients, resources=resources), args)
    except CliError as exc:
        out.error(str(exc))
        return exc.code
    except ClientError as exc:
        error = exc.response.get("Error", {})
        text = " ".join(str(error.get("Message", "")).split())
        text = text if len(text) <= 1000 else text[:999] + "…"  # an AccessDenied: who, what, where, why
        out.error(f"AWS refused {exc.operation_name}: {error.get('Code')}: {text}")
        return PARTIAL_FAILURE
    except BotoCoreError as exc:
        out.error(str(exc))
        return PARTIAL_FAILURE


if __name__ == "__main__":
    raise SystemExit(main())
