"""The docs' settings tables state the defaults the code and the template have: each default a table gives
is compared with the settings model's field default (``SLUICE_*`` columns) and the template parameter's
default (parameter columns), and a disagreement fails (Given / When / Then).

A table is found by its header line; a row names one setting, or several joined by `` / `` with as many
defaults joined the same way (or one default for all). A default cell is read up to its first remark:
```` `x` (why) ```` is x, ``1209600 (14 days)`` is 1209600, ``**required**`` is a variable that must be
set, ``(none)``, ``empty`` and ``''`` are the empty value, and a cell naming a template resource says the
template sets it from that resource (no default to compare).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pydantic import create_model

from sluice.consumer.settings import ConsumerSettings
from sluice.jobs.settings import JobConsumerSettings
from sluice.redrive.settings import RedriveSettings
from sluice.settings import ENV_PREFIX, EnvSettings
from sluice_local.app.fast import FAST
from tests.unit.settings_sources import (
    REQUIRED,
    ROOT,
    Template,
    fields_named,
    load_template,
    model_default,
    parameter_default,
    same,
)
from tests.unit.test_template import workload_names

NO_NAME = {"", "—", "-"}


@dataclass(frozen=True)
class Table:
    """Where a table is and which of its columns say what."""

    doc: str
    header: str
    default: str
    env: str | None = None
    """The column naming ``SLUICE_*`` variables (the prefix may be left out) of ``model``."""
    model: type[EnvSettings] | None = None
    parameter: str | None = None
    """The column naming template parameters."""
    fast: str | None = None
    """The column giving ``--fast``'s value (sluice_local.app.fast.FAST)."""

    @property
    def id(self) -> str:
        return f"{self.doc}: {self.header}"


TABLES = (
    Table(
        "docs/configuration.md",
        "| variable | type | default | valid | set by (template) |",
        default="default",
        env="variable",
        model=ConsumerSettings,
    ),
    Table(
        "docs/configuration.md",
        "| parameter | default | allowed | feeds |",
        default="default",
        parameter="parameter",
    ),
    Table(
        "docs/consumer.md",
        "| setting | default | template parameter |",
        default="default",
        env="setting",
        model=ConsumerSettings,
        parameter="template parameter",
    ),
    Table(
        "docs/jobs.md",
        "| template parameter | `SLUICE_*` | default | meaning |",
        default="default",
        env="`SLUICE_*`",
        model=JobConsumerSettings,
        parameter="template parameter",
    ),
    Table(
        "docs/redrive.md",
        "| variable | parameter | default | meaning |",
        default="default",
        env="variable",
        model=RedriveSettings,
        parameter="parameter",
    ),
    Table("README.md", "| parameter | default | meaning |", default="default", parameter="parameter"),
    Table(
        "docs/local.md",
        "| parameter | fast | in AWS (default) | effect locally |",
        default="in AWS (default)",
        parameter="parameter",
        fast="fast",
    ),
    Table(
        "docs/library.md",
        "| variable | default | set it to |",
        default="default",
        env="variable",
        model=ConsumerSettings,
    ),
)


# --- reading a table -----------------------------------------------------------------------------------


def _cells(line: str) -> list[str]:
    # a '|' inside backticks is text (`a \| b` is how the docs escape one)
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]


def rows(text: str, header: str) -> list[dict[str, str]]:
    """The rows of the table under ``header``, each as column → cell."""
    assert header in text, f"no table headed {header!r}"
    columns = _cells(header)
    lines = text[text.index(header) :].splitlines()[2:]  # the header and its |---| row
    table = []
    for line in lines:
        if not line.startswith("|"):
            break
        cells = _cells(line)
        assert len(cells) == len(columns), f"a row of {len(cells)} cells under {len(columns)} columns: {line}"
        table.append(dict(zip(columns, cells, strict=True)))
    return table


def names(cell: str) -> list[str]:
    """The settings a cell names: ``a`` / ``b``, SLUICE_ prefixes as written, remarks left out."""
    found = []
    for part in cell.split(" / "):
        quoted = re.match(r"`([^`]*)`", part.strip())
        found.append(quoted.group(1) if quoted else part.split(" (", 1)[0].strip())
    return found


def value(cell: str) -> Any:
    """A default cell read up to its first remark (see the module's docstring)."""
    text = cell.strip()
    if text.startswith("**required**"):
        return REQUIRED
    quoted = re.match(r"`([^`]*)`", text)
    text = quoted.group(1) if quoted else re.split(r" \(|: |; ", text, maxsplit=1)[0].strip()
    return "" if text in ("''", '""', "(none)", "empty", "none") else text


def defaults(cell: str, count: int) -> list[Any] | None:
    parts = [value(part) for part in cell.split(" / ")]
    if len(parts) == 1:
        return parts * count
    return parts if len(parts) == count else None


