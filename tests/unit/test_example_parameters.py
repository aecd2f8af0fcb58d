"""The template's business key fits no example; the example's stacks set theirs as the example's own
configuration (Given / When / Then)."""

from __future__ import annotations

from sluice.consumer.settings import ConsumerSettings
from sluice_local.app.messages import EXAMPLE_PARAMETERS, order
from sluice_local.app.stack import local_cloud
from tests.unit.settings_sources import load_template, parameter_default

KEY_PATH = "IdempotencyKeyJmesPath"


def test_given_the_template_then_its_key_path_defaults_to_message_identity() -> None:
    # Given the template and the consumer's settings, Then neither assumes a business key
    assert parameter_default(load_template(), KEY_PATH) == ""
    assert ConsumerSettings.model_fields["idempotency_key_jmespath"].default == ""


def test_given_the_example_then_its_key_path_names_its_orders_id() -> None:
    # Given the example's configuration, Then its key path finds the id of every order it sends
    assert EXAMPLE_PARAMETERS == {KEY_PATH: "order_id"}
    assert order("o-1")["order_id"] == "o-1"


def test_given_a_local_stack_when_built_then_it_deploys_with_the_examples_key_path() -> None:
    # When the stack the demo, the soak, the e2e tests and `python -m sluice_local up` start is built
    cloud = local_cloud({"LogLevel": "INFO"})
    # Then it carries the example's key path beside the caller's parameters
    assert cloud.parameters[KEY_PATH] == "order_id"
    assert cloud.parameters["LogLevel"] == "INFO"


def test_given_a_callers_key_path_when_a_local_stack_is_built_then_the_caller_wins() -> None:
    # When a caller deploys the stack with its own key path (here: none)
    cloud = local_cloud({KEY_PATH: ""})
    # Then the example's does not replace it
    assert cloud.parameters[KEY_PATH] == ""
