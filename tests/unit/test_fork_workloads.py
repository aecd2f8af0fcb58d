"""A team's fork stays green: a copy of the project with two workloads added as docs/workloads.md says
(one on a queue the stack creates, one on an existing queue named by its QueueArn) passes the same
structural checks as the project itself: the template contract's rules (tests/unit/test_template.py),
every alarm (tests/unit/test_template_operations.py) and the workloads' blocks
(tests/unit/test_template_workload_settings.py). A check that assumed the workloads are the examples
fails here (Given / When / Then)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from samtranslator.yaml_helper import yaml_parse

from tests.unit.test_template import (
    RULES,
    Check,
    load_template,
    project_with_examples,
    test_given_each_workloads_redrive_roles_then_they_reach_only_its_own_breaker_item,
    translate,
    workload_names,
)
from tests.unit.test_template_operations import VARIANTS, check_alarms, resolved
from tests.unit.test_template_workload_settings import _stack_maximum, check_workload_settings

Template = dict[str, Any]

# Named so no fork's own workload is one of them; each block as docs/workloads.md writes one.
CREATED = "TrialShipments"
EXISTING = "TrialInvoices"
EXISTING_ARN = "arn:aws:sqs:us-east-1:123456789012:trial-invoices"
ADDED = {
    CREATED: '      Code: examples/orders/\n      KeyPath: "[shipment_id, step]"\n      Timeout: "60"\n',
    EXISTING: f"      Code: examples/refunds/\n      KeyPath: invoice_id\n"
    f"      Queue: existing\n      QueueArn: {EXISTING_ARN}\n",
}


@pytest.fixture(scope="module")
def fork(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return project_with_examples(tmp_path_factory.mktemp("fork"), ADDED)


@pytest.fixture(scope="module")
def raw(fork: Path) -> Template:
    return load_template(fork)


@pytest.fixture(scope="module")
def cfn(raw: Template) -> Template:
    return translate(raw)


def test_given_the_fork_then_it_runs_its_own_workloads_beside_the_projects(raw: Template) -> None:
    names = workload_names(raw)
    assert {CREATED, EXISTING, "Orders"} <= set(names)
    resources = raw["Resources"]
    # the created one has its queue; the existing one only the event source reading its ARN
    assert f"{CREATED}Queue" in resources
    assert f"{EXISTING}Queue" not in resources
    source = resources[f"{EXISTING}QueueSource"]["Properties"]["EventSourceArn"]
    assert source == {"Fn::FindInMap": ["Workloads", EXISTING, "QueueArn"]}
    assert raw["Mappings"]["Workloads"][EXISTING]["QueueArn"] == EXISTING_ARN


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.__name__.removeprefix("check_"))
def test_given_the_fork_when_checked_then_every_template_rule_holds(
    rule: Check, raw: Template, cfn: Template
) -> None:
    assert rule(raw, cfn) == []


def test_given_the_fork_then_each_workloads_redrive_reaches_only_its_own_breaker_item(raw: Template) -> None:
    test_given_each_workloads_redrive_roles_then_they_reach_only_its_own_breaker_item(raw)


@pytest.mark.parametrize("parameters", VARIANTS)
def test_given_the_fork_in_each_mode_then_every_alarm_watches_its_metric_and_notifies_its_topic(
    parameters: dict[str, str], fork: Path
) -> None:
    template = resolved(parameters, fork)
    check_alarms(template)
    # the existing queue's age alarm watches that queue, by the name its ARN ends in
    [dimension] = template["Resources"][f"{EXISTING}QueueAgeAlarm"]["Properties"]["Dimensions"]
    assert "trial-invoices" in str(dimension["Value"])


def test_given_the_fork_then_every_workloads_block_holds(fork: Path) -> None:
    blocks = yaml_parse((fork.parent / "workloads.yaml").read_text(encoding="utf-8"))["Mappings"]["Workloads"]
    assert {CREATED, EXISTING} <= set(blocks)
    assert check_workload_settings(dict(blocks), _stack_maximum()) == []
