"""docs/testing.md's files run as written: its ``file=`` blocks (a team's conftest.py, pytest.ini and tests
of adopt.md's Shipments workload) and adopt.md's code for that workload, written into a folder and run by
pytest there, as the team runs them."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sluice_local.emulation.cloud import ROOT
from tests.conftest import team_pytest

FILE_BLOCK = re.compile(r"^```(?:python|ini) file=(\S+)\n(.*?)^```\s*$", re.MULTILINE | re.DOTALL)


def write_blocks(page: Path, into: Path, under: str) -> list[str]:
    """The page's ``file=PATH`` blocks whose PATH starts with ``under``, written under ``into``."""
    written = []
    for path, text in FILE_BLOCK.findall(page.read_text(encoding="utf-8")):
        if path.startswith(under):
            (into / path).parent.mkdir(parents=True, exist_ok=True)
            (into / path).write_text(text, encoding="utf-8")
            written.append(path)
    return written


@pytest.mark.subprocess
def test_the_testing_pages_tests_pass_on_the_adoption_pages_workload(tmp_path: Path) -> None:
    # Given adopt.md's Shipments code and testing.md's files for it, in a folder as the team has them
    assert write_blocks(ROOT / "docs" / "adopt.md", tmp_path, "workloads/shipments/") == [
        "workloads/shipments/app.py",
        "workloads/shipments/processor.py",
    ]
    assert sorted(write_blocks(ROOT / "docs" / "testing.md", tmp_path, "workload-tests/shipments/")) == [
        "workload-tests/shipments/conftest.py",
        "workload-tests/shipments/pytest.ini",
        "workload-tests/shipments/test_handler.py",
        "workload-tests/shipments/test_processor.py",
    ]
    # When pytest runs that folder, as the page says
    done = team_pytest(tmp_path, "workload-tests/shipments", timeout=300)
    # Then its three tests pass, with the folder as pytest's rootdir, and the files pass `make check`'s
    # ruff with the project's settings, as they would in the team's clone
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert "3 passed" in done.stdout, done.stdout[-3000:]
    assert f"rootdir: {tmp_path / 'workload-tests' / 'shipments'}" in done.stdout
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    ruff = str(Path(sys.executable).with_name("ruff"))
    for check in ([ruff, "check", "."], [ruff, "format", "--check", "."]):
        linted = subprocess.run(check, cwd=tmp_path, capture_output=True, text=True, check=False)
        assert linted.returncode == 0, linted.stdout + linted.stderr
