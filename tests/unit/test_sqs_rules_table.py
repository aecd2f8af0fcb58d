"""The table of SQS's documented rules (sluice_local.emulation.sqs_rules_table) holds both sides to
AWS's word.

For every rule, cases are generated from the table's own limit: at it, just inside and just outside.
The layer (``sluice.sqs.check_message`` / ``check_attribute``, its batcher and its delay clamp) and
the local runtime's checker (``sluice_local.emulation.sqs_checker``) must each give the table's verdict. The
checker never reads the layer (an ast check below), so a misreading in either shows up here as a
disagreement; the mutation tests show a deliberately wrong rule on each side is reported.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import sluice.sqs
import sluice.tracing
from sluice import batchsend
from sluice.batchsend import Outgoing, chunks, send_batch
from sluice.groups import MalformedGroupId, check_group_id
from sluice_local.emulation import sqs_checker
from sluice_local.emulation.sqs_rules_table import RULE, RULES
from tests.unit.sqs_rule_cases import CASES, GENERATORS, Case, number

ROOT = Path(__file__).resolve().parents[2]
NEVER_SENT = "never sent as asked"
"""The layer's verdict where it has no check but never puts the request on the wire as asked."""


# --- each side's verdict --------------------------------------------------------------------------

Verdict = tuple[str, str | None] | None
"""None when accepted, else (error code, the rule the side names, or None when it names none)."""


def emulation(case: Case) -> Verdict:
    if "entries" in case.request:
        violation = sqs_checker.check_batch(case.request["entries"])
    else:
        violation = sqs_checker.check_entry(**case.request)
    return None if violation is None else (violation.code, violation.rule)


class Recorder:
    """An SQS client that accepts every entry and keeps each SendMessageBatch call's entries."""

    def __init__(self) -> None:
        self.calls: list[list[dict[str, Any]]] = []

    def send_message_batch(self, QueueUrl: str, Entries: list[dict[str, Any]]) -> dict[str, Any]:  # noqa: N803
        self.calls.append(Entries)
        return {"Successful": [{"Id": e["Id"]} for e in Entries], "Failed": []}


def sent_entries(messages: list[Outgoing]) -> list[list[dict[str, Any]]]:
    sqs = Recorder()
    assert send_batch(sqs, "https://sqs.invalid/1/q", messages) == []  # type: ignore[arg-type]
    return sqs.calls


LAYER_BATCHES = {"batch.entries.min", "batch.entries.max", "batch.max-bytes"}
"""Rules the layer meets by how it cuts messages into calls (``sluice.batchsend.chunks``)."""
LAYER_TRACES = {"message.system-attributes", "message.system-attributes.trace-header"}
"""Rules the layer meets by sending only a trace header :func:`sluice.tracing.valid_xray_header` takes,
as its ``AWSTraceHeader`` (:func:`sluice.tracing.system_attributes`), and dropping any other."""
NOT_THE_LAYERS = {
    "batch.id.max-length": "the layer names a call's entries itself (0-9)",
    "batch.id.characters": "the layer names a call's entries itself (0-9)",
    "batch.id.distinct": "the layer names a call's entries itself (0-9)",
    "fifo.delay-seconds": "the layer's one FIFO send: the consumer's dead-lettering (below)",
    "fifo.group-id.required": "the layer's one FIFO send: the consumer's dead-lettering (below)",
    "fifo.deduplication-id.required": "the layer's one FIFO send: the consumer's dead-lettering (below)",
    "fifo.ids.max-length": "the layer's one FIFO send: the consumer's dead-lettering (below)",
    "fifo.ids.characters": "the layer's one FIFO send: the consumer's dead-lettering (below)",
}


