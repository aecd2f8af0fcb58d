"""What a consumer's source queue must hold, checked at cold start: refuse to start rather than deliver
twice or lose a message silently.

A queue the stack creates is configured by the template; a queue brought in by ARN (created outside
the stack, with its own retention and policy) is not, and the stack cannot change its redrive policy
or its visibility timeout. Either way the consumer reads the queue's attributes once per cold start
and refuses to start — :class:`~sluice.errors.ConfigurationError` naming the queue, the value found and
the value needed — when:

- the queue cannot be read (it does not exist, or the function may not read its attributes);
- its ``VisibilityTimeout`` is shorter than the consumer needs (``SLUICE_VISIBILITY_TIMEOUT_SECONDS``:
  6 x the function timeout + the batching window): a record still being processed would be delivered
  again to another invocation;
- it has no redrive policy: a message that keeps crashing the function (a timeout, an out-of-memory)
  never reaches sluice's own dead-lettering and is retried until the queue's retention deletes it;
- its redrive policy's ``maxReceiveCount`` is not the consumer's ``SLUICE_MAX_RECEIVE_COUNT``: the
  consumer's last-receive handling (its error recorded on the way to the DLQ) would run too early or
  never;
- the consumer dead-letters to one queue (``SLUICE_DEAD_LETTER_QUEUE_URL``) and the redrive policy to
  another, or that DLQ cannot be read: failures would be split between two places, or sent nowhere.

One ``GetQueueAttributes`` call per queue per cold start; nothing per message.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sluice.errors import ConfigurationError
from sluice.sqs import queue_identity, queue_url_from_arn, same_queue

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

__all__ = ["SourceQueueNeeds", "check_source_queue", "source_queue_problems"]


@dataclass(frozen=True)
class SourceQueueNeeds:
    visibility_seconds: int
    """The shortest visibility timeout the consumer can live with."""
    max_receive_count: int
    """The redrive policy's ``maxReceiveCount`` the consumer is configured for."""
    dead_letter_queue_url: str | None = None
    """Where the consumer dead-letters a record on its last receive (None: it leaves that to SQS)."""


def _attributes(sqs: SQSClient, url: str, names: list[Any]) -> tuple[dict[str, str] | None, str | None]:
    try:
        found = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=names).get("Attributes", {})
        return {str(k): str(v) for k, v in found.items()}, None
    except Exception as exc:  # noqa: BLE001 - any failure to read it is the problem reported
        error = getattr(exc, "response", None) or {}
        code = error.get("Error", {}).get("Code") or exc.__class__.__name__
        return None, str(code)


def source_queue_problems(sqs: SQSClient, queue_url: str, needs: SourceQueueNeeds) -> list[str]:
    """Every way the queue at ``queue_url`` (its URL, or its ARN: a workload's queue created outside the
    stack is named by ARN) falls short of ``needs``, worded for an operator; [] if none."""
    if queue_url.startswith("arn:"):
        queue_url = queue_url_from_arn(queue_url, endpoint=sqs.meta.endpoint_url)
    found, error = _attributes(sqs, queue_url, ["VisibilityTimeout", "RedrivePolicy", "QueueArn"])
    if found is None:
        return [f"source queue {queue_url} cannot be read ({error}): it must exist and be readable"]
    problems: list[str] = []
    visibility = int(found.get("VisibilityTimeout", "30"))
    if visibility < needs.visibility_seconds:
        problems.append(
            f"source queue {queue_url}: VisibilityTimeout is {visibility} s, the consumer needs at least "
            f"{needs.visibility_seconds} s (6 x the function timeout + the batching window; "
            "SLUICE_VISIBILITY_TIMEOUT_SECONDS): a record still in processing would be delivered again"
        )
    policy = _redrive_policy(found.get("RedrivePolicy"))
    if policy is None:
        problems.append(
            f"source queue {queue_url} has no redrive policy: a message that keeps crashing the function "
            "would be retried until the queue's retention deletes it; give it one to a DLQ with "
            f"maxReceiveCount {needs.max_receive_count}"
        )
        return problems
    target, count = policy
    if count != needs.max_receive_count:
        problems.append(
            f"source queue {queue_url}: its redrive policy's maxReceiveCount is {count}, the consumer "
            f"is configured for {needs.max_receive_count} (SLUICE_MAX_RECEIVE_COUNT)"
        )
    if needs.dead_letter_queue_url:
        mine, theirs = queue_identity(needs.dead_letter_queue_url), queue_identity(target)
        if mine is None or theirs is None or not same_queue(mine, theirs):
            problems.append(
                f"source queue {queue_url} dead-letters to {target} by its redrive policy, the consumer "
                f"to {needs.dead_letter_queue_url} (SLUICE_DEAD_LETTER_QUEUE_URL): they must be one queue"
            )
        elif (dlq_error := _attributes(sqs, needs.dead_letter_queue_url, ["QueueArn"])[1]) is not None:
            problems.append(
                f"dead-letter queue {needs.dead_letter_queue_url} cannot be read ({dlq_error}): "
                "it must exist and be readable"
            )
    return problems


def _redrive_policy(text: str | None) -> tuple[str, int] | None:
    """(deadLetterTargetArn, maxReceiveCount) of a ``RedrivePolicy`` attribute; None when it has none."""
    if not text:
        return None
    try:
        policy = json.loads(text)
        return str(policy["deadLetterTargetArn"]), int(policy["maxReceiveCount"])
    except (ValueError, KeyError, TypeError):
        return None


def check_source_queue(sqs: SQSClient, queue_url: str, needs: SourceQueueNeeds) -> None:
    """Cold start: :class:`ConfigurationError` listing every problem of the source queue, or nothing."""
    problems = source_queue_problems(sqs, queue_url, needs)
    if problems:
        raise ConfigurationError("; ".join(problems))
