"""``python -m sluice_local up|demo`` — the whole sluice stack on a laptop (no AWS account, no Docker)."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from pathlib import Path

from sluice_cli.samconfig import parse_overrides
from sluice_local.app.fast import FAST
from sluice_local.app.messages import ORDERS
from sluice_local.app.stack import acting_credentials, local_cloud
from sluice_local.emulation.cloud import ROOT, LocalCloud
from sluice_local.emulation.existing import ExistingQueue
from sluice_local.emulation.up import function_output, serve
from sluice_local.soak.options import WORKLOADS, Options


def _params(pairs: list[str]) -> dict[str, str]:
    try:
        return parse_overrides(pairs, where="--param")
    except ValueError as exc:
        raise SystemExit(str(exc)) from None


def _existing_queues(specs: list[str]) -> list[ExistingQueue]:
    try:
        return [ExistingQueue.parse(spec) for spec in specs]
    except ValueError as exc:
        raise SystemExit(str(exc)) from None


def _database_url(args: argparse.Namespace) -> str | None:
    if args.database_url:
        return str(args.database_url)
    if args.jobs:
        from sluice_local.app.postgres import database_url  # noqa: PLC0415 - psycopg only with --jobs

        return database_url()
    return None


def cmd_up(args: argparse.Namespace) -> int:
    params = {**(FAST if args.fast else {}), **_params(args.param)}
    cloud = local_cloud(
        params,
        template=Path(args.template) if args.template else None,
        stack_name=args.stack_name,
        port=args.port,
        database_url=_database_url(args),
        existing_queues=_existing_queues(args.existing_queue),
    )
    with function_output(Path(args.log_file)) if args.log_file else contextlib.nullcontext():
        serve(
            cloud,
            ready_file=Path(args.ready_file) if args.ready_file else None,
            hint=_send_an_order,
            console=sys.__stdout__ or sys.stderr,
            reload=not args.no_reload,
            credentials=acting_credentials,
            iam_usage=Path(args.iam_usage) if args.iam_usage else None,
        )
    return 0


def _send_to_a_queue(cloud: LocalCloud) -> str:
    """How to send to a stack that is not sluice's (docs/library.md): the queues its outputs name."""
    queues = sorted((key, url) for key, url in cloud.outputs.items() if key.endswith("QueueUrl"))
    if not queues:
        return (
            f"outputs: {', '.join(sorted(cloud.outputs)) or 'none'} (aws ... --endpoint-url {cloud.endpoint})"
        )
    return "\n".join(
        [
            "queues (the stack's outputs):",
            *(f"  {key}: {url}" for key, url in queues),
            f"aws sqs send-message --endpoint-url {cloud.endpoint} --queue-url {queues[0][1]} "
            "--message-body '<your body>'",
        ]
    )


def _send_an_order(cloud: LocalCloud) -> str:
    """How to send to each workload of the running stack (the example's order body for its Orders)."""
    names = [name for name in cloud.outputs.get("WorkloadNames", "").split(",") if name]
    if not names:  # a template of the team's own, not a sluice stack: its queues, no sluice command
        return _send_to_a_queue(cloud)
    lines = [f"{name}: {cloud.outputs.get(f'{name}QueueUrl')}" for name in names]
    body = (
        '{"order_id":"o-1","customer_id":"c-1","amount_cents":100,"currency":"EUR"}'
        if ORDERS in names
        else "<your body>"
    )
    target = ORDERS if ORDERS in names else (names[0] if names else "")
    send = (
        f"aws sqs send-message --endpoint-url {cloud.endpoint} "
        f"--queue-url {cloud.outputs.get(f'{target}QueueUrl')} --message-body '{body}'"
    )
    workload = f" --workload {target}" if len(names) > 1 else ""
    cli = f".venv/bin/sluice --stack-name {cloud.stack_name}"  # `make venv` installs it there
    return "\n".join(
        [
            *(["workloads' queues:", *(f"  {line}" for line in lines)] if lines else []),
            send,
            f"{cli} poison list   # the operator CLI, this stack (the poison queue is every workload's)",
            f"{cli}{workload} dlq stats   # one workload's queues",
        ]
    )


