"""Shared fixtures: an in-process moto account holding the resources the consumer uses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from sluice.envelope import Seal
from sluice_local.testing.direct import create_idempotency_table, create_queue_with_dlq, queue_arn_of

ROOT = Path(__file__).resolve().parents[1]
REGION = "us-east-1"

ENVELOPE_KEY = "sluice-test-envelope-key-0123456789abcdef"
"""The envelope key the tests' stacks hold (a deployed stack generates its own)."""
ENVELOPE_KEY_NAME = "sluice-envelope-key"
TEST_SEAL = Seal((ENVELOPE_KEY.encode(),))
"""What sluice's functions seal with in these tests: for writing what sluice itself writes."""
ENVELOPE_KEY_ARN = f"arn:aws:secretsmanager:{REGION}:123456789012:secret:{ENVELOPE_KEY_NAME}"
"""A secret ARN for settings that are validated but not loaded."""


def envelope_key_secret(region: str = REGION) -> str:
    """The ARN of the envelope key in the test's moto account (created on first use), as template.yaml
    hands it to every function in ``SLUICE_ENVELOPE_KEY_SECRET``."""
    client = boto3.client("secretsmanager", region_name=region)
    try:
        return str(client.describe_secret(SecretId=ENVELOPE_KEY_NAME)["ARN"])
    except client.exceptions.ResourceNotFoundException:
        return str(client.create_secret(Name=ENVELOPE_KEY_NAME, SecretString=ENVELOPE_KEY)["ARN"])


# --- tiers and parallel runs -------------------------------------------------------------------------

PG_FIXTURES = frozenset({"pg_url", "jobs_schema"})
SOAK_GROUPS = {
    # the group of each soak test (by function): each runs whole stacks in processes of its own, so the
    # three run beside each other and beside the rest; the sabotaged runs share one module fixture.
    "test_the_short_soak_loses_nothing_and_duplicates_no_side_effect": "soak-orders",
    "test_the_job_soak_loses_no_job_and_repeats_no_two_phase_side_effect": "soak-jobs",
}
OWN_STACKS = (
    "test_adopt_doc.py", "test_delay_crash.py", "test_delays_scheduler.py", "test_demo_output.py",
    "test_first_deploy.py", "test_follow_up.py", "test_lifecycle.py", "test_own_function.py",
    "test_runtime_emulation.py", "test_runtime_fidelity.py", "test_testing_kit.py", "test_two_stacks.py",
    "test_up_reload.py", "test_wiring.py",
)  # fmt: skip
"""e2e files that start stacks of their own (a `make up`, the demo, a second stack, a fresh deploy) and use
no session stack: in the "stack" group they made that worker's share the run's longest (604 s against the
others' ~500 s; docs/adopt.md's walkthrough alone 214 s, mostly waiting on its own `make up`)."""
STACK_GROUPS = {
    # e2e files with a session stack of their own worker (the longest; the redrive and trace tests are the
    # ones that also start the stepfunctions-mode stack): the other e2e files share the "stack" group's.
    "test_redrive.py": "stack-redrive",
    "test_traces.py": "stack-redrive",
    "test_bad_input_battery.py": "stack-battery",
    **dict.fromkeys(OWN_STACKS, "stack-own"),
}
GROUP_ORDER = (
    "soak-orders", "stack-redrive", "soak-jobs", "soak-small", "stack-battery", "stack", "stack-own",
)  # fmt: skip
"""The longest groups start first, one a worker (`make test` runs with --no-loadscope-reorder and as many
workers as groups), and the unit and functional tests fill in around them one by one."""


def tier_group(nodeid: str) -> str | None:
    """The group a test runs in on pytest-xdist (tests sharing a session stack or a module fixture share a
    worker), or None for a test any worker may take on its own."""
    path, _, rest = nodeid.partition("::")
    parts = Path(path).parts
    if "e2e" not in parts:
        return None
    if parts[-1] == "test_soak.py":
        return SOAK_GROUPS.get(rest.split("[", 1)[0], "soak-small")
    return STACK_GROUPS.get(parts[-1], "stack")


LIBRARY_TESTS = (
    "tests/unit/test_arrival.py", "tests/unit/test_backoff.py", "tests/unit/test_batch_delay.py",
    "tests/unit/test_batchsend.py", "tests/unit/test_batchsend_due.py", "tests/unit/test_breaker.py",
    "tests/unit/test_claimcheck.py", "tests/unit/test_deadline.py", "tests/unit/test_delay.py",
    "tests/unit/test_envelope.py", "tests/unit/test_fit.py", "tests/unit/test_heartbeat.py",
    "tests/unit/test_job_consumer.py", "tests/unit/test_jobs.py", "tests/unit/test_redrive.py",
    "tests/unit/test_redrive_sfn.py", "tests/unit/test_seal.py", "tests/unit/test_settings.py",
    "tests/unit/test_sqs.py", "tests/unit/test_tracing.py",
    "tests/unit/test_workload_routing.py",
    "tests/functional/test_consumer.py", "tests/functional/test_consumer_key.py",
    "tests/functional/test_job_store.py", "tests/functional/test_queue_check.py",
    "tests/functional/test_record_later.py", "tests/functional/test_routing.py",
    "tests/functional/test_testing_direct.py",
)  # fmt: skip
"""The runtime library's tests: they need the library, moto, pytest and the test harness's light modules
(the direct test kit, the Lambda loader, SQS events), nothing of the CLI or the local runtime's template
machinery. ``make test`` runs them at both ends of the library's dependency ranges (scripts/library_ends.py,
each in a clean virtualenv with the library's wheel) instead of in the dev environment, whose pins lie
between the ends; ``make check`` runs them in the dev environment with the rest. Marked ``library``."""


