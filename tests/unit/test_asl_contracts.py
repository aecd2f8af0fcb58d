"""Every JSONPath in statemachines/*.asl.json resolves in the contract of the data it reads.

The state machine functional tests run the definitions for ~100 s; this walks them in milliseconds
(the ``tests/asl_contracts`` package): from each machine's execution input contract, through every Task
(the function's return contract, read from its handler's annotations in ``functions/*/app.py``; an AWS
API's output shape from botocore's model), checking every InputPath, OutputPath, ResultPath (a Catch's
too), Parameters/ItemSelector/ResultSelector/ItemReader/ResultWriter/BatchInput ``.$`` value, Choice
Variable and ``*Path`` operand, ItemsPath, Wait path, Task timeout path and Map tolerance and batching
path, and what each Task is given against its function's input contract. Any other ``*Path`` or ``.$``
key is reported as not checked, never passed over.
"""

from __future__ import annotations

import copy
import json
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from sluice.delay.contracts import DelayExecution, RehydrateRequest, RehydrateResult
from sluice.redrive.contracts import BreakerAnswer, PlanItem, PlanState
from tests.asl_contracts import Handler, check, handlers, load_template

ROOT = Path(__file__).resolve().parents[2]
DEFINITIONS = sorted((ROOT / "statemachines").glob("*.asl.json"))
EXECUTION_INPUTS: dict[str, Any] = {
    "delay.asl.json": DelayExecution,  # sluice.delay.schedule.execution_input
    "redrive.asl.json": dict[str, object],  # an EventBridge event (alarm, schedule): never read
}


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    return load_template()


def definition(name: str) -> dict[str, Any]:
    return dict(json.loads((ROOT / "statemachines" / name).read_text(encoding="utf-8")))


def problems(
    template: Mapping[str, Any],
    name: str,
    *,
    replace: Mapping[Any, Any] | None = None,
    asl: Mapping[str, Any] | None = None,
) -> list[str]:
    return check(
        asl if asl is not None else definition(name),
        machine=name,
        execution_input=EXECUTION_INPUTS[name],
        handlers=handlers(template, name),
        replace=replace,
    )


def renamed(contract: Any, old: str, new: str) -> Any:
    """A copy of the TypedDict ``contract`` with its field ``old`` called ``new`` (the file is untouched)."""
    hints = typing.get_type_hints(contract)
    assert old in hints, f"{contract.__name__} has no field {old!r}"
    fields = {
        (new if key == old else key): (
            value if key in contract.__required_keys__ else typing.NotRequired[value]
        )
        for key, value in hints.items()
    }
    return typing.TypedDict(contract.__name__, fields)  # type: ignore[operator]


def heads(found: list[str]) -> list[str]:
    """The problems without the list of fields the contract does have."""
    return [line.split(" (it has ")[0] for line in found]


# --- the committed definitions -------------------------------------------------------------------


@pytest.mark.parametrize("path", DEFINITIONS, ids=lambda p: p.name)
def test_given_each_committed_definition_when_walked_then_every_path_resolves_in_its_contracts(
    template: dict[str, Any], path: Path
) -> None:
    # Given a definition and the contracts of its execution input and of the functions it invokes
    assert path.name in EXECUTION_INPUTS, f"{path.name}: add its execution input contract to EXECUTION_INPUTS"
    # When every path of every state is resolved, then none fails
    assert problems(template, path.name) == []


@pytest.mark.parametrize("path", DEFINITIONS, ids=lambda p: p.name)
def test_given_each_function_a_definition_invokes_then_its_handler_is_annotated_with_contracts(
    template: dict[str, Any], path: Path
) -> None:
    # Given the functions a definition invokes (its DefinitionSubstitutions' GetAtt)
    invoked: dict[str, Handler] = handlers(template, path.name)
    # Then each handler takes and returns TypedDicts (unions of them), never a bare dict or Any
    for handler in invoked.values():
        for annotation in (handler.event, handler.result):
            options = typing.get_args(annotation) or (annotation,)
            assert all(typing.is_typeddict(o) for o in options), (handler.function, annotation)
    assert invoked or "lambda:invoke" not in path.read_text(encoding="utf-8")


# --- renamed fields: the exact state and path are named --------------------------------------------