def cmd_demo(args: argparse.Namespace) -> int:
    from sluice_local.demo.run import run_demo  # noqa: PLC0415 - rich is only needed here

    only = frozenset(name.strip() for name in args.only.split(",") if name.strip())
    return run_demo(Path(args.log_file), _params(args.param), only)


def cmd_mutation(args: argparse.Namespace) -> int:
    from sluice_local.demo.mutation import run  # noqa: PLC0415

    scenarios = [name.strip() for name in args.scenario.split(",") if name.strip()] or None
    return run(
        workers=args.workers,
        limit=args.limit,
        scenarios=scenarios,
        out=Path(args.json) if args.json else None,
    )


def cmd_iam_report(args: argparse.Namespace) -> int:
    from sluice_local.emulation.iam import report  # noqa: PLC0415

    files = [Path(f) for f in args.usage] or sorted((ROOT / ".sluice-local" / "iam").glob("*.json"))
    if not files:
        print("no usage recorded yet: run the demo or the soak first", file=sys.stderr)
        return 2
    uses = report.merge(report.load(f) for f in files)
    templates = [ROOT / "template.yaml", ROOT / "workloads.yaml", *sorted((ROOT / "stacks").glob("*.yaml"))]
    lines, unjustified = report.least_privilege(uses, report.justifications(templates))
    used = sum(1 for use in uses.values() if use.granted)
    names = ", ".join(f.name for f in files)
    print(f"least privilege over {names}: {used} of {len(uses)} Allow statements used")
    for line in lines:
        print(f"  {line}")
    print(
        f"{len(unjustified)} statements granted nothing and are not justified (Metadata.SluiceLeastPrivilege)"
    )
    return 1 if unjustified else 0


def _options(args: argparse.Namespace) -> Options:
    from sluice_local.emulation.faults import ALL_KINDS  # noqa: PLC0415 - the fault injector: only when asked

    only = tuple(k for k in args.only.split(",") if k)
    unknown = sorted(set(only) - set(ALL_KINDS))
    if unknown:
        raise SystemExit(f"--only: unknown fault kind(s) {unknown}; known: {', '.join(ALL_KINDS)}")
    return Options(
        aws_rate=args.aws_rate,
        lambda_rate=args.lambda_rate,
        sabotage=args.sabotage,
        only=only,
        workload=args.workload,
    )


def cmd_soak(args: argparse.Namespace) -> int:
    from sluice_local.soak import runner  # noqa: PLC0415 - the fault injector patches botocore: only when asked

    options = _options(args)
    seeds = [args.seed] if args.seed is not None else list(range(args.first, args.first + args.seeds))
    workers = 2 if args.seed is not None else args.workers
    summary = runner.run(seeds, workers=workers, log_dir=Path(args.log_dir), options=options)
    rates = f"AWS calls faulted {options.aws_rate:.0%}, invocations {options.lambda_rate:.0%}"
    if options.only:
        rates += f", only {', '.join(options.only)}"
    flags = "".join(f" {arg}" for arg in options.argv())
    for line in summary.lines(rates=rates, flags=flags):
        print(line)
    return 0 if summary.ok else 1


def cmd_soak_worker(args: argparse.Namespace) -> int:
    from sluice_local.soak import runner  # noqa: PLC0415 - the fault injector patches botocore: only when asked

    return runner.run_worker(
        runner.claimed(Path(args.pool)),
        mode=args.mode,
        log_dir=Path(args.log_dir),
        options=_options(args),
        label=args.label,
    )


