"""Your processor and your handler, called directly in a unit test (docs/testing.md).

- :func:`sluice_record` builds the :class:`~sluice.consumer.SluiceRecord` your processor receives, from
  a body (parsed, and validated by your model, as the consumer does), with an :class:`EffectLog` that
  stands for ``record.once`` (each named side effect runs once per key, however often the record comes
  back) and ``record.later`` (recorded, not sent): a processor tested alone, no AWS at all.
- :func:`consumer_world` is what your handler module needs to start, in moto's in-process AWS: the
  idempotency table, a queue with its dead-letter queue, the poison queue, a claim-check bucket, the
  envelope key, and the ``SLUICE_*``/``POWERTOOLS_*`` variables the template gives a workload's consumer.
  :meth:`ConsumerWorld.load` imports your ``app.py`` as a cold start under them;
  :meth:`ConsumerWorld.poisoned` and :meth:`ConsumerWorld.dead_lettered` read where records ended.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from sluice.consumer import SluiceRecord
from sluice.consumer.record import business_key, identity_key
from sluice.delay import requested_due
from sluice.envelope import Envelope, SendAttributes
from sluice_local.app.observer import envelope_of, every_message
from sluice_local.emulation.lambda_loader import Handler, load_handler
from sluice_local.testing.events import sqs_record

__all__ = ["ConsumerWorld", "Delayed", "EffectLog", "Ended", "consumer_world", "sluice_record"]

ENVELOPE_KEY = "sluice-local-testing-envelope-key-0123456789"
"""The envelope key of a :func:`consumer_world` (a test's; at least sluice's minimum length)."""


@dataclass(frozen=True)
class Delayed:
    """A ``record.later`` call, recorded instead of sent."""

    body: str
    delay_seconds: float | None
    deliver_at: datetime | None
    attributes: SendAttributes | None


@dataclass
class EffectLog:
    """Stands for sluice's side-effect guard and delay pipeline in a processor's unit test.

    ``ran``: the ``(idempotency key, effect name)`` of each side effect that really ran; a record with the
    same key running an effect of the same name again gets the first run's result back (JSON round-trip,
    as the real guard stores it) and the effect does not run. ``delayed``: each ``record.later`` call.
    Share one log between two records to test a redelivery.
    """

    ran: list[tuple[str, str]] = field(default_factory=list)
    delayed: list[Delayed] = field(default_factory=list)
    _results: dict[str, Any] = field(default_factory=dict, repr=False)

    def once(self, key: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """What ``record.once`` calls (``key`` is the record's key and the effect's name, as JSON)."""
        if key in self._results:
            return self._results[key]  # a repeat gets what was stored: the JSON of the first result
        result = fn(*args, **kwargs)
        self._results[key] = json.loads(json.dumps(result))  # what is stored must be JSON
        record_key, name = json.loads(key)
        self.ran.append((record_key, name))
        return result  # the first run gets its own result, as Powertools returns it

    def later(
        self,
        body: str,
        *,
        delay_seconds: float | None,
        deliver_at: datetime | None,
        attributes: SendAttributes | None,
    ) -> str:
        """Records the request, refusing what the real ``record.later`` refuses (``ValueError``: neither
        or both of ``delay_seconds`` and ``deliver_at``, a naive ``deliver_at``, beyond 365 days)."""
        requested_due(datetime.now(UTC), deliver_at=deliver_at, delay_seconds=delay_seconds)
        self.delayed.append(Delayed(body, delay_seconds, deliver_at, attributes))
        return str(uuid.uuid4())


def sluice_record(
    body: str | Mapping[str, Any] | list[Any],
    *,
    model: type[BaseModel] | None = None,
    key_path: str = "",
    key: str | None = None,
    message_id: str | None = None,
    receive_count: int = 1,
    attributes: SendAttributes | None = None,
    effects: EffectLog | None = None,
) -> SluiceRecord:
    """The record your processor receives for ``body`` (text, or sent as its JSON).

    ``model``: your pydantic model (``data`` is then its instance; a body that does not match raises
    pydantic's ValidationError here, where the consumer isolates it as a permanent error);
    ``key_path``: your workload's ``KeyPath``: ``idempotency_key`` is then what the consumer makes of
    what it finds (``body:<JSON value>``; a body where it finds nothing raises ValueError here, where
    the consumer isolates it or keys it by identity, as ``KeyMissing`` says); without it, the
    consumer's identity key ``msg:<message id>``; ``key``: a key of your own, as it is.
    ``effects``: where ``record.once`` and ``record.later`` are recorded (a new :class:`EffectLog`
    when not given: ``record._idempotency``).
    """
    text = body if isinstance(body, str) else json.dumps(body)
    payload = json.loads(text)
    mid = message_id or str(uuid.uuid4())
    data = model.model_validate(payload) if model is not None else payload  # the model first, as the consumer
    if key is None:
        key = _key(payload, key_path, mid)
    log = effects if effects is not None else EffectLog()
    return SluiceRecord(
        message_id=mid,
        body=text,
        data=data,
        attributes=dict(attributes or {}),
        envelope=Envelope(origin_id=mid),
        receive_count=receive_count,
        idempotency_key=key,
        _idempotency=log,
        _later=log.later,
    )


def _key(payload: Any, key_path: str, message_id: str) -> str:
    if not key_path:
        return identity_key(message_id)
    import jmespath  # noqa: PLC0415 - only when a key path is given

    found = business_key(payload, jmespath.compile(key_path))
    if found is None:
        raise ValueError(
            f"key path {key_path!r} finds nothing in the body: the consumer isolates it "
            "(KeyMissing: poison) or keys it by its message id (KeyMissing: message-identity)"
        )
    return found


@dataclass(frozen=True)
class Ended:
    """A message found in the poison queue or the dead-letter queue, with what its envelope records."""

    message_id: str
    origin_id: str
    body: str
    reason: str
    error_type: str
    attributes: dict[str, Any]
    """The message's attributes as received (sluice's envelope among them)."""
    envelope: Envelope | None
    """sluice's envelope, read (None without one)."""


