"""The redriver's logger and metric sink when an operator runs it from a terminal."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from typing import Any

from sluice_cli.output import Output


class CountingSink:
    """Adds up the metrics a run emits (shown in the result instead of going to CloudWatch)."""

    def __init__(self) -> None:
        self.values: Counter[str] = Counter()

    def add_metric(self, name: str, unit: str, value: float) -> None:
        self.values[name] += int(value)


class StderrLog:
    """One line per event on stderr (``info`` only when verbose); the stdout result stays clean."""

    def __init__(self, out: Output, *, verbose: bool = False) -> None:
        self._out = out
        self._verbose = verbose

    def info(self, msg: object, *args: object, extra: Mapping[str, Any] | None = None, **_: Any) -> None:
        if self._verbose:
            self._write("info", msg, extra)

    def warning(self, msg: object, *args: object, extra: Mapping[str, Any] | None = None, **_: Any) -> None:
        self._write("warning", msg, extra)

    def error(self, msg: object, *args: object, extra: Mapping[str, Any] | None = None, **_: Any) -> None:
        self._write("error", msg, extra)

    def exception(self, msg: object, *args: object, extra: Mapping[str, Any] | None = None, **_: Any) -> None:
        self._write("error", msg, extra)

    def _write(self, level: str, msg: object, extra: Mapping[str, Any] | None) -> None:
        details = " ".join(f"{k}={json.dumps(v, default=str)}" for k, v in (extra or {}).items())
        self._out.log(f"{level}: {msg}" + (f" {details}" if details else ""))
