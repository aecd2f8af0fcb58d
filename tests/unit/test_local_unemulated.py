"""What the local runtime cannot honour of a function (a workload's extra layers, its VPC): left out or
kept, each said, and a malformed layer refused as Lambda refuses it (sluice_local.emulation.template)."""

from __future__ import annotations

from typing import Any

import pytest

from sluice_local.emulation.template import ParameterError, without_unemulated

LAYER = "arn:aws:lambda:us-east-1:123456789012:layer:carrier-sdk:3"


def _function(**properties: object) -> dict[str, Any]:
    return {"Resources": {"Fn": {"Type": "AWS::Lambda::Function", "Properties": properties}}}


def test_given_an_external_layer_and_a_vpc_then_the_layer_is_left_out_the_vpc_kept_and_both_said() -> None:
    vpc = {"SubnetIds": ["subnet-0123456789abcdef0"], "SecurityGroupIds": ["sg-0123456789abcdef0"]}
    template = _function(Layers=[{"Ref": "CommonLayer"}, LAYER], VpcConfig=vpc)
    deployable, notes = without_unemulated(template)
    assert deployable["Resources"]["Fn"]["Properties"] == {
        "Layers": [{"Ref": "CommonLayer"}],
        "VpcConfig": vpc,
    }
    assert notes == [
        f"Fn: layer {LAYER} is not available locally: left out",
        "Fn: VpcConfig is not emulated: it runs on this machine's network",
    ]
    assert template["Resources"]["Fn"]["Properties"]["Layers"] == [{"Ref": "CommonLayer"}, LAYER]  # a copy


def test_given_only_the_stacks_own_layers_then_nothing_changes() -> None:
    template = _function(Layers=[{"Ref": "CommonLayer"}])
    assert without_unemulated(template) == (template, [])


@pytest.mark.parametrize("layer", ["carrier-sdk", "arn:aws:lambda:us-east-1:123456789012:layer:carrier-sdk"])
def test_given_a_layer_that_is_no_layer_version_arn_then_the_deploy_is_refused(layer: str) -> None:
    with pytest.raises(ParameterError, match="is not a layer version ARN"):
        without_unemulated(_function(Layers=[{"Ref": "CommonLayer"}, layer]))
