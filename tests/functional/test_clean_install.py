"""`make venv` into a fresh virtualenv prints no warning: the three distributions install from their own
pyproject.toml files without setuptools' notices, pip's bootstrap of uv says only errors (issue 25)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAKE = shutil.which("make")
LIST_DISTRIBUTIONS = "import importlib.metadata as m\nfor d in m.distributions(): print(d.name)"


@pytest.mark.subprocess
@pytest.mark.skipif(MAKE is None, reason="no make on this machine (.ci/run installs it)")
def test_given_a_fresh_virtualenv_when_make_venv_installs_then_it_prints_no_warning(tmp_path: Path) -> None:
    # Given a virtualenv folder that does not exist yet
    venv = tmp_path / "venv"
    # When make creates it and installs the dev environment into it (.venv's recipe, bytecode left out)
    done = subprocess.run(
        [str(MAKE), "--no-print-directory", "venv", f"VENV={venv}", "VENV_COMPILE="],  # (.pyc: no output)
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
        env={k: v for k, v in os.environ.items() if k != "MAKEFLAGS"},
    )  # fmt: skip
    said = done.stdout + done.stderr
    # Then it succeeded, every distribution is there, and nothing it printed is a warning
    assert done.returncode == 0, said
    assert (venv / ".installed").is_file()
    listed = subprocess.run(
        [str(venv / "bin" / "python"), "-c", LIST_DISTRIBUTIONS],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert {"sluice-sqs", "sluice-sqs-cli", "sluice-sqs-local"} <= {name.lower() for name in listed.split()}
    warnings = [line for line in said.splitlines() if "warn" in line.lower() or "absent from the" in line]
    assert warnings == [], said
