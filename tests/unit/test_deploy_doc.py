"""docs/deploy.md and the README's Deploy section run as written: the first deploy's command lines (with
--print-command: nothing touches AWS), the make lines (`make -n`: the script and flags they run), and the
checklist the page shows is the one the script prints for the answers on the page. The operator commands
are parsed by tests/unit/test_docs_cli.py."""

from __future__ import annotations

import io
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from scripts import first_deploy

ROOT = Path(__file__).resolve().parents[2]
PAGES = (ROOT / "docs" / "deploy.md", ROOT / "README.md")
BASH_BLOCK = re.compile(r"^```bash[^\n]*\n(.*?)^```\s*$", re.MULTILINE | re.DOTALL)
SCRIPT = ".venv/bin/python scripts/first_deploy.py"


def lines(starting: str) -> list[tuple[str, str]]:
    found = []
    for page in PAGES:
        for block in BASH_BLOCK.findall(page.read_text(encoding="utf-8")):
            found += [(page.name, line.strip()) for line in block.splitlines() if line.startswith(starting)]
    return found


def print_command(words: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = first_deploy.main(
        words, stdin=io.StringIO(), out=out, err=err, environ={}, session_region=lambda: None
    )
    return code, out.getvalue(), err.getvalue()


def test_the_pages_show_the_first_deploy_and_make_deploy() -> None:
    assert len(lines(SCRIPT)) >= 1
    assert len(lines("make deploy")) >= 4


@pytest.mark.parametrize(("page", "line"), lines(SCRIPT))
def test_a_first_deploy_command_the_docs_show_prints_its_sam_command(page: str, line: str) -> None:
    words = shlex.split(line, comments=True)[2:]
    assert "--print-command" in words, f"{page}: {line!r} would deploy; show it with --print-command"
    code, out, err = print_command(words)
    assert code == 0, f"{page}: {line!r}: {err}"
    assert out.startswith("sam deploy --config-env ")


@pytest.mark.parametrize(("page", "line"), lines("make deploy"))
def test_a_make_deploy_line_the_docs_show_runs_the_first_deploy(page: str, line: str) -> None:
    words = shlex.split(line, comments=True)
    make = ["make", "-n", *words[1:]]  # a dry run: nothing is built or deployed
    done = subprocess.run(make, cwd=ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"{page}: {line!r}: {done.stderr}"
    [script] = [row for row in done.stdout.splitlines() if "scripts/first_deploy.py" in row]
    variables = dict(word.split("=", 1) for word in words[2:] if "=" in word)
    assert f"--env {variables.get('ENV', 'default')}" in script
    assert ("--if-new" in script) == ("ASK" not in variables)
    assert variables.get("DEPLOY_ARGS", "") in script


def test_the_checklist_on_the_page_is_the_one_the_first_deploy_prints_for_its_answers() -> None:
    # Given the page's first deploy command, and the example workloads
    [(_, line)] = lines(SCRIPT)
    args = first_deploy.arguments(shlex.split(line)[2:])
    answers = first_deploy.gather(args, args.region, None)
    plan = first_deploy.Plan(
        args.env, "sluice-dev", args.region, first_deploy.deploy_parameters(answers, args.env)
    )
    # Then the page's checklist is what the script prints after that deploy
    page = (ROOT / "docs" / "deploy.md").read_text(encoding="utf-8")
    shown = page.split("## The checklist", 1)[1].split("```text\n", 1)[1].split("```", 1)[0]
    assert shown.rstrip("\n") == first_deploy.checklist(plan, answers, ["Orders", "Refunds"])