@dataclass(frozen=True)
class ConsumerWorld:
    """The resources and variables a workload's consumer starts with (:func:`consumer_world`)."""

    env: dict[str, str]
    region: str
    queue_url: str
    queue_arn: str
    dead_letter_queue_url: str
    poison_queue_url: str
    delay_queue_url: str
    """Where ``record.later`` sends (the long-delay pipeline's queue; nothing delivers from it here)."""
    idempotency_table: str
    claim_check_bucket: str

    def client(self, service: str) -> Any:
        """A boto3 client of moto's in-process AWS (the world's region)."""
        import boto3  # noqa: PLC0415

        return boto3.client(service, region_name=self.region)  # type: ignore[call-overload]

    def record(self, body: str | Mapping[str, Any] | list[Any] = "{}", **options: Any) -> dict[str, Any]:
        """:func:`~sluice_local.testing.sqs_record` from the world's queue (``options`` as its)."""
        options.setdefault("queue_arn", self.queue_arn)
        return sqs_record(body, **options)

    def event(self, *items: dict[str, Any] | str | Mapping[str, Any] | list[Any]) -> dict[str, Any]:
        """A Lambda SQS event from the world's queue: each item a record (:meth:`record`), or a body."""
        records = [
            item if isinstance(item, dict) and "eventSource" in item else self.record(item) for item in items
        ]
        return {"Records": records}

    def load(self, code_dir: str | Path, handler: str = "app.lambda_handler") -> Handler:
        """Your handler, imported afresh from ``code_dir`` (its folder first on the path) under the
        world's variables: a cold start, as the Lambda runtime's."""
        return load_handler(code_dir, handler)

    def poisoned(self) -> list[Ended]:
        """Every message in the poison queue (received, then made visible again)."""
        return self._every(self.poison_queue_url)

    def dead_lettered(self) -> list[Ended]:
        """Every message in the dead-letter queue (received, then made visible again)."""
        return self._every(self.dead_letter_queue_url)

    def delayed(self) -> list[Ended]:
        """Every ``record.later`` request on the delay queue: its ``body``, when it is due
        (``envelope.deliver_at``) and where it goes (``envelope.target``, the world's queue)."""
        return self._every(self.delay_queue_url)

    def _every(self, url: str) -> list[Ended]:
        ended = []
        for message in every_message(self.client("sqs"), url):  # looked at, left where they are
            envelope = envelope_of(message)
            error = envelope.last_error if envelope is not None else None
            ended.append(
                Ended(
                    message_id=message["MessageId"],
                    origin_id=(envelope.origin_id if envelope is not None else None) or message["MessageId"],
                    body=message["Body"],
                    reason=error.message if error else "",
                    error_type=error.type if error else "",
                    attributes=message.get("MessageAttributes", {}),
                    envelope=envelope,
                )
            )
        return ended


