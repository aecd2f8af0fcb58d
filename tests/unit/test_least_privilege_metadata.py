"""The least-privilege justifications in the templates name statements that exist (no stale reason)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sluice_local.emulation.iam import report

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = [ROOT / "template.yaml", ROOT / "workloads.yaml", *sorted((ROOT / "stacks").glob("*.yaml"))]
SAM_ATTACHED = {"AWSXrayWriteOnlyAccess"}
"""Managed policies SAM attaches to a state machine's role (Tracing: Enabled), named by policy."""


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda p: p.name)
def test_every_justified_statement_is_one_of_the_template(template: Path) -> None:
    reasons = report.justifications([template])
    sids = set(re.findall(r"Sid: (\w+)", template.read_text()))
    named = {key.split(" ", 1)[0] for key in reasons}  # "<Sid>" or "<Sid> <action>"
    stale = sorted(named - sids - SAM_ATTACHED)
    actions = {key: key.split(" ", 1)[1] for key in reasons if " " in key}
    for key, action in actions.items():
        sid = key.split(" ", 1)[0]
        granted = [
            m.group(1)
            for m in re.finditer(rf"Sid: {sid}\b.*?Action: \[([^\]]*)\]", template.read_text(), re.S)
        ]
        assert any(action in listed for listed in granted), f"{template.name}: no {sid} grants {action}"
    assert not stale, f"{template.name}: Metadata.SluiceLeastPrivilege names no statement of it: {stale}"
    assert all(len(why) > 40 for why in reasons.values()), "each reason says what needs the statement"


def test_the_justifications_of_every_template_are_read() -> None:
    reasons = report.justifications(TEMPLATES)
    assert {"WriteOwnLogs", "WriteTraces", "AccountAdministers", "ReportStrandedBuckets"} <= set(reasons)
