"""Prove your own workload's code: events and a context for calling a handler directly, and a stack
deployed locally for sending it messages and waiting for where each one ends (docs/testing.md).

- :func:`sqs_record`, :func:`sqs_event`, :func:`lambda_context` (:mod:`.events`);
- :func:`sluice_record` and :class:`EffectLog` for a processor alone, :func:`consumer_world` for a handler
  in moto (:mod:`.direct`);
- :func:`start_stack`, :class:`RunningStack` (``send``, ``outcome``), :class:`Outcome` (:mod:`.stack`);
- :func:`with_workloads`: a copy of the project running only some of its workloads (:mod:`.project`);
- the pytest fixtures ``sluice_stack`` and ``sluice_context`` (:mod:`.plugin`).
"""

from typing import TYPE_CHECKING

from sluice._lazy import lazy_exports  # the library's own helper: both released together

if TYPE_CHECKING:
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

_EXPORTS = {
    "ConsumerWorld": "direct", "Delayed": "direct", "EffectLog": "direct", "Ended": "direct",
    "consumer_world": "direct", "sluice_record": "direct",
    "QUEUE_ARN": "events", "lambda_context": "events", "sqs_event": "events", "sqs_record": "events",
    "with_workloads": "project",
    "Outcome": "stack", "RunningStack": "stack", "configure_existing_queue": "stack",
    "port_is_closed": "stack", "start_stack": "stack",
}  # fmt: skip
"""Imported on first use (PEP 562): a test of a processor alone pays neither for the local runtime's
template machinery (the SAM translator) nor for the stack it never starts."""
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

__all__ = [
    "QUEUE_ARN", "ConsumerWorld", "Delayed", "EffectLog", "Ended", "Outcome", "RunningStack",
    "configure_existing_queue", "consumer_world", "lambda_context", "port_is_closed", "sluice_record",
    "sqs_event", "sqs_record", "start_stack", "with_workloads",
]  # fmt: skip
