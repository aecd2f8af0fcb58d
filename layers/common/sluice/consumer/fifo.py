"""The consumer's FIFO mode: on when the records come from a FIFO queue (its name ends in ``.fifo``).

A FIFO queue's batch runs in order, one record at a time (:func:`sluice.partial.each_record_in_order`):
the first failure stops the batch, or with ``SLUICE_FIFO_SKIP_GROUP_ON_ERROR`` only its group's later
records. A record reported unrun is handed back at once (visibility 0): its group stays blocked while
the failed record is in flight (SQS returns no later message of a group while one of it is in flight),
and the other groups' records come back without waiting for the queue's visibility timeout. A failed
record's backoff is its visibility, as on a standard queue: nothing here sends with ``DelaySeconds``,
which SQS refuses per message on a FIFO queue.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from sluice import metrics
from sluice.groups import group_param
from sluice.partial import SqsRecord, each_record, each_record_in_order, is_fifo

if TYPE_CHECKING:
    from aws_lambda_powertools import Logger
    from aws_lambda_powertools.utilities.typing import LambdaContext
    from mypy_boto3_sqs import SQSClient

    from sluice.arrival import Arrival
    from sluice.consumer.settings import ConsumerSettings
    from sluice.consumer.stats import BatchStats

__all__ = ["dead_letter_fields", "hand_back_unrun", "handing_back", "partial_response"]


def partial_response(
    event: Mapping[str, Any],
    handler: Callable[[SqsRecord], None],
    context: LambdaContext | None,
    settings: ConsumerSettings,
    *,
    on_skipped: Callable[[SqsRecord], None],
) -> dict[str, Any]:
    """The batch's ``batchItemFailures``: in order for a FIFO queue's records (``on_skipped`` gets each
    reported unrun), else on ``settings.concurrency`` threads."""
    records = event.get("Records")
    first = records[0] if isinstance(records, list) and records else None
    if isinstance(first, Mapping) and is_fifo(str(first.get("eventSourceARN", ""))):
        return each_record_in_order(
            event, handler, skip_group_on_error=settings.fifo_skip_group_on_error, on_skipped=on_skipped
        )
    return each_record(event, handler, context=context, workers=settings.concurrency)


def handing_back(
    sqs: SQSClient,
    queue_url: Callable[[str], str],
    settle: Callable[[str], None],
    stats: BatchStats,
    *,
    log: Logger,
) -> Callable[[SqsRecord], None]:
    """The batch's ``on_skipped``: stop extending the record (``settle``, the heartbeat's), count it
    (``RecordsHeldBack``), then hand it back (:func:`hand_back_unrun`) to the queue ``queue_url`` gives
    for its ``eventSourceARN``."""

    def skipped(record: SqsRecord) -> None:
        settle(record.message_id)
        stats.add(metrics.RECORDS_HELD_BACK)
        hand_back_unrun(sqs, queue_url(record.event_source_arn), record, log=log)

    return skipped


def hand_back_unrun(sqs: SQSClient, queue_url: str, record: SqsRecord, *, log: Logger) -> None:
    """Make a record the FIFO rule left unrun visible again now (its receive still counts)."""
    log.info(
        "record not run: an earlier record of its batch or group failed; handed back",
        extra={"message_id": record.message_id, "message_group_id": record.message_group_id},
    )
    try:
        sqs.change_message_visibility(
            QueueUrl=queue_url, ReceiptHandle=record.receipt_handle, VisibilityTimeout=0
        )
    except Exception:
        log.warning("could not hand the record back; the queue's timeout applies", exc_info=True)


def dead_letter_fields(queue_url: str, arrival: Arrival, group: str | None) -> dict[str, Any]:
    """What a send of ``arrival`` to the dead-letter queue ``queue_url`` adds: the group it was received
    in, as every hop sends it (:func:`sluice.groups.group_param`: a fair queue's tenant, a FIFO group),
    and when the queue is FIFO a deduplication id, its message id (a repeat of this send within SQS's
    five-minute window is dropped; the DLQ need not deduplicate by content)."""
    fields: dict[str, Any] = dict(group_param(group))
    if is_fifo(queue_url):
        fields["MessageDeduplicationId"] = arrival.message_id
    return fields
