"""docs/local.md's table of what each room of the local runtime may not import is the rule
``tests/unit/test_local_imports.py`` enforces (``ROOMS``): every room, every forbidden name, nothing else
(Given / When / Then)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.unit.test_local_imports import ROOMS

DOC = Path(__file__).resolve().parents[2] / "docs" / "local.md"
HEADER = "| room | may not import |"


def rooms_table(text: str) -> dict[str, tuple[str, ...]]:
    """The table under ``HEADER``: room → the names its second column lists, in order."""
    lines = text[text.index(HEADER) :].splitlines()[2:]  # the header and its |---| row
    table: dict[str, tuple[str, ...]] = {}
    for line in lines:
        if not line.startswith("|"):
            break
        match = re.fullmatch(r"\| `([^`]+)` \| (.+) \|", line)
        assert match, f"a rooms table row that is not `room` | `name`, ...: {line}"
        room, names = match.groups()
        assert room not in table, f"{room} listed twice"
        table[room] = tuple(re.findall(r"`([^`]+)`", names))
    return table


def test_given_the_docs_rooms_table_then_it_is_the_rule_the_import_test_enforces():
    # Given the table in docs/local.md
    table = rooms_table(DOC.read_text())
    # Then it names the same rooms as ROOMS, each with the same forbidden imports
    assert {room: set(names) for room, names in table.items()} == {
        room: set(names) for room, names in ROOMS.items()
    }


def test_given_a_table_missing_a_forbidden_import_then_the_check_notices():
    # Given the docs with psycopg removed from the emulation's row
    text = DOC.read_text()
    row = next(line for line in text.splitlines() if line.startswith("| `sluice_local.emulation` |"))
    # When its table is read, Then the emulation no longer forbids psycopg, unlike ROOMS
    table = rooms_table(text.replace(row, row.replace(", `psycopg`", "")))
    assert "psycopg" in ROOMS["sluice_local.emulation"]
    assert "psycopg" not in table["sluice_local.emulation"]


def test_the_idle_lifetime_the_docs_state_is_the_one_the_runtime_uses():
    from sluice_local.emulation.functions import IDLE_LIFETIME_SECONDS  # noqa: PLC0415

    # Given the sentence of docs/local.md that states it
    match = re.search(r"idle for (\d+) s \(`IDLE_LIFETIME_SECONDS`", " ".join(DOC.read_text().split()))
    # Then it is the constant FunctionHost's environments default to
    assert match, "docs/local.md no longer states the idle lifetime"
    assert float(match[1]) == IDLE_LIFETIME_SECONDS


def test_the_message_group_figures_the_docs_state_are_the_ones_the_emulation_uses():
    from sluice_local.emulation.moto_adapter import message_groups  # noqa: PLC0415

    # Given the emulated column of docs/local.md's message-group table
    text = " ".join(DOC.read_text().split())
    dedup = re.search(r"every id is kept (\d+) s from its first send", text)
    noisy = re.search(
        r"over the last (\d+) s, it got more than (\d+)% of the queue's deliveries and at least (\d+)", text
    )
    # Then they are the module's constants
    assert dedup, "docs/local.md no longer states the deduplication window"
    assert float(dedup[1]) == message_groups.DEDUPLICATION_WINDOW_SECONDS
    assert noisy, "docs/local.md no longer states the noisy-tenant rule"
    assert float(noisy[1]) == message_groups.NOISY_WINDOW_SECONDS
    assert int(noisy[2]) / 100 == message_groups.NOISY_SHARE
    assert int(noisy[3]) == message_groups.NOISY_MIN_DELIVERIES
