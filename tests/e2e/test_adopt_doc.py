"""docs/adopt.md, run as a new team would run it: every fenced block of the page, in order, read from
the page itself so the page cannot drift from sluice.

- ```` ```bash clone ````: the clone; the test copies the project instead (its working tree, so a change not
  yet committed is tested too) and runs the block's other lines (``make venv``) in the copy;
- ```` ```python file=PATH ````: written to PATH in the copy (the team's code);
- ```` ```diff ````: applied with ``git apply`` in the copy (the team's edit);
- ```` ```bash up ````: the first terminal, ``make up``, started in the background and waited for;
- ```` ```bash ```` (``when=LABEL``: once :data:`WAITS`' condition of that label holds, under a deadline):
  the second terminal, one shell whose variables carry from block to block;
- ```` ```text expect ````: every line of it is a line the block before printed (whitespace
  collapsed); ```` ```text expect=up ````: in a line the first terminal printed (waited for);
  ```` ```text example ````: the block before printed a line of each one's shape (any numbers and
  digests, as times, sizes and ids are).

The page's port, 4566, is replaced by a free one, so that runs in parallel never meet.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from sluice_local.emulation.cloud import ROOT
from sluice_local.testing.project import WORKLOADS_FILE, examples_only

DOC = ROOT / "docs" / "adopt.md"
PORT = "4566"
FENCE = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```\s*$", re.MULTILINE | re.DOTALL)
COPIED = ("template.yaml", "workloads.yaml", "samconfig.toml", "Makefile", "pyproject.toml")
# not in a fresh clone (or made for the copy: its .venv)
UNCLONED = (".git", ".venv", ".aws-sam", ".sluice-local", ".pytest_cache", ".mypy_cache", ".ruff_cache")
BASH, GIT = shutil.which("bash") or "/bin/bash", shutil.which("git") or "git"
THREE_DAYS = 3 * 24 * 3600
DEADLINE = 120.0  # each wait's, on a loaded 2-core machine; a deadline, never a sleep


@dataclass(frozen=True)
class Block:
    lang: str
    info: dict[str, str]
    text: str
    line: int

    def __str__(self) -> str:
        return f"docs/adopt.md:{self.line} ```{self.lang}"


def blocks(text: str) -> list[Block]:
    found = []
    for match in FENCE.finditer(text):
        info = {}
        for word in match[2].split():
            key, _, value = word.partition("=")
            info[key] = value
        found.append(Block(match[1], info, match[3], text.count("\n", 0, match.start()) + 1))
    return found


def collapsed(text: str) -> str:
    return " ".join(text.split())


def lines_missing(expected: str, output: str, *, within: bool = False) -> list[str]:
    """The lines of ``expected`` that are no line of ``output`` (``within``: in no line of it), their
    whitespace collapsed (``wc`` pads its numbers to the files' sizes, the CLI's JSON indents)."""
    printed = [collapsed(line) for line in output.splitlines()]
    return [
        line
        for line in expected.splitlines()
        if line.strip()
        and not any(collapsed(line) in seen if within else collapsed(line) == seen for seen in printed)
    ]


def shape(line: str) -> str:
    """A pattern of ``line`` whose numbers and hex digests may be any (a time, an id, a size)."""
    words = [re.escape(word) for word in line.split()]
    pattern = r"\s+".join(words)
    return re.sub(r"[0-9a-f]{32}|\d+", lambda m: r"[0-9a-f]{32}" if len(m[0]) == 32 else r"\d+", pattern)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def project_copy(into: Path) -> Path:
    """What ``git clone`` gives the team, made of this working tree: the files the steps change are
    copies, the local runtime too (it finds the project by its own path), the rest links; the
    virtualenv is this one, installed (``make venv`` has nothing to do). Its workloads.yaml runs the
    examples alone, as sluice ships it, and the folders the page writes are not there: a fork's own
    workloads (docs/workloads.md) change neither what the page's diff applies to nor the line counts
    it shows, and the page never writes into a fork's own folders."""
    into.mkdir()
    for name in COPIED:
        shutil.copy2(ROOT / name, into / name)
    shipped = examples_only((ROOT / WORKLOADS_FILE).read_text(encoding="utf-8"))
    (into / WORKLOADS_FILE).write_text(shipped, encoding="utf-8")
    shutil.copytree(ROOT / "local", into / "local", ignore=shutil.ignore_patterns("__pycache__"))
    written = {
        Path(b.info["file"]).parts[0] for b in blocks(DOC.read_text(encoding="utf-8")) if "file" in b.info
    }
    for entry in ROOT.iterdir():
        if entry.name not in (*COPIED, *UNCLONED, "local", *written):
            (into / entry.name).symlink_to(entry)
    venv = into / ".venv"
    venv.mkdir()
    for entry in Path(sys.prefix).iterdir():
        if entry.name != ".installed":
            (venv / entry.name).symlink_to(entry)
    (venv / ".installed").touch()  # newer than pyproject.toml and the layer's requirements
    return into