def nodeid_path(nodeid: str) -> str:
    """The test file of a node id, relative to the repository (as LIBRARY_TESTS names it)."""
    path = nodeid.partition("::")[0]
    return path if path.startswith("tests/") else f"tests/{path}"


STACK_TIMEOUT = 400
"""pytest-timeout's bound for a test on a deployed stack (the default, 120 s, is for everything else). The
first test of a group pays for what it sets up: the session stack's start (its own deadline: 180 s) and
module fixtures that run scenarios (each with its own deadline, 240 s for the battery), which on a loaded
2-core machine takes longer than 120 s. Only a hang reaches it."""


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test with its tier (stack, soak, pg), longest groups first."""
    groups = {item.nodeid: tier_group(item.nodeid) for item in items}
    for item in items:
        group = groups[item.nodeid]
        if group is not None:
            item.add_marker(pytest.mark.stack)
            if item.get_closest_marker("timeout") is None:
                item.add_marker(pytest.mark.timeout(STACK_TIMEOUT))
        if group is not None and group.startswith("soak"):
            item.add_marker(pytest.mark.soak)
        if PG_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.pg)
        if nodeid_path(item.nodeid) in LIBRARY_TESTS:
            item.add_marker(pytest.mark.library)
    rank = {name: i for i, name in enumerate(GROUP_ORDER)}
    items.sort(key=lambda item: rank.get(groups[item.nodeid] or "", len(rank)))  # stable: order kept within


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """With ``--dist loadgroup``, the tiers' groups are the work units (xdist's own ``xdist_group`` marks
    are not seen under pytest 9: xdist renames ``item._nodeid``, pytest 9 reads ``item._id``). A group's
    tests go to one worker; every other test is a unit of its own."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling  # noqa: PLC0415 - only on xdist's controller

    class TierScheduling(LoadScopeScheduling):  # type: ignore[misc]  # xdist ships no types
        def _split_scope(self, nodeid: str) -> str:
            return tier_group(nodeid) or nodeid

    return TierScheduling(config, log)


@pytest.fixture(autouse=True, scope="session")
def _sqs_as_strict_as_aws() -> Iterator[None]:
    """moto accepts what SQS refuses (sizes in characters, any characters, any attributes): every test
    runs with the local runtime's SQS rules, so a message sluice sends that AWS would refuse fails here.
    And a message moto's redrive policy moves carries ``DeadLetterQueueSourceArn``, as in SQS (the
    redriver re-drives a message only to the queue it came from)."""
    from sluice_local.emulation import moto_adapter  # noqa: PLC0415

    undo_sources = moto_adapter.install_dead_letter_sources()
    undo_lock = moto_adapter.install_sqs_locks()  # concurrent deletes neither lose nor resurrect
    _SQS_RULES.append(moto_adapter.install_sqs_rules())
    yield
    _SQS_RULES.pop()()
    undo_lock()
    undo_sources()


_SQS_RULES: list[Any] = []


@pytest.fixture
def lenient_moto() -> Iterator[None]:
    """moto as it is, without the SQS rules (for tests that probe moto's own leniency)."""
    from sluice_local.emulation import moto_adapter  # noqa: PLC0415

    _SQS_RULES.pop()()
    yield
    _SQS_RULES.append(moto_adapter.install_sqs_rules())


