"""Rules AWS applies to a state machine definition that moto does not.

moto's Step Functions parser accepts any field in an optimized integration's ``Parameters`` and drops
the ones it does not know when the task runs. AWS refuses such a definition when the state machine is
created (``SCHEMA_VALIDATION_FAILED: The field "X" is not supported by Step Functions``), so a field
that silently vanished here would fail the deployment there. The local runtime refuses it too.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

OPTIMIZED_PARAMETERS: Mapping[tuple[str, str], frozenset[str]] = {
    # The "Supported parameters" of each optimized integration sluice uses (Step Functions developer
    # guide, "Integrating services"). Anything else goes through an aws-sdk:<service>:<action> task.
    ("sqs", "sendMessage"): frozenset(
        {
            "DelaySeconds",
            "MessageAttributes",
            "MessageBody",
            "MessageDeduplicationId",
            "MessageGroupId",
            "QueueUrl",
        }
    ),
    ("lambda", "invoke"): frozenset(
        {"ClientContext", "FunctionName", "InvocationType", "Qualifier", "Payload"}
    ),
}
_OPTIMIZED = re.compile(
    r"^arn:aws[a-z-]*:states:::(?P<service>[a-z0-9-]+):(?P<action>[A-Za-z]+)(\.[a-zA-Z]+)?$"
)


def _states(states: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    for name, state in states.items():
        yield name, state
        for inner in (state.get("ItemProcessor"), state.get("Iterator"), *state.get("Branches", [])):
            if isinstance(inner, Mapping):
                yield from _states(inner.get("States", {}))


def unsupported_fields(definition: Mapping[str, Any]) -> list[str]:
    """``"<state>: <field>"`` for every Parameters field an optimized integration does not support."""
    problems = []
    for name, state in _states(definition.get("States", {})):
        match = _OPTIMIZED.match(str(state.get("Resource", ""))) if state.get("Type") == "Task" else None
        allowed = OPTIMIZED_PARAMETERS.get((match["service"], match["action"])) if match else None
        if allowed is None:
            continue
        for field in state.get("Parameters") or {}:
            bare = field.removesuffix(".$")
            if bare not in allowed:
                problems.append(f'{name}: the field "{bare}" is not supported by Step Functions')
    return problems


__all__ = ["OPTIMIZED_PARAMETERS", "unsupported_fields"]
