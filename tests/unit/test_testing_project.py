"""``with_workloads``: a copy of a project whose workloads.yaml lists only the workloads a test names,
the rest of the project linked, not copied; ``examples_only`` / ``with_examples``: one that runs the
examples as sluice ships them, whatever a fork's workloads.yaml lists; ``add_workloads``: a workload
added as docs/workloads.md says (Given / When / Then)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from samtranslator.yaml_helper import yaml_parse

from sluice_local.emulation.cloud import ROOT
from sluice_local.testing import with_workloads
from sluice_local.testing.project import EXAMPLES, add_workloads, examples_only, with_examples

LIST = re.compile(r"&workloads \[[^\]]*\]")
SHIPMENTS = "      Code: workloads/shipments/\n      KeyPath: shipment_id\n"


def listed(text: str) -> list[str]:
    return [str(name) for name in yaml_parse(text)["Resources"]["Fn::ForEach::Workload"][1]]


def test_given_the_project_when_one_workload_is_chosen_then_the_copy_lists_it_alone(tmp_path: Path) -> None:
    # Given the project's workloads (the examples, or a fork's own)
    own = (ROOT / "workloads.yaml").read_text(encoding="utf-8")
    first = listed(own)[0]
    # When the project's template is copied to run its first workload alone
    template = with_workloads(ROOT / "template.yaml", [first], tmp_path / "copy")
    # Then the copy's workloads.yaml loops over that one only, its blocks all kept
    text = (tmp_path / "copy" / "workloads.yaml").read_text(encoding="utf-8")
    assert f"- &workloads [{first}]\n" in text
    assert text == LIST.sub(f"&workloads [{first}]", own, count=1)
    # ... its template a copy (the local runtime reads nested templates beside a template's real path)
    assert not template.is_symlink()
    assert template.read_text() == (ROOT / "template.yaml").read_text()
    # ... and the code the stack runs the project's own
    assert (tmp_path / "copy" / "examples").resolve() == ROOT / "examples"
    assert not (tmp_path / "copy" / ".venv").exists()


def test_given_a_workload_without_a_block_then_the_copy_is_refused_naming_it(tmp_path: Path) -> None:
    first = listed((ROOT / "workloads.yaml").read_text(encoding="utf-8"))[0]
    with pytest.raises(ValueError, match="NoSuchWorkload"):  # a name no fork's workloads.yaml has
        with_workloads(ROOT / "template.yaml", [first, "NoSuchWorkload"], tmp_path / "copy")
    assert not (tmp_path / "copy").exists()


def test_given_a_project_whose_workloads_are_not_listed_in_a_loop_then_it_is_refused(tmp_path: Path) -> None:
    (tmp_path / "template.yaml").write_text("Resources: {}\n")
    (tmp_path / "workloads.yaml").write_text("Resources: {}\n")
    with pytest.raises(ValueError, match="no `Fn::ForEach::Workload"):
        with_workloads(tmp_path / "template.yaml", ["Orders"], tmp_path / "copy")


def test_given_a_fork_with_its_own_workloads_then_examples_only_gives_back_the_shipped_file() -> None:
    own = (ROOT / "workloads.yaml").read_text(encoding="utf-8")
    # Given a fork that added a workload as docs/workloads.md says, and one that removed the examples
    fork = add_workloads(own, {"Shipments": SHIPMENTS})
    without = examples_only(own, {"Shipments": SHIPMENTS}).replace(
        "[Orders, Refunds, Shipments]", "[Shipments]"
    )
    # When each is taken back to the examples alone
    # Then both are the same file, the examples' blocks and list in it and nothing of the fork's
    assert examples_only(fork) == examples_only(own) == examples_only(without)
    shipped = yaml_parse(examples_only(own))
    assert list(shipped["Mappings"]["Workloads"]) == listed(examples_only(own)) == list(EXAMPLES)


def test_given_a_workload_added_then_its_block_and_name_are_appended_once() -> None:
    own = examples_only((ROOT / "workloads.yaml").read_text(encoding="utf-8"))
    added = add_workloads(own, {"Shipments": SHIPMENTS})
    assert listed(added) == [*EXAMPLES, "Shipments"]
    assert yaml_parse(added)["Mappings"]["Workloads"]["Shipments"] == {
        "Code": "workloads/shipments/",
        "KeyPath": "shipment_id",
    }
    assert len(added.split("\n")) == len(own.split("\n")) + 3  # its name and its two lines
    assert add_workloads(added, {"Shipments": SHIPMENTS}) == added


def test_given_with_examples_then_the_copy_runs_the_examples_and_the_extra_ones(tmp_path: Path) -> None:
    template = with_examples(ROOT / "template.yaml", tmp_path / "copy", {"Shipments": SHIPMENTS})
    assert listed((template.parent / "workloads.yaml").read_text(encoding="utf-8")) == [
        *EXAMPLES,
        "Shipments",
    ]
    assert template.read_text() == (ROOT / "template.yaml").read_text()