@pytest.mark.parametrize(
    ("machine", "contract", "old", "new", "expected"),
    [
        pytest.param(
            "redrive.asl.json",
            PlanState,
            "waitSeconds",
            "waitSecs",
            [
                "redrive.asl.json: PlanBatch/Route: Choices[0].And[1].Variable: '$.waitSeconds': "
                "no field 'waitSeconds' in PlanState",
                "redrive.asl.json: DeliverBatch/Wait: SecondsPath: '$.plan.waitSeconds': "
                "no field 'waitSeconds' in PlanState",
            ],
            id="Plan's answer",
        ),
        pytest.param(
            "redrive.asl.json",
            PlanState,
            "receiptHandle",
            "receipt",
            [
                "redrive.asl.json: PlanBatch/Hold: Parameters.ReceiptHandle.$: '$.receiptHandle': "
                "no field 'receiptHandle' in PlanState",
                "redrive.asl.json: DeliverBatch/DeleteIsolated: Parameters.ReceiptHandle.$: "
                "'$.plan.receiptHandle': no field 'receiptHandle' in PlanState",
                "redrive.asl.json: DeliverBatch/Delete: Parameters.ReceiptHandle.$: '$.plan.receiptHandle': "
                "no field 'receiptHandle' in PlanState",
            ],
            id="Plan's answer, read in both Maps",
        ),
        pytest.param(
            "redrive.asl.json",
            PlanState,
            "groupId",
            "group",
            [
                "redrive.asl.json: DeliverBatch/WithGroup: Choices[0].Variable: '$.plan.groupId': "
                "no field 'groupId' in PlanState",
            ],
            id="the group id, sent again",
        ),
        pytest.param(
            "redrive.asl.json",
            BreakerAnswer,
            "probeAt",
            "probeTime",
            [
                "redrive.asl.json: CheckCircuitBreaker: ResultSelector.probeAt.$: '$.Payload.probeAt': "
                "no field 'probeAt' in BreakerAnswer"
            ],
            id="the breaker's answer",
        ),
        pytest.param(
            "delay.asl.json",
            RehydrateResult,
            "more",
            "moreWork",
            [
                "delay.asl.json: Rehydrate: ResultSelector.more.$: '$.Payload.more': "
                "no field 'more' in RehydrateResult"
            ],
            id="the rehydrator's answer",
        ),
        pytest.param(
            "delay.asl.json",
            DelayExecution,
            "wake_at",
            "wakeAt",
            [
                "delay.asl.json: WaitForBucket: TimestampPath: '$.wake_at': "
                "no field 'wake_at' in DelayExecution"
            ],
            id="the execution input",
        ),
    ],
)
def test_given_a_contract_field_renamed_when_checked_then_the_state_and_path_reading_it_are_named(
    template: dict[str, Any], machine: str, contract: Any, old: str, new: str, expected: list[str]
) -> None:
    # Given a copy of the contract with one field renamed, swapped in wherever the contract is used
    replace = {contract: renamed(contract, old, new)}
    # When the definition is checked, then exactly the states reading the old name are reported
    assert heads(problems(template, machine, replace=replace)) == expected


def test_given_a_task_input_field_renamed_when_checked_then_the_task_and_both_names_are_reported(
    template: dict[str, Any],
) -> None:
    # Given the Plan function's input contract expecting "probe" where the ItemSelector writes "probeAt"
    replace = {PlanItem: renamed(PlanItem, "probeAt", "probe")}
    # When checked
    [problem] = problems(template, "redrive.asl.json", replace=replace)
    # Then the Task, its Payload and both names are named
    assert problem.startswith(
        "redrive.asl.json: PlanBatch/Plan: Parameters.Payload: it matches none of PlanItem"
    )
    assert "PlanItem: probe missing; probeAt is not a field of PlanItem" in problem


def test_given_the_rehydrate_request_field_renamed_when_checked_then_the_rehydrate_task_is_reported(
    template: dict[str, Any],
) -> None:
    replace = {RehydrateRequest: renamed(RehydrateRequest, "prefix", "keyPrefix")}
    [problem] = problems(template, "delay.asl.json", replace=replace)
    assert problem.startswith(
        "delay.asl.json: Rehydrate: Parameters.Payload: it matches none of RehydrateRequest"
    )
    assert "RehydrateRequest: keyPrefix missing; prefix is not a field of RehydrateRequest" in problem


# --- the definition's side ----------------------------------------------------------------------------


def test_given_a_misspelt_path_in_a_definition_when_checked_then_it_is_named_with_its_state(
    template: dict[str, Any],
) -> None:
    # Given the Redrive task reading $.plan.queueURL (PlanState says queueUrl)
    asl = copy.deepcopy(definition("redrive.asl.json"))
    redrive = asl["States"]["DeliverBatch"]["ItemProcessor"]["States"]["Redrive"]
    redrive["Parameters"]["QueueUrl.$"] = "$.plan.queueURL"
    # When checked, then that state and path are named
    assert heads(problems(template, "redrive.asl.json", asl=asl)) == [
        "redrive.asl.json: DeliverBatch/Redrive: Parameters.QueueUrl.$: '$.plan.queueURL': "
        "no field 'queueURL' in PlanState"
    ]


