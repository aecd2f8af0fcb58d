"""``sam build && sam package`` leave nothing local: every code folder, layer, state machine definition
and nested template of the application, the workloads' loop's included, is uploaded and the packaged
templates name it in S3 (what ``sam deploy`` hands CloudFormation, which cannot read a local path).

SAM CLI 1.170 leaves a loop's artifact local in two cases (docs/workloads.md, "What packaging needs"):
this test fails if either comes back. It packages into the embedded S3 (moto's server), no AWS account.

The same build (one `sam build`, the slow part) is also read for what it printed (no warning) and for
what it put in the two common layers: each compiled file for arm64 and for x86_64, told apart by file
names and ELF headers, nothing imported.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import boto3
import pytest
from moto.server import ThreadedMotoServer
from samtranslator.yaml_helper import yaml_parse

from sluice_local.emulation.endpoint import free_port
from tests.build_output import architecture_gaps, build_warnings, extension_modules

ROOT = Path(__file__).resolve().parents[2]
SAM = Path(sys.executable).with_name("sam")
ARTIFACTS = {
    "AWS::Serverless::Function": ("CodeUri",),
    "AWS::Serverless::LayerVersion": ("ContentUri",),
    "AWS::Serverless::StateMachine": ("DefinitionUri",),
    "AWS::Serverless::Application": ("Location",),
    "AWS::CloudFormation::Stack": ("TemplateURL",),
}


def local_artifacts(node: Any, where: str = "") -> list[str]:
    """Every artifact property under ``node`` (resources, loops' bodies, SAM's generated mappings) that
    is still a local path."""
    found: list[str] = []
    if isinstance(node, list):
        for i, item in enumerate(node):
            found += local_artifacts(item, f"{where}[{i}]")
    elif isinstance(node, dict):
        for prop in ARTIFACTS.get(str(node.get("Type")), ()):
            value = node.get("Properties", {}).get(prop)
            if isinstance(value, str) and not re.match(r"^(s3|https?)://", value):
                found.append(f"{where}.{prop} = {value}")
        for key, value in node.items():
            if key == "Properties":
                continue  # a resource's: checked above by its type
            if key in ("CodeUri", "ContentUri") and isinstance(value, str) and not value.startswith("s3://"):
                found.append(f"{where}.{key} = {value}")  # a mapping SAM generated for a loop
            found += local_artifacts(value, f"{where}.{key}")
    return found


@pytest.fixture
def embedded_s3() -> Any:
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


@pytest.mark.timeout(600)
def test_given_sam_build_and_sam_package_then_every_artifact_is_in_s3(
    tmp_path: Path, embedded_s3: str
) -> None:
    env = {
        **os.environ,
        "AWS_ENDPOINT_URL": embedded_s3,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "SAM_CLI_TELEMETRY": "0",
        "PATH": f"{SAM.parent}{os.pathsep}{os.environ.get('PATH', '')}",  # the layer's Makefile finds pip
    }
    s3 = boto3.client(
        "s3",
        endpoint_url=embedded_s3,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    s3.create_bucket(Bucket="artifacts")
    build, packaged = tmp_path / "build", tmp_path / "packaged.yaml"
    # When the application is built and packaged as `sam deploy` packages it (samconfig.toml's settings)
    outputs = []
    for argv in (
        [str(SAM), "build", "--build-dir", str(build), "--cache-dir", str(tmp_path / "cache")],
        [str(SAM), "package", "--template-file", str(build / "template.yaml"), "--s3-bucket", "artifacts",
         "--output-template-file", str(packaged), "--config-file", str(ROOT / "samconfig.toml")],
    ):  # fmt: skip
        done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        outputs.append(done.stdout + done.stderr)
    # Then the build printed no warning (none about the functions' missing requirements.txt: they are
    # built by functions/Makefile)
    assert build_warnings(outputs[0]) == [], outputs[0][-3000:]
    # ... the common layer serves both architectures: every compiled module twice, bundled libraries both
    common, lean = build / "CommonLayer" / "python", build / "CommonLayerWithoutPowertools" / "python"
    assert architecture_gaps(common) == []
    assert extension_modules(common) >= {
        "pydantic_core/_pydantic_core.cpython-313",
        "wrapt/_wrappers.cpython-313",
        "psycopg_binary/_psycopg.cpython-313",
        "psycopg_binary/pq.cpython-313",
    }
    assert {"sluice", "aws_lambda_powertools", "pydantic", "aws_xray_sdk", "psycopg"} <= {
        p.name for p in common.iterdir()
    }
    # ... and so does the variant without Powertools, which ships sluice and the job store's driver only
    assert architecture_gaps(lean) == []
    assert extension_modules(lean) == {"psycopg_binary/_psycopg.cpython-313", "psycopg_binary/pq.cpython-313"}
    assert {p.name for p in lean.iterdir() if not p.name.endswith(".dist-info")} == {
        "sluice", "psycopg", "psycopg_binary", "psycopg_binary.libs",
    }  # fmt: skip
    # Then the root and every nested template it names are in S3, with nothing local left in any
    templates = {"template.yaml": yaml_parse(packaged.read_text(encoding="utf-8"))}
    pending = list(templates.items())
    while pending:
        name, template = pending.pop()
        assert local_artifacts(template.get("Resources", {})) == [], name
        assert local_artifacts(template.get("Mappings", {})) == [], name
        for resource in template.get("Resources", {}).values():
            location = resource.get("Properties", {}).get("Location") if isinstance(resource, dict) else None
            if isinstance(location, str):
                key = urlparse(location).path.rsplit("/", 1)[-1]
                body = s3.get_object(Bucket="artifacts", Key=key)["Body"].read().decode()
                templates[location] = yaml_parse(body)
                pending.append((location, templates[location]))
    # ... the workloads' nested template among them, each workload's code looked up in S3
    nested = [t for name, t in templates.items() if name != "template.yaml"]
    assert any("Fn::ForEach::Workload" in t.get("Resources", {}) for t in nested)
    assert any("SAMCodeUriWorkload" in t.get("Mappings", {}) for t in nested)


def test_given_what_sam_package_leaves_local_in_a_loop_then_the_check_names_it() -> None:
    # what SAM CLI 1.170 wrote for a loop's literal code folder: a build folder, never uploaded
    body = {"Type": "AWS::Serverless::Function", "Properties": {"CodeUri": "OrdersCircuitBreakerFunction"}}
    loop = {"Fn::ForEach::Workload": ["Name", ["Orders"], {"${Name}CircuitBreakerFunction": body}]}
    assert local_artifacts(loop) == [
        ".Fn::ForEach::Workload[2].${Name}CircuitBreakerFunction.CodeUri = OrdersCircuitBreakerFunction"
    ]
    machine = {
        "Type": "AWS::Serverless::StateMachine",
        "Properties": {"DefinitionUri": {"Bucket": "b", "Key": "k"}},
    }
    assert local_artifacts({"M": machine, "SAMCodeUriWorkload": {"Orders": {"CodeUri": "s3://b/k"}}}) == []