@dataclass
class Terminals:
    """The page's two terminals: ``make up`` in the first, the team's commands in the second."""

    project: Path
    env: dict[str, str]
    state: Path
    up: subprocess.Popen[bytes] | None = None
    up_output: Path | None = None

    def second(self, script: str, where: Block) -> str:
        """Run ``script`` in the second terminal: what it printed; its variables kept for the next."""
        names = sorted(
            {
                name
                for line in script.splitlines()
                if re.match(r"(export\s+)?[A-Z][A-Z0-9_]*=", line)
                for name in re.findall(r"(?:^|\s)([A-Z][A-Z0-9_]*)=", line)
            }
        )
        keep = f"\ndeclare -p {' '.join(names)} >> {shlex.quote(str(self.state))}" if names else ""
        run = subprocess.run(
            [BASH, "-c", f"set -euo pipefail\nsource {shlex.quote(str(self.state))}\n{script}{keep}"],
            cwd=self.project,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=DEADLINE,
            check=False,
        )
        output = run.stdout + run.stderr
        assert run.returncode == 0, f"{where} failed with {run.returncode}:\n{output}\n{self.up_tail()}"
        print(f"{time.strftime('%H:%M:%S')} {where} printed:\n{output}")
        return output

    def first(self, script: str) -> None:
        self.up_output = self.project / "up.out"
        with self.up_output.open("wb") as sink:
            self.up = subprocess.Popen(
                [BASH, "-c", script],
                cwd=self.project,
                env=self.env,
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: make and the runtime stop together
            )
        self.wait(lambda: " is up at " in self.up_text(), "make up: the stack is up", timeout=240)

    def up_text(self) -> str:
        if self.up_output is None:
            return ""
        return self.up_output.read_text(encoding="utf-8", errors="replace")

    def printed_by_up(self, text: str) -> Callable[[], bool]:
        return lambda: not lines_missing(text, self.up_text(), within=True)

    def up_tail(self) -> str:
        return f"--- make up printed (last 3000 characters):\n{self.up_text()[-3000:]}"

    def log(self) -> list[dict[str, object]]:
        path = self.project / "functions.log"
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines() if path.exists() else []
        return [json.loads(line) for line in lines if line.startswith('{"level"')]

    def logged(self, message: str, **keys: str) -> bool:
        return any(
            line.get("message") == message and all(line.get(k) == v for k, v in keys.items())
            for line in self.log()
        )

    def wait(self, condition: Callable[[], bool], what: str, timeout: float = DEADLINE) -> None:
        assert self.up is not None, f"{what}: waited for before `make up` was started"
        deadline = time.monotonic() + timeout
        while not condition():
            assert time.monotonic() < deadline, f"not within {timeout} s: {what}\n{self.up_tail()}"
            try:  # between looks at the condition: watch `make up`, which must not exit meanwhile
                code = self.up.wait(timeout=0.2)
            except subprocess.TimeoutExpired:
                continue
            raise AssertionError(f"make up exited with {code} waiting for {what}\n{self.up_tail()}")

    def stop(self) -> int | None:
        if self.up is None or self.up.poll() is not None:
            return None if self.up is None else self.up.returncode
        os.killpg(self.up.pid, signal.SIGTERM)  # Ctrl-C in the first terminal, as the page says
        try:
            return self.up.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.up.pid, signal.SIGKILL)
            self.up.wait()
            raise AssertionError(f"make up did not stop within 60 s of SIGTERM\n{self.up_tail()}") from None


def waits(t: Terminals) -> dict[str, tuple[str, Callable[[], bool]]]:
    """What the page says has happened before a ``when=LABEL`` block (each waited for, under a deadline)."""
    up = t.up_text
    return {
        "dispatched": ("s-1 dispatched", lambda: t.logged("shipment dispatched", shipment_id="s-1")),
        "refused": (
            "the Invoices consumer refused",
            lambda: "Invoices-consumer failed (ConfigurationError)" in up(),
        ),
        "booked": ("i-1 booked", lambda: t.logged("invoice booked", invoice_id="i-1")),
        "parked": (
            "s-1's delivery check parked",
            lambda: any(line.get("message") == "delay batch done" and line.get("parked") for line in t.log()),
        ),
        "checked": ("s-2's delivery checked", lambda: t.logged("delivery checked", shipment_id="s-2")),
        "poisoned": ("s-3 isolated", lambda: t.logged("record isolated to the poison queue")),
        "reloaded": ("processor.py reloaded", lambda: "processor.py changed" in up()),
        "replayed": ("s-3 dispatched", lambda: t.logged("shipment dispatched", shipment_id="s-3")),
    }


