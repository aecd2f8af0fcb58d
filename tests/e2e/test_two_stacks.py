"""Two stacks in one account and region (one embedded AWS): a failure storm in one moves no alarm of the
other. Every name is the stack's own and every metric of sluice carries the stack's name as its
``service`` dimension; the alarms on them (EMF metrics extracted from what the functions print, as
CloudWatch Logs does) are evaluated by the local runtime as CloudWatch would.
"""

from __future__ import annotations

import json
import uuid

from sluice_local.app.fast import FAST
from sluice_local.app.messages import ORDERS, REFUNDS, claim_check, order
from sluice_local.app.stack import local_cloud
from sluice_local.emulation.cloud import LocalCloud
from sluice_local.emulation.emf import Datapoint
from tests.waiting import wait_for

DEADLINE_SECONDS = 240.0  # a deadline, not a wait: the test ends as soon as the storm is seen
STORM_WAIT: dict[str, float] = {"timeout": DEADLINE_SECONDS, "every": 0.5}
STORM = 6
"""Messages whose claim-check object never appears: each fails on every receive, nears its dead-letter
queue (NearDeadLetter) and is dead-lettered (the DLQ's depth alarm)."""


def transitions(cloud: LocalCloud) -> dict[str, list[tuple[str, str]]]:
    assert cloud.alarms is not None
    return {alarm.name: list(alarm.transitions) for alarm in cloud.alarms.alarms}


def went_to_alarm(cloud: LocalCloud, name: str) -> bool:
    return any(new == "ALARM" for _, new in transitions(cloud)[name])


CALM = {**FAST, "ConsumerTimeoutSeconds": "60"}


def test_a_failure_storm_in_one_stack_moves_no_alarm_of_the_other_in_the_same_account():
    # Given two stacks of the same template in one embedded account and region
    suffix = uuid.uuid4().hex[:6]
    with (
        local_cloud(FAST, stack_name=f"storm-{suffix}", examples=True) as storm,
        # the calm stack's consumer gets a minute, not --fast's 10 s: on a loaded machine a 10-s invocation
        # hands records back before its deadline, they come again, and NearDeadLetter counts them: its own
        # load, not the other stack's storm, which is what this test is about
        local_cloud(CALM, stack_name=f"calm-{suffix}", beside=storm, examples=True) as calm,
    ):
        assert calm.endpoint == storm.endpoint  # one embedded AWS
        assert storm.alarms is not None
        assert calm.alarms is not None
        evaluated = {a.name for a in storm.alarms.alarms}
        near = f"{storm.stack_name}-{ORDERS}-near-dead-letter"
        assert near in evaluated, f"the alarm on NearDeadLetter (EMF) is not evaluated: {evaluated}"
        assert f"{calm.stack_name}-{ORDERS}-near-dead-letter" in {a.name for a in calm.alarms.alarms}

        metrics = storm.feed.subscribe()  # every EMF datapoint of either stack, from now on
        # When one stack's consumer fails on every receive of many messages while the other's
        # processes its orders
        sqs = storm.client("sqs")
        bucket = storm.outputs["ClaimCheckBucketName"]
        prefix = storm.outputs["ClaimCheckPrefix"]
        for n in range(STORM):
            sqs.send_message(
                QueueUrl=storm.outputs[ORDERS + "QueueUrl"],
                MessageBody=claim_check(bucket, f"{prefix}never-{n}"),
            )
        for n in range(STORM):
            calm.client("sqs").send_message(
                QueueUrl=calm.outputs[ORDERS + "QueueUrl"], MessageBody=json.dumps(order(f"calm-{n}"))
            )

        # Then the storm's own alarms move: the one on its EMF metric and the one on its DLQ
        wait_for(lambda: went_to_alarm(storm, near), f"{near} in ALARM; {transitions(storm)}", **STORM_WAIT)
        dlq = f"{storm.stack_name}-{ORDERS}-dlq-depth"
        wait_for(lambda: went_to_alarm(storm, dlq), f"{dlq} in ALARM; {transitions(storm)}", **STORM_WAIT)
        # and the calm stack processed its orders, each stack's datapoints under its own name
        seen: list[Datapoint] = []

        def processed(service: str) -> float:
            seen.extend(metrics.drain())
            return sum(
                sum(p.values)
                for p in seen
                if p.name == "RecordsProcessed" and p.dimensions == (("service", service),)
            )

        calm_orders, storm_orders = f"{calm.stack_name}/{ORDERS}", f"{storm.stack_name}/{ORDERS}"
        wait_for(
            lambda: processed(calm_orders) >= STORM,
            f"calm's orders processed; {processed(calm_orders)}",
            **STORM_WAIT,
        )
        near_by = {
            service: sum(
                sum(p.values)
                for p in seen
                if p.name == "NearDeadLetter" and p.dimensions == (("service", service),)
            )
            for service in (storm_orders, calm_orders)
        }
        assert near_by[storm_orders] > 0, near_by
        assert near_by[calm_orders] == 0, near_by
        assert processed(storm_orders) == 0
        # ... and in the storm's stack, its other workload's alarms stay where they were
        others = {
            name: moves
            for name, moves in transitions(storm).items()
            if name.startswith(f"{storm.stack_name}-{REFUNDS}-") and went_to_alarm(storm, name)
        }
        assert others == {}, f"the {REFUNDS} workload's alarms moved with the {ORDERS} storm: {others}"
        calm_alarms = transitions(calm)
        moved = {name: moves for name, moves in calm_alarms.items() if went_to_alarm(calm, name)}
        assert moved == {}, f"the calm stack's alarms moved with the other's storm: {moved}"
        assert all(name.startswith(f"{calm.stack_name}-") for name in calm_alarms), calm_alarms
