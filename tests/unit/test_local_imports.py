"""sluice_local has no import cycle, each of its modules imports on its own, and its rooms keep apart.

The graph counts every import of a sluice_local module, at the top of a module or inside a function
(a deferred import still ties the two modules together); each module is then imported alone, in a
forked copy of an interpreter that has loaded only the third-party libraries.

The rooms: ``sluice_local.emulation`` (any SAM template on embedded AWS) imports neither the demo, the
soak, the app's shared pieces (``sluice_local.app``), the job store (``sluice.jobs``) nor the operator
CLI (``sluice_cli``): what it needs of them is plugged in (``emulation.cloud.Attachment``, fault
boundaries). The demo and the soak do not import each other; what they share is in ``sluice_local.app``,
which imports neither.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "sluice_local"
PACKAGE_DIR = ROOT / "local" / PACKAGE


def modules() -> dict[str, Path]:
    """Dotted module name → file, for every module of the package (a package by its __init__)."""
    found = {}
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        parts = [PACKAGE, *path.relative_to(PACKAGE_DIR).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imports_of(name: str, path: Path, known: set[str] | None = None) -> set[str]:
    """The package's modules that ``name`` imports, anywhere in its code (every module it imports, and
    every name it imports from one, when ``known`` is None)."""
    is_package = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".")
                anchor = anchor if is_package else anchor[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            out.add(base)
            out.update(f"{base}.{alias.name}" for alias in node.names)
    return {target for target in out if (known is None or target in known) and target != name}


def graph() -> dict[str, set[str]]:
    found = modules()
    return {name: imports_of(name, path, set(found)) for name, path in found.items()}


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph as [a, b, ..., a], or None."""
    done: set[str] = set()
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        if node in path:
            return [*path[path.index(node) :], node]
        if node in done:
            return None
        path.append(node)
        for target in sorted(edges.get(node, ())):
            cycle = visit(target)
            if cycle:
                return cycle
        path.pop()
        done.add(node)
        return None

    for node in sorted(edges):
        cycle = visit(node)
        if cycle:
            return cycle
    return None


def test_the_import_graph_of_sluice_local_has_no_cycle():
    edges = graph()
    assert "sluice_local.app.observer" in edges  # the graph sees the whole package
    cycle = find_cycle(edges)
    assert cycle is None, "import cycle: " + " → ".join(cycle or [])


def test_the_cycle_check_finds_a_deferred_import_cycle(tmp_path):
    (tmp_path / "a.py").write_text("import sluice_local.b\n")
    (tmp_path / "b.py").write_text("def f():\n    from sluice_local.a import x\n")
    known = {"sluice_local.a", "sluice_local.b"}
    edges = {f"sluice_local.{m}": imports_of(f"sluice_local.{m}", tmp_path / f"{m}.py", known) for m in "ab"}

    assert find_cycle(edges) == ["sluice_local.a", "sluice_local.b", "sluice_local.a"]


IMPORT_EACH_ALONE = """
import importlib, os, sys, traceback
# The libraries sluice_local builds on are loaded once, then each module is imported in a forked copy
# of that interpreter: alone as far as sluice_local and the layer go (neither is loaded before the
# fork), without paying for boto3 and moto fifty times.
for library in (
    "boto3", "botocore.session", "s3transfer.manager", "pydantic", "aws_lambda_powertools",
    "samtranslator.translator.translator", "rich.console", "rich.live", "psycopg", "yaml", "jsonschema",
):
    importlib.import_module(library)
assert not any(m.split(".")[0] in {"sluice_local", "sluice", "sluice_cli"} for m in sys.modules)
failed = 0
for name in sys.argv[1:]:
    pid = os.fork()
    if pid == 0:
        try:
            importlib.import_module(name)
        except BaseException:
            print("FAILED", name, traceback.format_exc().strip().splitlines()[-1], flush=True)
            os._exit(1)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    failed += status != 0
print("IMPORTED", len(sys.argv) - 1 - failed, "FAILED", failed)
"""