def layer(case: Case) -> Verdict:
    request = case.request
    if case.rule in LAYER_BATCHES:  # sent as asked when the batcher makes it exactly one call
        messages = [Outgoing(e["Id"], e["MessageBody"]) for e in request["entries"]]
        return None if len(chunks(messages)) == 1 else (NEVER_SENT, None)
    if case.rule == "message.delay-seconds":  # sent as asked when the call carries the delay asked for
        asked = request["delay_seconds"]
        [[sent]] = sent_entries([Outgoing("k", request["body"], delay_seconds=asked)])
        return None if sent.get("DelaySeconds", 0) == asked else (NEVER_SENT, None)
    if case.rule in LAYER_TRACES:  # sent as asked when the call carries the system attribute asked for
        asked = request["system_attributes"]
        header = next(iter(asked.values())).get("StringValue")
        [[sent]] = sent_entries([Outgoing("k", request["body"], trace=header)])
        return None if sent.get("MessageSystemAttributes") == asked else (NEVER_SENT, None)
    if RULE[case.rule].scope == "attribute":
        [(name, value)] = request["attributes"].items()
        refusal = sluice.sqs.check_attribute(name, value)
    else:
        refusal = sluice.sqs.check_message(request["body"], request.get("attributes"))
    # the layer names its rules itself (it never reads the table), with the table's ids
    return None if refusal is None else (refusal.code, refusal.rule)


def disagreements(side: str, verdict: Callable[[Case], Verdict], cases: list[Case]) -> list[str]:
    """Every case where ``side`` does not give the table's verdict: its code, and the rule where the side
    names one (both sides do, but for the layer's "never sent as asked"), so a refusal for the wrong
    reason with the right code is a disagreement too."""
    out = []
    for case in cases:
        expected = RULE[case.rule].code if case.refused else None
        got = verdict(case)
        agrees = (
            (got is None and expected is None)
            or (got is not None and expected is not None and got[0] in (expected, NEVER_SENT))
        ) and (got is None or got[1] in (None, case.rule))
        if not agrees:
            says = "accepted" if got is None else f"{got[0]} ({got[1] or 'no rule named'})"
            out.append(
                f"{side}: {case.rule} / {case.label}: the table says {expected or 'accepted'}, {side} {says}"
            )
    return out


def layer_cases(rule_ids: set[str] | None = None) -> list[Case]:
    return [c for c in CASES if c.rule not in NOT_THE_LAYERS and (rule_ids is None or c.rule in rule_ids)]


# --- the table itself ---------------------------------------------------------------------------


def test_every_rule_has_cases_on_both_sides_of_its_limit():
    assert set(GENERATORS) == set(RULE), "a rule without cases (or cases without a rule)"
    for rule in RULES:
        verdicts = {c.refused for c in CASES if c.rule == rule.id}
        assert verdicts == {True, False}, rule.id


def test_every_rule_names_its_source_and_the_documented_number():
    for rule in RULES:
        assert rule.source.startswith("https://docs.aws.amazon.com/"), rule.id
        assert rule.code, rule.id
        assert rule.says, rule.id
        if isinstance(rule.limit, int) and rule.limit > 1:
            assert f"{rule.limit:,}" in rule.says or str(rule.limit) in rule.says, rule.id


def test_the_table_says_sqs_takes_a_message_of_1_mib():
    # Since August 2025 SQS takes up to 1 MiB (it was 256 KiB); the layer's limits say so too.
    assert RULE["message.max-bytes"].limit == RULE["batch.max-bytes"].limit == 1_048_576


RUNTIME_JUDGES = ("sqs_rules_table.py", "sqs_checker.py", "moto_adapter/sqs_rules.py")
"""The local runtime's side: the table, its checker, and the moto adapter that applies them to moto."""


def layer_imports(path: Path) -> tuple[list[str], list[str]]:
    """(every module ``path`` imports anywhere in its code, those of them that are the layer's)."""
    imported = [
        name
        for node in ast.walk(ast.parse(path.read_text()))
        for name in (
            [a.name for a in node.names]
            if isinstance(node, ast.Import)
            else [node.module or ""]
            if isinstance(node, ast.ImportFrom)
            else []
        )
    ]
    return imported, [n for n in imported if n == "sluice" or n.startswith("sluice.")]


@pytest.mark.parametrize("module", RUNTIME_JUDGES)
def test_the_runtime_judges_without_the_layer(module):
    # Given one module of the runtime's side, when its imports are read, then none is the layer's
    imported, layers = layer_imports(ROOT / "local" / "sluice_local" / "emulation" / module)
    assert imported, module
    assert layers == [], module


