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

The batch-delay function is not one of them: its records are grouped (by target, by due-time bucket)
and sent or parked together, so a record's outcome is only known after its group's send.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext

__all__ = ["SqsRecord", "each_record"]


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
    def body(self) -> str:
        return str(self.raw_event.get("body") or "")


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
    records = event.get("Records")
    if not isinstance(records, list):
        raise ValueError("not an SQS event: it has no Records list")  # noqa: TRY004 - a bad value, as Powertools says

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
