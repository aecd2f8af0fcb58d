"""README's parameter table lists every parameter of template.yaml (test_settings_docs holds each row's
default to the template's), so no parameter, such as TrustedSenderArns or OperatorArns, is found only by
reading the template."""

from __future__ import annotations

from pathlib import Path

from scripts.first_deploy import declared_parameters
from tests.unit.test_settings_docs import names, rows

ROOT = Path(__file__).resolve().parents[2]
HEADER = "| parameter | default | meaning |"


def listed(text: str) -> set[str]:
    return {name for row in rows(text, HEADER) for name in names(row["parameter"])}


def test_given_the_readme_then_its_parameter_table_lists_every_template_parameter() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert [name for name in declared_parameters() if name not in listed(readme)] == []


def test_given_a_row_left_out_then_the_check_names_the_parameter() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    [row] = [line for line in readme.splitlines() if line.startswith("| `OperatorArns` |")]
    assert "OperatorArns" not in listed(readme.replace(row + "\n", ""))
