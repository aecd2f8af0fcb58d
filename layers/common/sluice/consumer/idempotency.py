"""Idempotency on DynamoDB through Powertools, for whole records and for single side effects.

- :meth:`Idempotency.run` processes a record at most once per key. A duplicate is skipped (the
  processor is not called) and reported as such; the same key with a different payload is a
  :class:`~sluice.errors.PermanentError` (a producer reused a key), a key being processed elsewhere is
  a :class:`~sluice.errors.TransientError` (retry later). Cost per new record: 1 PutItem + 1
  UpdateItem; per duplicate: 1 PutItem (Powertools reads the old item from the failed condition).
- :meth:`Idempotency.once` guards ONE side effect (charge, notify, grant) with its own key, so a
  record that fails after charging and is retried does not charge again.

Records with the same key in one batch are serialized in-process, so a duplicate inside a batch is
a duplicate (not an in-progress conflict) whatever the batch concurrency.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent_function,
)
from aws_lambda_powertools.utilities.idempotency.exceptions import (
    BaseError,
    IdempotencyAlreadyInProgressError,
    IdempotencyValidationError,
)

from sluice.errors import PermanentError, TransientError

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext
    from mypy_boto3_dynamodb import DynamoDBClient


class InProgressElsewhere(TransientError):  # noqa: N818 - reads as the situation, like RetryAfter
    """Another invocation holds this key; its lock lives until that invocation's deadline."""


def _record(task: dict[str, Any], call: Callable[[], None]) -> None:
    """Powertools stores this function's (empty) result under the record's key."""
    call()


def _effect(effect: dict[str, Any], call: Callable[[], Any]) -> Any:
    return call()


class _KeyedLocks:
    """One lock per key held by any thread of this process; forgotten when released."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, tuple[threading.Lock, int]] = {}

    @contextmanager
    def hold(self, key: str) -> Iterator[None]:
        with self._guard:
            lock, users = self._locks.get(key, (threading.Lock(), 0))
            self._locks[key] = (lock, users + 1)
        try:
            with lock:
                yield
        finally:
            with self._guard:
                lock, users = self._locks[key]
                if users == 1:
                    del self._locks[key]
                else:
                    self._locks[key] = (lock, users - 1)


class Idempotency:
    def __init__(self, *, table: str, client: DynamoDBClient, ttl_seconds: int, name: str = "sluice") -> None:
        """``name`` (the function's name) prefixes every key, so consumers may share one table."""
        self._record_config = IdempotencyConfig(
            event_key_jmespath="key",
            payload_validation_jmespath="payload",
            expires_after_seconds=ttl_seconds,
            raise_on_no_idempotency_key=True,
        )
        self._effect_config = IdempotencyConfig(
            event_key_jmespath="key",
            expires_after_seconds=ttl_seconds,
            raise_on_no_idempotency_key=True,
        )
        # Powertools keeps the configuration on the persistence object: one store per configuration.
        self._run_record = idempotent_function(
            data_keyword_argument="task",
            persistence_store=DynamoDBPersistenceLayer(table_name=table, boto3_client=client),
            config=self._record_config,
            key_prefix=f"{name}.record",
        )(_record)
        self._run_effect = idempotent_function(
            data_keyword_argument="effect",
            persistence_store=DynamoDBPersistenceLayer(table_name=table, boto3_client=client),
            config=self._effect_config,
            key_prefix=f"{name}.effect",
        )(_effect)
        self._locks = _KeyedLocks()

    def register_lambda_context(self, context: LambdaContext | None) -> None:
        """In-progress records then expire with the invocation, so a crashed run does not block retries."""
        if context is not None and hasattr(context, "get_remaining_time_in_millis"):
            self._record_config.register_lambda_context(context)
            self._effect_config.register_lambda_context(context)

    def run(self, key: str, payload: Any, fn: Callable[[], object]) -> bool:
        """Run ``fn`` unless ``key`` was already processed. Returns False for a skipped duplicate."""
        ran: list[bool] = []

        def call() -> None:
            ran.append(True)
            fn()

        with self._locks.hold(key):
            try:
                self._run_record(task={"key": key, "payload": payload}, call=call)
            except IdempotencyValidationError:
                raise PermanentError(
                    f"idempotency key {key!r} was already used for a different payload"
                ) from None
            except IdempotencyAlreadyInProgressError:
                raise InProgressElsewhere(f"idempotency key {key!r} is being processed elsewhere") from None
            except BaseError as exc:
                # The store failed (before or after the call): retry; an in-progress record left
                # behind expires with this invocation, so the retry is not blocked for long.
                raise TransientError(f"idempotency store failed: {exc}") from exc
        return bool(ran)

    def once(self, key: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run the side effect ``fn(*args, **kwargs)`` at most once for ``key``; returns its result.

        The result must be JSON-serializable (it is stored and returned again to a duplicate).
        """
        with self._locks.hold("effect:" + key):
            try:
                return self._run_effect(effect={"key": key}, call=lambda: fn(*args, **kwargs))
            except IdempotencyAlreadyInProgressError:
                raise InProgressElsewhere(f"side effect {key!r} is in progress elsewhere") from None
