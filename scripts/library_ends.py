"""The runtime library (``sluice``, layers/common) at both ends of the dependency ranges it declares.

``make library`` (a part of ``make test``) builds the three distributions this repository holds, then, for
each end — the oldest supported versions on the oldest supported Python, the newest on the Lambda
runtime's — in a clean virtualenv:

1. installs the library's wheel alone: what comes is its dependencies and nothing else (neither moto, the
   CLI, the local runtime, psycopg nor boto3: ``NEVER_WITH_THE_LIBRARY``), and ``uv pip check`` is clean;
2. adds its extras, ``aws-sdk`` and ``jobs``: boto3 and psycopg come, the check is still clean;
3. times ``from sluice.consumer import Consumer`` (``python -X importtime``, the median of five fresh
   interpreters);
4. runs the library's tests (``LIBRARY_TESTS`` in tests/conftest.py) with the test tools added under the
   versions resolved in 1-2 as constraints, so the tools cannot move them.

The oldest end resolves the library's own requirements at their lowest (``--resolution lowest-direct``,
the requirements given directly), their dependencies at the newest that fit. Exit 1 when a step fails.

    python scripts/library_ends.py [--ends oldest,newest] [--work DIR] [--no-tests]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import re
import shutil
import statistics
import subprocess
import sys
import threading
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.conftest import LIBRARY_TESTS  # noqa: E402 - the repository's tests define the selection

DISTRIBUTIONS = {"sluice-sqs": "layers/common", "sluice-sqs-cli": "cli", "sluice-sqs-local": "local"}
NEVER_WITH_THE_LIBRARY = (
    "moto", "sluice-sqs-cli", "sluice-sqs-local", "psycopg", "psycopg-binary", "aws-sam-cli",
    "aws-sam-translator", "boto3", "botocore", "aws-xray-sdk", "rich", "pyyaml",
)  # fmt: skip
"""What the library alone must not bring: the other distributions and their tools, the job store's driver
(its ``jobs`` extra), the AWS SDK (the Lambda runtime's; its ``aws-sdk`` extra), the functions' tracer."""
REPORTED = ("aws-lambda-powertools", "pydantic", "boto3", "botocore", "jmespath", "psycopg")
IMPORT_RUNS = 5
IMPORTED = "from sluice.consumer import Consumer"
"""What a handler's cold start imports (``import sluice.consumer`` alone loads only the lazy package)."""


@dataclass(frozen=True)
class End:
    name: str
    python: str
    resolution: str


ENDS = {
    "oldest": End("oldest", "3.11", "lowest-direct"),
    "newest": End("newest", f"{sys.version_info[0]}.{sys.version_info[1]}", "highest"),
}


def interpreter(version: str) -> str:
    """A Python of this version on the machine: the dev environment's own, pyenv's, or one on PATH."""
    if version == f"{sys.version_info[0]}.{sys.version_info[1]}":
        return str(Path(sys.base_prefix) / "bin" / f"python{version}")
    found = (
        subprocess.run(["pyenv", "root"], capture_output=True, text=True, check=False)  # noqa: S607 - found on PATH
        if shutil.which("pyenv")
        else None
    )
    if found is not None and found.returncode == 0:
        versions = sorted(
            Path(found.stdout.strip(), "versions").glob(f"{version}.*/bin/python{version}"),
            key=lambda path: [int(part) for part in re.findall(r"\d+", path.parents[1].name)],
        )
        if versions:
            return str(versions[-1])
    on_path = shutil.which(f"python{version}")
    if on_path is None:
        raise SystemExit(f"no Python {version} on this machine: the {version} end cannot be tested")
    return on_path


_SAY = threading.Lock()
_TESTS = threading.Lock()


def say(text: str) -> None:
    """One whole line (or block) on stdout: the two ends run at once and print as they go."""
    with _SAY:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()


def uv(*args: str, capture: bool = True) -> str:
    done = subprocess.run(  # noqa: S603 - our own argv
        [str(Path(sys.executable).parent / "uv"), *args], capture_output=capture, text=True, check=False
    )
    if done.returncode:
        raise SystemExit(f"uv {' '.join(args)} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    return done.stdout


def library_requirements() -> tuple[list[str], dict[str, list[str]]]:
    """The library's own requirements and its extras' (each given directly to the resolver, so the oldest
    end's ``lowest-direct`` holds every one of them at its lower bound)."""
    project = tomllib.loads((ROOT / "layers/common/pyproject.toml").read_text(encoding="utf-8"))["project"]
    return list(project["dependencies"]), dict(project["optional-dependencies"])


def dev_pins() -> list[str]:
    """The test tools, at the dev environment's versions (the root pyproject.toml)."""
    dev = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    wanted = ("pytest", "pytest-timeout", "pytest-xdist", "moto")
    pins = [
        r for r in dev["optional-dependencies"]["dev"] if re.split(r"[\[=<>~ ]", r, maxsplit=1)[0] in wanted
    ]
    return [*pins, "aws-xray-sdk"]  # the functions' Tracer, which the consumer tests load


def build(work: Path) -> dict[str, Path]:
    """Each distribution's wheel (from its sdist, so the source folders stay as they are)."""
    dist = work / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    wheels = {}
    for name, folder in DISTRIBUTIONS.items():
        uv("build", "--quiet", "--out-dir", str(dist), str(ROOT / folder))
        (wheel,) = dist.glob(f"{name.replace('-', '_')}-*.whl")
        wheels[name] = wheel
        print(f"built {wheel.name}")
    return wheels


def installed(python: Path) -> dict[str, str]:
    lines = uv("pip", "freeze", "--python", str(python)).splitlines()
    return {re.sub(r"[-_.]+", "-", n).lower(): v for n, _, v in (line.partition("==") for line in lines)}


def import_ms(python: Path) -> tuple[float, float]:
    """``IMPORTED`` in fresh interpreters, bytecode cached as a Lambda runtime would have it (one more run,
    first, writes it): the medians, in ms, of the self time of sluice's own modules and of every module
    the process imported (its start included), from ``python -X importtime``."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH")}
    own, total = [], []
    for _ in range(IMPORT_RUNS + 1):
        done = subprocess.run(  # noqa: S603 - our own argv
            [str(python), "-X", "importtime", "-c", IMPORTED],
            capture_output=True, text=True, check=True, env=env, cwd=python.parent,
        )  # fmt: skip
        rows = [
            (int(row.split("|")[0].removeprefix("import time:")), row.split("|")[2].strip())
            for row in done.stderr.splitlines()
            if row.startswith("import time:") and "self" not in row
        ]
        own.append(sum(us for us, name in rows if name.split(".")[0] == "sluice") / 1000)
        total.append(sum(us for us, _ in rows) / 1000)
    return statistics.median(own[1:]), statistics.median(total[1:])


def run_end(end: End, wheel: Path, work: Path, *, tests: bool) -> list[str]:
    """The problems found at this end (empty: it passed)."""
    venv = work / f"venv-{end.name}"
    shutil.rmtree(venv, ignore_errors=True)
    uv("venv", "--quiet", "--python", interpreter(end.python), str(venv))
    python = venv / "bin" / "python"
    base, extras = library_requirements()
    problems: list[str] = []
    install = ("pip", "install", "--quiet", "--compile-bytecode", "--python", str(python))
    pip = (*install, "--resolution", end.resolution)
    # 1. the library alone
    uv(*pip, str(wheel), *base)
    alone = installed(python)
    problems += [
        f"{end.name}: installing the library brought {n}" for n in NEVER_WITH_THE_LIBRARY if n in alone
    ]
    uv("pip", "check", "--python", str(python))
    # 2. with its extras: the job store's driver and the AWS SDK
    uv(*pip, f"sluice-sqs[aws-sdk,jobs] @ {wheel.as_uri()}", *base, *extras["aws-sdk"], *extras["jobs"])
    versions = installed(python)
    problems += [
        f"{end.name}: its extras did not bring {n}" for n in ("psycopg", "boto3") if n not in versions
    ]
    uv("pip", "check", "--python", str(python))
    say(f"{end.name} (Python {end.python}, {end.resolution}): pip check clean; "
        + ", ".join(f"{n} {versions.get(n, '-')}" for n in REPORTED))  # fmt: skip
    # 3. import time
    own, total = import_ms(python)
    say(f"{end.name}: {IMPORTED!r}: {total:.0f} ms of imports with the interpreter's start, {own:.0f} ms "
        f"of them sluice's own modules (medians of {IMPORT_RUNS})")  # fmt: skip
    if not tests:
        return problems
    # 4. the library's tests, the resolved versions held by constraints
    constraints = work / f"constraints-{end.name}.txt"
    constraints.write_text("\n".join(f"{n}=={v}" for n, v in versions.items() if n != "sluice-sqs") + "\n")
    uv(*install, "-c", str(constraints), *dev_pins())
    after = installed(python)
    moved = {n: f"{v} -> {after.get(n)}" for n, v in versions.items() if after.get(n) != v}
    if moved:
        problems.append(f"{end.name}: installing the test tools moved {moved}")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "local")}  # the test harness, not installed
    where = subprocess.run(  # noqa: S603 - our own argv
        [str(python), "-c", "import sluice; print(sluice.__file__)"], capture_output=True, text=True, env=env,
        check=True, cwd=ROOT,
    ).stdout.strip()  # fmt: skip
    if str(venv) not in where:
        problems.append(f"{end.name}: the tests would import sluice from {where}, not the installed wheel")
    with _TESTS:  # one end's tests at a time: both at once took PostgreSQL past its connections in CI
        done = subprocess.run(  # noqa: S603 - our own argv
            [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", *LIBRARY_TESTS],
            cwd=ROOT, env=env, check=False, capture_output=True, text=True,
        )  # fmt: skip
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else "(no output)"
    say(f"{end.name}: the library's tests: {summary}")
    if done.returncode:
        say(f"{done.stdout[-6000:]}\n{done.stderr[-2000:]}")
        problems.append(f"{end.name}: the library's tests failed")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ends", default="oldest,newest")
    parser.add_argument("--work", type=Path, default=ROOT / ".library-ends")
    parser.add_argument("--no-tests", action="store_true", help="install, check and time only")
    args = parser.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    wheels = build(args.work)

    def end(name: str) -> list[str]:
        try:
            return run_end(ENDS[name], wheels["sluice-sqs"], args.work, tests=not args.no_tests)
        except SystemExit as stopped:  # a failed install or check: said, and the other end still runs
            return [f"{name}: {stopped}"]

    # the ends at once, each in its own virtualenv (their tests one after the other, see run_end): one
    # after the other, the library was the last part of `make test` to finish
    names = args.ends.split(",")
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(names)) as pool:
        problems = [problem for found in pool.map(end, names) for problem in found]
    for problem in problems:
        print(f"FAILED: {problem}")
    print("library at both ends: " + ("ok" if not problems else f"{len(problems)} problem(s)"))
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
