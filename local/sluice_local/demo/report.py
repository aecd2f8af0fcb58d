"""The one-page report ``make demo`` writes: queue depth over time, the scenarios' timeline, the delivery
lag of delayed messages and the alarms the local runtime evaluated, as a self-contained HTML page
(inline SVG, no script, nothing fetched) a person opens in a browser."""

from __future__ import annotations

import html
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

COLOURS = ("#1f77b4", "#d62728", "#9467bd", "#2ca02c", "#ff7f0e", "#8c564b", "#17becf")
WIDTH, HEIGHT, PAD = 900, 220, 40


@dataclass(frozen=True)
class Sample:
    at: float  # seconds since the recording started
    depths: dict[str, tuple[int, int]]  # queue → (visible, in flight)


@dataclass(frozen=True)
class AlarmChange:
    at: float
    alarm: str
    old: str
    new: str
    reason: str


@dataclass(frozen=True)
class Span:
    name: str
    start: float
    seconds: float
    verdict: str  # PASS, FAIL, SKIP


@dataclass
class Recording:
    """What the demo saw, in seconds since it started."""

    started: float = field(default_factory=time.time)
    samples: list[Sample] = field(default_factory=list)
    alarms: list[AlarmChange] = field(default_factory=list)
    spans: list[Span] = field(default_factory=list)
    lags: list[float] = field(default_factory=list)

    def now(self) -> float:
        return round(time.time() - self.started, 2)

    def sample(self, depths: dict[str, tuple[int, int]]) -> None:
        self.samples.append(Sample(self.now(), dict(depths)))

    def alarm(self, name: str, old: str, new: str, reason: str) -> None:
        self.alarms.append(AlarmChange(self.now(), name, old, new, reason))

    def span(self, name: str, started_at: datetime | None, seconds: float, verdict: str) -> None:
        start = (started_at.timestamp() - self.started) if started_at is not None else self.now() - seconds
        self.spans.append(Span(name, round(max(0.0, start), 2), seconds, verdict))


def delivery_lags(log_lines: Iterable[dict[str, Any]]) -> list[float]:
    """``DeliveryLagSeconds`` values from the functions' EMF metric lines (one per rehydrated batch)."""
    out: list[float] = []
    for line in log_lines:
        if "_aws" in line and "DeliveryLagSeconds" in line:
            value = line["DeliveryLagSeconds"]
            out += [float(v) for v in value] if isinstance(value, list) else [float(value)]
    return out


# --- the page ----------------------------------------------------------------------------------------


def _scale(value: float, top: float, span: float) -> float:
    return span * (value / top) if top > 0 else 0.0


def depth_chart(samples: Sequence[Sample]) -> str:
    """Visible + in flight per queue over time, one polyline per queue."""
    queues = sorted({q for s in samples for q in s.depths})
    t_max = max((s.at for s in samples), default=1.0) or 1.0
    y_max = max((sum(s.depths[q]) for s in samples for q in s.depths), default=1) or 1
    parts = [_axes("seconds", "messages (visible + in flight)", t_max, y_max)]
    for i, queue in enumerate(queues):
        points = " ".join(
            f"{PAD + _scale(s.at, t_max, WIDTH - 2 * PAD):.1f},"
            f"{HEIGHT - PAD - _scale(sum(s.depths.get(queue, (0, 0))), y_max, HEIGHT - 2 * PAD):.1f}"
            for s in samples
        )
        colour = COLOURS[i % len(COLOURS)]
        parts.append(
            f'<polyline class="series" fill="none" stroke="{colour}" stroke-width="2" points="{points}"/>'
        )
        parts.append(
            f'<text x="{WIDTH - PAD + 5}" y="{PAD + 14 * i}" fill="{colour}" font-size="11">'
            f"{html.escape(queue)}</text>"
        )
    return _svg("queue depth over time", parts, width=WIDTH + 120)