def _rates(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--aws-rate", type=float, default=0.05, help="share of AWS calls faulted")
    parser.add_argument("--lambda-rate", type=float, default=0.08, help="share of invocations faulted")
    parser.add_argument("--only", default="", help="comma-separated fault kinds to inject (default: all)")
    parser.add_argument("--log-dir", default=str(ROOT / ".sluice-local" / "soak"))
    parser.add_argument(
        "--workload", default="all", choices=list(WORKLOADS),
        help="what each seed sends: orders, refunds and job rows (all, the default), orders and refunds "
        "(queues), or one of them",
    )  # fmt: skip
    parser.add_argument(
        "--sabotage", default="", choices=["", "ledger", "delete-failed"],
        help="check the checker: break something it must report (see sluice_local.soak.options.SABOTAGE)",
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sluice_local", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="deploy template.yaml into embedded AWS and keep it running")
    up.add_argument("--port", type=int, default=None, help="loopback port (default: a free one)")
    up.add_argument("--template", default=None, help=f"SAM template (default: {ROOT / 'template.yaml'})")
    up.add_argument("--stack-name", default="sluice-local")
    up.add_argument("--param", action="append", default=[], metavar="KEY=VALUE", help="parameter override")
    up.add_argument(
        "--fast", action="store_true", help="small backoff/timeout parameters (seconds, not minutes)"
    )
    up.add_argument(
        "--jobs", action="store_true",
        help="attach the job store: SLUICE_DATABASE_URL, else postgresql://postgres@127.0.0.1:5432/test",
    )  # fmt: skip
    up.add_argument("--database-url", default=None, help="attach the job store to this PostgreSQL")
    up.add_argument(
        "--existing-queue", action="append", default=[], metavar="NAME[:VISIBILITY]",
        help="a queue the account has before the deploy (a workload's `Queue: existing`), created with "
        "SQS's defaults or this visibility timeout (s); set the rest on it with the AWS CLI (repeatable)",
    )  # fmt: skip
    up.add_argument("--ready-file", default=None, help="write endpoint + outputs as JSON here once up")
    up.add_argument("--iam-usage", default=None, help="on stop, write what each IAM statement granted here")
    up.add_argument("--log-file", default=None, help="send the functions' stdout (JSON logs, EMF) here")
    up.add_argument(
        "--no-reload",
        action="store_true",
        help="keep running the code each function started with (default: an edit to a function's folder "
        "takes effect on its next cold start)",
    )
    up.set_defaults(func=cmd_up)
    demo = sub.add_parser("demo", help="deploy, drive every scenario, print expected vs observed")
    demo.add_argument("--param", action="append", default=[], metavar="KEY=VALUE")
    demo.add_argument("--log-file", default=str(ROOT / ".sluice-local" / "demo-functions.log"))
    demo.add_argument("--only", default="", help="comma-separated scenario names to run (default: every one)")
    demo.set_defaults(func=cmd_demo)
    mutation = sub.add_parser(
        "mutation", help="each IAM statement a demo scenario needs, taken out: the run must be refused"
    )
    mutation.add_argument("--workers", type=int, default=2, help="processes, each its own stack (default 2)")
    mutation.add_argument("--limit", type=int, default=None, help="take out only the first N statements")
    mutation.add_argument(
        "--scenario", default="", help="comma-separated demo scenarios (default: every one)"
    )
    mutation.add_argument("--json", default="", help="write the baseline and every mutant here")
    mutation.set_defaults(func=cmd_mutation)
    iam_report = sub.add_parser(
        "iam-report", help="permissions granted but never used in the recorded runs (demo, soak, tests)"
    )
    iam_report.add_argument("usage", nargs="*", help="usage files (default: .sluice-local/iam/*.json)")
    iam_report.set_defaults(func=cmd_iam_report)
    soak = sub.add_parser("soak", help="seeded fault schedules through the stack; lost/duplicated checked")
    soak.add_argument("--seeds", type=int, default=500, help="how many seeds (default 500)")
    soak.add_argument("--first", type=int, default=0, help="the first seed (default 0)")
    soak.add_argument("--seed", type=int, default=None, help="replay this one seed alone")
    soak.add_argument(
        "--workers",
        type=int,
        default=max(2, 2 * (os.cpu_count() or 1)),
        help="processes, each its own stack (default: twice the cores; each stack's job functions hold a "
        "PostgreSQL connection per execution environment, about ten a stack)",
    )
    _rates(soak)
    soak.set_defaults(func=cmd_soak)
    worker = sub.add_parser("soak-worker", help=argparse.SUPPRESS)
    worker.add_argument("--mode", required=True, choices=["lambda", "stepfunctions"])
    worker.add_argument("--pool", required=True, help="a seed pool folder: claim seeds until it is empty")
    worker.add_argument("--label", default="0", help="names this worker's log files")
    _rates(worker)
    worker.set_defaults(func=cmd_soak_worker)
    args = parser.parse_args(argv)
    started = time.monotonic()
    code: int = args.func(args)
    if args.command in ("demo", "soak", "mutation"):
        print(f"wall time {time.monotonic() - started:.1f} s", file=sys.__stdout__ or sys.stderr)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
