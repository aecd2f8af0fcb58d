"""A copy of a project that runs only some of its workloads: for a local stack of just the workloads a
test sends to (a stack runs exactly the workloads its ``workloads.yaml`` lists, docs/workloads.md)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

__all__ = ["WORKLOADS_FILE", "copy_project", "with_workloads"]

WORKLOADS_FILE = "workloads.yaml"
_LIST = re.compile(r"(Fn::ForEach::Workload:\s*\n\s*- Name\s*\n\s*- )(&\w+ )?\[[^\]]*\]")
_SKIPPED = {".git", ".venv", ".aws-sam", "node_modules", "__pycache__"}


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
