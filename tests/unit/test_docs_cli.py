"""Every operator command the docs show parses: each ``sluice …`` line of a bash block in docs/ and the
README is given to the CLI's own argument parser (nothing runs), so a renamed command or option fails
here, not in an operator's terminal."""

from __future__ import annotations

import re
import shlex

import pytest

from sluice_cli.__main__ import parse
from sluice_local.emulation.cloud import ROOT

BASH_BLOCK = re.compile(r"^```bash[^\n]*\n(.*?)^```\s*$", re.MULTILINE | re.DOTALL)
PAGES = sorted([*(ROOT / "docs").glob("*.md"), ROOT / "README.md"])


def commands() -> list[tuple[str, str]]:
    found = []
    for page in PAGES:
        for block in BASH_BLOCK.findall(page.read_text(encoding="utf-8")):
            for line in block.splitlines():
                words = shlex.split(line, comments=True)
                if words and words[0] in ("sluice", ".venv/bin/sluice"):
                    found.append((page.name, line.strip()))
    return found


def test_the_docs_show_operator_commands() -> None:
    assert len(commands()) >= 20, commands()


@pytest.mark.parametrize(("page", "line"), commands())
def test_a_command_the_docs_show_parses(page: str, line: str) -> None:
    words = shlex.split(line, comments=True)
    args = [w if "$" not in w and "<" not in w else "placeholder" for w in words[1:]]
    try:
        parse(args)
    except SystemExit as exc:
        pytest.fail(f"{page}: {line!r} does not parse (exit {exc.code})")
