"""docs/observability.md's event table is the code's ``LogEvent``: every member listed, nothing else,
and its sample log lines carry the ``event`` key tools select on (Given / When / Then)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from sluice.logevents import EVENT, LogEvent

DOC = Path(__file__).resolve().parents[2] / "docs" / "observability.md"
HEADER = "| `event` | message | written by |"


def event_table(text: str) -> list[str]:
    """The first column of the table under ``HEADER``, in order."""
    lines = text[text.index(HEADER) :].splitlines()[2:]  # the header and its |---| row
    rows = []
    for line in lines:
        if not line.startswith("|"):
            break
        match = re.match(r"\| `([^`]+)` \|", line)
        assert match, f"an event table row that names no event: {line}"
        rows.append(match.group(1))
    return rows


def test_given_the_docs_event_table_then_it_lists_exactly_the_log_events():
    # Given the table in docs/observability.md
    listed = event_table(DOC.read_text())
    # Then it names every LogEvent once, and nothing the code does not define
    assert len(listed) == len(set(listed)), "an event listed twice"
    assert set(listed) == {event.value for event in LogEvent}


def test_given_a_table_missing_an_event_then_the_check_notices():
    # Given the docs with one event's row removed
    text = DOC.read_text()
    row = next(line for line in text.splitlines() if line.startswith("| `jobs.message_rejected` |"))
    # When its table is read, Then the event is missing from it
    assert LogEvent.JOB_MESSAGE_REJECTED.value not in event_table(text.replace(row + "\n", ""))


def test_given_the_docs_sample_log_lines_then_each_carries_its_event():
    # Given the example JSON log lines in docs/observability.md
    text = DOC.read_text()
    block = text[text.index("Example lines") :]
    block = block[block.index("```json") + len("```json") : block.index("```", block.index("```json") + 7)]
    samples = [json.loads(line) for line in block.strip().splitlines()]
    # Then every one has an event key naming a LogEvent
    assert samples
    for sample in samples:
        assert LogEvent(sample[EVENT]), sample
