"""The soak's runner: one deployed stack per worker process, its seeds run one after another (faults
installed, workload sent, drained to quiescence, checked), and the workers started and gathered."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from sluice_local.app import postgres
from sluice_local.app.fast import FAST
from sluice_local.app.messages import ORDERS, REFUNDS
from sluice_local.app.observer import Stack
from sluice_local.app.principals import PRODUCER
from sluice_local.app.stack import acting_credentials, local_cloud
from sluice_local.emulation import faults
from sluice_local.emulation.cloud import LocalCloud
from sluice_local.emulation.iam import report as iam_report
from sluice_local.emulation.pollers import SqsPoller
from sluice_local.emulation.up import function_output
from sluice_local.soak.checker import QUEUE_WORKLOADS, Checker
from sluice_local.soak.db_faults import install_database_boundary
from sluice_local.soak.logtail import LogTail
from sluice_local.soak.options import Options
from sluice_local.soak.result import SeedResult
from sluice_local.soak.summary import Summary, gather
from sluice_local.soak.workload import (
    OBSERVED,
    Sent,
    SentJob,
    observe,
    release,
    send_jobs,
    send_messages,
    upload_due,
)

VISIBILITY_SECONDS = 6
FETCH_VISIBILITY_SECONDS = 60
"""The redrive state machine's DLQ receive visibility on a soak stack (300 s in AWS): a batch a failed
execution left in flight comes back after this long by itself. Compressed as the queues' visibility is,
yet long enough for a loaded machine to plan and send a batch within it."""
SEED_DEADLINE_SECONDS = 420.0
"""A deadline for one seed to drain, only reached when something is stuck. Several failed redrive
executions in a row fit in it, each holding its batch FETCH_VISIBILITY_SECONDS (with 300 s, two in a row
outlasted it on a machine at load average 15, and seed 213 of a 500-seed run was stuck at 240 s)."""
POLL_SECONDS = 0.3
IDLE_POLLS = 2
ZOMBIE_SECONDS = 60.0  # timed-out handler threads still running after the drain: they end at their next call
CRASH_POINTS = tuple((name + "RedriverFunction", "DeleteMessageBatch") for name in QUEUE_WORKLOADS)
"""Where half of a function's crashes land instead of after a random number of calls: points a random
count rarely reaches (each workload's redriver between its send and its delete: it seldom has messages
in hand)."""


class Soak:
    """One deployed stack, seeds run on it one after another."""

    def __init__(
        self, cloud: LocalCloud, log_path: Path, *, mode: str, options: Options, no_jobs: str = ""
    ) -> None:
        """``no_jobs``: why the stack has no job store ('' when it has one)."""
        self.cloud = cloud
        self.mode = mode
        self.options = options
        self.no_jobs = no_jobs
        self.stack = Stack(cloud.endpoint, cloud.outputs, log_path, cloud.region, acting_credentials(cloud))
        self.checker = Checker(self.stack, log_path, mode=mode, no_jobs=no_jobs)
        self._log = LogTail(log_path)  # the drain's reader: what the held claim-check orders went through
        consumer = cloud.functions[ORDERS + "ConsumerFunction"].spec.environment
        self._max_receives = int(consumer["SLUICE_MAX_RECEIVE_COUNT"])
        self._compress_time()

    def _compress_time(self) -> None:
        sqs = self.stack.client("sqs")
        for output in (*(name + "QueueUrl" for name in QUEUE_WORKLOADS), "DelayQueueUrl", "JobQueueUrl"):
            if output not in self.stack.outputs:  # no job store without a PostgreSQL
                continue
            sqs.set_queue_attributes(
                QueueUrl=self.stack.outputs[output], Attributes={"VisibilityTimeout": str(VISIBILITY_SECONDS)}
            )
        for host in self.cloud.functions.values():
            if "SLUICE_VISIBILITY_TIMEOUT_SECONDS" in host.spec.environment:
                host.spec.environment["SLUICE_VISIBILITY_TIMEOUT_SECONDS"] = str(VISIBILITY_SECONDS)
        for poller in self.cloud.pollers:  # as AWS requires of an SQS trigger: timeout ≤ visibility
            spec = poller.spec.function.spec
            spec.timeout = min(spec.timeout, VISIBILITY_SECONDS - 1)
        for name in QUEUE_WORKLOADS:
            if arn := self.stack.outputs.get(name + "RedriveStateMachineArn"):
                compress_fetch(self.stack.client("stepfunctions"), arn, FETCH_VISIBILITY_SECONDS)

    # --- one seed ------------------------------------------------------------------------------

    def run(self, seed: int) -> SeedResult:
        o = self.options
        plan = faults.FaultPlan(
            seed, aws_rate=o.aws_rate, lambda_rate=o.lambda_rate, only=o.only,
            ledger_table=self.stack.outputs["LedgerTableName"],
            guard_table=self.stack.outputs["IdempotencyTableName"],
            sabotage_ledger=o.sabotage == "ledger", crash_points=CRASH_POINTS,
        )  # fmt: skip
        injector = faults.Injector(plan)
        started = time.monotonic()
        undo = faults.install(injector, install_database_boundary)
        if o.sabotage == "delete-failed":  # the mapping deletes records the batch reported failed
            original = SqsPoller._failures
            SqsPoller._failures = staticmethod(lambda result, ids: set())  # type: ignore[method-assign]
        jobs: list[SentJob] = []
        sent: list[Sent] = []
        try:
            for part, workload in (("orders", ORDERS), ("refunds", REFUNDS)):
                if o.sends(part):
                    sent += send_messages(self.stack, plan, workload)
            if o.sends("jobs"):
                jobs = [] if self.no_jobs else send_jobs(self.stack, plan)
            stuck = self._drain(sent, jobs) or self._zombies_gone()
        finally:
            undo()
            if o.sabotage == "delete-failed":
                SqsPoller._failures = original  # type: ignore[method-assign]
        seconds = time.monotonic() - started
        result = self.checker.check(seed, sent, jobs, injector, seconds=seconds, stuck=stuck)
        self._clean_up()
        return result

    def _drain(self, sent: list[Sent], jobs: list[SentJob]) -> str:
        """Wait for quiescence; '' when reached, else what is still moving at the deadline.

        The claim-check objects held back (:meth:`Sent.due`) are uploaded as their messages are seen
        failing. Should nothing move any more while some are still held, their messages are at an end
        where no receive will fail again (isolated, or deleted when they must not have been): those are
        uploaded then, and the checker tells where the messages ended."""
        deadline = time.monotonic() + SEED_DEADLINE_SECONDS
        s3, bucket = self.stack.client("s3", PRODUCER), self.stack.outputs["ClaimCheckBucketName"]
        busy = "not polled"
        idle = 0
        while time.monotonic() < deadline:
            observe(sent, self._log.read(*OBSERVED), max_receives=self._max_receives)
            upload_due(s3, bucket, sent)
            moving = self._busy() or self._jobs_busy(jobs)
            held = [str(s) for s in sent if s.upload_at is not None]
            idle = 0 if moving else idle + 1
            if idle >= IDLE_POLLS:  # each poll reads the queues one after another: agree twice
                if not held:
                    return ""
                release(s3, bucket, sent)
                idle = 0
            busy = moving or f"claim-check objects held back: {held}"
            time.sleep(POLL_SECONDS)  # between polls of the quiescence condition
        return busy

    def _zombies_gone(self) -> str:
        """Wait (while the injector is still installed) for the threads of timed-out invocations: each
        dies at its next call, and must not write the ledger after the check."""
        deadline = time.monotonic() + ZOMBIE_SECONDS
        for host in self.cloud.functions.values():
            for thread in list(host.timed_out):
                thread.join(max(0.0, deadline - time.monotonic()))
                if thread.is_alive():
                    return f"timed-out thread {thread.name} still running {ZOMBIE_SECONDS:.0f} s on"
        return ""

    def _busy(self) -> str:
        # The delay DLQ is an end (alarmed; drained by an operator): what lands there counts as dead-lettered.
        # The depths are read from the emulation, not asked for: a request each, every POLL_SECONDS, by every
        # worker, was 7 % of a soak worker's CPU.
        queues = [name + kind for name in QUEUE_WORKLOADS for kind in ("QueueUrl", "DeadLetterQueueUrl")]
        for output in (*queues, "DelayQueueUrl"):
            depth = self.cloud.queue_depth(self.stack.outputs[output])
            if any(depth.values()):
                return f"{output}: {depth}"
        parked = self.stack.client("s3").list_objects_v2(
            Bucket=self.stack.outputs["DelayBucketName"], Prefix="delayed/"
        )
        pending = [o["Key"] for o in parked.get("Contents", []) if "/quarantine/" not in o["Key"]]
        if pending:
            return f"parked objects: {pending[:3]}"
        # A redrive execution holds nothing the queues above do not count (what it fetched is in flight
        # in the DLQ until it is sent and deleted), and the backstop starts one every few seconds: under
        # faults and load they overlap, one always running (a job seed was reported stuck so). Only the
        # delay state machine's running executions are waited for.
        arn = self.stack.outputs["DelayStateMachineArn"]
        sfn = self.stack.client("stepfunctions")
        if sfn.list_executions(stateMachineArn=arn, statusFilter="RUNNING").get("executions"):
            return "DelayStateMachineArn: executions running"
        return ""

    def _jobs_busy(self, jobs: list[SentJob]) -> str:
        """Rows are the truth: busy while one is not terminal, or a job message is still around."""
        if not jobs:
            return ""
        store = self.stack.job_store()
        open_rows = Counter(
            job.status
            for job in (store.get(uuid.UUID(j.job_id)) for j in jobs)
            if job is not None and job.status not in ("completed", "dead")
        )
        if open_rows:
            return f"jobs: {dict(open_rows)}"
        attributes = self.stack.client("sqs").get_queue_attributes(
            QueueUrl=self.stack.outputs["JobQueueUrl"],
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        depth = {k: int(v) for k, v in attributes.items()}
        return f"JobQueueUrl: {depth}" if any(depth.values()) else ""

    # --- the checker ---------------------------------------------------------------------------

    def _clean_up(self) -> None:
        sqs = self.stack.client("sqs")
        for output in ("PoisonPillQueueUrl",):
            for message in self.stack.every_message(output):
                sqs.delete_message(
                    QueueUrl=self.stack.outputs[output], ReceiptHandle=message["ReceiptHandle"]
                )


def compress_fetch(sfn: Any, arn: str, seconds: int) -> None:
    """Set the redrive state machine's FetchBatch ``VisibilityTimeout`` to ``seconds`` in place."""
    definition = json.loads(sfn.describe_state_machine(stateMachineArn=arn)["definition"])
    fetch = definition["States"]["FetchBatch"]["Parameters"]
    if "VisibilityTimeout" not in fetch:
        raise RuntimeError(f"FetchBatch of {arn} sets no VisibilityTimeout to compress: {fetch}")
    fetch["VisibilityTimeout"] = seconds
    sfn.update_state_machine(stateMachineArn=arn, definition=json.dumps(definition))


