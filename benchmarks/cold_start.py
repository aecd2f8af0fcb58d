"""Cold start of the consumer Lambda handler: import only, or the whole cold invocation.

Import only (default): the cold import time of the consumer handler, as a ratio to
``boto3.client("sqs")``.

Each sample is a fresh interpreter (``python -c``) whose environment looks like a Lambda execution
environment: AWS_LAMBDA_FUNCTION_NAME, LAMBDA_TASK_ROOT, region, dummy credentials, the Powertools
service name, the SLUICE_* settings the handler validates at import, and PYTHONPATH = the function's
code directory, then the layer (the Lambda runtime puts the code directory first and the layer on
the path). The child times only the import with ``time.perf_counter`` and prints milliseconds; the
interpreter's own start-up is not counted. Baseline and handler runs alternate to reduce drift. The
handler reads the stack's envelope key from Secrets Manager at import (``load_seal``): a moto server
this script starts on a loopback port holds it (``AWS_ENDPOINT_URL_SECRETS_MANAGER`` in the children),
so those two reads are a local HTTP round trip each, where Lambda's are network round trips.

    .venv/bin/python benchmarks/cold_start.py              # dev venv (extra packages, e.g. awscrt)
    .venv/bin/python benchmarks/cold_start.py --lean       # lean venv: boto3 + the layer's pins only
    .venv/bin/python benchmarks/cold_start.py --importtime # where the handler's import time goes

Whole cold invocation (``--invoke``): each sample is a fresh interpreter that starts moto's
``mock_aws``, creates the queues and table (untimed), then imports the handler and runs its first
batch of 10 new records; the timed region is the import plus that first invocation. The sluice
consumer (examples/orders/app.py, the example workload) is compared with benchmarks/anchor/app.py, the
same job written with Powertools alone; runs alternate and the ratio of the medians is held against 1.0.

    .venv/bin/python benchmarks/cold_start.py --invoke --runs 9
    .venv/bin/python benchmarks/cold_start.py --invoke --runs 9 --importtime --profile

``--smoke`` (the tests): one run per kind, no warm-up, one child per side for --importtime/--profile:
every step of the chosen mode, figures too noisy to read.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import hashlib
import json
import logging
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BENCH_DIR = Path(__file__).resolve().parent
FUNCTION_DIR = ROOT / "examples" / "orders"
LAYER_DIR = ROOT / "layers" / "common"
LAYER_REQUIREMENTS = LAYER_DIR / "requirements.txt"
LEAN_VENV = ROOT / ".bench-venv"
# The lean venv plus moto, for --invoke --lean (the plain lean venv stays boto3 + layer only).
# Python >= 3.13 writes a .gitignore into every venv it creates.
LEAN_INVOKE_VENV = ROOT / ".bench-venv-invoke"
TARGET_RATIO = 1.3

ANCHOR_DIR = BENCH_DIR / "anchor"
INVOKE_CHILD = BENCH_DIR / "invoke_child.py"
INVOKE_TARGET_RATIO = 1.0  # issue 28: the whole cold invocation no slower than the Powertools-only anchor
ENVELOPE_KEY_NAME = "sluice-envelope-key"
ENVELOPE_KEY = "bench-envelope-key-" + "0" * 32  # invoke_child.py's; load_seal wants >= 32 bytes
INVOKE_RECORDS = 10
PHASES = (("import_ms", 9), ("invoke_ms", 12), ("total_ms", 9))  # (sample key, column width)
# The consumer's SLUICE_* settings at the template's defaults (ConsumerTimeoutSeconds 30, no batching
# window), on top of lambda_env(): the import-only mode keeps its historical minimal settings.
INVOKE_ENV = {
    "LOG_LEVEL": "INFO",
    "SLUICE_CLAIM_CHECK_PREFIX": "claim-check/",
    "SLUICE_MAX_RECEIVE_COUNT": "5",
    "SLUICE_DEAD_LETTER_QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/123456789012/sluice-work-dlq",
    "SLUICE_BACKOFF_BASE_SECONDS": "2",
    "SLUICE_BACKOFF_CAP_SECONDS": "300",
    "SLUICE_VISIBILITY_TIMEOUT_SECONDS": "180",
    "SLUICE_BATCH_WINDOW_SECONDS": "0",
    "SLUICE_CONCURRENCY": "1",
    "SLUICE_IDEMPOTENCY_KEY_JMESPATH": "order_id",
    "SLUICE_IDEMPOTENCY_TTL_SECONDS": "1209600",
}

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


def lambda_env(function_dir: Path = FUNCTION_DIR, layer_dir: Path = LAYER_DIR) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SLUICE_", "POWERTOOLS_", "AWS_ENDPOINT_URL")) and k not in _DROP
    }
    env.update(
        {
            "AWS_LAMBDA_FUNCTION_NAME": "sluice-consumer",
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "512",
            "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
            "AWS_EXECUTION_ENV": "AWS_Lambda_python3.13",
            "LAMBDA_TASK_ROOT": str(function_dir),
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
            # The example processor's ledger table (template.yaml LedgerTable), read at import.
            "LEDGER_TABLE_NAME": "sluice-ledger",
            "PYTHONPATH": os.pathsep.join([str(function_dir), str(layer_dir)]),
        }
    )
    return env


@contextlib.contextmanager
def envelope_key_endpoint() -> Iterator[dict[str, str]]:
    """A moto server on a loopback port holding the stack's envelope key, for children that import the
    handler outside ``mock_aws`` (it reads the key at import: ``sluice.sealing.load_seal``). Yields the
    variables that point a child at it: the secret's ARN, as template.yaml hands it over, and the Secrets
    Manager endpoint (no other service's: the handler makes no other call at import)."""
    import boto3  # noqa: PLC0415 - the parent only needs them here
    from moto.server import ThreadedMotoServer  # noqa: PLC0415

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request among the figures
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        credentials = lambda_env()
        client = boto3.client(
            "secretsmanager",
            endpoint_url=endpoint,
            region_name=credentials["AWS_REGION"],
            aws_access_key_id=credentials["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=credentials["AWS_SECRET_ACCESS_KEY"],
            aws_session_token=credentials["AWS_SESSION_TOKEN"],
        )
        arn = client.create_secret(Name=ENVELOPE_KEY_NAME, SecretString=ENVELOPE_KEY)["ARN"]
        yield {"SLUICE_ENVELOPE_KEY_SECRET": arn, "AWS_ENDPOINT_URL_SECRETS_MANAGER": endpoint}
    finally:
        server.stop()


def run_child(
    python: str,
    code: str,
    env: dict[str, str],
    *extra_args: str,
    argv: tuple[str, ...] = (),
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    # cwd = the code directory, as in Lambda (sys.path[0] is '' for ``-c``).
    return subprocess.run(
        [python, *extra_args, "-c", code, *argv],
        env=env,
        cwd=cwd or Path(env["LAMBDA_TASK_ROOT"]),
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


def lean_python(base: str, *, with_moto: bool = False) -> str:
    """Create (or reuse) .bench-venv with boto3 and the layer's pinned requirements only.

    ``with_moto``: .bench-venv-invoke instead, the same plus moto (the dev venv's version), for
    --invoke, whose children run against moto.
    """
    venv = LEAN_INVOKE_VENV if with_moto else LEAN_VENV
    python = venv / "bin" / "python"
    specs = [_version_spec(base, "boto3")] + ([_version_spec(base, "moto")] if with_moto else [])
    wanted = hashlib.sha256(
        (LAYER_REQUIREMENTS.read_text() + " ".join(specs) + _version(base)).encode()
    ).hexdigest()
    marker = venv / ".sluice-bench"
    if python.exists() and marker.exists() and marker.read_text().strip() == wanted:
        return str(python)
    print(f"creating lean venv {venv} ({' + '.join(specs)} + {LAYER_REQUIREMENTS.relative_to(ROOT)}) ...")
    uv = (
        Path(sys.executable).parent / "uv"
    )  # the dev environment's (make venv installs it): seconds, not a minute
    if uv.exists():
        subprocess.run([str(uv), "venv", "--quiet", "--clear", "--python", base, str(venv)], check=True)
        # bytecode compiled at install, as pip does by default (what the figures were measured with)
        install = [str(uv), "pip", "install", "--quiet", "--compile-bytecode", "--python", str(python)]
    else:
        subprocess.run([base, "-m", "venv", "--clear", str(venv)], check=True)
        install = [str(python), "-m", "pip", "install", "--quiet"]
    pip = subprocess.run(
        [*install, *specs, "-r", str(LAYER_REQUIREMENTS)],
        capture_output=True,
        text=True,
        check=False,
    )
    if pip.returncode != 0:
        raise SystemExit(f"pip install into {venv} failed:\n{pip.stdout}\n{pip.stderr}")
    marker.write_text(wanted + "\n")
    return str(python)


def _version(python: str) -> str:
    return subprocess.run(
        [python, "-c", "import sys; print(sys.version.split()[0])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def _version_spec(python: str, package: str) -> str:
    """The dev venv's version of ``package``, so the two modes differ only by the extra packages."""
    proc = subprocess.run(
        [python, "-c", f"import importlib.metadata as m; print(m.version({package!r}))"],
        capture_output=True,
        text=True,
        check=False,
    )
    return f"{package}=={proc.stdout.strip()}" if proc.returncode == 0 else package


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


# --- whole cold invocation (--invoke) ----------------------------------------------------------


@dataclass
class Kind:
    """One side of --invoke: its handler's code directory and the environment of its children."""

    name: str
    code_dir: Path
    env: dict[str, str]
    samples: list[dict[str, Any]] = field(default_factory=list)

    def median(self, key: str) -> float:
        return float(statistics.median(s[key] for s in self.samples))


def invoke_env(code_dir: Path, layer_dir: Path, *, ledger: bool) -> dict[str, str]:
    """lambda_env() with the consumer's settings at the template's defaults; the same for both sides.

    ``ledger``: the example processor writes a ledger table (LEDGER_TABLE_NAME), so both sides do.
    """
    env = lambda_env(code_dir, layer_dir)
    env.update(INVOKE_ENV)
    env["SLUICE_POISON_QUEUE_URL"] = "https://sqs.us-east-1.amazonaws.com/123456789012/sluice-poison"
    if not ledger:  # an older processor without the ledger: the anchor writes none either
        del env["LEDGER_TABLE_NAME"]
    return env


def check_copied_classes(processor: Path, anchor: Path) -> list[str]:
    """The anchor validates with a copy of processor.Order (and writes the ledger with a copy of
    processor.Ledger when the processor has one): refuse to compare if a copy differs."""

    def classes(path: Path) -> dict[str, str]:
        return {n.name: ast.dump(n) for n in ast.parse(path.read_text()).body if isinstance(n, ast.ClassDef)}

    ours, theirs = classes(anchor), classes(processor)
    if "Order" not in theirs:
        raise SystemExit(f"no class Order in {processor}")
    copied: list[str] = [name for name in ("Order", "Ledger") if name in theirs]
    for name in copied:
        if ours.get(name) != theirs[name]:
            raise SystemExit(f"class {name} of {anchor} differs from {processor}: copy it again")
    return copied


def invoke_once(
    python: str, kind: Kind, *extra_args: str, **spec: Any
) -> tuple[dict[str, Any], subprocess.CompletedProcess[str]]:
    proc = run_child(
        python, INVOKE_CHILD.read_text(), kind.env, *extra_args, argv=(json.dumps(spec),), cwd=kind.code_dir
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("BENCH ")]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"{kind.name} child failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(lines[-1].removeprefix("BENCH "))
    if result["failures"]:
        raise SystemExit(f"{kind.name}: unexpected batch item failures {result['failures']}:\n{proc.stdout}")
    return result, proc


def run_invoke(python: str, kinds: list[Kind], runs: int, *, warm_up: bool = True) -> None:
    for kind in kinds if warm_up else ():  # warm-up (unmeasured): .pyc files, page cache
        invoke_once(python, kind)
    for i in range(runs):
        for kind in kinds if i % 2 == 0 else kinds[::-1]:
            kind.samples.append(invoke_once(python, kind)[0])
    works = {kind.name: {json.dumps(s["items"], sort_keys=True) for s in kind.samples} for kind in kinds}
    if len({w for ws in works.values() for w in ws}) != 1:
        raise SystemExit(f"the two handlers did not do the same work (idempotency items per run): {works}")


def report_invoke(kinds: list[Kind]) -> None:
    sluice, anchor = kinds
    items = sluice.samples[0]["items"]
    print(
        f"\nwork per run (both): {INVOKE_RECORDS} new records, no failures; items written {items}"
        "\n  (idempotency: one per record + one per side effect, charge and notify;"
        " ledger: one per side effect)"
    )
    print(f"\n{'median ms':34}{'import':>9}{'1st invoke':>12}{'total':>9}   total samples")
    for kind in kinds:
        where = kind.code_dir.relative_to(ROOT) if kind.code_dir.is_relative_to(ROOT) else kind.code_dir
        label = f"{kind.name} ({where})"
        print(
            f"  {label:32}{kind.median('import_ms'):9.1f}{kind.median('invoke_ms'):12.1f}"
            f"{kind.median('total_ms'):9.1f}   {_fmt([s['total_ms'] for s in kind.samples])}"
        )
    ratios = {key: sluice.median(key) / anchor.median(key) for key in ("import_ms", "invoke_ms", "total_ms")}
    diffs = {key: sluice.median(key) - anchor.median(key) for key in ratios}
    print(f"  {'sluice - anchor':32}" + "".join(f"{diffs[k]:+{w}.1f}" for k, w in PHASES))
    print(f"  {'sluice / anchor':32}" + "".join(f"{ratios[k]:{w}.2f}" for k, w in PHASES))
    ratio = ratios["total_ms"]
    verdict = "PASS" if ratio <= INVOKE_TARGET_RATIO else "FAIL"
    print(
        f"\nratio sluice/anchor, whole cold invocation (median import + first invocation) = {ratio:.3f}"
        f"  (target <= {INVOKE_TARGET_RATIO})  {verdict}"
    )
    cpu = {kind.name: kind.median("cpu_total_ms") for kind in kinds}
    print(
        "  informational, the children's CPU time over the same regions (less moved by the machine's load):"
        f" sluice {cpu['sluice']:.1f} ms, anchor {cpu['anchor']:.1f} ms,"
        f" ratio {cpu['sluice'] / cpu['anchor']:.3f}"
    )


def _importtime_rows(stderr: str) -> dict[str, tuple[int, int]]:
    """module -> (self us, cumulative us) from -X importtime output."""
    rows: dict[str, tuple[int, int]] = {}
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        self_field, cumulative_field, name = line.removeprefix("import time:").split("|", 2)
        rows[name.strip()] = (int(self_field), int(cumulative_field))
    return rows


def importtime_diff(
    python: str, kinds: list[Kind], key_env: dict[str, str], repeats: int = 5, top: int = 15
) -> None:
    """Which modules the sluice handler imports that the anchor does not, and their self time.

    Measured as in Lambda, nothing preloaded: `python -X importtime -c "import app"` in each side's
    environment plus ``key_env`` (:func:`envelope_key_endpoint`: the clients are built, the only AWS
    calls are sluice's two reads of the envelope key), median of ``repeats`` children.
    """
    per_kind: dict[str, dict[str, float]] = {}
    app_ms: dict[str, tuple[float, float]] = {}
    for kind in kinds:
        runs = []
        for _ in range(repeats):
            env = {**kind.env, **key_env}
            proc = run_child(python, "import app", env, "-X", "importtime", cwd=kind.code_dir)
            if proc.returncode != 0:
                raise SystemExit(f"{kind.name} child failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
            runs.append(_importtime_rows(proc.stderr))
        modules = set.intersection(*(set(r) for r in runs))
        per_kind[kind.name] = {m: statistics.median(r[m][0] for r in runs) / 1000 for m in modules}
        app_ms[kind.name] = (
            statistics.median(r["app"][1] for r in runs) / 1000,
            statistics.median(r["app"][0] for r in runs) / 1000,
        )
    sluice, anchor = (per_kind[k.name] for k in kinds)
    extra = {m: ms for m, ms in sluice.items() if m not in anchor and m != "app"}
    missing = {m: ms for m, ms in anchor.items() if m not in sluice and m != "app"}
    print(f"\n-X importtime of `import app`, nothing preloaded (as in Lambda; median of {repeats} children)")
    for kind in kinds:
        cumulative, own = app_ms[kind.name]
        print(
            f"  {kind.name}: `import app` {cumulative:.1f} ms cumulative; self time of app {own:.1f} ms"
            " (its module body: Logger/Metrics/Tracer, clients, settings)"
        )
    print(
        f"  modules only sluice imports: {len(extra)}, {sum(extra.values()):.1f} ms self in total;"
        f" only the anchor: {len(missing)}, {sum(missing.values()):.1f} ms"
    )
    print(f"  {top} heaviest sluice-only modules (self ms):")
    for module, ms in sorted(extra.items(), key=lambda kv: kv[1], reverse=True)[:top]:
        print(f"    {ms:7.1f}  {module}")
    if missing:
        heaviest = sorted(missing.items(), key=lambda kv: kv[1], reverse=True)[:8]
        print("  anchor-only modules (self ms): " + ", ".join(f"{m} {ms:.1f}" for m, ms in heaviest))
    common = sorted(set(sluice) & set(anchor) - {"app"})
    print(
        f"  modules both import: {len(common)}, self {sum(sluice[m] for m in common):.1f} ms (sluice) vs"
        f" {sum(anchor[m] for m in common):.1f} ms (anchor)"
    )
    print(
        "  note: the first pydantic model class built in a process pays pydantic's one-off set-up (a few"
        " ms):\n  in sluice that is sluice.settings.EnvSettings, in the anchor Order (inside app's self time)"
    )


def _package(filename: str, code_dirs: dict[str, str]) -> str:
    """A profile entry's package: the layer, the handler, a site-package, a stdlib module, built-ins."""
    if filename == "~":
        return "(built-in functions)"
    if filename.startswith("<frozen "):
        return filename.strip("<>").replace("frozen ", "frozen:")
    for label, directory in code_dirs.items():
        if filename.startswith(directory):
            return "handler (app.py, processor.py)" if label.startswith("handler:") else label
    if "site-packages/" in filename:
        parts = filename.split("site-packages/", 1)[1].split("/")
        depth = 3 if parts[0] == "aws_lambda_powertools" else 2 if parts[0] in {"moto", "botocore"} else 1
        return ".".join(p.removesuffix(".py") for p in parts[:depth] if p != "__init__.py")
    if "/lib/python3" in filename:
        return "stdlib:" + filename.split("/lib/python3", 1)[1].split("/", 2)[1].removesuffix(".py")
    return filename


def profile_diff(python: str, kinds: list[Kind], layer_dir: Path, repeats: int = 3, top: int = 14) -> None:
    """cProfile of ``repeats`` children per side: where sluice's extra time goes, per phase and package."""
    code_dirs = {"sluice layer": str(layer_dir / "sluice")}
    for kind in kinds:
        code_dirs[f"handler:{kind.name}"] = str(kind.code_dir)
    # stats[side][phase] = one pstats.Stats per child
    stats: dict[str, dict[str, list[pstats.Stats]]] = {k.name: {"import": [], "invoke": []} for k in kinds}
    with tempfile.TemporaryDirectory(prefix="sluice-cold-profile-") as tmp:
        for i in range(repeats):
            for kind in kinds if i % 2 == 0 else kinds[::-1]:
                base = str(Path(tmp) / f"{kind.name}-{i}")
                invoke_once(python, kind, profile=base)
                for phase in ("import", "invoke"):
                    stats[kind.name][phase].append(pstats.Stats(f"{base}.{phase}"))
    print(
        f"\ncProfile, median of {repeats} children per side (the profiler inflates call-heavy code, and"
        " moto's\nDynamoDB runs in-process: read the differences, not the totals)"
    )
    for phase in ("import", "invoke"):
        tot = {
            name: _median_by(by_phase[phase], lambda f: _package(f, code_dirs))
            for name, by_phase in stats.items()
        }
        groups = set(tot["sluice"]) | set(tot["anchor"])
        rows = sorted(
            groups, key=lambda g: tot["sluice"].get(g, 0.0) - tot["anchor"].get(g, 0.0), reverse=True
        )
        total_s, total_a = sum(tot["sluice"].values()), sum(tot["anchor"].values())
        print(f"\n  {phase}: own time (tottime) by package, ms   sluice {total_s:.0f}  anchor {total_a:.0f}")
        print(f"    {'sluice':>8}{'anchor':>8}{'diff':>8}  package (largest sluice excess first)")
        for group in rows[:top]:
            s_ms, a_ms = tot["sluice"].get(group, 0.0), tot["anchor"].get(group, 0.0)
            print(f"    {s_ms:8.1f}{a_ms:8.1f}{s_ms - a_ms:+8.1f}  {group}")
        calls = {name: _calls(by_phase[phase][0]) for name, by_phase in stats.items()}
        print(
            "    calls (sluice vs anchor): "
            + "; ".join(
                f"{what} {calls['sluice'][what]} vs {calls['anchor'][what]}" for what in calls["sluice"]
            )
        )
    # Cumulative times inside the layer are only meaningful at import (at invoke, cProfile misattributes
    # the batch to the heartbeat's thread join).
    print("\n  import: heaviest functions of the sluice layer and handler (cumulative ms, median):")
    own: dict[str, list[float]] = defaultdict(list)
    for st in stats["sluice"]["import"]:
        for (filename, line, fn), (_, _, _, ct, _) in st.stats.items():  # type: ignore[attr-defined]
            if filename.startswith((code_dirs["sluice layer"], code_dirs["handler:sluice"])):
                own[f"{_short(filename, code_dirs)}:{line}({fn})"].append(ct * 1000)
    heaviest = sorted(((statistics.median(v), k) for k, v in own.items()), reverse=True)
    for ct_ms, where in heaviest[:top]:
        print(f"    {ct_ms:8.1f}  {where}")


def _median_by(runs: list[pstats.Stats], key: Any) -> dict[str, float]:
    """Median over runs of the summed tottime (ms) per ``key(filename)``."""
    sums: list[defaultdict[str, float]] = []
    for st in runs:
        acc: defaultdict[str, float] = defaultdict(float)
        for (filename, _, _), (_, _, tt, _, _) in st.stats.items():  # type: ignore[attr-defined]
            acc[key(filename)] += tt * 1000
        sums.append(acc)
    names = {name for acc in sums for name in acc}
    return {name: statistics.median(acc.get(name, 0.0) for acc in sums) for name in names}


def _short(filename: str, code_dirs: dict[str, str]) -> str:
    for directory in code_dirs.values():
        if filename.startswith(directory):
            return filename.removeprefix(str(Path(directory).parent) + "/")
    return filename


def _calls(stats: pstats.Stats) -> dict[str, int]:
    """Counts of a few telling calls: AWS API calls, clients built, threads started, loader reads."""
    wanted = {
        "API calls": ("botocore/client.py", "_make_api_call"),
        "clients built": ("botocore/session.py", "create_client"),
        "threads started": ("threading.py", "start"),
        "service/endpoint files loaded": ("botocore/loaders.py", "load_data_with_path"),
    }
    out = dict.fromkeys(wanted, 0)
    for (filename, _, fn), (_, nc, _, _, _) in stats.stats.items():  # type: ignore[attr-defined]
        for what, (suffix, name) in wanted.items():
            if fn == name and filename.endswith(suffix):
                out[what] += nc
    return out


def consumer_dir(tree: Path) -> Path:
    """The example consumer's folder in ``tree``: examples/orders (functions/consumer before workloads)."""
    new, old = tree / "examples" / "orders", tree / "functions" / "consumer"
    return new if new.is_dir() or not old.is_dir() else old


def main_invoke(args: argparse.Namespace, python: str) -> int:
    tree = Path(args.tree).resolve()
    function_dir, layer_dir = consumer_dir(tree), tree / "layers" / "common"
    copied = check_copied_classes(function_dir / "processor.py", ANCHOR_DIR / "app.py")
    ledger = "Ledger" in copied
    kinds = [
        Kind("sluice", function_dir, invoke_env(function_dir, layer_dir, ledger=ledger)),
        Kind("anchor", ANCHOR_DIR, invoke_env(ANCHOR_DIR, layer_dir, ledger=ledger)),
    ]
    print(f"  anchor's copies of processor.py checked identical: {', '.join(copied)}")
    for kind in kinds:
        print(f"  {kind.name}: cwd {kind.code_dir}  PYTHONPATH={kind.env['PYTHONPATH']}")
    print(
        f"  {args.runs} runs per side, alternating; each a fresh interpreter: mock_aws + resources"
        f" (untimed), then timed `import app` + lambda_handler(event of {INVOKE_RECORDS} new records)"
    )
    run_invoke(python, kinds, args.runs, warm_up=not args.smoke)
    report_invoke(kinds)
    if args.importtime:
        with envelope_key_endpoint() as key_env:
            importtime_diff(python, kinds, key_env, repeats=1 if args.smoke else 5)
    if args.profile:
        profile_diff(python, kinds, layer_dir, repeats=1 if args.smoke else 3)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--runs",
        type=int,
        default=None,
        help="fresh processes per child kind (default 7, >= 5; --invoke: 9, >= 9)",
    )
    parser.add_argument("--lean", action="store_true", help="use the lean venv .bench-venv (boto3 + layer)")
    parser.add_argument("--python", default=None, help="interpreter to use instead (overrides --lean)")
    parser.add_argument("--importtime", action="store_true", help="also show the 15 heaviest imports")
    parser.add_argument(
        "--anchor", action="store_true", help="also time a bare Powertools batch+idempotency handler module"
    )
    parser.add_argument(
        "--invoke", action="store_true", help="whole cold invocation (import + first batch) vs the anchor"
    )
    parser.add_argument("--profile", action="store_true", help="--invoke: also a cProfile diff per phase")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="smoke size (the tests): --runs defaults to 1 with no minimum, no warm-up, one child per"
        " side for --importtime/--profile; figures too noisy to read",
    )
    parser.add_argument(
        "--tree",
        default=str(ROOT),
        help="a tree holding examples/orders and layers/common (default: this repository), e.g. a"
        " `git archive` export of another commit",
    )
    args = parser.parse_args()
    minimum = 1 if args.smoke else 9 if args.invoke else 5
    args.runs = args.runs if args.runs is not None else (1 if args.smoke else 9 if args.invoke else 7)
    if args.runs < minimum:
        parser.error(f"--runs must be at least {minimum}")
    if args.profile and not args.invoke:
        parser.error("--profile needs --invoke")

    if args.python:
        python, mode = args.python, "given interpreter"
    elif args.lean:
        python = lean_python(sys.executable, with_moto=args.invoke)
        mode = "lean venv (boto3 + layer requirements" + (" + moto)" if args.invoke else " only)")
    else:
        python, mode = sys.executable, "dev venv (sys.executable)"
    print(f"interpreter: {python}  [{mode}]")
    print(f"  {describe(python)}")
    if args.smoke:
        print(f"  smoke size: {args.runs} run(s) per kind, no warm-up; the figures are not meant to be read")
    if args.invoke:
        return main_invoke(args, python)
    return main_import(args, python)


def main_import(args: argparse.Namespace, python: str) -> int:
    tree = Path(args.tree).resolve()
    layer_dir = tree / "layers" / "common"
    env = lambda_env(consumer_dir(tree), layer_dir)
    # --anchor: the --invoke anchor module too (benchmarks/anchor/app.py: with the Order model, so with
    # pydantic), in its own code directory with the same layer on the path.
    anchor_env = lambda_env(ANCHOR_DIR, layer_dir)
    print(f"  PYTHONPATH={env['PYTHONPATH']}")
    with envelope_key_endpoint() as key_env:
        endpoint = key_env["AWS_ENDPOINT_URL_SECRETS_MANAGER"]
        print(f"  envelope key: {key_env['SLUICE_ENVELOPE_KEY_SECRET']} on a moto server at {endpoint}")
        env.update(key_env)
        anchor_env.update(key_env)
        return _main_import(args, python, env, anchor_env)


def _main_import(
    args: argparse.Namespace, python: str, env: dict[str, str], anchor_env: dict[str, str]
) -> int:
    """The import-only samples, the children pointed at the envelope key's endpoint."""
    baseline: list[float] = []
    handler: list[float] = []
    anchor: list[float] = []
    anchor_app: list[float] = []
    kinds = [(BASELINE_CHILD, baseline, env), (HANDLER_CHILD, handler, env)]
    if args.anchor:
        kinds += [(ANCHOR_CHILD, anchor, env), (HANDLER_CHILD, anchor_app, anchor_env)]
    # Warm-up (unmeasured): writes .pyc files and warms the page cache for every child.
    for code, _, kind_env in kinds if not args.smoke else ():
        sample(python, code, kind_env)
    for i in range(args.runs):
        # Rotate the order each round so no kind always runs first (or right after another).
        shift = i % len(kinds)
        round_ = kinds[shift:] + kinds[:shift]
        for code, out, kind_env in round_ if i % 2 == 0 else round_[::-1]:
            out.append(sample(python, code, kind_env))

    b, h = statistics.median(baseline), statistics.median(handler)
    ratio = h / b
    print(f"\nbaseline  `import boto3; boto3.client('sqs')`: median {b:7.1f} ms  samples {_fmt(baseline)}")
    print(f"handler   `import app` (consumer)            : median {h:7.1f} ms  samples {_fmt(handler)}")
    verdict = "PASS" if ratio <= TARGET_RATIO else "ABOVE TARGET"
    print(f"ratio handler/baseline = {ratio:.2f}  (target <= {TARGET_RATIO})  {verdict}")
    print(f"handler minus baseline = {h - b:.1f} ms")
    if anchor:
        a, m = statistics.median(anchor), statistics.median(anchor_app)
        print(f"anchor    bare Powertools batch+idempotency  : median {a:7.1f} ms  samples {_fmt(anchor)}")
        print(f"ratio anchor/baseline  = {a / b:.2f}   handler/anchor = {h / a:.2f}  (informational)")
        print(
            f"anchor    `import app` (benchmarks/anchor)   : median {m:7.1f} ms  samples {_fmt(anchor_app)}"
        )
        print(
            f"ratio handler/anchor app = {h / m:.2f}  (informational; --invoke compares the whole cold start)"
        )

    if args.importtime:
        importtime(python, env)
    return 0


def _fmt(values: list[float]) -> str:
    return "[" + ", ".join(f"{v:.0f}" for v in values) + "]"


if __name__ == "__main__":
    sys.exit(main())
