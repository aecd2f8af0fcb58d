"""`make demo` prints nothing a user cannot act on (issue 25): the demo's own command, on one scenario, its
output read whole — no warning of moto's, the SAM translator's or Powertools', no object's repr."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from sluice_local.emulation.cloud import ROOT

NOISE = ("warning", "No Moto CloudFormation support", "unpublished metrics", "object at 0x", "Traceback")


def test_given_the_demo_when_it_runs_a_scenario_then_it_prints_its_outcome_and_no_warning(
    tmp_path: Path,
) -> None:
    # Given the demo's command, asked for one scenario (the whole demo is minutes; its deploy, its runtime
    # and its printing are the same for one), run where its report may be written
    code = os.pathsep.join(str(ROOT / folder) for folder in ("local", "layers/common", "cli"))
    done = subprocess.run(
        [sys.executable, "-m", "sluice_local", "demo", "--only", "normal", "--log-file", str(tmp_path / "l")],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "PYTHONPATH": code},
    )  # fmt: skip
    said = done.stdout + done.stderr
    # Then it passed that scenario, and not one line of what it printed is a warning or a repr
    assert done.returncode == 0, said[-4000:]
    assert "1 passed, 0 failed" in said, said[-4000:]
    noisy = [line for line in said.splitlines() if any(n.lower() in line.lower() for n in NOISE)]
    assert noisy == [], said[-4000:]
    assert (tmp_path / ".sluice-local" / "demo-report.html").is_file()
