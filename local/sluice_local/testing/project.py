"""A copy of a project that runs only some of its workloads: for a local stack of just the workloads a
test sends to (a stack runs exactly the workloads its ``workloads.yaml`` lists, docs/workloads.md)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = [
    "EXAMPLES",
    "WORKLOADS_FILE",
    "add_workloads",
    "copy_project",
    "examples_only",
    "with_examples",
    "with_workloads",
]

WORKLOADS_FILE = "workloads.yaml"
_LIST = re.compile(r"(Fn::ForEach::Workload:\s*\n\s*- Name\s*\n\s*- )(&\w+ )?\[[^\]]*\]")
_MAPPING = re.compile(r"^  Workloads:[ \t]*\n((?:(?:    .*|[ \t]*)\n)*)", re.MULTILINE)
# The examples' blocks (examples/orders/, examples/refunds/) as sluice ships them: what a test or a demo
# about the examples' behaviour runs, whatever a team's workloads.yaml lists (docs/workloads.md).
EXAMPLES: dict[str, str] = {
    "Orders": "      Code: examples/orders/\n      KeyPath: order_id\n      ExampleLedger: [Ledger]\n",
    "Refunds": "      Code: examples/refunds/\n      KeyPath: refund_id\n      ExampleLedger: [Ledger]\n",
}
_SKIPPED = {".git", ".venv", ".aws-sam", "node_modules", "__pycache__", ".sluice-local"}


def with_workloads(template: Path, names: Sequence[str], into: Path) -> Path:
    """``into`` made a copy of ``template``'s project whose workloads.yaml lists only ``names`` (each
    one of its blocks); returns the copy's template. Everything else is linked, not copied: the code
    the stack runs is the project's own."""
    source = template.resolve().parent
    text = (source / WORKLOADS_FILE).read_text(encoding="utf-8")
    if not _LIST.search(text):
        raise ValueError(f"{source / WORKLOADS_FILE}: no `Fn::ForEach::Workload: [Name, [...], ...]` list")
    unknown = [name for name in names if not re.search(rf"^    {re.escape(name)}:\s*$", text, re.MULTILINE)]
    if unknown or not names:
        raise ValueError(f"{WORKLOADS_FILE} has no block for {unknown or 'an empty list'}")
    listed = _LIST.sub(lambda m: f"{m[1]}{m[2] or ''}[{', '.join(names)}]", text, count=1)
    return copy_project(template, into, workloads=listed)


def _listed(text: str) -> tuple[list[str], re.Match[str]]:
    """The workloads ``text`` lists, and its Workloads mapping's match (group 1: the blocks)."""
    match, mapping = _LIST.search(text), _MAPPING.search(text)
    if not match or not mapping:
        raise ValueError(f"{WORKLOADS_FILE}: no `Workloads:` mapping or `Fn::ForEach::Workload` list")
    inside = match[0][match[0].rindex("[") + 1 : -1]
    return [name.strip() for name in inside.split(",") if name.strip()], mapping


def _relisted(text: str, names: Sequence[str]) -> str:
    return _LIST.sub(lambda m: f"{m[1]}{m[2] or ''}[{', '.join(names)}]", text, count=1)


def add_workloads(text: str, blocks: Mapping[str, str]) -> str:
    """workloads.yaml's ``text`` with each workload of ``blocks`` (name: its block's lines, indented six
    spaces, as docs/workloads.md writes them) added where it has none: its block at the end of the
    Workloads mapping, its name at the end of the list. One it has already is left as it is."""
    names, mapping = _listed(text)
    new = {name: block for name, block in blocks.items() if name not in names}
    core = mapping[1].rstrip() + "\n" if mapping[1].strip() else ""
    added = "".join(
        f"    {name}:\n{block.rstrip()}\n"
        for name, block in new.items()
        if not re.search(rf"^    {re.escape(name)}:\s*$", core, re.MULTILINE)
    )
    text = text[: mapping.start(1)] + core + added + mapping[1][len(core) :] + text[mapping.end(1) :]
    return _relisted(text, [*names, *new])


def examples_only(text: str, extra: Mapping[str, str] | None = None) -> str:
    """workloads.yaml's ``text`` running the examples alone (:data:`EXAMPLES`) and ``extra``'s workloads:
    its Workloads mapping and list replaced, every other line kept. What a test of the examples'
    behaviour deploys, so that a team's own workloads, added or removed, leave it as sluice ships it."""
    _, mapping = _listed(text)
    blocks = {**EXAMPLES, **(extra or {})}
    body = "".join(f"    {name}:\n{block.rstrip()}\n" for name, block in blocks.items())
    core = mapping[1].rstrip() + "\n" if mapping[1].strip() else ""
    text = text[: mapping.start(1)] + body + mapping[1][len(core) :] + text[mapping.end(1) :]
    return _relisted(text, list(blocks))


def with_examples(template: Path, into: Path, extra: Mapping[str, str] | None = None) -> Path:
    """``into`` made a copy of ``template``'s project running the examples and ``extra``'s workloads
    (:func:`examples_only`); returns the copy's template."""
    text = (template.resolve().parent / WORKLOADS_FILE).read_text(encoding="utf-8")
    return copy_project(template, into, workloads=examples_only(text, extra))


def copy_project(template: Path, into: Path, *, workloads: str | None = None) -> Path:
    """``into`` made a copy of ``template``'s project: the template and its workloads.yaml (``workloads``
    its text, else the project's own) copied, every other entry (code folders, ``stacks/``, ...)
    linked, so the stack runs the project's own code. Returns the copy's template, for a test to edit
    what it copies."""
    source = template.resolve().parent
    into.mkdir(parents=True, exist_ok=True)
    for entry in source.iterdir():
        if entry.name not in _SKIPPED and entry.name not in (template.name, WORKLOADS_FILE):
            (into / entry.name).symlink_to(entry)
    # a copy, not a link: the local runtime reads a template's nested ones beside its real path
    (into / template.name).write_text(template.read_text(encoding="utf-8"), encoding="utf-8")
    text = (source / WORKLOADS_FILE).read_text(encoding="utf-8") if workloads is None else workloads
    (into / WORKLOADS_FILE).write_text(text, encoding="utf-8")
    return into / template.name