def test_given_a_choice_on_a_field_only_some_outcomes_have_when_checked_then_it_is_reported(
    template: dict[str, Any],
) -> None:
    # Given Deliver testing $.plan.action before it knows the outcome is one that has a plan
    asl = copy.deepcopy(definition("redrive.asl.json"))
    deliver = asl["States"]["DeliverBatch"]["ItemProcessor"]["States"]["Deliver"]
    deliver["Choices"][1]["And"].reverse()
    # When checked, then the failed outcomes (no plan) are named at that rule
    found = problems(template, "redrive.asl.json", asl=asl)
    assert found
    assert all(
        p.startswith("redrive.asl.json: DeliverBatch/Deliver: Choices[1].And[0].Variable: '$.plan.action'")
        for p in found
    )
    assert "no field 'plan'" in found[0]


def test_given_an_sdk_parameter_the_api_does_not_have_when_checked_then_it_is_reported(
    template: dict[str, Any],
) -> None:
    asl = copy.deepcopy(definition("redrive.asl.json"))
    asl["States"]["FetchBatch"]["Parameters"]["MaxMessages"] = 10
    assert problems(template, "redrive.asl.json", asl=asl) == [
        "redrive.asl.json: FetchBatch: Parameters: MaxMessages is not a field of ReceiveMessageRequest"
    ]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("$..count", "unsupported JSONPath '$..count'"),
        ("States.Frobnicate($.count)", "unknown intrinsic function States.Frobnicate"),
    ],
)
def test_given_a_path_the_checker_cannot_follow_when_checked_then_it_says_so_instead_of_passing(
    template: dict[str, Any], value: str, expected: str
) -> None:
    asl = copy.deepcopy(definition("redrive.asl.json"))
    asl["States"]["FindOldest"]["Parameters"]["extra.$"] = value
    [problem] = problems(template, "redrive.asl.json", asl=asl)
    assert problem.startswith("redrive.asl.json: FindOldest: Parameters.extra.$: ")
    assert expected in problem


def test_given_a_jsonata_state_when_checked_then_it_is_reported_as_unchecked(
    template: dict[str, Any],
) -> None:
    asl = copy.deepcopy(definition("delay.asl.json"))
    asl["States"]["Rehydrate"]["QueryLanguage"] = "JSONata"
    assert problems(template, "delay.asl.json", asl=asl) == [
        "delay.asl.json: Rehydrate: QueryLanguage: JSONata is not checked"
    ]


# --- every path field is followed or reported: none passes silently ---------------------------------


def _mutated(machine: str, edit: Any) -> dict[str, Any]:
    asl = copy.deepcopy(definition(machine))
    edit(asl["States"])
    return asl