@pytest.fixture(autouse=True)
def _aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Never reach real AWS from tests."""
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": REGION,
        "AWS_REGION": REGION,
        "POWERTOOLS_SERVICE_NAME": "sluice",
        "POWERTOOLS_METRICS_NAMESPACE": "Sluice",
        "POWERTOOLS_TRACE_DISABLED": "true",
        "POWERTOOLS_DEV": "false",
    }.items():
        monkeypatch.setenv(name, value)
    for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)


@dataclass
class Resources:
    sqs: Any
    s3: Any
    dynamodb: Any
    work_url: str
    work_arn: str
    dlq_url: str
    poison_url: str
    table: str
    bucket: str
    prefix: str = "claim-check/"

    def env(self, **overrides: object) -> dict[str, str]:
        env = {
            "SLUICE_IDEMPOTENCY_TABLE": self.table,
            "SLUICE_POISON_QUEUE_URL": self.poison_url,
            "SLUICE_CLAIM_CHECK_BUCKETS": self.bucket,
            "SLUICE_CLAIM_CHECK_PREFIX": self.prefix,
            "SLUICE_MAX_RECEIVE_COUNT": "5",
            "SLUICE_BACKOFF_BASE_SECONDS": "2",
            "SLUICE_BACKOFF_CAP_SECONDS": "300",
            "SLUICE_VISIBILITY_TIMEOUT_SECONDS": "180",
            "SLUICE_IDEMPOTENCY_KEY_JMESPATH": "order_id",
            "AWS_LAMBDA_FUNCTION_NAME": "sluice-test-consumer",
            "SLUICE_ENVELOPE_KEY_SECRET": envelope_key_secret(),
        }
        env.update({f"SLUICE_{k.upper()}": str(v) for k, v in overrides.items()})
        return env

    def send(self, body: Any, **kwargs: Any) -> str:
        text = body if isinstance(body, str) else json.dumps(body)
        return self.sqs.send_message(QueueUrl=self.work_url, MessageBody=text, **kwargs)["MessageId"]


def team_pytest(cwd: Path, folder: str, *, timeout: float) -> subprocess.CompletedProcess[str]:
    """pytest run on ``folder`` from ``cwd`` as a team runs its own tests: a fresh process, without this
    session's AWS, sluice, moto or pytest settings in its environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "SLUICE_", "MOTO_", "PYTEST_"))}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", folder],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def create_ledger_table(dynamodb: Any, name: str) -> None:
    """The example processors' ledger, keyed as template.yaml's LedgerTable (one item per side effect)."""
    dynamodb.create_table(
        TableName=name,
        AttributeDefinitions=[
            {"AttributeName": "effect_key", "AttributeType": "S"},
            {"AttributeName": "execution_id", "AttributeType": "S"},
        ],
        KeySchema=[
            {"AttributeName": "effect_key", "KeyType": "HASH"},
            {"AttributeName": "execution_id", "KeyType": "RANGE"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )


def create_task_role(iam: Any, name: str) -> str:
    """A role Lambda and Step Functions may assume (moto does not check what it allows)."""
    trust = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"Service": ["lambda.amazonaws.com", "states.amazonaws.com"]},
                "Action": "sts:AssumeRole",
            }
        ],
    }
    return str(iam.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(trust))["Role"]["Arn"])


def create_waiting_state_machine(stepfunctions: Any, iam: Any, name: str) -> str:
    """A stand-in for the delay state machine whose executions stay RUNNING (moto does not execute
    them unless asked), as a bucket's execution does while it waits."""
    role = iam.create_role(RoleName=f"{name}-role", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    return str(
        stepfunctions.create_state_machine(
            name=name,
            definition=json.dumps({"StartAt": "Done", "States": {"Done": {"Type": "Succeed"}}}),
            roleArn=role,
        )["stateMachineArn"]
    )


def make_resources(visibility_timeout: int = 180, suffix: str = "") -> Resources:
    """The consumer's resources; ``suffix`` names a separate set, so cases or iterations that must not
    see each other's messages or records each get their own queues, table and bucket."""
    sqs = boto3.client("sqs", region_name=REGION)
    s3 = boto3.client("s3", region_name=REGION)
    ddb = boto3.client("dynamodb", region_name=REGION)
    work_url, dlq_url = create_queue_with_dlq(
        sqs, f"work{suffix}", f"work-dlq{suffix}", visibility_timeout=visibility_timeout, max_receive_count=5
    )
    work_arn = queue_arn_of(sqs, work_url)
    poison_url = sqs.create_queue(QueueName=f"poison{suffix}")["QueueUrl"]
    table, bucket = f"idempotency{suffix}", f"sluice-claims{suffix}"
    create_idempotency_table(ddb, table)
    s3.create_bucket(Bucket=bucket)
    return Resources(sqs, s3, ddb, work_url, work_arn, dlq_url, poison_url, table, bucket)


@pytest.fixture
def aws() -> Iterator[Resources]:
    with mock_aws():
        yield make_resources()


# --- PostgreSQL (the job store) ---------------------------------------------------------------------


@pytest.fixture(scope="session")
def pg_url() -> str:
    """The real PostgreSQL the job tests use; skips them with the printed reason when none answers."""
    from sluice_local.app import postgres  # noqa: PLC0415

    url = postgres.database_url()
    reason = postgres.unreachable_reason(url)
    if reason is not None:
        pytest.skip(reason)
    return url


@pytest.fixture
def jobs_schema(pg_url: str) -> Iterator[str]:
    """A schema of its own holding a migrated job store; dropped after the test."""
    from sluice_local.app import postgres  # noqa: PLC0415

    name = postgres.new_schema(pg_url, prefix="sluice_t_")
    yield name
    postgres.drop_schema(pg_url, name)
