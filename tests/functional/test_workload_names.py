"""A workload's name is checked by CloudFormation itself (workloads.yaml: the WorkloadList parameter's
AllowedPattern, per value of its Default, which lists the Fn::ForEach::Workload loop's names), and by
the local runtime, which applies parameter constraints and a template's Rules section as CloudFormation
does (docs/workloads.md, "Naming"; docs/local.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from samtranslator.yaml_helper import yaml_parse

from sluice_local.emulation.cloud import DeployError, LocalCloud
from sluice_local.emulation.template import parameter_problems
from sluice_local.emulation.template_rules import rule_problems
from tests.conftest import ROOT

WORKLOADS = (ROOT / "workloads.yaml").read_text()
LOOP = "&workloads [Orders, Refunds]"
DEFAULT = 'Default: "Orders,Refunds"'


def _problems(text: str) -> list[str]:
    """What CloudFormation refuses of workloads.yaml, the root passing the parameters it passes."""
    template = yaml_parse(text)
    passed = [name for name, spec in template["Parameters"].items() if "Default" not in spec]
    return parameter_problems(template["Parameters"], {}, passed) + rule_problems(template, {}, passed)


def test_given_the_project_workloads_when_checked_then_every_name_passes():
    assert LOOP in WORKLOADS
    assert DEFAULT in WORKLOADS
    assert _problems(WORKLOADS) == []


@pytest.mark.parametrize("name", ["poison", "flow", "jobs", "Has-Dash", "Has_Underscore", "A" * 25, "9Lives"])
def test_given_a_workload_name_breaking_the_pattern_when_listed_then_cloudformation_refuses_it(name):
    text = WORKLOADS.replace(LOOP, f"&workloads [Orders, {name}]").replace(
        DEFAULT, f'Default: "Orders,{name}"'
    )
    [problem] = _problems(text)
    assert problem.startswith(
        "Parameter 'WorkloadList' failed to satisfy constraint: each workload name starts"
    )


def test_given_the_project_then_the_checked_list_names_the_workloads_the_loop_runs():
    template = yaml_parse(WORKLOADS)
    [_, loop, _] = template["Resources"]["Fn::ForEach::Workload"]
    assert template["Parameters"]["WorkloadList"]["Default"].split(",") == loop


@pytest.mark.parametrize("name", ["A", "Orders2", "A" + "b" * 23])
def test_given_a_workload_name_within_the_pattern_when_listed_then_it_passes(name):
    text = WORKLOADS.replace(LOOP, f"&workloads [{name}]").replace(DEFAULT, f'Default: "{name}"')
    assert _problems(text) == []


def _template(names: str, loop: list[str]) -> dict[str, Any]:
    return {
        "Parameters": {
            "WorkloadList": {
                "Type": "CommaDelimitedList",
                "Default": names,
                "AllowedPattern": "^[A-Z][A-Za-z0-9]{0,23}$",
            }
        },
        "Rules": {
            "Checked": {
                "Assertions": [
                    {
                        "Assert": {"Fn::EachMemberIn": [loop, {"Ref": "WorkloadList"}]},
                        "AssertDescription": "unlisted",
                    }
                ]
            }
        },
        "Resources": {"Queue": {"Type": "AWS::SQS::Queue"}},
    }


@pytest.mark.parametrize(
    ("names", "loop", "says"),
    [
        (
            "Orders,poison",
            ["Orders", "poison"],
            "ValidationError: Parameter 'WorkloadList' failed to satisfy constraint",
        ),
        ("Orders", ["Orders", "poison"], "ValidationError: Rule 'Checked': unlisted"),
    ],
)
def test_given_a_template_breaking_a_parameter_pattern_or_rule_when_deployed_then_nothing_is_created(
    tmp_path: Path, names, loop, says
):
    template = tmp_path / "template.yaml"
    template.write_text(json.dumps(_template(names, loop)))
    cloud = LocalCloud(template=template, stack_name="names")
    try:
        with pytest.raises(DeployError, match=says):
            cloud.start()
    finally:
        cloud.stop()


def test_given_rule_functions_when_evaluated_then_they_follow_cloudformation():
    template = {
        "Parameters": {
            "L": {"Type": "CommaDelimitedList", "Default": "a,b"},
            "S": {"Type": "String", "Default": "a"},
        },
        "Rules": {
            "Skipped": {
                "RuleCondition": {"Fn::Equals": [{"Ref": "S"}, "z"]},
                "Assertions": [{"Assert": {"Fn::Equals": ["1", "2"]}}],
            },
            "Holds": {
                "Assertions": [
                    {"Assert": {"Fn::Contains": [{"Ref": "L"}, {"Ref": "S"}]}},
                    {"Assert": {"Fn::Not": [{"Fn::EachMemberEquals": [{"Ref": "L"}, "a"]}]}},
                    {
                        "Assert": {
                            "Fn::Or": [
                                {"Fn::Equals": [{"Ref": "S"}, "b"]},
                                {"Fn::EachMemberIn": [["b"], {"Ref": "L"}]},
                            ]
                        }
                    },
                    {"Assert": {"Fn::ValueOf": ["S", "Tags"]}},  # not known locally: not checked
                ]
            },
            "Fails": {
                "Assertions": [
                    {
                        "Assert": {
                            "Fn::And": [
                                {"Fn::Equals": [{"Ref": "S"}, "a"]},
                                {"Fn::Contains": [["a"], {"Ref": "S"}]},
                            ]
                        },
                        "AssertDescription": "S is not a",
                    }
                ]
            },
        },
    }
    assert rule_problems(template, {"S": "x", "L": "x,b"}) == ["Rule 'Fails': S is not a"]
    assert rule_problems(template, {}) == []