@pytest.mark.subprocess
def test_every_sluice_local_module_imports_alone_in_a_fresh_interpreter():
    names = sorted(modules())
    done = subprocess.run(
        [sys.executable, "-c", IMPORT_EACH_ALONE, *names],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    failed = [line for line in done.stdout.splitlines() if line.startswith("FAILED ")]
    assert failed == [], done.stderr[-2000:]
    assert done.stdout.splitlines()[-1] == f"IMPORTED {len(names)} FAILED 0", done.stdout + done.stderr


@pytest.mark.subprocess
def test_the_import_check_fails_a_module_that_only_imports_after_another(tmp_path):
    package = tmp_path / "sluice_local_probe"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "base.py").write_text("import sluice_local_probe.late\n")
    (package / "late.py").write_text("import sys\nassert 'sluice_local_probe.base' in sys.modules\n")
    done = subprocess.run(
        [sys.executable, "-c", IMPORT_EACH_ALONE, "sluice_local_probe.base", "sluice_local_probe.late"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.stdout.splitlines()[-1] == "IMPORTED 1 FAILED 1", done.stdout + done.stderr
    assert "FAILED sluice_local_probe.late AssertionError" in done.stdout


ROOMS = {
    # the emulation is AWS as the functions see it: it never reads the layer (its SQS rules come from
    # its own table, so a misreading of SQS in the layer is not copied into the runtime that judges
    # it), nor a database driver (the job store is the functions' business, not the emulated cloud's)
    "sluice_local.emulation": (
        "sluice_local.demo", "sluice_local.soak", "sluice_local.app", "sluice_local.__main__",
        "sluice", "psycopg", "sluice_cli",
    ),
    "sluice_local.demo": ("sluice_local.soak", "sluice_local.__main__"),
    "sluice_local.soak": ("sluice_local.demo", "sluice_local.__main__"),
    "sluice_local.app": ("sluice_local.demo", "sluice_local.soak", "sluice_local.__main__"),
    # the kit a team's tests import: the stack and the observer, never the demo or the soak
    "sluice_local.testing": ("sluice_local.demo", "sluice_local.soak", "sluice_local.__main__"),
}  # fmt: skip
"""Room → what no module of it may import (a package or module, and everything under it)."""


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def room_violations(found: dict[str, Path]) -> list[str]:
    """Every import that crosses a wall of :data:`ROOMS`, as "module imports target"."""
    out = []
    for name, path in sorted(found.items()):
        for room, forbidden in ROOMS.items():
            if not _within(name, room):
                continue
            out += [
                f"{name} imports {target}"
                for target in sorted(imports_of(name, path))
                if any(_within(target, wall) for wall in forbidden)
            ]
    return out


def test_the_rooms_of_sluice_local_import_only_what_they_may():
    found = modules()
    assert {"sluice_local.emulation.cloud", "sluice_local.demo.run", "sluice_local.soak.runner"} <= set(found)
    assert room_violations(found) == []


def test_the_room_check_finds_a_deferred_import_of_the_job_store_and_a_relative_one_of_the_soak(tmp_path):
    (tmp_path / "cloud.py").write_text("def f():\n    from sluice.jobs.store import JobStore\n")
    (tmp_path / "pollers.py").write_text("from ..soak import runner\n")
    (tmp_path / "run.py").write_text("from sluice_local.app.observer import Stack\n")
    found = {
        "sluice_local.emulation.cloud": tmp_path / "cloud.py",
        "sluice_local.emulation.pollers": tmp_path / "pollers.py",
        "sluice_local.demo.run": tmp_path / "run.py",
    }

    assert room_violations(found) == [
        "sluice_local.emulation.cloud imports sluice.jobs.store",
        "sluice_local.emulation.cloud imports sluice.jobs.store.JobStore",
        "sluice_local.emulation.pollers imports sluice_local.soak",
        "sluice_local.emulation.pollers imports sluice_local.soak.runner",
    ]


def test_the_room_check_finds_the_layer_and_psycopg_imported_by_the_emulation(tmp_path):
    # Given emulation modules that read the layer's SQS rules and limits, and a database driver
    (tmp_path / "checker.py").write_text("from sluice.sqs import check_message\nimport sluice.limits\n")
    (tmp_path / "adapter.py").write_text("def f():\n    from sluice import limits\n    import psycopg\n")
    (tmp_path / "runtime.py").write_text("import sluice_local.emulation.cloud\n")  # its own room: allowed
    found = {
        "sluice_local.emulation.checker": tmp_path / "checker.py",
        "sluice_local.emulation.moto_adapter.sqs_rules": tmp_path / "adapter.py",
        "sluice_local.emulation.runtime": tmp_path / "runtime.py",
    }
    # When the rooms are checked, Then every one of those imports is reported, and only those
    assert room_violations(found) == [
        "sluice_local.emulation.checker imports sluice.limits",
        "sluice_local.emulation.checker imports sluice.sqs",
        "sluice_local.emulation.checker imports sluice.sqs.check_message",
        "sluice_local.emulation.moto_adapter.sqs_rules imports psycopg",
        "sluice_local.emulation.moto_adapter.sqs_rules imports sluice",
        "sluice_local.emulation.moto_adapter.sqs_rules imports sluice.limits",
    ]