@contextmanager
def consumer_world(
    *,
    key_path: str,
    key_missing: str = "poison",
    function_name: str = "consumer",
    service: str = "consumer",
    region: str = "us-east-1",
    visibility_timeout: int = 180,
    settings: Mapping[str, str] | None = None,
) -> Iterator[ConsumerWorld]:
    """Moto's in-process AWS holding what a workload's consumer needs, and the process's environment
    holding the variables template.yaml gives it (restored after): ``key_path`` and ``key_missing`` are
    the workload's ``KeyPath`` and ``KeyMissing``; ``settings``: more ``SLUICE_*`` (or other) variables,
    your own included. Create your processor's own resources (its tables, ...) inside the block before
    :meth:`ConsumerWorld.load`, with :meth:`ConsumerWorld.client`."""
    from moto import mock_aws  # noqa: PLC0415 - the local runtime's dependency, not the layer's

    saved = dict(os.environ)
    os.environ.update({"AWS_DEFAULT_REGION": region, "AWS_REGION": region})
    try:
        with mock_aws():
            world = _create(
                key_path=key_path,
                key_missing=key_missing,
                function_name=function_name,
                service=service,
                region=region,
                visibility_timeout=visibility_timeout,
                settings=settings or {},
            )
            os.environ.update(world.env)
            yield world
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _create(
    *,
    key_path: str,
    key_missing: str,
    function_name: str,
    service: str,
    region: str,
    visibility_timeout: int,
    settings: Mapping[str, str],
) -> ConsumerWorld:
    import boto3  # noqa: PLC0415

    sqs = boto3.client("sqs", region_name=region)
    queue_url, dlq_url = create_queue_with_dlq(
        sqs,
        f"{function_name}-queue",
        f"{function_name}-dlq",
        visibility_timeout=visibility_timeout,
        max_receive_count=int(settings.get("SLUICE_MAX_RECEIVE_COUNT", "5")),  # what the queue check wants
    )
    queue_arn = queue_arn_of(sqs, queue_url)
    poison_url = sqs.create_queue(QueueName=f"{function_name}-poison")["QueueUrl"]
    delay_url = sqs.create_queue(QueueName=f"{function_name}-delay")["QueueUrl"]
    table, bucket = f"{function_name}-idempotency", f"{function_name}-claim-checks"
    create_idempotency_table(boto3.client("dynamodb", region_name=region), table)
    boto3.client("s3", region_name=region).create_bucket(Bucket=bucket)
    secret = boto3.client("secretsmanager", region_name=region).create_secret(
        Name=f"{function_name}-envelope-key", SecretString=ENVELOPE_KEY
    )["ARN"]
    env = {
        "AWS_LAMBDA_FUNCTION_NAME": function_name,
        "POWERTOOLS_SERVICE_NAME": service,
        "POWERTOOLS_METRICS_NAMESPACE": "SluiceTest",
        "POWERTOOLS_TRACE_DISABLED": "true",  # no X-Ray daemon here
        "SLUICE_ENVELOPE_KEY_SECRET": secret,
        "SLUICE_IDEMPOTENCY_TABLE": table,
        "SLUICE_IDEMPOTENCY_KEY_JMESPATH": key_path,
        "SLUICE_IDEMPOTENCY_KEY_MISSING": key_missing,
        "SLUICE_POISON_QUEUE_URL": poison_url,
        "SLUICE_DEAD_LETTER_QUEUE_URL": dlq_url,
        "SLUICE_SOURCE_QUEUE_URL": queue_url,
        "SLUICE_VISIBILITY_TIMEOUT_SECONDS": str(visibility_timeout),
        "SLUICE_CLAIM_CHECK_BUCKETS": bucket,
        "SLUICE_DELAY_QUEUE_URL": delay_url,
        **settings,
    }
    return ConsumerWorld(env, region, queue_url, queue_arn, dlq_url, poison_url, delay_url, table, bucket)


def queue_arn_of(sqs: Any, url: str) -> str:
    """The ARN of the queue at ``url``."""
    return str(sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"])


def create_queue_with_dlq(
    sqs: Any, name: str, dlq_name: str, *, visibility_timeout: int, max_receive_count: int
) -> tuple[str, str]:
    """A queue named ``name`` whose redrive policy sends to a new queue ``dlq_name`` after
    ``max_receive_count`` receives, as a workload's queue is; the two URLs (queue, DLQ)."""
    dlq_url = str(sqs.create_queue(QueueName=dlq_name)["QueueUrl"])
    redrive = {"deadLetterTargetArn": queue_arn_of(sqs, dlq_url), "maxReceiveCount": max_receive_count}
    queue_url = sqs.create_queue(
        QueueName=name,
        Attributes={"VisibilityTimeout": str(visibility_timeout), "RedrivePolicy": json.dumps(redrive)},
    )["QueueUrl"]
    return str(queue_url), dlq_url


def create_idempotency_table(dynamodb: Any, name: str) -> None:
    """The table shape Powertools idempotency expects (hash key ``id``), as template.yaml declares it."""
    dynamodb.create_table(
        TableName=name,
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        BillingMode="PAY_PER_REQUEST",
    )