def mode_of(seed: int) -> str:
    """Even seeds run with RedriveMode=lambda, odd ones with stepfunctions."""
    return "lambda" if seed % 2 == 0 else "stepfunctions"


def claimed(pool: Path) -> Iterator[int]:
    """The seeds of ``pool`` (one empty file each) this process wins, one at a time, lowest first: a
    seed is claimed by deleting its file, which exactly one process can. Workers that pull their next
    seed when done finish together; fixed shares left one worker running its slow seeds alone while the
    others had finished (the short soak's tail in ``make test``)."""
    while names := sorted(os.listdir(pool), key=int):
        for name in names:
            try:
                (pool / name).unlink()
            except FileNotFoundError:  # another worker took it first
                continue
            yield int(name)
            break


def seed_pool(log_dir: Path, mode: str, seeds: Iterable[int]) -> Path:
    """A fresh pool of ``seeds`` for the workers of ``mode`` (see :func:`claimed`)."""
    pool = log_dir / "seed-pool" / mode
    shutil.rmtree(pool, ignore_errors=True)
    pool.mkdir(parents=True)
    for seed in seeds:
        (pool / str(seed)).touch()
    return pool


def run_worker(seeds: Iterable[int], *, mode: str, log_dir: Path, options: Options, label: str = "0") -> int:
    """Run ``seeds`` (:func:`claimed` from a pool, as each is reached) on one stack; one JSON line per
    seed on stdout. Exit 1 when any seed failed."""
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"soak-{mode}-{label}.functions.log"
    faults_log = logging.FileHandler(log_path.with_suffix(".faults.log"), encoding="utf-8")
    faults_log.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    logging.getLogger("sluice_local.emulation.faults").addHandler(faults_log)  # every fault, with its seed
    logging.getLogger("sluice_local.emulation.faults").setLevel(logging.INFO)
    failed = 0
    params = {**FAST, "RedriveMode": mode}
    database = postgres.database_url()
    no_jobs = (
        (postgres.unreachable_reason(database) or "") if options.sends("jobs") else "not in this workload"
    )
    stack_name = f"sluice-soak-{mode}"
    # stdout carries one JSON line per seed to the runner and nothing else: whatever else is printed (a
    # handler still running after its stack stopped flushes its metrics then) goes to this worker's log.
    results, sys.stdout = sys.stdout, sys.stderr
    with (
        function_output(log_path),  # the functions' JSON logs and EMF
        local_cloud(
            parameters=params,
            stack_name=stack_name,
            database_url=None if no_jobs else database,
            examples=True,  # the soak sends to the examples, whatever a fork runs beside them
        ) as cloud,
    ):
        soak = Soak(cloud, log_path, mode=mode, options=options, no_jobs=no_jobs)
        for seed in seeds:
            result = soak.run(seed)
            failed += not result.ok
            print(result.to_json(), file=results, flush=True)
        # what the stack's roles and policies granted over every seed (python -m sluice_local iam-report)
        uses = iam_report.usage(
            cloud.iam, iam_report.stack_policies(cloud.iam, stack_name, [cloud.region]), stack_name
        )
        iam_report.dump(uses, log_dir / f"soak-{mode}-{label}.iam.json")
        for line in iam_report.summary(cloud.iam, uses):
            print(line, file=sys.stderr, flush=True)
        failed += bool(cloud.iam.record.denials)  # no seed asks for a refusal: one is a missing permission
    return 1 if failed else 0


