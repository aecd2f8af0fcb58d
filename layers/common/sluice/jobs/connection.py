"""One PostgreSQL connection per execution environment, re-established when broken.

The DSN comes from a Secrets Manager secret (read with Powertools parameters and cached) or, locally,
from ``SLUICE_DATABASE_URL``. Connections run in autocommit mode (one statement, one round trip) and
never issue a session ``SET``. Connected directly, each statement is prepared on the server at its first
use (a job function runs the same few statements all its life: planning the claim cost more than running
it) and statement and lock timeouts travel as libpq options. Behind a proxy (``behind_proxy``) neither:
RDS Proxy refuses startup options and pins a session that prepares, and a transaction-pooling PgBouncer
hands the next statement to a server connection that never saw the preparation; the timeouts then belong
in the proxy's initialization query.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.conninfo import make_conninfo

from sluice.errors import ConfigurationError, JobStoreUnavailable
from sluice.jobs import defaults

if TYPE_CHECKING:
    from sluice.jobs.settings import JobStoreSettings

__all__ = ["Connector", "dsn_from_secret", "first_line"]

_RDS_KEYS = {"host": "host", "port": "port", "username": "user", "password": "password", "dbname": "dbname"}


def dsn_from_secret(secret: str) -> str:
    """A DSN from a secret string: a DSN as is, or the RDS-managed JSON form."""
    text = secret.strip()
    if not text.startswith("{"):
        return text
    try:
        data = json.loads(text)
    except ValueError:
        raise ConfigurationError("database secret is neither a DSN nor JSON") from None
    if not isinstance(data, dict) or "host" not in data:
        raise ConfigurationError("database secret JSON has no 'host' (expected the RDS secret form)")
    params = {_RDS_KEYS[k]: str(v) for k, v in data.items() if k in _RDS_KEYS}
    params.setdefault(
        "dbname", "postgres"
    )  # the RDS form's dbInstanceIdentifier names the instance, not a database
    return make_conninfo(**params)


class Connector:
    """Hands out the environment's one connection; :meth:`discard` drops a broken one."""

    def __init__(
        self,
        dsn: Callable[[bool], str],
        *,
        statement_timeout_ms: int = defaults.STATEMENT_TIMEOUT_MS,
        lock_timeout_ms: int = defaults.LOCK_TIMEOUT_MS,
        connect_timeout_seconds: int = defaults.CONNECT_TIMEOUT_SECONDS,
        behind_proxy: bool = False,
        application_name: str = "sluice",
    ) -> None:
        """``dsn(refresh)`` returns the DSN; ``refresh=True`` after an authentication failure (rotation)."""
        self._dsn = dsn
        self._options: dict[str, Any] = {
            "connect_timeout": connect_timeout_seconds,
            "application_name": application_name[:63],
            # Dead peers are noticed instead of hanging a Lambda until its timeout.
            "keepalives": 1,
            "keepalives_idle": 30,
        }
        if not behind_proxy and (statement_timeout_ms or lock_timeout_ms):
            self._options["options"] = (
                f"-c statement_timeout={statement_timeout_ms} -c lock_timeout={lock_timeout_ms}"
            )
        self._prepare_threshold: int | None = None if behind_proxy else 0
        """psycopg's: prepared at the first execution (0), or never (None)."""
        self._conn: psycopg.Connection[Any] | None = None
        self._lock = threading.Lock()

    @classmethod
    def from_settings(
        cls, settings: JobStoreSettings, *, secrets_client: Any = None, application_name: str = "sluice"
    ) -> Connector:
        if settings.database_secret_arn:
            arn, max_age = settings.database_secret_arn, settings.database_secret_max_age_seconds

            def dsn(refresh: bool) -> str:
                from aws_lambda_powertools.utilities import parameters  # noqa: PLC0415 - only with a secret

                if secrets_client is not None:
                    provider = parameters.SecretsProvider(boto3_client=secrets_client)
                    value = provider.get(arn, max_age=max_age, force_fetch=refresh)
                else:
                    value = parameters.get_secret(arn, max_age=max_age, force_fetch=refresh)
                return dsn_from_secret(str(value))

        else:
            url = settings.database_url

            def dsn(refresh: bool) -> str:  # same shape as the secret reader
                return url

        return cls(
            dsn,
            statement_timeout_ms=settings.statement_timeout_ms,
            lock_timeout_ms=settings.lock_timeout_ms,
            connect_timeout_seconds=settings.connect_timeout_seconds,
            behind_proxy=settings.behind_proxy,
            application_name=application_name,
        )

    def connection(self) -> psycopg.Connection[Any]:
        """The open connection, connecting first when there is none or the last one broke."""
        with self._lock:
            conn = self._conn
            if conn is not None and not conn.closed and not conn.broken:
                return conn
            self._conn = None
            self._conn = self._connect()
            return self._conn

    def held(self) -> psycopg.Connection[Any] | None:
        """The connection held now, if any, without connecting (after a connect in progress ends)."""
        with self._lock:
            return self._conn

    def discard(self) -> None:
        """Close and forget the connection (after it broke); the next call connects again."""
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def close(self) -> None:
        self.discard()

    def _connect(self) -> psycopg.Connection[Any]:
        for refresh in (False, True):
            try:
                return psycopg.connect(
                    self._dsn(refresh),
                    autocommit=True,
                    prepare_threshold=self._prepare_threshold,
                    **self._options,
                )
            except psycopg.OperationalError as exc:
                if not refresh and _authentication_failed(exc):
                    continue  # the secret may have rotated: read it again, once
                raise JobStoreUnavailable(
                    f"cannot connect to the job store: {first_line(exc)}", unreachable=True
                ) from exc
        raise AssertionError("unreachable")  # pragma: no cover


def _authentication_failed(exc: psycopg.OperationalError) -> bool:
    return exc.sqlstate in {"28P01", "28000"} or "password authentication failed" in str(exc)


def first_line(exc: BaseException) -> str:
    """The first line of an error, short enough for a log line or a row's error history."""
    return (str(exc).strip().splitlines() or [exc.__class__.__name__])[0][:300]
