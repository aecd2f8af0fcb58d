"""Where alarms go: the stack's own warning and critical topics, or topics of yours named by
WarningAlarmTopicArn / CriticalAlarmTopicArn (the first deploy asks). Checked on the template as
CloudFormation resolves it, every alarm of every nested template included (Given / When / Then)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.test_template_operations import VARIANTS, expected_alarms, of_type, resolved

PAGER = "arn:aws:sns:eu-west-1:123456789012:pager"
CHAT = "arn:aws:sns:eu-west-1:123456789012:chat"


def destinations(template: dict[str, Any]) -> dict[str, Any]:
    """Each alarm's one destination (its AlarmActions, which its OKActions repeat)."""
    alarms = of_type(template, "AWS::CloudWatch::Alarm")
    for lid, props in alarms.items():
        assert props.get("OKActions", props["AlarmActions"]) == props["AlarmActions"], lid
    return {lid: props["AlarmActions"] for lid, props in alarms.items()}


@pytest.mark.parametrize("parameters", VARIANTS)
def test_given_topics_of_yours_then_every_alarm_publishes_to_the_one_of_its_severity(
    parameters: dict[str, str],
) -> None:
    # Given a pager topic for critical alarms and a chat topic for warnings
    template = resolved({**parameters, "CriticalAlarmTopicArn": PAGER, "WarningAlarmTopicArn": CHAT})
    # Then each alarm publishes there, by its severity, and none to the stack's own topics
    severity = {lid: expected[-1] for lid, expected in expected_alarms(template).items()}
    wanted = {
        "CriticalTopic": [{"Ref": "CriticalAlarmTopicArn"}],
        "WarningTopic": [{"Ref": "WarningAlarmTopicArn"}],
    }
    assert destinations(template) == {lid: wanted[topic] for lid, topic in severity.items()}


def test_given_topics_of_yours_and_addresses_then_the_addresses_are_subscribed_to_the_topics_alarms_use() -> (
    None
):
    template = resolved(
        {
            "CriticalAlarmTopicArn": PAGER,
            "CriticalEmail": "oncall@example.com",
            "WarningEmail": "team@example.com",
        }
    )
    subscriptions = of_type(template, "AWS::SNS::Subscription")
    assert subscriptions["CriticalEmailSubscription"]["TopicArn"] == {"Ref": "CriticalAlarmTopicArn"}
    assert subscriptions["WarningEmailSubscription"]["TopicArn"] == {"Ref": "WarningTopic"}  # none of yours


def test_given_no_topic_of_yours_then_every_alarm_publishes_to_the_stacks_own() -> None:
    template = resolved({})
    own = {destination[0]["Ref"] for destination in destinations(template).values()}
    assert own == {"CriticalTopic", "WarningTopic"}
    assert "CriticalEmailSubscription" not in template["Resources"]  # no address: no subscription
