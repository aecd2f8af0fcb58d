"""The demo report renders: a well-formed page whose three charts and alarm table hold what was recorded."""

from __future__ import annotations

import os
import shutil
import xml.etree.ElementTree as ET
from collections.abc import Iterator
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


BROWSER_MISSING = (
    "no headless browser here (Debian's chromium and chromium-driver, which .ci/run installs): "
    "the well-formedness test stands in"
)


@pytest.fixture
def browser() -> Iterator[Any]:
    """Debian's chromium, headless, driven through its chromedriver (Selenium): what a person would see."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver")
    try:
        from selenium import webdriver  # noqa: PLC0415
        from selenium.webdriver.chrome.service import Service  # noqa: PLC0415
    except ImportError:  # pragma: no cover - selenium is a dev dependency
        chromium = None
    if chromium is None or driver_path is None:
        if os.environ.get("CI"):  # CI installs both (.ci/run): missing there is a broken install, not a skip
            pytest.fail(BROWSER_MISSING)
        pytest.skip(BROWSER_MISSING)
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1200,1400"):
        options.add_argument(argument)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=driver_path))
    try:
        yield driver
    finally:
        driver.quit()


SEEN = """
const box = (e) => { const r = e.getBoundingClientRect(); return [r.x, r.y, r.width, r.height]; };
const onTop = (e) => {  // the element a person sees at its own centre is the element itself
  const [x, y, w, h] = box(e);
  const hit = document.elementFromPoint(x + w / 2, y + h / 2);
  return hit === e || e.contains(hit);
};
return [...document.querySelectorAll('figure')].map((f) => ({
  caption: f.querySelector('figcaption').innerText,
  svg: box(f.querySelector('svg')),
  series: [...f.querySelectorAll('polyline.series')].map((p) => ({
    stroke: getComputedStyle(p).stroke, box: box(p), points: p.points.numberOfItems,
  })),
  bars: [...f.querySelectorAll('rect.bar')].map((r) => ({box: box(r), seen: onTop(r)})),
}));
"""


@pytest.mark.browser
@pytest.mark.subprocess
def test_given_a_headless_browser_when_it_opens_the_report_then_a_person_sees_the_charts_and_the_rows(
    tmp_path: Path, browser: Any
) -> None:
    # Given the report of a recording with two queues, three scenarios, three lags and one alarm change
    page = report.write(recorded(), tmp_path / "report.html")

    # When a real browser lays the page out
    browser.get(page.as_uri())
    figures = browser.execute_script(SEEN)
    rows = [
        [cell.text for cell in row.find_elements("css selector", "td")]
        for row in browser.find_elements("css selector", "table tr")[1:]
    ]
    shot = browser.get_screenshot_as_png()

    # Then the three charts are drawn at their size, each with what it holds, on screen
    assert [f["caption"] for f in figures] == [
        "queue depth over time", "scenarios", "delivery lag of delayed messages",
    ]  # fmt: skip
    for figure in figures:
        _, top, width, height = figure["svg"]
        assert width >= 900, figure
        assert height > 0, figure
        assert top >= 0, figure
    depth, timeline, lags = figures
    assert [s["stroke"] for s in depth["series"]] == ["rgb(31, 119, 180)", "rgb(214, 39, 40)"]
    assert all(s["points"] == 6 and s["box"][2] > 400 for s in depth["series"])  # drawn across the chart
    assert len(timeline["bars"]) == 3
    assert all(b["seen"] and b["box"][2] >= 2 for b in timeline["bars"])
    heights = [b["box"][3] for b in lags["bars"]]
    assert len(heights) == 3
    assert heights[1] == max(heights) > heights[0] > heights[2] > 0
    assert all(b["seen"] for b in lags["bars"])
    # and the alarm table's one row reads as the recording says, as rendered text (entities decoded)
    assert rows == [["3.0 s", "sluice-demo-poison-depth", "OK → ALARM", "visible = 1 & more"]]
    assert shot[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(shot) > 10_000
