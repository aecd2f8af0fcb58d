"""Build the common layer's ``python/`` folder for both Lambda architectures from one build.

Run by ``sam build`` through the layer's Makefile (BuildMethod: makefile), with whatever ``python3`` has
pip: the wheels are CPython 3.13 manylinux wheels chosen with ``--platform``, so neither Docker nor a local
Python 3.13 is needed. Each architecture's wheels go to a folder of their own, then the two trees are
merged into one: the pure-Python files are the same bytes in both, and every compiled file carries its
architecture in its name (``_pydantic_core.cpython-313-aarch64-linux-gnu.so``, psycopg-binary's
``psycopg_binary.libs/libpq-<hash>.so.5``), so arm64 and x86_64 functions load their own from one layer.
A file both trees hold with different bytes stops the build (it would serve one architecture the
other's code), except a ``*.dist-info`` file (RECORD, WHEEL: metadata pip wrote per wheel, never
imported), where the first architecture's is kept.

``--without-powertools`` builds the variant for teams that add AWS's Powertools layer
(``AWSLambdaPowertoolsPythonV3-python313-<arch>``): that layer is ``aws-lambda-powertools[all]``, which
brings pydantic, aws-xray-sdk (and wrapt) and typing-extensions, and relies on the runtime's jmespath
(botocore's), so the variant ships sluice and the job store's driver only.
"""

from __future__ import annotations

import argparse
import filecmp
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REQUIREMENTS = HERE / "requirements.txt"

ARCHITECTURES = {
    # Lambda architecture -> the manylinux platform tags pip may pick for it (psycopg-binary's aarch64
    # wheels are manylinux_2_28 only; Lambda's python3.13 runtime is Amazon Linux 2023, glibc 2.34)
    "arm64": ("manylinux2014_aarch64", "manylinux_2_28_aarch64"),
    "x86_64": ("manylinux2014_x86_64", "manylinux_2_28_x86_64"),
}

POWERTOOLS_LAYER_PROVIDES = frozenset(
    {
        "aws-lambda-powertools",
        "aws-xray-sdk",
        "wrapt",
        "jmespath",
        "pydantic",
        "pydantic-core",
        "annotated-types",
        "typing-extensions",
        "typing-inspection",
    }
)
"""What a function with AWS's Powertools v3 layer already has: the layer's ``[all]`` extras and their
dependencies, and jmespath from the runtime (the layer deletes its own copy, botocore brings one)."""


class CollisionError(RuntimeError):
    """Two architectures' wheels put different bytes at one path that is not wheel metadata."""


def normalize(name: str) -> str:
    """PEP 503 name: lowercase, runs of '-', '_' and '.' become one '-'."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(line: str) -> str:
    match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", line)
    if match is None:
        raise ValueError(f"unreadable requirement {line!r}")
    return normalize(match[0])


def requirements(*, without_powertools: bool) -> list[str]:
    """The pinned lines of requirements.txt the layer installs (comments and blank lines dropped)."""
    lines = (line.split("#", 1)[0].strip() for line in REQUIREMENTS.read_text(encoding="utf-8").splitlines())
    pins = [line for line in lines if line]
    if without_powertools:
        pins = [line for line in pins if requirement_name(line) not in POWERTOOLS_LAYER_PROVIDES]
    return pins


UV_PLATFORMS = {"arm64": "aarch64-manylinux_2_28", "x86_64": "x86_64-manylinux_2_28"}
"""uv's names for the same platforms (manylinux_2_28 admits the manylinux2014 wheels too)."""


def installer() -> str | None:
    """uv where this interpreter's environment (or PATH) has it: the same wheels as pip, in a fraction of
    the time and CPU (``make build`` and the tests build the layer several times a run); else None."""
    beside = Path(sys.executable).parent / "uv"
    return str(beside) if beside.exists() else shutil.which("uv")


def pip_install(pins: list[str], architecture: str, target: Path) -> subprocess.Popen[bytes]:
    uv = installer()
    if uv is not None:
        argv = [uv, "pip", "install", "--quiet", "--no-deps", "--python-version", "3.13",
                "--python-platform", UV_PLATFORMS[architecture], "--only-binary", ":all:",
                "--target", str(target), *pins]  # fmt: skip
        return subprocess.Popen(argv)  # noqa: S603 - uv, fixed arguments
    platforms = [arg for tag in ARCHITECTURES[architecture] for arg in ("--platform", tag)]
    argv = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps",
            "--root-user-action=ignore", "--no-compile", *platforms, "--implementation", "cp",
            "--python-version", "3.13", "--only-binary=:all:", "--target", str(target), *pins]  # fmt: skip
    return subprocess.Popen(argv)  # noqa: S603 - this interpreter's pip, fixed arguments


def merge(trees: list[Path], destination: Path) -> list[str]:
    """Copy every tree into ``destination``, the first tree's file kept where several hold one path.
    Returns the metadata files whose bytes differed; raises CollisionError for any other such file."""
    differing: list[str] = []
    for tree in trees:
        for source in sorted(tree.rglob("*")):
            if source.is_dir():
                continue
            relative = source.relative_to(tree)
            target = destination / relative
            if not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, target)
            elif not filecmp.cmp(source, target, shallow=False):
                if not any(part.endswith(".dist-info") for part in relative.parts):
                    raise CollisionError(f"{relative} differs between architectures ({tree.name})")
                differing.append(relative.as_posix())
    return differing


def build(destination: Path, *, without_powertools: bool) -> None:
    pins = requirements(without_powertools=without_powertools)
    destination.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="sluice-layer-") as scratch:
        trees = [Path(scratch) / architecture for architecture in ARCHITECTURES]
        installs = [pip_install(pins, tree.name, tree) for tree in trees]
        failed = [tree.name for tree, install in zip(trees, installs, strict=True) if install.wait() != 0]
        if failed:
            raise SystemExit(f"pip failed for {', '.join(failed)}")
        for tree in trees:
            (tree / ".lock").unlink(missing_ok=True)  # uv's, for its --target: no file of the layer
        merge(trees, destination)
    shutil.copytree(
        HERE / "sluice", destination / "sluice", ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("destination", type=Path, help="the layer's python/ folder")
    parser.add_argument(
        "--without-powertools", action="store_true", help="leave out what AWS's Powertools layer provides"
    )
    args = parser.parse_args(argv)
    build(args.destination, without_powertools=args.without_powertools)


if __name__ == "__main__":
    main()