# --- comparing ----------------------------------------------------------------------------------------


def _parameter_problems(template: Template, name: str, stated: Any, where: str) -> list[str]:
    if name not in template.get("Parameters", {}):
        return [f"{where}: {name} is no template parameter"]
    actual = parameter_default(template, name)
    if actual is REQUIRED:
        return [] if stated is REQUIRED else [f"{where}: {name} has no default; the docs say {stated!r}"]
    if same(str(actual), stated) or (_number(actual) is not None and _number(actual) == _number(stated)):
        return []
    return [f"{where}: {name} defaults to {actual!r} in template.yaml; the docs say {stated!r}"]


def _number(text: Any) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def _env_problems(model: type[EnvSettings], name: str, stated: Any, where: str) -> list[str]:
    found = fields_named(name, (model,))
    if not found:
        return [f"{where}: {name} is no {model.__name__} setting"]
    [(_, field)] = found
    if same(model_default(field), stated):
        return []
    actual = "required" if field.is_required() else repr(field.default)
    variable = ENV_PREFIX + name.removeprefix(ENV_PREFIX)
    return [f"{where}: {variable} defaults to {actual} in {model.__name__}; the docs say {stated!r}"]


def _column_problems(
    table: Table, row: dict[str, str], column: str, check: Callable[[str, Any, str], list[str]]
) -> list[str]:
    """The row's settings named in ``column``, each checked against its stated default."""
    listed = [n for n in names(row[column]) if n not in NO_NAME]
    if not listed:
        return []
    where = f"{table.doc} row {next(iter(row.values()))}"
    stated = defaults(row[table.default], len(listed))
    if stated is None:
        return [f"{where}: {len(listed)} settings ({', '.join(listed)}) but not as many defaults"]
    return [p for name, default in zip(listed, stated, strict=True) for p in check(name, default, where)]


def table_problems(table: Table, text: str, template: Template) -> list[str]:
    """Every default ``table`` (in ``text``) states that its model or the template does not have."""

    workloads = workload_names(template)

    def resource(cell: Any) -> bool:  # a resource of the template's, or each workload's (<Workload>X)
        names = [str(cell).replace("<Workload>", w) for w in workloads]
        # a workload's queue: the one it creates, or an existing one its event source reads (no resource)
        resources = template["Resources"]
        return all(n in resources or (n.endswith("Queue") and f"{n}Source" in resources) for n in names)

    def parameter(name: str, default: Any, where: str) -> list[str]:
        if resource(default):
            return []  # set from that resource: no default to compare
        return _parameter_problems(template, name, default, where)

    def env(name: str, default: Any, where: str) -> list[str]:
        assert table.model is not None
        return [] if resource(default) else _env_problems(table.model, name, default, where)

    problems = []
    for row in rows(text, table.header):
        named = [n for c in (table.parameter, table.env) if c is not None for n in names(row[c])]
        if all(n in NO_NAME for n in named):
            problems.append(f"{table.doc} row {next(iter(row.values()))}: the row names no setting")
        if table.parameter is not None:
            problems += _column_problems(table, row, table.parameter, parameter)
        if table.env is not None:
            problems += _column_problems(table, row, table.env, env)
        if table.fast is not None and table.parameter is not None:
            problems += _column_problems(
                Table(table.doc, table.header, default=table.fast), row, table.parameter, _fast_problems
            )
    return problems


def _fast_problems(name: str, stated: Any, where: str) -> list[str]:
    if str(FAST.get(name)) == str(stated):
        return []
    return [f"{where}: --fast gives {name} {FAST.get(name)!r}; the docs say {stated!r}"]


def _text(table: Table) -> str:
    return (ROOT / table.doc).read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def template() -> Template:
    return load_template()


# --- the docs agree ------------------------------------------------------------------------------------


@pytest.mark.parametrize("table", TABLES, ids=lambda t: t.id)
def test_given_a_docs_settings_table_then_every_default_it_states_is_the_code_and_the_templates(
    table: Table, template: Template
) -> None:
    # Given the table as the docs have it, When each default is compared, Then none disagrees
    assert table_problems(table, _text(table), template) == []
    assert len(rows(_text(table), table.header)) >= 3


def test_given_the_consumers_settings_then_its_table_lists_every_one(template: Template) -> None:
    # Given docs/configuration.md's SLUICE_* table, Then it lists every ConsumerSettings field once
    table = TABLES[0]
    listed = [n for row in rows(_text(table), table.header) for n in names(row["variable"])]
    assert sorted(listed) == sorted(ENV_PREFIX + field.upper() for field in ConsumerSettings.model_fields)


# --- the check notices a changed value -------------------------------------------------------------------


def _table(doc: str, default: str = "default") -> Table:
    return next(t for t in TABLES if t.doc == doc and t.default == default)


