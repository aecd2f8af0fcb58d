"""The local runtime refuses what AWS refuses in a state machine definition and moto lets through."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest

from sluice_local.emulation.asl_rules import unsupported_fields

ROOT = Path(__file__).resolve().parents[2]
DEFINITIONS = sorted((ROOT / "statemachines").glob("*.asl.json"))


def load(path: Path) -> dict[str, Any]:
    text = re.sub(r"\$\{[^}]+\}", "1", path.read_text(encoding="utf-8"))  # placeholders: any value
    return dict(json.loads(text))


@pytest.mark.parametrize("path", DEFINITIONS, ids=lambda p: p.name)
def test_given_each_committed_definition_then_its_optimized_integrations_use_only_supported_fields(
    path: Path,
) -> None:
    assert unsupported_fields(load(path)) == []


def test_given_a_field_the_optimized_sqs_integration_does_not_take_then_it_is_refused_inside_a_map() -> None:
    # Given the redrive definition whose Redrive task (inside the DeliverBatch Map) also sends
    # MessageSystemAttributes: moto drops the field when the task runs, AWS refuses the definition
    definition = load(ROOT / "statemachines" / "redrive.asl.json")
    broken = copy.deepcopy(definition)
    redrive = broken["States"]["DeliverBatch"]["ItemProcessor"]["States"]["Redrive"]
    redrive["Parameters"]["MessageSystemAttributes.$"] = "$.plan.messageSystemAttributes"
    # When it is checked, then that field is named, with the state it is in
    assert unsupported_fields(broken) == [
        'Redrive: the field "MessageSystemAttributes" is not supported by Step Functions'
    ]


def test_given_an_aws_sdk_task_then_any_field_of_the_api_is_accepted() -> None:
    definition = {
        "StartAt": "Send",
        "States": {
            "Send": {
                "Type": "Task",
                "Resource": "arn:aws:states:::aws-sdk:sqs:sendMessage",
                "Parameters": {"QueueUrl": "q", "MessageBody": "b", "MessageSystemAttributes": {}},
                "End": True,
            }
        },
    }
    assert unsupported_fields(definition) == []
