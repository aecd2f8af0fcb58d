"""The soak's redrive state machine holds a fetched batch for seconds, not AWS's 300 s: a batch that a
failed execution left in flight comes back within a seed's drain deadline.

Found by a loaded clean-clone CI: two failed executions in a row each held a DLQ message 300 s, and the
seed was reported stuck at its 420 s deadline.
"""

from __future__ import annotations

import json
from pathlib import Path

import boto3
from moto import mock_aws

from sluice.redrive.steps import FETCH_VISIBILITY_SECONDS
from sluice_local.soak import runner

ROOT = Path(__file__).resolve().parents[2]


def test_given_the_deployed_redrive_definition_when_the_soak_compresses_it_then_only_the_fetch_hold_changes():
    # Given the redrive state machine as the template defines it (AWS's 300 s fetch hold)
    definition = json.loads((ROOT / "statemachines" / "redrive.asl.json").read_text())
    assert definition["States"]["FetchBatch"]["Parameters"]["VisibilityTimeout"] == FETCH_VISIBILITY_SECONDS
    with mock_aws():
        sfn = boto3.client("stepfunctions", region_name="us-east-1")
        arn = sfn.create_state_machine(
            name="redrive",
            definition=json.dumps(definition),
            roleArn="arn:aws:iam::123456789012:role/redrive",
        )["stateMachineArn"]

        # When the soak compresses it
        runner.compress_fetch(sfn, arn, runner.FETCH_VISIBILITY_SECONDS)

        # Then FetchBatch holds its batch the soak's seconds, and nothing else in the definition moved
        deployed = json.loads(sfn.describe_state_machine(stateMachineArn=arn)["definition"])
    fetch = deployed["States"]["FetchBatch"]["Parameters"]
    assert fetch["VisibilityTimeout"] == runner.FETCH_VISIBILITY_SECONDS
    fetch["VisibilityTimeout"] = FETCH_VISIBILITY_SECONDS
    assert deployed == definition


def test_the_fetch_hold_lets_several_failed_executions_in_a_row_end_within_a_seeds_deadline():
    assert 4 * runner.FETCH_VISIBILITY_SECONDS < runner.SEED_DEADLINE_SECONDS
    # and is long enough for a loaded machine to plan and send a batch in it
    assert runner.FETCH_VISIBILITY_SECONDS >= 10 * runner.VISIBILITY_SECONDS