def test_the_layer_check_finds_a_deferred_import_of_the_layer(tmp_path):
    # Given an adapter that reads the layer's limits inside a function, and once at the top
    adapter = tmp_path / "sqs_rules.py"
    adapter.write_text(
        "import sluice_local.emulation\nimport sluice\n\n"
        "def check():\n    from sluice.limits import MAX_MESSAGE_BYTES\n    return MAX_MESSAGE_BYTES\n"
    )
    # When its imports are read, Then both are the layer's (sluice_local is not)
    assert layer_imports(adapter)[1] == ["sluice", "sluice.limits"]


# --- both sides against the table ------------------------------------------------------------------


@pytest.mark.parametrize("rule", [r.id for r in RULES])
def test_the_local_runtime_gives_the_tables_verdict(rule):
    cases = [c for c in CASES if c.rule == rule]
    assert disagreements("the local runtime", emulation, cases) == []


@pytest.mark.parametrize("rule", [r.id for r in RULES if r.id not in NOT_THE_LAYERS])
def test_the_layer_gives_the_tables_verdict(rule):
    cases = layer_cases({rule})
    assert disagreements("the layer", layer, cases) == []


def test_the_layer_names_a_full_calls_entries_as_the_table_allows():
    # Given more messages than one call takes, when the layer sends them, then each call passes
    calls = sent_entries([Outgoing(str(i), f"m{i}") for i in range(number(RULE["batch.entries.max"]) + 3)])
    assert len(calls) == 2
    assert [sqs_checker.check_batch(call) for call in calls] == [None, None]


def test_the_layer_sends_a_group_id_only_as_the_table_allows_and_a_deduplication_id_in_one_place():
    # A standard queue's MessageGroupId (a fair queue's tenant) is sent on every hop, only once
    # sluice.groups took it: it must give the table's verdict on every group-id case
    group_cases = [
        c
        for c in CASES
        if c.rule in ("fifo.ids.max-length", "fifo.ids.characters") and c.request.get("group_id") != "g"
    ]
    assert len(group_cases) >= 4
    for case in group_cases:
        try:
            check_group_id(case.request["group_id"])
        except MalformedGroupId:
            refused = True
        else:
            refused = False
        assert refused == case.refused, case
    # the one deduplication id of this layer: a FIFO workload's consumer dead-lettering a record into its
    # FIFO DLQ, its message id (a UUID: 36 characters of the allowed set); never with DelaySeconds
    layer_root = ROOT / "layers" / "common" / "sluice"
    setting = {
        p.relative_to(layer_root).as_posix()
        for p in layer_root.rglob("*.py")
        if re.search(r'"MessageDeduplicationId"\]? ?[:=]|MessageDeduplicationId=', p.read_text())
    }
    assert setting == {"consumer/fifo.py"}


# --- a wrong rule on either side is caught ------------------------------------------------------------


def test_given_a_layer_that_takes_an_11th_attribute_then_the_table_reports_it(monkeypatch):
    monkeypatch.setattr(sluice.sqs, "MAX_ATTRIBUTES", 11)
    found = disagreements("the layer", layer, layer_cases())
    assert found == [
        "the layer: attributes.max-count / 11 attributes: the table says InvalidParameterValue, "
        "the layer accepted"
    ]


def test_given_a_layer_that_takes_39_digits_then_the_table_reports_it(monkeypatch):
    monkeypatch.setattr(sluice.sqs, "MAX_NUMBER_DIGITS", 39)
    found = disagreements("the layer", layer, layer_cases())
    assert found
    assert all(line.startswith("the layer: attribute.number.precision / ") for line in found)


def test_given_a_layer_that_batches_11_entries_then_the_table_reports_it(monkeypatch):
    monkeypatch.setattr(batchsend, "MAX_BATCH_ENTRIES", 11)
    found = disagreements("the layer", layer, layer_cases())
    assert found == [
        "the layer: batch.entries.max / 11 entries: the table says TooManyEntriesInBatchRequest, "
        "the layer accepted"
    ]


