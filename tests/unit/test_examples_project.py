"""The demo's and the soak's copy of the project running the examples alone: one per process (the soak's
workers deploy stacks of one name side by side), and the copies of processes that ended are removed."""

from __future__ import annotations

import os
from pathlib import Path

from sluice_local.app.stack import examples_project
from sluice_local.emulation.cloud import ROOT


def test_given_workers_of_one_stack_name_then_each_has_its_copy_and_dead_ones_go(
    tmp_path: Path,
) -> None:
    # Given a project whose projects folder holds a copy of a process that ended and one of a live one
    project = tmp_path / "project"
    project.mkdir()
    for name in ("template.yaml", "workloads.yaml"):
        (project / name).write_text((ROOT / name).read_text(encoding="utf-8"), encoding="utf-8")
    projects = project / ".sluice-local" / "projects"
    dead, alive = projects / "sluice-soak-lambda-999999999", projects / f"sluice-soak-lambda-{os.getppid()}"
    dead.mkdir(parents=True)
    alive.mkdir()
    # When this process makes its copy
    template = examples_project(project, None, "sluice-soak-lambda")
    # Then it is its own, the ended process's is gone, the live one's stays
    assert template == projects / f"sluice-soak-lambda-{os.getpid()}" / "template.yaml"
    assert "Orders" in (template.parent / "workloads.yaml").read_text(encoding="utf-8")
    assert not dead.exists()
    assert alive.exists()
