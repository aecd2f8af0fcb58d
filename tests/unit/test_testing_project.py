"""``with_workloads``: a copy of a project whose workloads.yaml lists only the workloads a test names,
the rest of the project linked, not copied (Given / When / Then)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sluice_local.emulation.cloud import ROOT
from sluice_local.testing import with_workloads


def test_given_the_project_when_one_workload_is_chosen_then_the_copy_lists_it_alone(tmp_path: Path) -> None:
    # When the project's template is copied to run the Orders workload alone
    template = with_workloads(ROOT / "template.yaml", ["Orders"], tmp_path / "copy")
    # Then the copy's workloads.yaml loops over Orders only, its blocks all kept
    text = (tmp_path / "copy" / "workloads.yaml").read_text(encoding="utf-8")
    assert "- &workloads [Orders]\n" in text
    assert text.replace("[Orders]", "[Orders, Refunds]", 1) == (ROOT / "workloads.yaml").read_text(
        encoding="utf-8"
    )
    # ... its template a copy (the local runtime reads nested templates beside a template's real path)
    assert not template.is_symlink()
    assert template.read_text() == (ROOT / "template.yaml").read_text()
    # ... and the code the stack runs the project's own
    assert (tmp_path / "copy" / "examples").resolve() == ROOT / "examples"
    assert not (tmp_path / "copy" / ".venv").exists()


def test_given_a_workload_without_a_block_then_the_copy_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="Shipments"):
        with_workloads(ROOT / "template.yaml", ["Orders", "Shipments"], tmp_path / "copy")
    assert not (tmp_path / "copy").exists()


def test_given_a_project_whose_workloads_are_not_listed_in_a_loop_then_it_is_refused(tmp_path: Path) -> None:
    (tmp_path / "template.yaml").write_text("Resources: {}\n")
    (tmp_path / "workloads.yaml").write_text("Resources: {}\n")
    with pytest.raises(ValueError, match="no `Fn::ForEach::Workload"):
        with_workloads(tmp_path / "template.yaml", ["Orders"], tmp_path / "copy")
