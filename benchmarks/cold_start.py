"""Cold import time of the consumer Lambda handler, as a ratio to ``boto3.client("sqs")``.

Each sample is a fresh interpreter (``python -c``) whose environment looks like a Lambda execution
environment: AWS_LAMBDA_FUNCTION_NAME, LAMBDA_TASK_ROOT, region, dummy credentials, the Powertools
service name, the SLUICE_* settings the handler validates at import, and PYTHONPATH = the function's
code directory, then the layer (the Lambda runtime puts the code directory first and the layer on
the path). The child times only the import with ``time.perf_counter`` and prints milliseconds; the
interpreter's own start-up is not counted. Baseline and handler runs alternate to reduce drift.

    .venv/bin/python benchmarks/cold_start.py              # dev venv (extra packages, e.g. awscrt)
    .venv/bin/python benchmarks/cold_start.py --lean       # lean venv: boto3 + the layer's pins only
    .venv/bin/python benchmarks/cold_start.py --importtime # where the handler's import time goes
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FUNCTION_DIR = ROOT / "functions" / "consumer"
LAYER_DIR = ROOT / "layers" / "common"
LAYER_REQUIREMENTS = LAYER_DIR / "requirements.txt"
LEAN_VENV = ROOT / ".bench-venv"
TARGET_RATIO = 1.3

HANDLER_CHILD = """\
from time import perf_counter as p
t = p()
import app
print((p() - t) * 1000)
"""
BASELINE_CHILD = """\
from time import perf_counter as p
t = p()
import boto3
boto3.client("sqs")
print((p() - t) * 1000)
"""

# Optional third child (--anchor): a bare Powertools SQS handler module with the same building blocks
# (Logger, Metrics, Tracer, BatchProcessor, idempotency on DynamoDB), i.e. the floor the layer builds on.
ANCHOR_CHILD = """\
from time import perf_counter as p
t = p()
import os
from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer, IdempotencyConfig, idempotent_function,
)
logger, metrics, tracer = Logger(), Metrics(), Tracer()
batch = BatchProcessor(EventType.SQS)
store = DynamoDBPersistenceLayer(table_name=os.environ["SLUICE_IDEMPOTENCY_TABLE"])
config = IdempotencyConfig(event_key_jmespath="message_id")
@idempotent_function(data_keyword_argument="task", persistence_store=store, config=config)
def work(task):
    return None
print((p() - t) * 1000)
"""

# Variables of the developer's shell that would change what is imported or how.
# PYTHONDONTWRITEBYTECODE is dropped so .pyc files are written once (warm-up) and then reused.
_DROP = (
    "PYTHONSTARTUP",
    "PYTHONHOME",
    "PYTHONDEVMODE",
    "PYTHONPROFILEIMPORTTIME",
    "PYTHONDONTWRITEBYTECODE",
    "AWS_PROFILE",
    "AWS_CONFIG_FILE",
    "AWS_SHARED_CREDENTIALS_FILE",
    "AWS_ENDPOINT_URL",
)


def lambda_env() -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("SLUICE_", "POWERTOOLS_")) and k not in _DROP
    }
    env.update(
        {
            "AWS_LAMBDA_FUNCTION_NAME": "sluice-consumer",
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "512",
            "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
            "AWS_EXECUTION_ENV": "AWS_Lambda_python3.13",
            "LAMBDA_TASK_ROOT": str(FUNCTION_DIR),
            "AWS_REGION": "us-east-1",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": "ASIABENCHMARKDUMMY00",
            "AWS_SECRET_ACCESS_KEY": "benchmark-dummy-secret",
            "AWS_SESSION_TOKEN": "benchmark-dummy-token",
            "POWERTOOLS_SERVICE_NAME": "sluice-consumer",
            "POWERTOOLS_METRICS_NAMESPACE": "Sluice",
            "SLUICE_IDEMPOTENCY_TABLE": "sluice-idempotency",
            "SLUICE_POISON_QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/123456789012/sluice-poison",
            "SLUICE_CLAIM_CHECK_BUCKETS": "sluice-claims",
            "PYTHONPATH": os.pathsep.join([str(FUNCTION_DIR), str(LAYER_DIR)]),
        }
    )
    return env


def run_child(
    python: str, code: str, env: dict[str, str], *extra_args: str
) -> subprocess.CompletedProcess[str]:
    # cwd = the code directory, as in Lambda (sys.path[0] is '' for ``-c``).
    return subprocess.run(
        [python, *extra_args, "-c", code],
        env=env,
        cwd=FUNCTION_DIR,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def sample(python: str, code: str, env: dict[str, str]) -> float:
    proc = run_child(python, code, env)
    if proc.returncode != 0:
        raise SystemExit(f"child failed (exit {proc.returncode}):\n{proc.stderr}")
    return float(proc.stdout.strip().splitlines()[-1])


def lean_python(base: str) -> str:
    """Create (or reuse) .bench-venv with boto3 and the layer's pinned requirements only."""
    python = LEAN_VENV / "bin" / "python"
    boto3_spec = _boto3_spec(base)
    wanted = hashlib.sha256(
        (LAYER_REQUIREMENTS.read_text() + boto3_spec + _version(base)).encode()
    ).hexdigest()
    marker = LEAN_VENV / ".sluice-bench"
    if python.exists() and marker.exists() and marker.read_text().strip() == wanted:
        return str(python)
    print(f"creating lean venv {LEAN_VENV} ({boto3_spec} + {LAYER_REQUIREMENTS.relative_to(ROOT)}) ...")
    subprocess.run([base, "-m", "venv", "--clear", str(LEAN_VENV)], check=True)
    pip = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", boto3_spec, "-r", str(LAYER_REQUIREMENTS)],
        capture_output=True,
        text=True,
        check=False,
    )
    if pip.returncode != 0:
        raise SystemExit(f"pip install into {LEAN_VENV} failed:\n{pip.stdout}\n{pip.stderr}")
    marker.write_text(wanted + "\n")
    return str(python)