def timeline_chart(spans: Sequence[Span]) -> str:
    """One bar per scenario, from its start to its verdict."""
    t_max = max((s.start + s.seconds for s in spans), default=1.0) or 1.0
    row = 16
    height = PAD + row * len(spans) + 10
    colour = {"PASS": "#2ca02c", "FAIL": "#d62728", "SKIP": "#bbbbbb"}
    parts = []
    for i, s in enumerate(spans):
        x = 180 + _scale(s.start, t_max, WIDTH - 200)
        w = max(2.0, _scale(s.seconds, t_max, WIDTH - 200))
        y = PAD / 2 + row * i
        parts.append(f'<text x="4" y="{y + 11}" font-size="11">{html.escape(s.name)}</text>')
        parts.append(
            f'<rect class="bar" x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{row - 4}" '
            f'fill="{colour.get(s.verdict, "#999")}"><title>{html.escape(s.name)}: {s.verdict}, '
            f"{s.seconds:.1f} s</title></rect>"
        )
    parts.append(f'<text x="180" y="{height - 2}" font-size="11">0 s</text>')
    parts.append(f'<text x="{WIDTH - 40}" y="{height - 2}" font-size="11">{t_max:.0f} s</text>')
    return _svg("scenarios", parts, height=height)


def lag_chart(lags: Sequence[float]) -> str:
    """Delivery lag of each rehydrated batch (seconds after its due time)."""
    y_max = max((abs(v) for v in lags), default=1.0) or 1.0
    parts = [_axes("rehydrated batch", "delivery lag (s)", float(len(lags) or 1), y_max)]
    step = (WIDTH - 2 * PAD) / max(1, len(lags))
    for i, lag in enumerate(lags):
        h = _scale(abs(lag), y_max, HEIGHT - 2 * PAD)
        parts.append(
            f'<rect class="bar" x="{PAD + i * step + 1:.1f}" y="{HEIGHT - PAD - h:.1f}" '
            f'width="{max(1.0, step - 2):.1f}" height="{h:.1f}" fill="#1f77b4">'
            f"<title>{lag:.2f} s</title></rect>"
        )
    return _svg("delivery lag of delayed messages", parts)


def _axes(x_label: str, y_label: str, x_max: float, y_max: float) -> str:
    return (
        f'<line x1="{PAD}" y1="{HEIGHT - PAD}" x2="{WIDTH - PAD}" y2="{HEIGHT - PAD}" stroke="#333"/>'
        f'<line x1="{PAD}" y1="{PAD}" x2="{PAD}" y2="{HEIGHT - PAD}" stroke="#333"/>'
        f'<text x="{WIDTH / 2}" y="{HEIGHT - 8}" font-size="11">'
        f"{html.escape(x_label)} (0 to {x_max:.0f})</text>"
        f'<text x="4" y="{PAD - 8}" font-size="11">{html.escape(y_label)} (max {y_max:g})</text>'
    )


def _svg(title: str, parts: list[str], *, width: int = WIDTH, height: int = HEIGHT) -> str:
    body = "".join(parts)
    return (
        f'<figure><figcaption>{html.escape(title)}</figcaption><svg xmlns="http://www.w3.org/2000/svg" '
        f'width="{width}" height="{height}" role="img" aria-label="{html.escape(title)}">'
        f"{body}</svg></figure>"
    )


def render(recording: Recording, *, title: str = "sluice demo") -> str:
    """The page (a complete XHTML-compatible HTML document)."""
    changes = "".join(
        f"<tr><td>{c.at:.1f} s</td><td>{html.escape(c.alarm)}</td><td>{c.old} → {c.new}</td>"
        f"<td>{html.escape(c.reason)}</td></tr>"
        for c in recording.alarms
    )
    verdicts = {v: sum(s.verdict == v for s in recording.spans) for v in ("PASS", "FAIL", "SKIP")}
    when = datetime.fromtimestamp(recording.started, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"/>'
        f"<title>{html.escape(title)}</title>"
        "<style>body{font-family:sans-serif;margin:24px;max-width:1100px}figure{margin:16px 0}"
        "figcaption{font-weight:bold}table{border-collapse:collapse}td,th{border:1px solid #ccc;"
        "padding:2px 6px;font-size:12px}</style></head><body>"
        f"<h1>{html.escape(title)}</h1><p>started {when}; scenarios: {verdicts['PASS']} passed, "
        f"{verdicts['FAIL']} failed, {verdicts['SKIP']} skipped; {len(recording.samples)} queue samples.</p>"
        + depth_chart(recording.samples)
        + timeline_chart(recording.spans)
        + lag_chart(recording.lags)
        + "<h2>alarm state changes (evaluated locally)</h2>"
        + (
            f"<table><tr><th>at</th><th>alarm</th><th>change</th><th>reason</th></tr>{changes}</table>"
            if changes
            else "<p>none</p>"
        )
        + "</body></html>"
    )


def write(recording: Recording, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(recording), encoding="utf-8")
    return path


__all__ = ["AlarmChange", "Recording", "Sample", "Span", "delivery_lags", "render", "write"]
