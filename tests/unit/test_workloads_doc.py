"""docs/workloads.md's "Adding a workload" diff, applied to workloads.yaml as sluice ships it (the examples'
blocks, whatever a team's fork lists: :func:`shipped`): the new workload gets
every resource a workload has, with its own settings, and nothing else changes; the cap on workloads
the docs state is CloudFormation's quotas divided by what one workload declares."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from samtranslator.yaml_helper import yaml_parse

from sluice_local.emulation.language_extensions import expand, nested_sources
from sluice_local.emulation.template import translate
from sluice_local.testing.project import copy_project, examples_only

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "workloads.md"
TEMPLATE = ROOT / "template.yaml"
WORKLOADS = ROOT / "workloads.yaml"


def shipped() -> str:
    """workloads.yaml running the examples alone, as sluice ships it (a fork's own workloads left out)."""
    return examples_only(WORKLOADS.read_text(encoding="utf-8"))


def documented_diff() -> list[str]:
    [block] = re.findall(r"```diff\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    return block.rstrip("\n").split("\n")


def apply(diff: list[str], text: str) -> str:
    """``text`` with the unified-diff-like ``diff`` applied: context lines are found in order (their
    indentation kept), ``-`` lines must come next and go, ``+`` lines go in where they stand."""
    lines, at = text.split("\n"), 0
    for line in diff:
        if line.startswith("@@"):
            continue
        mark, content = line[:1], line[1:]
        if mark == "+":
            lines.insert(at, content)
            at += 1
            continue
        found = next((i for i in range(at, len(lines)) if lines[i] == content), None)
        assert found is not None, f"the documented diff's line is not in workloads.yaml: {content!r}"
        if mark == "-":
            del lines[found]
            at = found
        else:
            at = found + 1
    return "\n".join(lines)


def passed() -> dict[str, str]:
    """What template.yaml passes workloads.yaml with its defaults (its timeout, window, ...)."""
    [values] = [known for _, path, known in nested_sources(TEMPLATE, {}) if path == WORKLOADS]
    return values


def resources(text: str) -> dict[str, Any]:
    return dict(expand(yaml_parse(text), passed())["Resources"])


def test_given_the_documented_diff_then_it_adds_a_workload_with_everything_one_has_and_its_settings() -> None:
    before = shipped()
    diff = documented_diff()
    # When the diff in the docs is applied to the template (config only: the folder is the code)
    after = apply(diff, before)
    old, new = resources(before), resources(after)
    # Then the new workload has a resource for each of a workload's, and nothing else changed
    added = sorted(set(new) - set(old))
    example_only = {
        "OrdersLedgerPolicy"
    }  # the example ledger's writer: its block asks for it, a team's does not
    every = sorted(lid.replace("Orders", "Shipments", 1) for lid in old if lid.startswith("Orders"))
    assert added == [lid for lid in every if lid.replace("Shipments", "Orders", 1) not in example_only]
    assert "ShipmentsLedgerPolicy" not in new
    writer = old["OrdersLedgerPolicy"]["Properties"]
    assert writer["Roles"] == [{"Ref": "OrdersConsumerRole"}]
    [grant] = writer["PolicyDocument"]["Statement"]
    assert (grant["Action"], grant["Resource"]) == (
        ["dynamodb:PutItem"],
        {"Ref": "LedgerTableArn"},  # the root passes LedgerTable.Arn
    )
    assert all(new[lid] == old[lid] for lid in old)
    # ... with its own folder and settings, and the stack-wide ones where it says nothing
    consumer = new["ShipmentsConsumerFunction"]["Properties"]
    assert consumer["CodeUri"] == "workloads/shipments/"
    assert (consumer["Timeout"], consumer["MemorySize"]) == ("60", 512)
    variables = consumer["Environment"]["Variables"]
    assert variables["SLUICE_IDEMPOTENCY_KEY_JMESPATH"] == "shipment_id"
    assert variables["SLUICE_VISIBILITY_TIMEOUT_SECONDS"] == 360  # 6 x 60 s, no batching window
    assert new["ShipmentsQueue"]["Properties"]["VisibilityTimeout"] == 360
    assert new["ShipmentsQueueSource"]["Properties"]["BatchSize"] == {
        "Ref": "BatchSize"
    }  # the stack-wide one
    # ... and the change is as small as the docs say: the lines of the diff, nothing more
    changed = [line for line in diff if line[:1] in "+-" and not line.startswith("@@")]
    assert len(after.split("\n")) - len(before.split("\n")) == sum(1 if c[0] == "+" else -1 for c in changed)
    assert len(changed) <= 8


def declared(tmp: Path, names: str) -> tuple[int, int]:
    """(resources, outputs) the workloads' nested stack declares with the workloads ``names`` (a YAML
    list), after SAM's transform, every RedriveMode's: CloudFormation counts a conditional one too."""
    copy_project(ROOT / "template.yaml", tmp)
    text = shipped()
    assert "&workloads [" in text, "workloads.yaml no longer lists its workloads the expected way"
    listed = re.sub(r"&workloads \[[^\]]*\]", f"&workloads {names}", text, count=1)
    (tmp / "workloads.yaml").write_text(listed, encoding="utf-8")
    resources: set[str] = set()
    outputs: set[str] = set()
    for mode in ("lambda", "stepfunctions"):
        translated, _ = translate(tmp / "template.yaml", {"RedriveMode": mode})
        ours = [*translated.template["Resources"], *translated.emulated]
        resources |= {lid for lid in ours if lid.startswith(("Orders", "Refunds"))}
        outputs |= {key for key in translated.template["Outputs"] if key.startswith("WorkloadStack.")}
    return len(resources), len(outputs)


def test_given_cloudformations_quotas_then_the_docs_cap_on_workloads_is_the_templates(tmp_path: Path) -> None:
    # CloudFormation allows 500 resources and 200 outputs a template (a conditional one counts too);
    # the workloads' nested stack holds nothing else
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    one, two = declared(tmp_path / "one", "[Orders]"), declared(tmp_path / "two", "[Orders, Refunds]")
    resources, outputs = two[0] - one[0], two[1] - one[1]
    shared_outputs = one[1] - outputs
    cap = min(500 // resources, (200 - shared_outputs) // outputs)
    said = re.search(
        r"\*\*About (\w+) workloads a stack\*\*: each declares (\d+) resources and (\d+) outputs",
        DOC.read_text(),
    )
    assert said is not None
    words = {"eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12}
    assert (words[said.group(1)], int(said.group(2)), int(said.group(3))) == (cap, resources, outputs)


def test_given_the_settings_table_then_it_names_every_key_workloads_yaml_reads_and_no_other() -> None:
    # Given the keys workloads.yaml looks up in a workload's block, and the docs' table of them
    read = set(re.findall(r"FindInMap \[Workloads, !Ref Name, (\w+)", WORKLOADS.read_text(encoding="utf-8")))
    doc = DOC.read_text(encoding="utf-8")
    start = doc.index("| key | default | meaning |")
    table = set(re.findall(r"^\| `(\w+)` \|", doc[start : doc.index("\n\n", start)], re.MULTILINE))
    # Then they are the same, but for the examples' ledger writer (its own paragraph, under Limits)
    assert read - {"ExampleLedger"} == table
    assert "`ExampleLedger: [Ledger]`" in doc
