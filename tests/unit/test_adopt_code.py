"""The code docs/adopt.md has a team write (``workloads/shipments/``, ``workloads/invoices/``) is held to
what the examples are held to (``make lint``, ``make typecheck``): ruff, and mypy --strict with each
folder as its own Lambda root. tests/e2e/test_adopt_doc.py runs it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from sluice_local.emulation.cloud import ROOT

DOC = ROOT / "docs" / "adopt.md"
PYTHON_FILE = re.compile(r"^```python file=(\S+)\n(.*?)^```\s*$", re.MULTILINE | re.DOTALL)
BIN = Path(sys.executable).parent


def written(into: Path) -> list[Path]:
    """The page's ```python file=PATH blocks, written under ``into``; the folders they make."""
    folders = []
    for path, text in PYTHON_FILE.findall(DOC.read_text(encoding="utf-8")):
        target = into / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        folders.append(target.parent)
    return sorted(set(folders))


@pytest.mark.subprocess
def test_the_pages_code_passes_ruff_and_strict_mypy_as_the_examples_do(tmp_path):
    folders = written(tmp_path)
    assert [f.relative_to(tmp_path).as_posix() for f in folders] == [
        "workloads/invoices",
        "workloads/shipments",
    ]
    config = str(ROOT / "pyproject.toml")
    for check in (["ruff", "check"], ["ruff", "format", "--check"]):
        run = subprocess.run(
            [str(BIN / check[0]), *check[1:], "--config", config, str(tmp_path)],
            capture_output=True,
            text=True,
            check=False,
        )
        assert run.returncode == 0, run.stdout + run.stderr
    for folder in folders:
        run = subprocess.run(
            [str(BIN / "mypy"), "--strict", "--config-file", config, *map(str, sorted(folder.glob("*.py")))],
            capture_output=True,
            text=True,
            check=False,
            env={"MYPYPATH": f"{ROOT / 'layers' / 'common'}:{folder}", "PATH": str(BIN)},
            cwd=tmp_path,
        )
        assert run.returncode == 0, run.stdout + run.stderr