def run(seeds: list[int], *, workers: int, log_dir: Path, options: Options) -> Summary:
    """Run ``seeds`` in ``workers`` processes (each its own stack, one RedriveMode) and gather them."""
    by_mode: dict[str, list[int]] = {"lambda": [], "stepfunctions": []}
    for seed in seeds:
        by_mode[mode_of(seed)].append(seed)
    jobs: list[tuple[str, Path, int]] = []
    per_mode = max(1, workers // 2)
    for mode, mode_seeds in by_mode.items():
        if mode_seeds:
            pool = seed_pool(log_dir, mode, mode_seeds)
            jobs += [(mode, pool, i) for i in range(min(per_mode, len(mode_seeds)))]
    processes: list[tuple[str, subprocess.Popen[str]]] = []
    for mode, pool, i in jobs:
        cmd = [
            sys.executable, "-m", "sluice_local", "soak-worker", "--mode", mode,
            "--pool", str(pool), "--label", str(i), "--log-dir", str(log_dir),
            *options.argv(),
        ]  # fmt: skip
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "SLUICE_", "MOTO_"))}
        if "SLUICE_DATABASE_URL" in os.environ:  # the job store's PostgreSQL, when not the default
            env["SLUICE_DATABASE_URL"] = os.environ["SLUICE_DATABASE_URL"]
        log_dir.mkdir(parents=True, exist_ok=True)
        with (log_dir / f"worker-{mode}-{i}.stderr").open("wb") as stderr:
            processes.append(
                (
                    " ".join(cmd[1:]),
                    subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=stderr, text=True, env=env),
                )
            )
    summary = Summary(expected=list(seeds), workloads=options.workload)
    gather(processes, summary, log_dir)
    summary.results.sort(key=lambda r: r["seed"])
    (log_dir / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in summary.results))
    return summary
