"""The local runtime reads a template's YAML with libyaml (sluice_local.emulation.cfn_yaml) and gets what
samtranslator's own reading gets, for every template in the repository."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from samtranslator.yaml_helper import yaml_parse

from sluice_local.emulation import cfn_yaml

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = sorted(
    p.relative_to(ROOT).as_posix()
    for pattern in ("*.yaml", "stacks/*.yaml", "examples/*/*.yaml", "tests/e2e/fixtures/*/*.yaml")
    for p in ROOT.glob(pattern)
)


def test_the_repository_has_the_templates_this_reads():
    assert {"template.yaml", "workloads.yaml", "stacks/jobs.yaml", "stacks/delays.yaml"} <= set(TEMPLATES)


@pytest.mark.parametrize("name", TEMPLATES)
def test_given_a_template_when_read_then_it_is_what_samtranslator_reads(name):
    text = (ROOT / name).read_text(encoding="utf-8")
    assert cfn_yaml.parse(text) == yaml_parse(text)


def test_given_every_short_form_intrinsic_then_each_becomes_its_long_form():
    text = """
A: !Ref Param
B: !GetAtt Queue.Arn
C: !Sub "${AWS::Region}-x"
D: !If [IsProd, 1, 2]
E: !Condition IsProd
F: !Join ["", [a, !Ref B]]
G: !FindInMap [Map, !Ref Key, Value]
"""
    assert cfn_yaml.parse(text) == {
        "A": {"Ref": "Param"},
        "B": {"Fn::GetAtt": ["Queue", "Arn"]},
        "C": {"Fn::Sub": "${AWS::Region}-x"},
        "D": {"Fn::If": ["IsProd", 1, 2]},
        "E": {"Condition": "IsProd"},
        "F": {"Fn::Join": ["", ["a", {"Ref": "B"}]]},
        "G": {"Fn::FindInMap": ["Map", {"Ref": "Key"}, "Value"]},
    }


def test_given_the_same_text_twice_then_each_caller_gets_its_own_copy():
    text = "Resources:\n  Q:\n    Type: AWS::SQS::Queue\n"
    first = cfn_yaml.parse(text)
    first["Resources"]["Q"]["Type"] = "changed"
    assert cfn_yaml.parse(text)["Resources"]["Q"]["Type"] == "AWS::SQS::Queue"


def test_given_libyaml_then_it_reads_with_libyaml_and_refuses_what_a_safe_loader_refuses():
    if yaml.__with_libyaml__:
        assert issubclass(cfn_yaml._Loader, yaml.CSafeLoader)
    with pytest.raises(yaml.constructor.ConstructorError):
        cfn_yaml.parse("a: !!python/object/apply:os.system [echo]\n")
