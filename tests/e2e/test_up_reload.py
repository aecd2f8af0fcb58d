"""``make up`` runs a function's new code from its next invocation once a file in its folder changes
(docs/local.md): a team edits its processor while its stack runs, no restart."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

from sluice_local.emulation.cloud import ROOT
from sluice_local.emulation.endpoint import endpoint_client
from sluice_local.testing import start_stack
from sluice_local.testing.project import with_examples

TEMPLATE = """\
AWSTemplateFormatVersion: "2010-09-09"
Transform: AWS::Serverless-2016-10-31
Resources:
  ShipmentsFunction:
    Type: AWS::Serverless::Function
    Properties:
      FunctionName: shipments-reload
      CodeUri: shipments/
      Handler: app.lambda_handler
      Runtime: python3.13
      Timeout: 10
"""
APP = "from rules import VERSION\n\n\ndef lambda_handler(event, context):\n    return {'version': VERSION}\n"
DEADLINE_SECONDS = 60.0  # a deadline, not a wait: the test ends once the new code answers


def write(path: Path, text: str) -> None:
    before = path.stat().st_mtime_ns if path.exists() else 0
    path.write_text(text)
    stat = path.stat()
    if stat.st_mtime_ns <= before:  # a check right after must see the change
        os.utime(path, ns=(stat.st_atime_ns, before + 1))


def test_given_a_running_stack_when_a_module_of_its_function_changes_then_the_next_invocation_runs_it(
    tmp_path: Path,
) -> None:
    # Given a team's stack running under `up` (its own template and function folder)
    (tmp_path / "template.yaml").write_text(TEMPLATE)
    code = tmp_path / "shipments"
    code.mkdir()
    write(code / "app.py", APP)
    write(code / "rules.py", "VERSION = 1\n")
    running = start_stack(
        tmp_path, stack_name="reload", template=tmp_path / "template.yaml", project=tmp_path
    )
    try:
        lam = endpoint_client("lambda", running.stack.endpoint)

        def version() -> int:
            answer = lam.invoke(FunctionName="shipments-reload", Payload=b"{}")
            return int(json.loads(answer["Payload"].read())["version"])

        assert version() == 1
        # When a module of the function's folder changes
        write(code / "rules.py", "VERSION = 2\n")
        # Then an invocation soon runs the new code (the folder is checked every second)
        deadline = time.monotonic() + DEADLINE_SECONDS
        while version() != 2:
            assert time.monotonic() < deadline, f"still the old code after {DEADLINE_SECONDS:.0f} s"
            time.sleep(0.5)  # between polls of the condition
        said = running.output.read_text()
        assert "ShipmentsFunction: rules.py changed" in said, said[-2000:]
    finally:
        running.stop()


def test_given_a_running_stack_when_sigterms_land_back_to_back_then_it_stops(tmp_path: Path) -> None:
    # Given `up` running (as `make up` is stopped: SIGTERM to its process group, and make forwards one)
    examples = with_examples(ROOT / "template.yaml", tmp_path / "examples")  # whatever a fork lists
    running = start_stack(tmp_path, stack_name="sluice-signals", template=examples, workloads=("Orders",))
    # When they arrive back to back, many of them (up's handlers once took the stop Event's lock, and
    # one landing inside another deadlocked: seen in test_adopt_doc's stop; this does not force that
    # interleaving, it checks that a burst of them stops it)
    for _ in range(200):
        running.process.send_signal(signal.SIGTERM)
    # Then it stops, saying so (a deadline, not a wait)
    assert running.process.wait(timeout=120) == 0
    assert "stopped" in running.output.read_text(encoding="utf-8")


def test_given_up_when_it_deploys_then_it_prints_nothing_a_user_cannot_act_on(tmp_path: Path) -> None:
    # Given `up` on the project's template (moto's CloudFormation creates no queue or bucket policy; the
    # SAM translator keeps metrics it never publishes)
    examples = with_examples(ROOT / "template.yaml", tmp_path / "examples")
    running = start_stack(tmp_path, stack_name="sluice-quiet", template=examples)
    try:
        outputs = running.stack.outputs
        ssm = running.stack.client("ssm")
        parameter = ssm.get_parameter(Name=outputs["CommonLayerArnParameter"])["Parameter"]["Value"]
    finally:
        assert running.stop() == 0
    said = running.output.read_text(encoding="utf-8")
    # Then its output holds none of their notices, and the layer's output is an ARN, as CloudFormation's
    for noise in ("No Moto CloudFormation support", "UserWarning", "unpublished metrics", "object at 0x"):
        assert noise not in said, f"{noise!r} in up's output:\n{said[-3000:]}"
    assert outputs["CommonLayerArn"].startswith("arn:aws:lambda:us-east-1:123456789012:layer:")
    # And other stacks' functions find the layer's current version in its SSM parameter (not an export)
    assert outputs["CommonLayerArnParameter"] == "/sluice-quiet/sluice/common-layer-arn"
    assert parameter == outputs["CommonLayerArn"]
