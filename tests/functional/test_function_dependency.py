"""A function with a dependency of its own builds with a plain ``sam build``: a requirements.txt in its
folder is all it takes (functions/Makefile installs it; README.md, "Adding a dependency to a function").

The build runs on a throwaway copy of a minimal template (one function with a requirements.txt, one
without) using the repository's own functions/Makefile, with a PATH that has no virtualenv on it and a
``python3.13`` that fails when run: SAM CLI's own Python builder would need that one (it checks for a
``python3.13`` on PATH before pip runs), the Makefile needs any ``python3`` with pip.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.build_output import build_warnings, elf_machine

ROOT = Path(__file__).resolve().parents[2]
SAM = Path(sys.executable).with_name("sam")

TEMPLATE = """\
AWSTemplateFormatVersion: "2010-09-09"
Transform: AWS::Serverless-2016-10-31
Globals:
  Function:
    Runtime: python3.13
    Architectures: [arm64]
    Handler: app.handler
Resources:
  WithDependencyFunction:
    Type: AWS::Serverless::Function
    Metadata:
      BuildMethod: makefile
      ContextPath: functions
    Properties:
      CodeUri: functions/with_dependency/
  PlainFunction:
    Type: AWS::Serverless::Function
    Metadata:
      BuildMethod: makefile
      ContextPath: functions
    Properties:
      CodeUri: functions/plain/
"""
APP = "def handler(event, context):\n    return event\n"


def _project(root: Path) -> None:
    (root / "template.yaml").write_text(TEMPLATE, encoding="utf-8")
    (root / "layers" / "common").mkdir(parents=True)
    shutil.copy2(ROOT / "layers" / "common" / "requirements.txt", root / "layers" / "common")
    (root / "functions").mkdir()
    shutil.copy2(ROOT / "functions" / "Makefile", root / "functions")
    for name in ("with_dependency", "plain"):
        (root / "functions" / name).mkdir()
        (root / "functions" / name / "app.py").write_text(APP, encoding="utf-8")
    # a compiled package, unpinned: the layer's pin (wrapt==2.5.2) chooses the version
    (root / "functions" / "with_dependency" / "requirements.txt").write_text("wrapt\n", encoding="utf-8")


def _path_without_the_venv(shims: Path) -> str:
    """PATH with no virtualenv's bin on it, behind shims: ``python3`` (this interpreter, which has pip)
    and a ``python3.13`` that fails."""
    shims.mkdir()
    for name, body in (("python3", f'exec "{sys.executable}" "$@"'), ("python3.13", "exit 1")):
        shim = shims / name
        shim.write_text(f"#!/bin/sh\n{body}\n", encoding="utf-8")
        shim.chmod(0o755)
    venv_bin = str(Path(sys.executable).parent)
    kept = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d and d != venv_bin]
    return os.pathsep.join([str(shims), *kept])


@pytest.mark.subprocess
def test_given_a_function_with_a_requirements_txt_when_sam_build_runs_then_its_wheels_are_bundled(
    tmp_path: Path,
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    _project(project)
    env = {
        **{k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"},
        "PATH": _path_without_the_venv(tmp_path / "shims"),
        "SAM_CLI_TELEMETRY": "0",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    # When a plain `sam build` runs (no samconfig, no Makefile of the repository around it)
    done = subprocess.run(
        [str(SAM), "build", "--build-dir", str(tmp_path / "build"), "--cache-dir", str(tmp_path / "cache")],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=100,
    )
    output = done.stdout + done.stderr
    # Then it succeeds without a warning, SAM CLI's Python builder never involved
    assert done.returncode == 0, output[-3000:]
    assert build_warnings(output) == [], output[-3000:]
    assert "PythonPipBuilder" not in output
    # ... the function with a requirements.txt has its code and the arm64 wheel, at the layer's pinned version
    built = tmp_path / "build" / "WithDependencyFunction"
    assert (built / "app.py").read_text(encoding="utf-8") == APP
    assert (built / "wrapt-2.5.2.dist-info").is_dir()
    extensions = sorted(p.name for p in (built / "wrapt").glob("*.so"))
    assert extensions == ["_wrappers.cpython-313-aarch64-linux-gnu.so"]
    assert elf_machine(built / "wrapt" / extensions[0]) == "aarch64"
    # ... and the one without is its code only
    assert sorted(p.name for p in (tmp_path / "build" / "PlainFunction").iterdir()) == ["app.py"]
