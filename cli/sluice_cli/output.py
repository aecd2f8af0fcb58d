"""Tables for humans (rich when it is installed, plain text otherwise), JSON only with ``--json``."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable, Sequence
from datetime import date, datetime
from typing import Any, TextIO

Cell = str | int | float | bool | None

WIDTH_WHEN_NOT_A_TERMINAL = 200


def to_json(data: Any) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False, default=_json_default)


def _json_default(value: object) -> object:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode()
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def cell_text(value: Cell) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


class Output:
    """Where a command's result goes. With ``json_mode`` only :meth:`emit`'s data reaches stdout."""

    def __init__(
        self, *, json_mode: bool, stdout: TextIO, stderr: TextIO, use_rich: bool | None = None
    ) -> None:
        self.json_mode = json_mode
        self._stdout = stdout
        self._stderr = stderr
        self._console: Any = None
        if use_rich is not False and not json_mode:
            self._console = _rich_console(stdout)

    def emit(self, data: Any, human: Callable[[], None]) -> None:
        """The result: ``data`` as JSON with ``--json``, else whatever ``human`` prints."""
        if self.json_mode:
            self._stdout.write(to_json(data) + "\n")
        else:
            human()

    def table(self, title: str, columns: Sequence[str], rows: Iterable[Sequence[Cell]]) -> None:
        text_rows = [[cell_text(c) for c in row] for row in rows]
        if self._console is not None:
            from rich.table import Table  # noqa: PLC0415 - optional dependency
            from rich.text import Text  # noqa: PLC0415

            table = Table(title=title, title_justify="left", show_lines=False)
            for i, column in enumerate(columns):  # the first column identifies the row: never wrapped
                table.add_column(column, overflow="fold", no_wrap=i == 0)
            for row in text_rows:
                table.add_row(*(Text(c) for c in row))  # Text: no markup is read from message data
            self._console.print(table)
            return
        self._plain_table(title, columns, text_rows)

    def fields(self, title: str, pairs: Sequence[tuple[str, Cell]]) -> None:
        """A two-column name/value listing."""
        self.table(title, ("field", "value"), pairs)

    def text(self, text: str, *, title: str | None = None) -> None:
        """A block of text as it is (a message body, an envelope)."""
        if title:
            self._write(title)
        self._stdout.write(text + ("" if text.endswith("\n") else "\n"))

    def line(self, text: str) -> None:
        self._write(text)

    def warn(self, message: str) -> None:
        """Always to stderr, in both modes (never mixed into the JSON on stdout)."""
        self._stderr.write(f"warning: {message}\n")

    def error(self, message: str) -> None:
        self._stderr.write(f"error: {message}\n")

    def log(self, line: str) -> None:
        """A progress or log line: stderr."""
        self._stderr.write(line + "\n")

    def _write(self, text: str) -> None:
        if self._console is not None:
            from rich.text import Text  # noqa: PLC0415

            self._console.print(Text(text))
        else:
            self._stdout.write(text + "\n")

    def _plain_table(self, title: str, columns: Sequence[str], rows: list[list[str]]) -> None:
        widths = [len(c) for c in columns]
        for row in rows:
            widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
        lines = [title, "  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip()]
        lines.append("  ".join("-" * w for w in widths))
        lines.extend("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows)
        self._stdout.write("\n".join(lines) + "\n")


def _rich_console(stream: TextIO) -> Any:
    try:
        from rich.console import Console  # noqa: PLC0415 - optional: a dev dependency
    except ImportError:
        return None
    terminal = stream.isatty()
    return Console(
        file=stream,
        width=None if terminal else WIDTH_WHEN_NOT_A_TERMINAL,
        highlight=False,
        soft_wrap=False,
        color_system="auto" if terminal else None,
    )
