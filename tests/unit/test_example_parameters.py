"""The template's business key fits no example; the example workloads set theirs in their own block of
template.yaml's Mappings.Workloads, as a team's workload does (Given / When / Then)."""

from __future__ import annotations

from sluice.consumer.settings import ConsumerSettings
from sluice_local.app.messages import ORDERS, REFUNDS, order
from sluice_local.app.stack import local_cloud
from tests.unit.settings_sources import function_env, load_template, parameter_default

KEY_PATH = "IdempotencyKeyJmesPath"


def test_given_the_template_then_its_key_path_defaults_to_message_identity() -> None:
    # Given the template and the consumer's settings, Then neither assumes a business key
    assert parameter_default(load_template(), KEY_PATH) == ""
    assert ConsumerSettings.model_fields["idempotency_key_jmespath"].default == ""


def test_given_the_example_workloads_then_each_names_its_own_key_path_in_its_block() -> None:
    # Given the template as deployed, Then each example's consumer keys by its own id field
    template = load_template()
    assert template["Mappings"]["Workloads"][ORDERS]["KeyPath"] == "order_id"
    assert template["Mappings"]["Workloads"][REFUNDS]["KeyPath"] == "refund_id"
    assert (
        function_env(template, f"{ORDERS}ConsumerFunction")["SLUICE_IDEMPOTENCY_KEY_JMESPATH"] == "order_id"
    )
    assert (
        function_env(template, f"{REFUNDS}ConsumerFunction")["SLUICE_IDEMPOTENCY_KEY_JMESPATH"] == "refund_id"
    )
    assert order("o-1")["order_id"] == "o-1"


def test_given_a_local_stack_when_built_then_it_adds_nothing_for_the_examples() -> None:
    # When the stack the demo, the soak, the e2e tests and `python -m sluice_local up` start is built
    cloud = local_cloud({"LogLevel": "INFO"})
    # Then its parameters are samconfig.toml's and the caller's: the examples need no stack parameter
    assert KEY_PATH not in cloud.parameters
    assert cloud.parameters["LogLevel"] == "INFO"
