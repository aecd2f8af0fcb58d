"""checkov on template.yaml as deployed in each mode, not only with its defaults.

checkov scans only the resources whose Condition holds for the parameters' defaults, so the defaults
alone (RedriveMode=lambda, no job store, no e-mail, ...) leave the stepfunctions-mode and job store
resources unscanned. This writes the template once per variant, with those defaults changed, and runs
checkov on each: 0 failed checks in every variant, or the exit status says which failed.

checkov does not expand ``Fn::ForEach`` (``AWS::LanguageExtensions``) nor read a nested application's
template: it skips their resources without a word. Each variant is therefore expanded first, by the
project's virtualenv (``python -m sluice_local.emulation.language_extensions``, SAM CLI's own
expansion), with each nested template's resources expanded into it for the values the root passes,
and checkov scans that one template; a loop left in it fails the scan. The every-option variant adds a
workload that sets every consumer setting of its own and consumes an existing queue
(``EVERY_WORKLOAD_SETTING``): the branch of the loop a ``Queue: existing`` block takes is scanned too.

Each example with a template of its own (``examples/*/template.yaml``: a team's function on the library
alone) is scanned too, as it is.

Run with the checkov virtualenv's Python (standard library only): ``make security``.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROJECT_PYTHON = ROOT / ".venv" / "bin" / "python"
ACCOUNT = "123456789012"
EVERYTHING_ELSE = {
    # every optional part on, and the redrive state machine instead of the redriver
    "RedriveMode": "stepfunctions",
    "DelayOrchestrator": "Scheduler",  # the schedule group, role, DLQ and on-failure destination
    "DatabaseSecretArn": f"arn:aws:secretsmanager:us-east-1:{ACCOUNT}:secret:sluice-db",
    "DatabaseSubnetIds": "subnet-0123456789abcdef0",
    "DatabaseSecurityGroupIds": "sg-0123456789abcdef0",
    "TrustedSenderArns": f"arn:aws:iam::{ACCOUNT}:role/producer",
    "OperatorArns": f"arn:aws:iam::{ACCOUNT}:role/operator",
    "ExtraDelayTargetArns": f"arn:aws:sqs:us-east-1:{ACCOUNT}:elsewhere",
    "WarningEmail": "warning@example.com",
    "CriticalEmail": "critical@example.com",
}
VARIANTS: dict[str, dict[str, str]] = {
    "defaults": {},
    "stepfunctions, job store, every option": EVERYTHING_ELSE,
}
# In the every-option variant, a workload that sets every consumer setting of its own (docs/workloads.md):
# the resources only such a block creates (its VPC's network policy, ...) are scanned too; and a FIFO
# workload (its .fifo queue and DLQ, its event source without a batching window).
EVERY_WORKLOAD_SETTING = f"""    Scanned:
      Code: examples/orders/
      Queue: existing
      QueueArn: arn:aws:sqs:us-east-1:{ACCOUNT}:a-queue-made-before-sluice
      ReservedConcurrency: "5"
      SubnetIds: subnet-0123456789abcdef0,subnet-0fedcba9876543210
      SecurityGroupIds: sg-0123456789abcdef0
      Layers: ["arn:aws:lambda:us-east-1:{ACCOUNT}:layer:extra:1"]
      Environment: ["GREETING=hello"]
    ScannedFifo:
      Code: examples/orders/
      QueueType: fifo
      ContentBasedDeduplication: "true"
      SkipGroupOnError: "true"
