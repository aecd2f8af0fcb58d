"""The functions' JSON log read as it grows: each read returns only the lines appended since the last."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sluice.logevents import EVENT, LogEvent


class LogTail:
    """One reader of a log file that is only appended to. Reads whole lines only (a line still being
    written is read next time), and parses only those that mention one of the asked events."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._offset = 0

    def read(self, *events: LogEvent) -> list[dict[str, Any]]:
        """The lines appended since the last read whose ``event`` is one of ``events``."""
        try:
            with self._path.open("rb") as f:
                f.seek(self._offset)
                chunk = f.read()
        except FileNotFoundError:
            return []
        end = chunk.rfind(b"\n") + 1
        self._offset += end
        needles = [event.encode() for event in events]
        out: list[dict[str, Any]] = []
        for raw in chunk[:end].split(b"\n"):
            if not any(needle in raw for needle in needles):  # most lines: not parsed at all
                continue
            try:
                entry = json.loads(raw)
            except ValueError:
                continue
            if isinstance(entry, dict) and entry.get(EVENT) in events:
                out.append(entry)
        return out
