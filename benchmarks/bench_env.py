"""The environment every in-process benchmark runs in: offline (moto), quiet, no tracing; and where the
shared reference material (the price table of the cost benchmarks) lives.

Set it before anything of Powertools or boto3 is constructed (Powertools reads it at construction).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

REGION = "us-east-1"

OFFLINE_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": REGION,
    "AWS_REGION": REGION,
    "POWERTOOLS_SERVICE_NAME": "sluice-bench",
    "POWERTOOLS_METRICS_NAMESPACE": "SluiceBench",
    "POWERTOOLS_TRACE_DISABLED": "true",
    "POWERTOOLS_DEV": "false",
    "POWERTOOLS_LOG_LEVEL": "WARNING",
    "LOG_LEVEL": "WARNING",
}

ROOT = Path(__file__).resolve().parents[1]
REFERENCE_DIR_VARIABLE = "SLUICE_REFERENCE_DIR"


def reference_dir() -> Path:
    """The shared reference folder (``aws-prices.md``, ``seeds/``): ``$SLUICE_REFERENCE_DIR`` when set, else
    ``shared/reference`` beside the repository's root, so any checkout or worktree placed beside ``shared/``
    finds it (``/work/main`` and ``/work/wt-*`` alike)."""
    return Path(os.environ.get(REFERENCE_DIR_VARIABLE) or ROOT.parent / "shared" / "reference")


def default_prices() -> Path:
    """The price table every cost benchmark reads by default (``--prices`` overrides it)."""
    return reference_dir() / "aws-prices.md"


def read_price_table(path: Path) -> str:
    """The price table's text; exits naming the file and how to point at another when it cannot be read."""
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SystemExit(
            f"cannot read the price table {path} ({exc.strerror}): pass --prices PATH or set "
            f"{REFERENCE_DIR_VARIABLE} to the folder holding aws-prices.md"
        ) from None


def unit_price(text: str) -> float:
    """'0.40 per million' → 4e-07; '0.005 per 1,000' → 5e-06; '0.023 per GB-month', '0.0000133334' → as is."""
    match = re.match(r"\s*([0-9][0-9,]*(?:\.[0-9]+)?)\s*(?:per\s+(million|[0-9][0-9,]*))?", text)
    if not match:
        raise SystemExit(f"cannot read a price from {text!r}")
    value, per = float(match.group(1).replace(",", "")), match.group(2)
    if per == "million":
        return value / 1_000_000
    return value / float(per.replace(",", "")) if per else value


def unit_prices(path: Path, wanted: Mapping[str, tuple[str, str]]) -> dict[str, float]:
    """The USD per unit of each ``name: (service, start of the unit column)`` row of the price table."""
    rows: list[tuple[str, str, str]] = []
    for line in read_price_table(path).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.lstrip().startswith("|") and len(cells) == 3 and not set(cells[0]) <= set("-: "):
            rows.append((cells[0], cells[1], cells[2]))
    found: dict[str, float] = {}
    for name, (service, unit) in wanted.items():
        matches = [p for s, u, p in rows if s == service and u.startswith(unit)]
        if len(matches) != 1:
            raise SystemExit(f"{path}: expected one row '{service} | {unit}…', found {len(matches)}")
        found[name] = unit_price(matches[0])
    return found