@pytest.mark.parametrize(
    ("machine", "edit", "expected"),
    [
        pytest.param(
            "delay.asl.json",
            lambda s: s["Rehydrate"].update(TimeoutSecondsPath="$.nope"),
            "delay.asl.json: Rehydrate: TimeoutSecondsPath: '$.nope': no field 'nope' in DelayExecution",
            id="TimeoutSecondsPath",
        ),
        pytest.param(
            "delay.asl.json",
            lambda s: s["Rehydrate"].update(HeartbeatSecondsPath="$.prefix"),
            "delay.asl.json: Rehydrate: HeartbeatSecondsPath: is str, where number is needed",
            id="HeartbeatSecondsPath of a string",
        ),
        pytest.param(
            "redrive.asl.json",
            lambda s: s["DeliverBatch"].update(ToleratedFailureCountPath="$.nope"),
            "redrive.asl.json: DeliverBatch: ToleratedFailureCountPath: '$.nope': no field 'nope'",
            id="ToleratedFailureCountPath",
        ),
        pytest.param(
            "redrive.asl.json",
            lambda s: s["DeliverBatch"].update(ToleratedFailurePercentagePath="$.nope"),
            "redrive.asl.json: DeliverBatch: ToleratedFailurePercentagePath: '$.nope': no field 'nope'",
            id="ToleratedFailurePercentagePath",
        ),
        pytest.param(
            "redrive.asl.json",
            lambda s: s["DeliverBatch"].update(ItemBatcher={"MaxItemsPerBatchPath": "$.nope"}),
            "redrive.asl.json: DeliverBatch: ItemBatcher.MaxItemsPerBatchPath: '$.nope': no field 'nope'",
            id="ItemBatcher.MaxItemsPerBatchPath",
        ),
        pytest.param(
            "redrive.asl.json",
            lambda s: s["DeliverBatch"].update(
                ItemReader={
                    "Resource": "arn:aws:states:::s3:getObject",
                    "Parameters": {"Bucket": "b", "Key.$": "$.nope"},
                    "ReaderConfig": {"MaxItemsPath": "$.nope"},
                }
            ),
            "redrive.asl.json: DeliverBatch: ItemReader.Parameters.Key.$: '$.nope': no field 'nope'",
            id="ItemReader parameters",
        ),
        pytest.param(
            "redrive.asl.json",
            lambda s: s["DeliverBatch"].update(
                ItemReader={
                    "Resource": "arn:aws:states:::s3:getObject",
                    "ReaderConfig": {"MaxItemsPath": "$.nope"},
                }
            ),
            "redrive.asl.json: DeliverBatch: ItemReader.ReaderConfig.MaxItemsPath: '$.nope': no field 'nope'",
            id="ItemReader.ReaderConfig.MaxItemsPath",
        ),
        pytest.param(
            "redrive.asl.json",
            lambda s: s["DeliverBatch"].update(
                ResultWriter={
                    "Resource": "arn:aws:states:::s3:putObject",
                    "Parameters": {"Prefix.$": "$.nope"},
                }
            ),
            "redrive.asl.json: DeliverBatch: ResultWriter.Parameters.Prefix.$: '$.nope': no field 'nope'",
            id="ResultWriter parameters",
        ),
        pytest.param(
            "delay.asl.json",
            lambda s: (
                s["Rehydrate"]["Catch"][0].update(ResultPath="$.failure"),
                s["Stranded"].update(CausePath="$.error.Cause"),
            ),
            "delay.asl.json: Stranded: CausePath: '$.error.Cause': no field 'error'",
            id="Catch's ResultPath, read by the state it leads to",
        ),
        pytest.param(
            "delay.asl.json",
            lambda s: s["Rehydrate"]["Catch"][0].update(ResultPath="$$.Execution.Input"),
            "delay.asl.json: Rehydrate: Catch[0].ResultPath: '$$.Execution.Input': "
            "a ResultPath names fields of $ only",
            id="Catch's ResultPath outside $",
        ),
    ],
)
def test_given_a_path_field_that_does_not_resolve_when_checked_then_its_state_and_field_are_named(
    template: dict[str, Any], machine: str, edit: Any, expected: str
) -> None:
    # Given a definition with one path field that reads what its input does not have
    asl = _mutated(machine, edit)
    # When checked, Then that state, field and path are reported
    found = heads(problems(template, machine, asl=asl))
    assert [p for p in found if p.startswith(expected)], found


def test_given_the_committed_catch_when_its_error_is_read_then_it_resolves(template: dict[str, Any]) -> None:
    # Given the Stranded Fail state reading the error the Rehydrate Catch puts at $.error
    asl = _mutated("delay.asl.json", lambda s: s["Stranded"].update(CausePath="$.error.Cause"))
    # Then it resolves: the Catch's ResultPath is followed into the state it leads to
    assert problems(template, "delay.asl.json", asl=asl) == []


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        pytest.param(
            lambda s: s["Rehydrate"].update(Credentials={"RoleArn.$": "$.role"}),
            "delay.asl.json: Rehydrate: Credentials.RoleArn.$: '$.role' is not checked",
            id="a .$ key outside the templates it knows",
        ),
        pytest.param(
            lambda s: s["Rehydrate"]["Retry"][0].update(MaxAttemptsPath="$.attempts"),
            "delay.asl.json: Rehydrate: Retry[0].MaxAttemptsPath: '$.attempts' is not checked",
            id="a Path key inside Retry",
        ),
        pytest.param(
            lambda s: s["Rehydrate"]["Catch"][0].update(OutputPath="$.x"),
            "delay.asl.json: Rehydrate: Catch[0].OutputPath: '$.x' is not checked",
            id="a Path key inside Catch it does not follow",
        ),
        pytest.param(
            lambda s: s["WaitForBucket"].update(FuturePath="$.wake_at"),
            "delay.asl.json: WaitForBucket: FuturePath: '$.wake_at' is not checked",
            id="a Path key it does not know",
        ),
    ],
)
def test_given_a_path_field_the_checker_does_not_follow_when_checked_then_it_is_reported_not_passed(
    template: dict[str, Any], edit: Any, expected: str
) -> None:
    # Given a definition with a path field the walk has no rule for
    asl = _mutated("delay.asl.json", edit)
    # When checked, Then it is reported as not checked, with its state and field
    assert [p for p in problems(template, "delay.asl.json", asl=asl) if p.startswith(expected)]
