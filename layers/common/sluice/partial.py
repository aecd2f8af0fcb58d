"""The partial-batch loop of the functions an SQS event source mapping invokes one record at a time.

The consumer and the job consumer hand each record of an SQS event to a handler: a record whose
handler returns is done (Lambda deletes it), one whose handler raises is reported in
``batchItemFailures`` (SQS delivers it again), whatever the other records did. Records may run on a
bounded thread pool (the consumer's ``SLUICE_CONCURRENCY``); the failures are reported in the event's
order either way.

This is the whole of what these functions used of Powertools' batch processor (``BatchProcessor``,
``process_partial_response``), written out: importing ``aws_lambda_powertools.utilities.batch`` builds
Powertools' pydantic event models (Kafka, Kinesis, DynamoDB streams...), about 100 ms of every cold
start for a loop of a few lines. A handler gets an :class:`SqsRecord`, which reads the fields of Powertools'
``SQSRecord`` sluice reads (and ``raw_event``, the record as Lambda sent it).

A FIFO queue's batch follows Lambda's rule for it instead (:func:`each_record_in_order`, Powertools'
``SqsFifoPartialProcessor``'s semantics): in order, one record at a time, nothing after a failure run.

The batch-delay function is not one of them: its records are grouped (by target, by due-time bucket)
and sent or parked together, so a record's outcome is only known after its group's send.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext

__all__ = ["SqsRecord", "each_record", "each_record_in_order", "is_fifo"]


def is_fifo(queue: str) -> bool:
    """Whether ``queue`` (its ARN or URL) is a FIFO queue: SQS requires a FIFO queue's name to end
    in ``.fifo`` and forbids that ending on a standard queue."""
    return queue.endswith(".fifo")


class SqsRecord(Mapping[str, Any]):
    """One record of a Lambda SQS event: the fields of Powertools' ``SQSRecord`` that sluice reads; a
    mapping of the record's own keys, as Powertools' is."""

    __slots__ = ("raw_event",)

    def __init__(self, raw_event: Mapping[str, Any]) -> None:
        self.raw_event = raw_event
        """The record as Lambda sent it."""

    def __getitem__(self, key: str) -> Any:
        return self.raw_event[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.raw_event)

    def __len__(self) -> int:
        return len(self.raw_event)

    @property
    def message_id(self) -> str:
        return str(self.raw_event["messageId"])

    @property
    def receipt_handle(self) -> str:
        return str(self.raw_event["receiptHandle"])

    @property
    def event_source_arn(self) -> str:
        return str(self.raw_event["eventSourceARN"])

    @property
    def message_group_id(self) -> str:
        """The record's ``MessageGroupId`` ('' when it has none)."""
        attributes = self.raw_event.get("attributes")
        return str(attributes.get("MessageGroupId") or "") if isinstance(attributes, Mapping) else ""

    @property
    def body(self) -> str:
        return str(self.raw_event.get("body") or "")


def _records(event: Mapping[str, Any]) -> list[Any]:
    records = event.get("Records")
    if not isinstance(records, list):
        raise ValueError("not an SQS event: it has no Records list")  # noqa: TRY004 - a bad value, as Powertools says
    return records


def each_record(
    event: Mapping[str, Any],
    handler: Callable[[SqsRecord], None],
    *,
    context: LambdaContext | None,
    workers: int = 1,
) -> dict[str, Any]:
    """Run ``handler`` on every record of ``event`` (on up to ``workers`` threads); returns
    ``{"batchItemFailures": [...]}`` naming, in the event's order, the records whose handler raised.

    ``context`` is the invocation's (kept for the callers' symmetry; the handlers close over what they
    need). An event without a ``Records`` list is not an SQS event: :class:`ValueError`, and Lambda
    retries the whole batch (as Powertools does)."""
    records = _records(event)

    def run(raw: Mapping[str, Any]) -> str | None:
        record = SqsRecord(raw)
        try:
            handler(record)
        except Exception:  # noqa: BLE001 - the record's outcome: reported, retried by SQS
            return record.message_id
        return None

    if workers <= 1 or len(records) <= 1:
        failed = [run(raw) for raw in records]
    else:
        with ThreadPoolExecutor(max_workers=min(workers, len(records))) as pool:
            failed = list(pool.map(run, records))
    return {"batchItemFailures": [{"itemIdentifier": mid} for mid in failed if mid is not None]}


def each_record_in_order(
    event: Mapping[str, Any],
    handler: Callable[[SqsRecord], None],
    *,
    skip_group_on_error: bool = False,
    on_skipped: Callable[[SqsRecord], None] | None = None,
) -> dict[str, Any]:
    """The FIFO queue's partial batch (Lambda's rule, Powertools' ``SqsFifoPartialProcessor``): the
    records run one at a time in the event's order; at the first whose handler raises, it and every
    record after it are reported in ``batchItemFailures`` unrun, so none overtakes it. With
    ``skip_group_on_error`` only the later records of a failed record's ``MessageGroupId`` are
    reported unrun; the other groups' records go on. A record reported unrun goes to ``on_skipped``
    first (the consumer hands it back to its queue).

    What failed is local to this call: a warm environment's next batch starts with no group failed
    (Powertools for TypeScript kept it across invocations, its issue 3673)."""
    records = _records(event)
    failed: list[str] = []
    failed_groups: set[str] = set()
    stopped = False
    for raw in records:
        record = SqsRecord(raw)
        group = record.message_group_id
        if stopped or (skip_group_on_error and group in failed_groups):
            if on_skipped is not None:
                on_skipped(record)
            failed.append(record.message_id)
            continue
        try:
            handler(record)
        except Exception:  # noqa: BLE001 - the record's outcome: reported, retried by SQS
            failed.append(record.message_id)
            failed_groups.add(group)
            stopped = not skip_group_on_error
    return {"batchItemFailures": [{"itemIdentifier": mid} for mid in failed]}
