"""cfn-lint on each nested application's template, with the parameter values template.yaml passes it.

``sam validate --lint`` lints template.yaml alone. A nested template (workloads.yaml, stacks/*.yaml)
loops over and looks up what its parent passes (the workload names, the consumer timeout, ...), which
has no default of its own there; cfn-lint's own ``Fn::ForEach`` expansion reads only a parameter's
``Default``. Each nested template is therefore linted as a copy beside it whose parameters default to
the values the root passes with its defaults
(``sluice_local.emulation.language_extensions.nested_sources``), in each RedriveMode: with the defaults,
and with the job store and every other optional part on (a nested application under a Condition, the
job store's, is linted where it exists; each one at least once). A nested template declares each
parameter on one line (``Name: {Type: String}``), which the copy extends.

The workloads' template is linted a second time with a workload that sets every consumer setting of
its own and consumes an existing queue (``security_scan.EVERY_WORKLOAD_SETTING``, which checkov scans
too): the properties, the network policy and the existing-queue branch only such a block creates are
linted as well.

Run with the project's virtualenv: ``make validate``.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from security_scan import EVERY_WORKLOAD_SETTING  # this folder's: the script's own

from sluice_local.emulation.language_extensions import nested_sources

ROOT = Path(__file__).resolve().parents[1]
ACCOUNT = "123456789012"
VARIANTS = (
    {},
    {
        "RedriveMode": "stepfunctions",
        "DatabaseSecretArn": f"arn:aws:secretsmanager:us-east-1:{ACCOUNT}:secret:sluice-db",
        "DatabaseSubnetIds": "subnet-0123456789abcdef0,subnet-0123456789abcdef1",
        "DatabaseSecurityGroupIds": "sg-0123456789abcdef0",
    },
)
WORKLOADS = ROOT / "workloads.yaml"
WORKLOAD_NAME = re.compile(r"[A-Z][A-Za-z0-9]{0,23}")
"""docs/workloads.md, "Naming": the shared resources' names are lower case, so a workload's never collide."""


def name_problems(text: str) -> list[str]:
    """The workloads' list (the ``Fn::ForEach::Workload`` loop's) against the naming rule."""
    listed = re.search(r"&workloads \[([^\]]*)\]", text)
    if listed is None:
        return ["workloads.yaml: no workloads' list (&workloads [...]) found"]
    names = [name.strip() for name in listed[1].split(",") if name.strip()]
    return [
        f"workload name {name!r}: a capital letter, then letters and digits, 24 at most (docs/workloads.md)"
        for name in names
        if not WORKLOAD_NAME.fullmatch(name)
    ]


def with_defaults(text: str, values: dict[str, str]) -> str:
    """``text`` with each one-line parameter declaration ``  Name: {Type: T}`` given ``Default: value``."""
    for name, value in values.items():
        pattern = re.compile(rf"^(  {name}: \{{Type: [^,}}]+)\}}", re.MULTILINE)
        text, found = pattern.subn(lambda m, v=value: f"{m[1]}, Default: {json.dumps(v)}}}", text)
        if found != 1:
            raise SystemExit(f"parameter {name} is not declared on one line ({{Type: ...}}) in the template")
    return text


def with_every_workload_setting(text: str) -> str:
    """workloads.yaml's ``text`` with EVERY_WORKLOAD_SETTING's workloads added to its list and mapping."""
    listed, found = re.subn(
        r"&workloads \[([^\]]*)\]", r"&workloads [\1, Scanned, ScannedFifo]", text, count=1
    )
    if found != 1 or "\n  Workloads:\n" not in listed:
        raise SystemExit("workloads.yaml no longer lists its workloads as expected")
    return listed.replace("\n  Workloads:\n", "\n  Workloads:\n" + EVERY_WORKLOAD_SETTING, 1)


def main() -> int:
    named = name_problems(WORKLOADS.read_text(encoding="utf-8"))
    if named:
        print("\n".join(named), file=sys.stderr)
        return 1
    cfn_lint = Path(sys.executable).with_name("cfn-lint")
    every = {app for app, _, _ in nested_sources(ROOT / "template.yaml", {}, every=True)}
    copies: dict[Path, str] = {}  # each copy -> what it is, for a failure's message
    try:
        for given in VARIANTS:
            for app, template, known in nested_sources(ROOT / "template.yaml", given):
                every.discard(app)
                texts = {"": template.read_text(encoding="utf-8")}
                if template == WORKLOADS:
                    texts["a workload with every setting"] = with_every_workload_setting(texts[""])
                for what, text in texts.items():
                    copy = template.with_name(f".lint-{len(copies)}-{template.name}")
                    copy.write_text(with_defaults(text, known), encoding="utf-8")
                    label = ", ".join(filter(None, [given.get("RedriveMode", "defaults"), what]))
                    copies[copy] = f"{app} ({template.relative_to(ROOT)}, {label})"
        failed = _lint(cfn_lint, copies)
    finally:
        for copy in copies:
            copy.unlink(missing_ok=True)
    if every:
        failed.append(f"{', '.join(sorted(every))}: in no variant (add one where its Condition holds)")
    if failed:
        print("cfn-lint failed for: " + "; ".join(failed), file=sys.stderr)
        return 1
    print(
        f"cfn-lint: {len(copies)} nested templates clean (defaults; stepfunctions with the job store; "
        "the workloads' with every setting too)"
    )
    return 0


def _lint(cfn_lint: Path, copies: dict[Path, str]) -> list[str]:
    """What of ``copies`` cfn-lint finds fault with: all in one process (its start is most of a run's
    time), then, only when that fails, each alone to name which."""
    argv = [str(cfn_lint), "--regions", "us-east-1", "--"]
    if subprocess.run([*argv, *map(str, copies)], check=False, cwd=ROOT).returncode == 0:  # noqa: S603
        return []
    return [
        what
        for copy, what in copies.items()
        if subprocess.run([*argv, str(copy)], check=False, cwd=ROOT, capture_output=True).returncode != 0  # noqa: S603
    ]


if __name__ == "__main__":
    sys.exit(main())