def _changed_row(text: str, row_start: str, old: str, new: str) -> str:
    """``text`` with the row starting ``row_start`` given ``new`` for its cell ``old``."""
    [row] = [line for line in text.splitlines() if line.startswith(row_start)]
    assert f"| {old} |" in row
    return text.replace(row, row.replace(f"| {old} |", f"| {new} |", 1))


def test_given_jobs_md_with_the_900_s_lease_then_both_the_template_and_the_model_disagree(
    template: Template,
) -> None:
    # Given docs/jobs.md saying JOB_LEASE_SECONDS defaults to 900 (as JobSettings once did)
    table = _table("docs/jobs.md")
    text = _changed_row(_text(table), "| `JobLeaseSeconds` |", "960", "900")
    # When checked, Then the parameter's and the setting's defaults are both named against it
    problems = table_problems(table, text, template)
    assert len(problems) == 2
    assert "JobLeaseSeconds defaults to 960 in template.yaml; the docs say '900'" in problems[0]
    assert (
        "SLUICE_JOB_LEASE_SECONDS defaults to 960 in JobConsumerSettings; the docs say '900'" in problems[1]
    )


def test_given_a_changed_default_in_configuration_md_then_the_check_notices(template: Template) -> None:
    # Given configuration.md saying a missing key is keyed by identity by default
    table = TABLES[0]
    text = _changed_row(
        _text(table), "| `SLUICE_IDEMPOTENCY_KEY_MISSING` |", "`poison`", "`message-identity`"
    )
    # When checked, Then the model's default is named against it
    [problem] = table_problems(table, text, template)
    assert "SLUICE_IDEMPOTENCY_KEY_MISSING defaults to 'poison' in ConsumerSettings" in problem


def test_given_a_model_whose_default_changed_then_the_docs_check_notices(template: Template) -> None:
    # Given a consumer model whose backoff cap default moved from 300 to 600
    moved = create_model("MovedCap", __base__=ConsumerSettings, backoff_cap_seconds=(float, 600.0))
    table = Table("docs/consumer.md", TABLES[2].header, default="default", env="setting", model=moved)
    # When the docs (still 300) are checked against it, Then the setting is reported
    [problem] = table_problems(table, _text(table), template)
    assert "SLUICE_BACKOFF_CAP_SECONDS defaults to 600.0 in MovedCap; the docs say '300'" in problem


def test_given_a_template_whose_default_changed_then_the_docs_check_notices(template: Template) -> None:
    # Given the template's MaxReceiveCount default moved from 5 to 7
    moved = copy.deepcopy(template)
    moved["Parameters"]["MaxReceiveCount"]["Default"] = 7
    # When configuration.md's parameter table is checked, Then that row is reported
    [problem] = table_problems(TABLES[1], _text(TABLES[1]), moved)
    assert "MaxReceiveCount defaults to 7 in template.yaml; the docs say '5'" in problem


def test_given_a_row_naming_an_unknown_parameter_then_the_check_reports_it(template: Template) -> None:
    # Given README's table naming a parameter the template does not have
    table = _table("README.md")
    text = _text(table).replace("| `LogLevel` |", "| `LogLevels` |", 1)
    # When checked, Then the row is reported, not skipped
    assert table_problems(table, text, template) == [
        "README.md row `LogLevels`: LogLevels is no template parameter"
    ]


@pytest.mark.parametrize(
    ("cell", "expected"),
    [
        ("`''` (any key in the allowed buckets)", ""),
        ("1209600 (14 days)", "1209600"),
        ("`33554432` (32 MiB)", "33554432"),
        ("empty: every claim-check pointer is rejected", ""),
        ("**required** (every function)", REQUIRED),
        ("(none)", ""),
        ("`rate(5 seconds)` (local-only unit)", "rate(5 seconds)"),
        ("read committed", "read committed"),
    ],
)
def test_given_a_default_cell_when_read_then_its_remark_is_left_out(cell: str, expected: Any) -> None:
    assert value(cell) == expected


def test_given_the_tables_then_each_names_a_doc_that_exists() -> None:
    assert all(Path(ROOT / t.doc).is_file() for t in TABLES)


def test_given_local_md_with_another_fast_value_then_the_check_notices(template: Template) -> None:
    # Given docs/local.md saying --fast gives RedriveMaxAttempts 3 (FAST gives 2)
    table = _table("docs/local.md", "in AWS (default)")
    text = _changed_row(_text(table), "| `RedriveMaxAttempts` |", "2", "3")
    # When checked, Then the --fast value is reported, and the AWS default is not
    assert table_problems(table, text, template) == [
        "docs/local.md row `RedriveMaxAttempts`: --fast gives RedriveMaxAttempts '2'; the docs say '3'"
    ]