def test_given_a_runtime_that_takes_an_11th_attribute_then_the_table_reports_it(monkeypatch):
    monkeypatch.setattr(sqs_checker, "MAX_ATTRIBUTES", 11)
    found = disagreements("the local runtime", emulation, CASES)
    assert found == [
        "the local runtime: attributes.max-count / 11 attributes: the table says InvalidParameterValue, "
        "the local runtime accepted"
    ]


def test_given_a_runtime_that_forgets_the_amazon_prefix_then_the_table_reports_it(monkeypatch):
    monkeypatch.setattr(sqs_checker, "RESERVED_PREFIXES", ("aws.",))
    found = disagreements("the local runtime", emulation, CASES)
    assert found
    assert [line.split(":")[1] for line in found] == [
        f" attribute.name.reserved-prefixes / {prefix}" for prefix in ("Amazon.", "AMAZON.", "amazon.")
    ]


def test_given_a_runtime_that_names_the_wrong_rule_then_the_table_reports_it(monkeypatch):
    # Given a checker whose attribute-count refusal names the size rule (the right code, wrong rule)
    right = sqs_checker._violation
    monkeypatch.setattr(
        sqs_checker,
        "_violation",
        lambda rule, message: right("message.max-bytes" if rule == "attributes.max-count" else rule, message),
    )
    found = disagreements("the local runtime", emulation, CASES)
    assert found == [
        "the local runtime: attributes.max-count / 11 attributes: the table says InvalidParameterValue, "
        "the local runtime InvalidParameterValue (message.max-bytes)"
    ]


def test_every_rule_the_layer_names_is_the_tables():
    # Given every case, when the layer refuses one, then the rule it names is one the table knows
    named = {v[1] for v in map(layer, layer_cases()) if v is not None and v[0] != NEVER_SENT}
    assert named
    assert named <= set(RULE)


def test_given_a_layer_that_refuses_for_the_wrong_rule_then_the_table_reports_it(monkeypatch):
    # Given a layer whose reserved-prefix refusal is its character rule (the right code, wrong rule)
    right = sluice.sqs.check_attribute

    def wrong(name: object, value: object) -> sluice.sqs.Refusal | None:
        refusal = right(name, value)
        if refusal is not None and refusal.rule == "attribute.name.reserved-prefixes":
            return sluice.sqs.Refusal("attribute.name.characters", refusal.code, refusal.message)
        return refusal

    monkeypatch.setattr(sluice.sqs, "check_attribute", wrong)
    # When the layer is held to the table, then each such case is reported with the rule it named
    found = disagreements("the layer", layer, layer_cases())
    assert found == [
        f"the layer: attribute.name.reserved-prefixes / {prefix}: the table says InvalidParameterValue, "
        "the layer InvalidParameterValue (attribute.name.characters)"
        for prefix in ("AWS.", "AWS.", "aws.", "Amazon.", "AMAZON.", "amazon.")
    ]


def test_given_a_runtime_that_takes_a_short_trace_id_then_the_table_reports_it(monkeypatch):
    # Given a checker that takes 23 or 24 hex digits for the trace's identifier
    monkeypatch.setattr(sqs_checker, "_TRACE_ROOT", re.compile("Root=1-[0-9a-fA-F]{8}-[0-9a-fA-F]{23,24}"))
    found = disagreements("the local runtime", emulation, CASES)
    assert found == [
        "the local runtime: message.system-attributes.trace-header / 23 digits of identifier: "
        "the table says InvalidParameterValue, the local runtime accepted"
    ]


def test_given_a_layer_that_sends_a_version_2_trace_header_then_the_table_reports_it(monkeypatch):
    # Given a layer whose trace header check takes any version
    monkeypatch.setattr(
        sluice.tracing, "_XRAY_ROOT", re.compile(r"(?:^|;)Root=[0-9]-([0-9a-f]{8})-([0-9a-f]{24})(?:;|$)")
    )
    found = disagreements("the layer", layer, layer_cases())
    assert found == [
        "the layer: message.system-attributes.trace-header / version 2: "
        "the table says InvalidParameterValue, the layer accepted"
    ]
