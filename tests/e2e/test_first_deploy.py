"""A fresh stack deploys with only what the first deploy asks (issue 26): template.yaml, as it ships,
deployed into embedded AWS with exactly the parameters scripts/first_deploy.py passes for a typical answer
set (samconfig.toml's with the answers over them; every other parameter its default), with the local
runtime's defaults; the stack is CREATE_COMPLETE and one message goes through."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from scripts.first_deploy import Answers, Destination, Plan, deploy_parameters
from sluice_local.app.messages import ORDERS, order
from sluice_local.emulation.cloud import ACCOUNT, LocalCloud
from tests.waiting import wait_for

if TYPE_CHECKING:
    from sluice_local.emulation.functions import Handler

REGION = "us-east-1"
PAGER = f"arn:aws:sns:{REGION}:{ACCOUNT}:pager"
ANSWERS = Answers(
    critical=Destination(email="oncall@example.com", topic_arn=PAGER),
    warning=Destination(email="team@example.com"),
    trusted_senders=(f"arn:aws:iam::{ACCOUNT}:role/producer",),
    operators=(f"arn:aws:iam::{ACCOUNT}:role/ops/operator",),
    business_key="order_id",
)


class PagerTopic:
    """The team's pager topic, there before the deploy as in their account (an Attachment)."""

    def attach(self, cloud: LocalCloud) -> None:
        cloud.client("sns").create_topic(Name=PAGER.rsplit(":", 1)[1])

    def environment_dropped(self, handler: Handler) -> None:
        pass  # a topic holds nothing of an execution environment

    def detach(self) -> None:
        pass  # it goes with the embedded account


def test_a_fresh_stack_deploys_with_only_the_first_deploy_answers_and_a_message_goes_through() -> None:
    # Given the parameters the first deploy passes for the typical answers: samconfig.toml's and the answers
    parameters = deploy_parameters(ANSWERS, "default")
    assert set(parameters) - set(ANSWERS.parameters()) <= {
        "LogLevel",
        "MaximumConcurrency",
        "MaxReceiveCount",
        "ConsumerTimeoutSeconds",
        "MaximumBatchingWindowInSeconds",
    }  # fmt: skip  (samconfig.toml's [default]: nothing else is given)
    plan = Plan("default", "sluice-first", REGION, parameters)
    assert "--parameter-overrides" in plan.command()
    # When a fresh stack of template.yaml is deployed with them alone
    with LocalCloud(parameters=parameters, stack_name=plan.stack_name, attachments=[PagerTopic()]) as cloud:
        [stack] = cloud.client("cloudformation").describe_stacks(StackName=plan.stack_name)["Stacks"]
        # Then it is complete, with the answers as its parameters and the alarms on the answered topics
        assert stack["StackStatus"] == "CREATE_COMPLETE"
        given = {p["ParameterKey"]: p["ParameterValue"] for p in stack["Parameters"]}
        assert all(
            value in given[name] for name, value in ANSWERS.parameters().items()
        )  # moto: a list's repr
        assert cloud.outputs["CriticalTopicArn"] == PAGER
        subscribed = cloud.client("sns").list_subscriptions_by_topic(TopicArn=PAGER)["Subscriptions"]
        assert [s["Endpoint"] for s in subscribed] == ["oncall@example.com"]
        # and one order sent to the example workload is processed: its charge is in the ledger
        cloud.client("sqs").send_message(
            QueueUrl=cloud.outputs[ORDERS + "QueueUrl"], MessageBody=json.dumps(order("first-1"))
        )
        ledger = cloud.client("dynamodb")

        def charged() -> bool:
            items = ledger.scan(TableName=cloud.outputs["LedgerTableName"])["Items"]
            return any(item["effect_key"]["S"] == "first-1#charge" for item in items)

        wait_for(charged, "order first-1 charged (its ledger item)", timeout=60)
