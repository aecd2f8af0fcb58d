"""Prove your own workload's code: events and a context for calling a handler directly, and a stack
deployed locally for sending it messages and waiting for where each one ends (docs/testing.md).

- :func:`sqs_record`, :func:`sqs_event`, :func:`lambda_context` (:mod:`.events`);
- :func:`sluice_record` and :class:`EffectLog` for a processor alone, :func:`consumer_world` for a handler
  in moto (:mod:`.direct`);
- :func:`start_stack`, :class:`RunningStack` (``send``, ``outcome``), :class:`Outcome` (:mod:`.stack`);
- :func:`with_workloads`: a copy of the project running only some of its workloads (:mod:`.project`);
- the pytest fixtures ``sluice_stack`` and ``sluice_context`` (:mod:`.plugin`).
"""

from sluice_local.testing.direct import (
    ConsumerWorld,
    Delayed,
    EffectLog,
    Ended,
    consumer_world,
    sluice_record,
)
from sluice_local.testing.events import QUEUE_ARN, lambda_context, sqs_event, sqs_record
from sluice_local.testing.project import with_workloads
from sluice_local.testing.stack import (
    Outcome,
    RunningStack,
    configure_existing_queue,
    port_is_closed,
    start_stack,
)

__all__ = [
    "QUEUE_ARN", "ConsumerWorld", "Delayed", "EffectLog", "Ended", "Outcome", "RunningStack",
    "configure_existing_queue", "consumer_world", "lambda_context", "port_is_closed", "sluice_record",
    "sqs_event", "sqs_record", "start_stack", "with_workloads",
]  # fmt: skip