"""


def with_defaults(template: str, defaults: dict[str, str]) -> str:
    """The template text with the ``Default:`` of each named parameter replaced (each must exist)."""
    lines = template.splitlines(keepends=True)
    start = lines.index("Parameters:\n")
    end = next(i for i in range(start + 1, len(lines)) if re.match(r"^[A-Za-z]", lines[i]))
    todo, current = dict(defaults), None
    for i in range(start + 1, end):
        if m := re.match(r"^  ([A-Za-z0-9]+):\s*$", lines[i]):
            current = m[1]
        elif current in todo and re.match(r"^    Default:", lines[i]):
            lines[i] = f'    Default: "{todo.pop(current)}"\n'
    if todo:
        raise SystemExit(f"parameters without a Default line in template.yaml: {sorted(todo)}")
    return "".join(lines)


def with_every_workload_setting(template: str, n: int) -> str:
    """``template`` whose workloads are a copy of workloads.yaml with the workload EVERY_WORKLOAD_SETTING
    added, written beside it as ``.checkov-workloads-<n>.yaml`` (removed by the caller)."""
    workloads = (ROOT / "workloads.yaml").read_text(encoding="utf-8")
    listed, found = re.subn(
        r"&workloads \[([^\]]*)\]", r"&workloads [\1, Scanned, ScannedFifo]", workloads, count=1
    )
    if found != 1 or "\n  Workloads:\n" not in listed or "\n      Location: workloads.yaml\n" not in template:
        raise SystemExit(
            "workloads.yaml no longer lists its workloads, or template.yaml its Location, as expected"
        )
    copy = ROOT / f".checkov-workloads-{n}.yaml"
    copy.write_text(
        listed.replace("\n  Workloads:\n", "\n  Workloads:\n" + EVERY_WORKLOAD_SETTING, 1), encoding="utf-8"
    )
    return template.replace("\n      Location: workloads.yaml\n", f"\n      Location: {copy.name}\n", 1)


def expanded(source: Path) -> str:
    """The template at ``source`` with its ``Fn::ForEach`` loops expanded (JSON), none left."""
    done = subprocess.run(  # noqa: S603 - our own argv
        [str(PROJECT_PYTHON), "-m", "sluice_local.emulation.language_extensions", str(source)],
        check=True,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    template = json.loads(done.stdout or "{}")
    if not template.get("Resources"):
        raise SystemExit(f"expanding {source.name} printed no template: {done.stderr or done.stdout!r}")
    if "Fn::ForEach" in done.stdout:
        raise SystemExit("an Fn::ForEach is left after the expansion: checkov would skip its resources")
    return done.stdout


def scanned(checkov: Path, template: Path) -> bool:
    """checkov on one CloudFormation template: True with 0 failed checks."""
    argv = [
        str(checkov),
        "--file",
        str(template),
        "--framework",
        "cloudformation",
        "--compact",
        "--quiet",
        "--skip-download",
    ]
    return subprocess.run(argv, check=False).returncode == 0  # noqa: S603 - our own argv


def main() -> int:
    checkov = Path(sys.executable).with_name("checkov")
    template = (ROOT / "template.yaml").read_text(encoding="utf-8")
    failed = []
    with tempfile.TemporaryDirectory(prefix="sluice-checkov-") as tmp:
        for n, (name, defaults) in enumerate(VARIANTS.items()):
            # beside template.yaml: its nested applications' Locations are relative to it
            source = ROOT / f".checkov-variant-{n}.yaml"
            try:
                text = with_defaults(template, defaults)
                if defaults is EVERYTHING_ELSE:
                    text = with_every_workload_setting(text, n)
                source.write_text(text, encoding="utf-8")
                path = Path(tmp) / f"template-{n}.json"
                path.write_text(expanded(source), encoding="utf-8")
            finally:
                source.unlink(missing_ok=True)
                (ROOT / f".checkov-workloads-{n}.yaml").unlink(missing_ok=True)
            print(f"== checkov: template.yaml, {name}", flush=True)
            if not scanned(checkov, path):
                failed.append(name)
    # An example with a template of its own (examples/own-function/: a team's function on the library
    # alone, docs/library.md) is scanned as it is: it has no loops or nested applications to expand.
    for example in sorted(ROOT.glob("examples/*/template.yaml")):
        name = str(example.relative_to(ROOT))
        print(f"== checkov: {name}", flush=True)
        if not scanned(checkov, example):
            failed.append(name)
    if failed:
        print(f"checkov failed for: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
