"""`make validate` refuses a workload name that breaks docs/workloads.md's rule (scripts/lint_nested.py):
a capital letter, then letters and digits, 24 at most, so no workload's names collide with the shared
resources' lower-case ones."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

import pytest

from sluice_local.emulation.cloud import ROOT

WORKLOADS = (ROOT / "workloads.yaml").read_text(encoding="utf-8")


def lint_nested() -> ModuleType:
    sys.path.insert(0, str(ROOT / "scripts"))  # it imports security_scan, its neighbour
    try:
        spec = importlib.util.spec_from_file_location("lint_nested", ROOT / "scripts" / "lint_nested.py")
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(ROOT / "scripts"))


def test_the_projects_workload_names_pass() -> None:
    assert lint_nested().name_problems(WORKLOADS) == []


@pytest.mark.parametrize("name", ["poison", "flow", "jobs", "Has-Dash", "Has_Underscore", "A" * 25, "9Lives"])
def test_a_name_breaking_the_rule_is_refused_by_name(name: str) -> None:
    text = WORKLOADS.replace("&workloads [", f"&workloads [{name}, ", 1)
    [problem] = lint_nested().name_problems(text)
    assert problem.startswith(f"workload name {name!r}")


@pytest.mark.parametrize("name", ["A", "Orders2", "A" + "b" * 23])
def test_a_name_within_the_rule_passes(name: str) -> None:
    assert lint_nested().name_problems(WORKLOADS.replace("&workloads [", f"&workloads [{name}, ", 1)) == []
