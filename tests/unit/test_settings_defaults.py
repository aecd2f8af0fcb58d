"""One default per setting: template.yaml's parameter defaults are the settings models' defaults, and a
producer's job store built with defaults finds the deployed job consumer's table (Given / When / Then)."""

from __future__ import annotations

import copy
import inspect
from typing import Any

import pytest
from pydantic import create_model

from sluice.jobs import Connector, JobConsumerSettings, JobSettings, JobStore, defaults
from sluice.settings import EnvSettings
from tests.unit.settings_sources import (
    ACCOUNT,
    MODELS,
    REGION,
    Template,
    fields_named,
    function_env,
    load_template,
    model_default,
    parameter_default,
    parameter_fed,
    same,
)

JOB_CONSUMER = "JobConsumerFunction"
DEPLOYED = {"DatabaseSecretArn": f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:jobs-db"}
"""A deploy with a job store: every other parameter at its default."""

PRODUCER_DEFAULTS = (  # what JobStore.from_settings / Connector.from_settings pass, keyword by keyword
    (JobStore, "schema", "jobs_schema"),
    (JobStore, "isolation", "job_isolation"),
    (JobStore, "serialization_retries", "job_serialization_retries"),
    (JobStore, "backoff_base_seconds", "job_backoff_base_seconds"),
    (JobStore, "backoff_cap_seconds", "job_backoff_cap_seconds"),
    (JobStore, "default_max_attempts", "job_max_attempts"),
    (Connector, "statement_timeout_ms", "statement_timeout_ms"),
    (Connector, "lock_timeout_ms", "lock_timeout_ms"),
    (Connector, "connect_timeout_seconds", "connect_timeout_seconds"),
    (Connector, "behind_proxy", "behind_proxy"),
)


@pytest.fixture(scope="module")
def raw() -> Template:
    return load_template()


def default_disagreements(template: Template, models: tuple[type[EnvSettings], ...] = MODELS) -> list[str]:
    """Every ``SLUICE_*`` variable a parameter feeds whose model default is not the parameter's default."""
    problems = []
    for variable, parameter in sorted(parameter_fed(template).items()):
        stated = parameter_default(template, parameter)
        for model, field in fields_named(variable, models):
            if not field.is_required() and not same(model_default(field), stated):
                problems.append(
                    f"{variable}: {model} defaults to {field.default!r}, parameter {parameter} to {stated!r}"
                )
    return problems


def deployed_job_consumer(template: Template) -> JobConsumerSettings:
    """The job consumer's settings as its function reads them at cold start, deployed from ``template``."""
    return JobConsumerSettings.from_env(function_env(template, JOB_CONSUMER, DEPLOYED))


def producer_disagreements(template: Template) -> list[str]:
    """A producer's ``JobStore`` / ``Connector`` keyword defaults that differ from the deployed consumer's."""
    deployed = deployed_job_consumer(template)
    problems = []
    for cls, keyword, field in PRODUCER_DEFAULTS:
        default: Any = inspect.signature(cls).parameters[keyword].default
        if default != getattr(deployed, field):
            problems.append(
                f"{cls.__name__}({keyword}=) defaults to {default!r}; the deployed job consumer's "
                f"SLUICE_{field.upper()} is {getattr(deployed, field)!r}"
            )
    return problems


def _with_default(template: Template, parameter: str, value: str) -> Template:
    changed = copy.deepcopy(template)
    changed["Parameters"][parameter]["Default"] = value
    return changed


# --- the template's defaults are the models' ---------------------------------------------------------


def test_given_the_template_then_every_parameter_fed_setting_has_the_models_default(raw: Template) -> None:
    # Given every SLUICE_* variable set from a parameter, When its defaults are compared
    problems = default_disagreements(raw)
    # Then the parameter's default is the model's (read as the model reads it: "50" is 50.0)
    assert problems == []
    assert len(parameter_fed(raw)) >= 20  # the comparison saw the parameters, not an empty template


def test_given_a_parameter_default_that_differs_from_its_model_then_the_check_names_both() -> None:
    # Given the template's JobLeaseSeconds at the 900 the job settings once defaulted to
    changed = _with_default(load_template(), "JobLeaseSeconds", "900")
    # When checked, Then the variable, the model and both values are named
    [problem] = default_disagreements(changed, (JobSettings,))
    assert problem.startswith("SLUICE_JOB_LEASE_SECONDS: JobSettings defaults to 960")
    assert problem.endswith("parameter JobLeaseSeconds to '900'")


def test_given_a_model_default_that_differs_from_its_parameter_then_the_check_notices(raw: Template) -> None:
    # Given a consumer model whose key path defaults to the example's field
    from sluice.consumer.settings import ConsumerSettings  # noqa: PLC0415

    example_default = create_model(
        "ExampleConsumerSettings", __base__=ConsumerSettings, idempotency_key_jmespath=(str, "order_id")
    )
    # When checked, Then the disagreement with the template's default is reported
    [problem] = default_disagreements(raw, (example_default,))
    assert problem.startswith("SLUICE_IDEMPOTENCY_KEY_JMESPATH")


# --- a producer's job store and the deployed job consumer ----------------------------------------------


def test_given_a_producers_default_job_store_then_it_uses_the_deployed_job_consumers_schema(
    raw: Template,
) -> None:
    # Given the job consumer as the template deploys it (JobsSchema left at its default)
    deployed = deployed_job_consumer(raw)
    # When a producer builds its store with no schema=
    store = JobStore(Connector(lambda _refresh: "postgresql://producer@db/app"))
    # Then both name the same schema: the producer's rows are the ones the consumer claims
    assert store.schema == deployed.jobs_schema == defaults.SCHEMA == "sluice"
    assert JobStore.from_settings(deployed, Connector(lambda _r: ""), worker="w").schema == store.schema


def test_given_a_producers_default_job_store_then_every_store_default_is_the_deployed_ones(
    raw: Template,
) -> None:
    assert producer_disagreements(raw) == []


def test_given_a_stack_whose_schema_default_differs_then_the_producer_check_notices(raw: Template) -> None:
    # Given a template whose JobsSchema defaults to "public" (what JobStore once defaulted to on its own)
    changed = _with_default(raw, "JobsSchema", "public")
    # When the producer's defaults are compared with that consumer's, Then the schema is reported
    [problem] = producer_disagreements(changed)
    assert problem.startswith("JobStore(schema=) defaults to 'sluice'")
    assert problem.endswith("SLUICE_JOBS_SCHEMA is 'public'")
