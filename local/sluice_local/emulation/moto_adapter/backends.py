"""moto's server, its settings, and reads and writes on its backends: switch off its own SQS→Lambda
invoke-on-send, hand state machines created through CloudFormation to the executing backend, read
queue metrics for alarms, list EventBridge rules for schedules, reset every backend."""

from __future__ import annotations

import json
import time
from typing import Any

from sluice_local.emulation.asl_rules import unsupported_fields
from sluice_local.emulation.moto_adapter.attributes import MODULE_LIST, SETTINGS, Undo, replace


def start_server(port: int) -> Any:
    """moto's threaded HTTP server on a loopback port (stop it with ``.stop()``)."""
    from moto.server import ThreadedMotoServer  # noqa: PLC0415

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    return server


def install_module_list_once() -> Undo:
    """moto's server finds a request's backend by listing its own package's folders (a listdir and
    an isdir per folder) on every request, under its dispatcher's lock: about 7 % of a soak worker's
    CPU. The folders do not change while a stack runs, so they are listed once."""
    owner = MODULE_LIST.owner_class()
    listed = tuple(getattr(owner, MODULE_LIST.name)())
    return replace(owner, MODULE_LIST.name, lambda: listed)


def configure() -> Undo:
    """Apply :data:`SETTINGS`; returns what restores the previous ones."""
    from moto.core.config import default_user_config  # noqa: PLC0415

    saved = {key: default_user_config.get(key) for key in SETTINGS}
    for key, value in SETTINGS.items():
        default_user_config[key] = dict(value)  # type: ignore[literal-required]

    def undo() -> None:
        for key, value in saved.items():
            default_user_config[key] = value  # type: ignore[literal-required]

    return undo


def reset() -> None:
    """Reset every moto backend (what ``POST /moto-api/reset`` does)."""
    from moto.moto_api._internal.models import moto_api_backend  # noqa: PLC0415

    moto_api_backend.reset()


def detach_sqs_invoke(account: str, region: str, queue_name: str) -> None:
    """Switch off moto's own synchronous invoke-on-send for a queue (the runtime's poller replaces it)."""
    from moto.sqs.models import sqs_backends  # noqa: PLC0415

    sqs_backends[account][region].queues[queue_name].lambda_event_source_mappings.clear()


def hand_over_state_machines(account: str, region: str) -> None:
    """CloudFormation creates state machines in moto's plain backend; executions run in its parser
    backend (``execute_state_machine``). Hand each new one over, validating its definition as AWS
    would: raises ``ValueError`` naming the first invalid one."""
    from moto.stepfunctions.models import stepfunctions_backends  # noqa: PLC0415
    from moto.stepfunctions.parser.models import (  # noqa: PLC0415
        StepFunctionsParserBackend,
        stepfunctions_parser_backends,
    )

    plain = stepfunctions_backends[account][region]
    executing = stepfunctions_parser_backends[account][region]
    known = {sm.arn for sm in executing.state_machines}
    for machine in plain.state_machines:
        if machine.arn in known:
            continue
        try:
            StepFunctionsParserBackend._validate_definition(definition=machine.definition)
        except Exception as exc:
            raise ValueError(f"state machine {machine.name}: invalid definition: {exc}") from exc
        if problems := unsupported_fields(json.loads(machine.definition)):  # moto drops them at run time
            raise ValueError(
                f"state machine {machine.name}: SCHEMA_VALIDATION_FAILED: " + "; ".join(problems)
            )
        executing.state_machines.append(machine)


def event_rules(account: str, region: str) -> list[Any]:
    """Every EventBridge rule on every bus (moto ``Rule`` objects: ``name``, ``arn``, ``state``,
    ``scheduled_expression``, ``send_to_targets(event)``)."""
    from moto.events.models import events_backends  # noqa: PLC0415

    return [
        rule for bus in events_backends[account][region].event_buses.values() for rule in bus.rules.values()
    ]


DEPTH_METRICS = (
    "ApproximateNumberOfMessagesVisible", "ApproximateNumberOfMessagesNotVisible",
    "ApproximateNumberOfMessagesDelayed",
)  # fmt: skip
"""What a queue holds, as CloudWatch names it: visible, in flight, delayed."""


def queue_metric(account: str, region: str, queue_name: str, metric: str) -> float | None:
    """An ``AWS/SQS`` queue metric as CloudWatch would report it now; None if unknown."""
    from moto.sqs.models import sqs_backends  # noqa: PLC0415

    queue = sqs_backends[account][region].queues.get(queue_name)
    if queue is None:
        return None
    if metric == "ApproximateNumberOfMessagesVisible":
        return float(queue.approximate_number_of_messages)
    if metric == "ApproximateNumberOfMessagesNotVisible":
        return float(queue.approximate_number_of_messages_not_visible)
    if metric == "ApproximateNumberOfMessagesDelayed":
        return float(queue.approximate_number_of_messages_delayed)
    if metric == "ApproximateAgeOfOldestMessage":
        sent: list[int] = []
        for message in list(queue._messages):
            if message.sent_timestamp is not None:
                sent.append(message.sent_timestamp)
        return max(0.0, time.time() - min(sent) / 1000) if sent else 0.0
    return None


def wait_while_empty(account: str, region: str, queue_name: str, timeout: float) -> bool:
    """Whether the queue holds a message (visible, in flight or delayed), waiting up to ``timeout`` s
    for one on the queue's own condition, which moto notifies when a message is added: no request to
    the server (an idle queue's pollers then cost nothing). True for a queue moto does not know, or a
    moto whose queue has no such condition: the receive that follows decides, as before."""
    from moto.sqs.models import sqs_backends  # noqa: PLC0415

    queue = sqs_backends[account][region].queues.get(queue_name)
    lock = getattr(queue, "_messages_lock", None)  # moto's own: without it, the receive decides
    if queue is None or lock is None or not hasattr(queue, "_messages"):
        return True
    with lock:
        return bool(lock.wait_for(lambda: len(queue._messages) > 0, timeout=timeout))


def metric_data_since(
    account: str, region: str, cursor: int
) -> tuple[list[tuple[str, str, tuple[tuple[str, str], ...], float]], int]:
    """The datapoints put with ``PutMetricData`` after the first ``cursor`` ones, as (namespace, name,
    sorted dimensions, value), and the cursor past them. moto appends each datapoint to one list."""
    from moto.cloudwatch.models import MetricDatum, cloudwatch_backends  # noqa: PLC0415

    new = cloudwatch_backends[account][region].metric_data[cursor:]  # one copy: a put meanwhile is next
    fresh = [
        (d.namespace, d.name, tuple(sorted((str(x.name), str(x.value)) for x in d.dimensions)), d.value)
        for d in new
        if isinstance(d, MetricDatum)
    ]
    return fresh, cursor + len(new)
