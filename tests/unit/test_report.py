"""The demo report renders: a well-formed page whose three charts and alarm table hold what was recorded."""

from __future__ import annotations

import shutil
import subprocess
import xml.etree.ElementTree as ET
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from sluice_local.demo import report

SVG = "{http://www.w3.org/2000/svg}"


def recorded() -> report.Recording:
    recording = report.Recording(started=datetime(2026, 11, 25, 12, tzinfo=UTC).timestamp())
    for second, depth in enumerate((0, 5, 12, 7, 2, 0)):
        recording.samples.append(
            report.Sample(float(second), {"work": (depth, 1), "poison": (second // 3, 0)})
        )
    recording.spans += [
        report.Span("normal", 0.0, 2.5, "PASS"),
        report.Span("keeps-failing", 0.5, 4.0, "FAIL"),
        report.Span("jobs", 0.0, 0.0, "SKIP"),
    ]
    recording.lags = [0.4, 1.2, -0.1]
    recording.alarms.append(
        report.AlarmChange(3.0, "sluice-demo-poison-depth", "OK", "ALARM", "visible = 1 & more")
    )
    return recording


def svg(figure: ET.Element) -> ET.Element:
    found = figure.find(f"{SVG}svg")
    assert found is not None
    return found


def test_given_a_recording_when_rendered_then_the_page_is_well_formed_and_holds_every_series() -> None:
    page = report.render(recorded())
    root = ET.fromstring(page.removeprefix("<!DOCTYPE html>"))  # noqa: S314 - our own page; XHTML-compatible

    figures = root.findall(".//figure")
    assert [f.findtext("figcaption") for f in figures] == [
        "queue depth over time", "scenarios", "delivery lag of delayed messages",
    ]  # fmt: skip
    depth, timeline, lags = (svg(f) for f in figures)
    assert len(depth.findall(f"{SVG}polyline")) == 2  # one line per queue
    points = depth.findall(f"{SVG}polyline")[0].get("points", "").split()
    assert len(points) == 6  # one point per sample
    assert len(timeline.findall(f"{SVG}rect")) == 3
    assert len(lags.findall(f"{SVG}rect")) == 3
    rows = root.findall(".//table/tr")
    assert [td.text for td in rows[1]][:3] == ["3.0 s", "sluice-demo-poison-depth", "OK → ALARM"]
    assert "visible = 1 &amp; more" in page  # escaped, not markup


def test_given_the_functions_log_then_the_delivery_lags_come_from_the_emf_lines() -> None:
    lines: list[dict[str, Any]] = [
        {"message": "charged"},
        {"_aws": {"CloudWatchMetrics": []}, "DeliveryLagSeconds": [0.5, 1.5]},
        {"_aws": {"CloudWatchMetrics": []}, "DeliveryLagSeconds": 2.0, "MessagesRehydrated": 1},
    ]
    assert report.delivery_lags(lines) == [0.5, 1.5, 2.0]


def test_given_a_headless_browser_when_it_opens_the_report_then_it_renders_a_screenshot(
    tmp_path: Path,
) -> None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if browser is None:
        pytest.skip(
            "no headless browser (Debian's chromium) on this machine: the well-formedness test stands in"
        )
    page = report.write(recorded(), tmp_path / "report.html")
    shot = tmp_path / "report.png"
    subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", f"--screenshot={shot}",
         "--window-size=1100,900", page.as_uri()],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert shot.stat().st_size > 10_000  # a page with charts, not a blank one
