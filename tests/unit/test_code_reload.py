"""``up`` runs a function's new code from its next cold start once its files change (as a deploy does),
and says how to restart when a layer changed."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sluice_local.emulation.functions import FunctionHost, FunctionSpec
from sluice_local.emulation.reload import CodeWatcher, changed, snapshot


@pytest.fixture(autouse=True)
def _forget_the_functions_modules() -> Iterator[None]:
    """The tests' function folders import ``model`` and ``rules``: not left for other tests to find."""
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        if name.partition(".")[0] in ("model", "rules") or name.startswith("_sluice_fn_"):
            del sys.modules[name]


def write(path: Path, text: str) -> None:
    """Write and move the modification time forward: a check right after must see the change."""
    before = path.stat().st_mtime_ns if path.exists() else 0
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    stat = path.stat()
    if stat.st_mtime_ns <= before:
        os.utime(path, ns=(stat.st_atime_ns, before + 1))


def function(folder: Path, version: str) -> FunctionHost:
    write(
        folder / "app.py",
        "from model import shape\n\ndef lambda_handler(event, context):\n    return shape()\n",
    )
    write(folder / "model" / "__init__.py", f"def shape():\n    return {version!r}\n")
    spec = FunctionSpec(
        logical_id="ShipmentsFunction", name="shipments", arn="arn:aws:lambda:us-east-1:1:function:shipments",
        code_dir=folder, handler="app.lambda_handler", environment={}, timeout=10, memory=128,
    )  # fmt: skip
    return FunctionHost(spec)


def test_given_a_changed_package_in_the_folder_when_checked_then_the_next_invocation_runs_the_new_code(
    tmp_path,
):
    # Given a function whose warm environment runs v1 (from a package in its folder)
    host = function(tmp_path / "shipments", "v1")
    said: list[str] = []
    watcher = CodeWatcher({"ShipmentsFunction": host}, [], said.append)
    assert host.invoke({}) == "v1"
    assert host.invoke({}) == "v1"
    assert host.cold_starts == 1
    assert watcher.check() == []  # nothing changed: nothing retired

    # When the package changes and the watcher checks
    write(tmp_path / "shipments" / "model" / "__init__.py", "def shape():\n    return 'v2'\n")
    assert watcher.check() == ["ShipmentsFunction"]

    # Then the next invocation cold-starts on v2, and the console was told
    assert host.invoke({}) == "v2"
    assert host.cold_starts == 2
    assert said == [
        "ShipmentsFunction: model/__init__.py changed — the next invocation cold-starts on the new code "
        "(1 idle environment(s) ended)"
    ]


def test_given_an_environment_busy_when_the_code_changes_then_it_is_not_reused(tmp_path):
    # Given an environment in the middle of an invocation (taken from the pool, not yet given back)
    host = function(tmp_path / "busy", "v1")
    busy = host._acquire()
    # When the code changes
    write(tmp_path / "busy" / "model" / "__init__.py", "def shape():\n    return 'v2'\n")
    assert host.retire() == 0  # nothing idle: the busy one ends with its invocation
    host._release(busy)
    # Then it was not given back: the next invocation cold-starts on v2
    assert host.invoke({}) == "v2"
    assert host.cold_starts == 2


def test_given_a_namespace_package_in_the_folder_when_it_changes_then_the_new_code_runs(tmp_path):
    folder = tmp_path / "ns"
    host = function(folder, "v1")
    write(folder / "rules" / "limits.py", "LIMIT = 1\n")  # a package without __init__.py
    write(
        folder / "app.py",
        "from rules.limits import LIMIT\n\ndef lambda_handler(event, context):\n    return LIMIT\n",
    )
    watcher = CodeWatcher({"Ns": host}, [], lambda said: None)
    assert host.invoke({}) == 1
    write(folder / "rules" / "limits.py", "LIMIT = 2\n")
    assert watcher.check() == ["Ns"]
    assert host.invoke({}) == 2


def test_given_a_changed_layer_then_the_console_says_how_to_restart(tmp_path):
    layer = tmp_path / "layer"
    write(layer / "sluice" / "core.py", "X = 1\n")
    host = function(tmp_path / "fn", "v1")
    said: list[str] = []
    watcher = CodeWatcher({"ShipmentsFunction": host}, [layer], said.append)
    write(layer / "sluice" / "core.py", "X = 2\n")
    assert watcher.check() == []
    assert len(said) == 1
    assert "sluice/core.py changed" in said[0]
    assert "stop it (Ctrl-C) and start it again" in said[0]


def test_snapshots_leave_caches_out_and_tell_added_removed_and_modified_files(tmp_path):
    write(tmp_path / "a.py", "1")
    write(tmp_path / "__pycache__" / "a.cpython-313.pyc", "x")
    write(tmp_path / ".hidden" / "b", "x")
    before = snapshot(tmp_path)
    assert set(before) == {"a.py"}
    write(tmp_path / "a.py", "22")
    write(tmp_path / "c.py", "3")
    assert changed(before, snapshot(tmp_path)) == ["a.py", "c.py"]