def _version(python: str) -> str:
    return subprocess.run(
        [python, "-c", "import sys; print(sys.version.split()[0])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def _boto3_spec(python: str) -> str:
    """The dev venv's boto3 version, so the two modes differ only by the extra packages."""
    proc = subprocess.run(
        [python, "-c", "import importlib.metadata as m; print(m.version('boto3'))"],
        capture_output=True,
        text=True,
        check=False,
    )
    return f"boto3=={proc.stdout.strip()}" if proc.returncode == 0 else "boto3"


def describe(python: str) -> str:
    proc = subprocess.run(
        [
            python,
            "-c",
            "import sys, importlib.util as u, importlib.metadata as m\n"
            "print(sys.version.split()[0], sys.prefix,"
            " 'boto3=' + m.version('boto3'), 'botocore=' + m.version('botocore'),"
            " 'awscrt=' + ('yes' if u.find_spec('awscrt') else 'no'))",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    return proc.stdout.strip() or proc.stderr.strip()


def importtime(python: str, env: dict[str, str], top: int = 15) -> None:
    proc = run_child(python, "import app", env, "-X", "importtime")
    if proc.returncode != 0:
        raise SystemExit(f"child failed (exit {proc.returncode}):\n{proc.stderr}")
    rows: list[tuple[int, int, str]] = []
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        self_field, cumulative_field, name = line.removeprefix("import time:").split("|", 2)
        rows.append((int(cumulative_field), int(self_field), name.rstrip()))
    print("\n-X importtime of `import app` (one child; module import only, not client construction)")
    print(f"  {top} heaviest by cumulative time:")
    print(f"  {'cumulative ms':>13}  {'self ms':>8}  module")
    for cumulative_us, self_us, name in sorted(rows, reverse=True)[:top]:
        print(f"  {cumulative_us / 1000:13.1f}  {self_us / 1000:8.1f}  {name.strip()}")
    print(f"  {top} heaviest by self time:")
    for cumulative_us, self_us, name in sorted(rows, key=lambda r: r[1], reverse=True)[:top]:
        print(f"  {cumulative_us / 1000:13.1f}  {self_us / 1000:8.1f}  {name.strip()}")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=7, help="fresh processes per child kind (>= 5)")
    parser.add_argument("--lean", action="store_true", help="use the lean venv .bench-venv (boto3 + layer)")
    parser.add_argument("--python", default=None, help="interpreter to use instead (overrides --lean)")
    parser.add_argument("--importtime", action="store_true", help="also show the 15 heaviest imports")
    parser.add_argument(
        "--anchor", action="store_true", help="also time a bare Powertools batch+idempotency handler module"
    )
    args = parser.parse_args()
    if args.runs < 5:
        parser.error("--runs must be at least 5")

    if args.python:
        python, mode = args.python, "given interpreter"
    elif args.lean:
        python, mode = lean_python(sys.executable), "lean venv (boto3 + layer requirements only)"
    else:
        python, mode = sys.executable, "dev venv (sys.executable)"
    env = lambda_env()
    print(f"interpreter: {python}  [{mode}]")
    print(f"  {describe(python)}")
    print(f"  PYTHONPATH={env['PYTHONPATH']}")

    # Warm-up (unmeasured): writes .pyc files and warms the page cache for both children.
    sample(python, BASELINE_CHILD, env)
    sample(python, HANDLER_CHILD, env)
    if args.anchor:
        sample(python, ANCHOR_CHILD, env)

    baseline: list[float] = []
    handler: list[float] = []
    anchor: list[float] = []
    kinds = [(BASELINE_CHILD, baseline), (HANDLER_CHILD, handler)]
    if args.anchor:
        kinds.append((ANCHOR_CHILD, anchor))
    for i in range(args.runs):
        # Rotate the order each round so no kind always runs first (or right after another).
        shift = i % len(kinds)
        round_ = kinds[shift:] + kinds[:shift]
        for code, out in round_ if i % 2 == 0 else round_[::-1]:
            out.append(sample(python, code, env))

    b, h = statistics.median(baseline), statistics.median(handler)
    ratio = h / b
    print(f"\nbaseline  `import boto3; boto3.client('sqs')`: median {b:7.1f} ms  samples {_fmt(baseline)}")
    print(f"handler   `import app` (consumer)            : median {h:7.1f} ms  samples {_fmt(handler)}")
    verdict = "PASS" if ratio <= TARGET_RATIO else "ABOVE TARGET"
    print(f"ratio handler/baseline = {ratio:.2f}  (target <= {TARGET_RATIO})  {verdict}")
    print(f"handler minus baseline = {h - b:.1f} ms")
    if anchor:
        a = statistics.median(anchor)
        print(f"anchor    bare Powertools batch+idempotency  : median {a:7.1f} ms  samples {_fmt(anchor)}")
        print(f"ratio anchor/baseline  = {a / b:.2f}   handler/anchor = {h / a:.2f}  (informational)")

    if args.importtime:
        importtime(python, env)
    return 0


def _fmt(values: list[float]) -> str:
    return "[" + ", ".join(f"{v:.0f}" for v in values) + "]"


if __name__ == "__main__":
    sys.exit(main())
