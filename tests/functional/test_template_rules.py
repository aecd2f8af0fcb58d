"""The local runtime applies a template's parameter constraints (an AllowedPattern to each value of a
CommaDelimitedList) and its Rules section as CloudFormation does, before creating anything
(docs/local.md); moto ignores both."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sluice_local.emulation.cloud import DeployError, LocalCloud
from sluice_local.emulation.template_rules import rule_problems


def _template(names: str, loop: list[str]) -> dict[str, Any]:
    return {
        "Parameters": {
            "Names": {
                "Type": "CommaDelimitedList",
                "Default": names,
                "AllowedPattern": "^[A-Z][A-Za-z0-9]{0,23}$",
            }
        },
        "Rules": {
            "Checked": {
                "Assertions": [
                    {
                        "Assert": {"Fn::EachMemberIn": [loop, {"Ref": "Names"}]},
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
            "ValidationError: Parameter 'Names' failed to satisfy constraint",
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


def test_given_a_string_where_a_list_belongs_then_it_is_one_member_not_its_substrings():
    # Given assertions over a String parameter where the rule functions take a list of strings
    contains = {"Assert": {"Fn::Contains": [{"Ref": "S"}, "prod"]}, "AssertDescription": "c"}
    member_in = {"Assert": {"Fn::EachMemberIn": [{"Ref": "S"}, "prod-eu"]}, "AssertDescription": "i"}
    template = {
        "Parameters": {"S": {"Type": "String", "Default": "prod-eu"}},
        "Rules": {"Contains": {"Assertions": [contains]}, "In": {"Assertions": [member_in]}},
    }
    # Then "prod" is not a member of "prod-eu" (a substring is not a member), and "prod-eu" is in itself
    assert rule_problems(template, {}) == ["Rule 'Contains': c"]
