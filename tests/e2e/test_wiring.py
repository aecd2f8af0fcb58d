"""The template is the source of truth: a wiring error in it makes the scenario fail, clearly."""

from __future__ import annotations

from pathlib import Path

from sluice_local.app import observer
from sluice_local.demo.scenarios import consumer, runner
from sluice_local.testing import port_is_closed, start_stack
from sluice_local.testing.project import copy_project, examples_only

from .conftest import ROOT


def miswired_template(tmp: Path) -> Path:
    """A copy of the project whose workloads' consumers send poison pills to their dead-letter queue."""
    copy_project(ROOT / "template.yaml", tmp)
    text = examples_only((ROOT / "workloads.yaml").read_text())  # the examples, whatever a fork lists
    wrong = text.replace(  # in the workloads' loop: each workload's functions, its own DLQ
        "              SLUICE_POISON_QUEUE_URL: !Ref PoisonPillQueue",
        '              SLUICE_POISON_QUEUE_URL: {Ref: !Sub "${Name}DeadLetterQueue"}',
    )
    assert wrong != text, "workloads.yaml no longer wires SLUICE_POISON_QUEUE_URL the expected way"
    (tmp / "workloads.yaml").write_text(wrong)
    return tmp / "template.yaml"


class PoisonUntilFoundElsewhere(consumer.Poison):
    """The poison scenario, given up as soon as its messages show up where they do not belong, rather
    than after a fixed few seconds (which a loaded machine may need just to consume them)."""

    timeout = 60.0

    def observe(self, stack: observer.Stack) -> tuple[bool, str]:
        ok, seen = super().observe(stack)
        if "found instead in" in seen:
            self.failed = True
        return ok, seen


def test_a_miswired_poison_queue_fails_the_poison_scenario_with_a_clear_message(tmp_path):
    running = start_stack(tmp_path, stack_name="sluice-miswired", template=miswired_template(tmp_path))
    try:
        scenario = PoisonUntilFoundElsewhere()
        [outcome] = runner.run(running.stack, [scenario])
    finally:
        code = running.stop()
    assert not outcome.ok
    assert "0 in PoisonPillQueue" in outcome.observed
    assert "found instead in OrdersDeadLetterQueue" in outcome.observed
    assert code == 0
    assert port_is_closed(running.port)
