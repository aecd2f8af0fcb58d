from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import boto3
import pytest
from aws_lambda_powertools import Logger
from botocore import endpoint
from moto.stepfunctions.parser.asl.component.common.retry import retrier_decl

from sluice.consumer.batch import Consumer
from sluice.consumer.record import SluiceRecord
from sluice.errors import PermanentError, RetryAfter, TransientError
from sluice_local.emulation.lambda_loader import LambdaContext
from tests.doubles import RecordingMetrics


class ApiCalls:
    """Counts (and keeps the parameters of) every AWS API call a client makes."""

    def __init__(self, session: boto3.Session) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        session.events.register("provide-client-params.*.*", self._record)

    def _record(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        self.calls.append((model.name, dict(params)))

    def count(self, operation: str) -> int:
        return sum(1 for name, _ in self.calls if name == operation)

    def params(self, operation: str) -> list[dict[str, Any]]:
        return [p for name, p in self.calls if name == operation]


class ScriptedProcessor:
    """Behaves as each body's ``behave`` field says; counts calls per order id."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.effects: Counter[str] = Counter()
        self.records: list[SluiceRecord] = []
        self._lock = threading.Lock()

    def __call__(self, record: SluiceRecord) -> None:
        data = record.data
        with self._lock:
            self.calls[data["order_id"]] += 1
            self.records.append(record)
        behave = data.get("behave", "ok")
        if behave == "slow":
            time.sleep(float(data.get("seconds", 1)))
        elif behave == "permanent":
            raise PermanentError(f"order {data['order_id']} cannot be settled")
        elif behave == "transient":
            raise TransientError("payment gateway unavailable")
        elif behave == "retry_after":
            raise RetryAfter(int(data["seconds"]), "rate limited")
        elif behave == "crash":
            raise RuntimeError("unexpected bug")
        elif behave == "charge_then_fail":
            record.once("charge", self._charge, data["order_id"])
            if self.calls[data["order_id"]] == 1:
                raise TransientError("notify timed out")

    def _charge(self, order_id: str) -> None:
        with self._lock:
            self.effects["charge:" + order_id] += 1


@pytest.fixture
def processor() -> ScriptedProcessor:
    return ScriptedProcessor()


@pytest.fixture
def metrics() -> RecordingMetrics:
    return RecordingMetrics()


@pytest.fixture
def session() -> boto3.Session:
    return boto3.Session(region_name="us-east-1")


@pytest.fixture
def api_calls(session) -> ApiCalls:
    return ApiCalls(session)


@pytest.fixture
def build_consumer(aws, metrics, session) -> Callable[..., Consumer]:
    def build(
        processor: Callable[[SluiceRecord], object],
        model: Any = None,
        resources: Any = None,
        **settings: object,
    ) -> Consumer:
        """A consumer on ``resources`` (default: the test's ``aws``)."""
        return Consumer.from_env(
            processor,
            model=model,
            logger=Logger(service="sluice-test"),
            metrics_sink=metrics,
            environ=(resources or aws).env(**settings),
            session=session,
        )

    return build


@pytest.fixture
def context() -> LambdaContext:
    return LambdaContext(function_name="sluice-test-consumer", timeout_seconds=30)


@pytest.fixture
def retry_backoffs(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Every interval moto's Step Functions retrier waits before a retry, recorded instead of slept.

    moto really sleeps a Retry's interval (``time.sleep`` in its ``RetrierDecl``); what a test checks
    is how often a state is retried and what it waited for, not the wall clock passing. Waiting is
    skipped, the intervals are kept, in order, for the test to read.
    """
    waited: list[float] = []
    monkeypatch.setattr(retrier_decl, "time", SimpleNamespace(sleep=waited.append))
    return waited


@pytest.fixture
def sdk_retry_sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Every back-off botocore's retry handler asks for before retrying a call, recorded, not slept.

    botocore sleeps the back-off its retry mode computes (``time.sleep`` in ``botocore.endpoint``): a
    test of what a retried call does (sent twice, a timeout surfacing) need not wait it out.
    """
    slept: list[float] = []
    monkeypatch.setattr(endpoint, "time", SimpleNamespace(sleep=slept.append))
    return slept
