"""A batch's outcome counts, added to by the records processed at once (``InBatchConcurrency``) and
published once the batch is done."""

from __future__ import annotations

from collections import Counter
from threading import Lock

__all__ = ["BatchStats"]


class BatchStats:
    """Counts by metric name, safe to add to from several threads."""

    def __init__(self) -> None:
        self._lock = Lock()
        self.counts: Counter[str] = Counter()

    def add(self, name: str, value: int = 1) -> None:
        with self._lock:
            self.counts[name] += value