def parked_three_days_out(printed: str) -> None:
    """The object under delayed/<bucket>/ and the RUNNING execution bucket-<bucket> the page shows: the
    bucket opens three days after s-1 was dispatched, a few waits ago (well within the hour)."""
    objects = {int(b) for b in re.findall(r"delayed/(\d+)/", printed)}
    running = {int(b) for b in re.findall(r"bucket-(\d+)\s+RUNNING", printed)}
    due = time.time() + THREE_DAYS
    assert len(objects) == 1, printed
    assert objects == running, printed
    assert due - 3600 < objects.pop() <= due, printed


@pytest.fixture
def terminals(tmp_path: Path) -> Iterator[Terminals]:
    project = project_copy(tmp_path / "sluice")
    # a team's shell: nothing of the test session's AWS, sluice, moto or Powertools settings
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "SLUICE_", "MOTO_", "POWERTOOLS_"))
    }
    env.update(
        PYTHONPATH=os.pathsep.join(str(project / d) for d in ("local", "layers/common", "cli")),
        AWS_CONFIG_FILE=str(tmp_path / "aws-config"),  # nobody's profile: only what the page exports
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "aws-credentials"),
        AWS_PAGER="",
    )
    state = tmp_path / "second-terminal.sh"
    state.touch()
    t = Terminals(project, env, state)
    try:
        yield t
    finally:
        t.stop()


@pytest.mark.skipif(shutil.which("aws") is None and os.environ.get("CI") != "true", reason="no AWS CLI")
def test_the_adoption_walkthrough_runs_as_written(terminals: Terminals) -> None:
    assert shutil.which("aws"), "the AWS CLI is missing: .ci/run installs Debian's awscli"
    started = time.monotonic()
    port = str(free_port())
    page = blocks(DOC.read_text(encoding="utf-8").replace(PORT, port))
    labels = waits(terminals)
    used = {b.info["when"] for b in page if "when" in b.info}
    assert used == set(labels), f"labels on the page {sorted(used)}, known to the test {sorted(labels)}"
    last = ""
    for block in page:
        if block.lang == "bash" and "clone" in block.info:
            first, *rest = block.text.splitlines()
            assert re.fullmatch(r"git clone \S+ && cd sluice", first), f"{block}: {first}"
            last = terminals.second("\n".join(rest), block)
        elif block.lang == "python" and "file" in block.info:
            path = terminals.project / block.info["file"]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(block.text, encoding="utf-8")
        elif block.lang == "diff":
            patch = terminals.project.parent / f"edit-{block.line}.diff"
            patch.write_text(block.text, encoding="utf-8")
            subprocess.run([GIT, "apply", str(patch)], cwd=terminals.project, check=True)
        elif block.lang == "bash" and "up" in block.info:
            terminals.first(block.text)
        elif block.lang == "bash":
            if "when" in block.info:
                what, condition = labels[block.info["when"]]
                terminals.wait(condition, f"{block}: {what}")
            last = terminals.second(block.text, block)
            if block.info.get("when") == "parked":
                parked_three_days_out(last)
        elif block.lang == "text" and block.info.get("expect") == "up":
            terminals.wait(terminals.printed_by_up(block.text), f"{block}: make up printing it")
        elif block.lang == "text" and "example" in block.info:
            missing = [line for line in block.text.splitlines() if not re.search(shape(line), last)]
            assert not missing, f"{block}: nothing shaped as {missing}; the block before printed:\n{last}"
        elif block.lang == "text" and "expect" in block.info:
            missing = lines_missing(block.text, last)
            assert not missing, f"{block}: not printed {missing}; the block before printed:\n{last}"
        else:
            raise AssertionError(f"{block}: a block the test does not know how to run")
    # Ctrl-C: the stack stops cleanly
    terminals.stop()
    assert terminals.up_text().rstrip().endswith("stopped"), terminals.up_tail()
    print(f"docs/adopt.md ran in {time.monotonic() - started:.1f} s")
