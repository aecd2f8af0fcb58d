"""The partial-batch loop of the functions an SQS event source mapping invokes one record at a time.

The consumer and the job consumer hand each record of an SQS event to a handler: a record whose
handler returns is done (Lambda deletes it), one whose handler raises is reported in
``batchItemFailures`` (SQS delivers it again). Powertools' batch processor does the bookkeeping;
this module adds the bounded thread pool the consumer's ``SLUICE_CONCURRENCY`` asks for.

The batch-delay function is not one of them: its records are grouped (by target, by due-time bucket)
and sent or parked together, so a record's outcome is only known after its group's send.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
    from aws_lambda_powertools.utilities.typing import LambdaContext

__all__ = ["each_record"]


class _PoolBatchProcessor(BatchProcessor):
    """Powertools BatchProcessor whose records run on a bounded thread pool (order of results kept)."""

    def __init__(self, workers: int) -> None:
        super().__init__(EventType.SQS, raise_on_entire_batch_failure=False)
        self._workers = workers

    def process(self) -> list[tuple[Any, ...]]:
        if self._workers <= 1 or len(self.records) <= 1:
            return super().process()
        with ThreadPoolExecutor(max_workers=min(self._workers, len(self.records))) as pool:
            return list(pool.map(self._process_record, self.records))


def each_record(
    event: Mapping[str, Any],
    handler: Callable[[SQSRecord], None],
    *,
    context: LambdaContext | None,
    workers: int = 1,
) -> dict[str, Any]:
    """Run ``handler`` on every record of ``event`` (on up to ``workers`` threads); returns
    ``{"batchItemFailures": [...]}`` naming the records whose handler raised."""
    response = process_partial_response(
        event=dict(event),
        record_handler=handler,
        processor=_PoolBatchProcessor(workers),
        context=context,
    )
    return dict(response)
