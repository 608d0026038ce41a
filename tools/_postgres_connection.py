"""A pool of connections to one PostgreSQL database, its schema migrated on first use.

The ledger and the audit store share a database (and may share one :class:`PostgresDatabase`,
so one pool). Their callers are synchronous: the write path calls the
:class:`~airlock.tools.LedgerStore` protocol from the event loop as it calls SQLite, one short
transaction per step, and the audit log writes from its own writer thread. So the pool is
psycopg's synchronous :class:`~psycopg_pool.ConnectionPool`: an async pool would need an async
protocol and every caller of the ledger changed, for steps that take a fraction of a
millisecond on a nearby server; and the audit writer thread would only block on it anyway.

Connections are in autocommit mode; :meth:`PostgresDatabase.transaction` opens an explicit
transaction (committed when the block ends, rolled back when it raises) and
:meth:`PostgresDatabase.read` runs single statements. A forked child opens a pool of its own
(the parent's sockets are the parent's).

The schema is the SQL files of :mod:`airlock.tools._postgres_migrations`, applied in order the
first time a process opens the database.

Every wait is bounded (:mod:`airlock.tools._postgres_session`): each connection is opened with
a lock, statement and idle-in-transaction timeout and TCP keepalives, and the pool checks a
connection before it hands it out, so one that a restart, a failover or
``pg_terminate_backend`` closed is replaced rather than failing its caller's next operation.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import psycopg
from psycopg import errors
from psycopg_pool import ConnectionPool, PoolTimeout

from airlock.tools._errors import (
    LedgerClosedError,
    LedgerCorruptError,
    LedgerError,
    LedgerIOError,
    LedgerLockedError,
    LedgerReadOnlyError,
    LedgerUnavailableError,
)
from airlock.tools._postgres_migrations import migrate as migrate_schema
from airlock.tools._postgres_session import (
    IDLE_IN_TRANSACTION_TIMEOUT,
    LOCK_TIMEOUT,
    STATEMENT_TIMEOUT,
    SessionLimits,
    connect_arguments,
)

__all__ = ["PostgresDatabase", "map_postgres_errors", "redact_url"]

T = TypeVar("T")
Connection = psycopg.Connection[Any]


def redact_url(url: str) -> str:
    """``url`` without its password, for messages and logs."""
    scheme, sep, rest = url.partition("://")
    credentials, at, host = rest.rpartition("@")
    if not at or ":" not in credentials:
        return url
    return f"{scheme}{sep}{credentials.split(':', 1)[0]}:***@{host}"


# The errors of psycopg that say something a person can act on, by the class they map to; the
# first that matches wins, anything else of psycopg's is a plain ``ledger_error``.
_MAPPED: tuple[tuple[tuple[type[BaseException], ...], type[LedgerError], str], ...] = (
    (
        (errors.LockNotAvailable, errors.DeadlockDetected, errors.SerializationFailure),
        LedgerLockedError,
        "was held by another process longer than the store waits; try again",
    ),
    (
        # A statement ran past statement_timeout (or an operator cancelled it): the request's
        # own length, not someone else's lock, so the same request again would run as long. A
        # long audit find or export on a large log needs a longer limit, and the message says
        # how to set one. Retryable all the same: a server slowed by load may do it in time.
        (errors.QueryCanceled,),
        LedgerLockedError,
        "ran a statement longer than statement_timeout lets one run (airlock's default "
        f"{STATEMENT_TIMEOUT:g} s), or an operator cancelled it; for a long audit find or "
        "export, raise the limit in the URL (?options=-c%20statement_timeout%3D10min) or "
        "with PostgresDatabase(statement_timeout=...)",
    ),
    (
        # A transaction of this process sat idle past idle_in_transaction_session_timeout
        # (frozen, in a debugger): the server ended it; the same request, again, may succeed.
        (errors.IdleInTransactionSessionTimeout,),
        LedgerLockedError,
        "let a transaction sit idle longer than idle_in_transaction_session_timeout "
        "allows; try again",
    ),
    (
        (errors.ReadOnlySqlTransaction, errors.InsufficientPrivilege),
        LedgerReadOnlyError,
        "may not be written by this user; grant it INSERT and UPDATE on airlock's tables",
    ),
    (
        (errors.DiskFull, errors.IoError, errors.OutOfMemory),
        LedgerIOError,
        "ran out of disk or memory on the server; free some and try again",
    ),
    (
        (errors.DataCorrupted, errors.IndexCorrupted),
        LedgerCorruptError,
        "reports corrupted data; restore it from a backup",
    ),
    (
        (psycopg.OperationalError, PoolTimeout),
        LedgerUnavailableError,
        "cannot be reached; check that the server runs and the URL (AIRLOCK_DATABASE_URL)",
    ),
)


@contextmanager
def map_postgres_errors(url: str, store: str) -> Iterator[None]:
    """Turn psycopg's errors into :class:`~airlock.tools.LedgerError` (the one place this
    boundary translates them), naming the database without its password. A constraint the
    store itself relies on (``IntegrityError``) passes through for the store to handle."""
    try:
        yield
    except psycopg.IntegrityError:
        raise
    except (psycopg.Error, PoolTimeout) as exc:
        where = redact_url(url)
        for classes, kind, advice in _MAPPED:
            if isinstance(exc, classes):
                raise kind(
                    f"{store} at {where!r} {advice} (PostgreSQL: {_first_line(exc)})",
                    path=where,
                    store=store,
                ) from exc
        raise LedgerError(
            f"{store} at {where!r} failed: {type(exc).__name__}: {_first_line(exc)}",
            path=where,
            store=store,
        ) from exc


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [""])[0][:300]


class PostgresDatabase:
    """The pool of one process to the database at ``url`` (``postgresql://...``).

    Args:
        url: a libpq connection URL; ``?options=-csearch_path%3DNAME`` puts the tables in
            schema ``NAME``.
        min_size, max_size: connections the pool keeps open, and at most opens.
        timeout: seconds to wait for a free connection (or for the server to answer).
        migrate: apply the schema's migrations that the database lacks.
        label: what the database holds, in errors (``"the ledger"``).
        lock_timeout, statement_timeout, idle_in_transaction_timeout: seconds the server lets
            each connection wait for a lock, run a statement, and sit idle inside a
            transaction (``None``: the server's setting); see
            :mod:`airlock.tools._postgres_session` for why 5, 30 and 60. With
            ``AIRLOCK_POSTGRES_LIMITS=server`` in the environment none is sent (the server's
            settings apply), for PgBouncer and other poolers that refuse startup options.

    Every method raises :class:`~airlock.tools.LedgerError` for what psycopg raised
    (:func:`map_postgres_errors`): ``ledger_unavailable`` when the server cannot be reached,
    ``ledger_locked`` (retryable) when a lock wait or a statement took longer than the limits
    allow (the message tells the two apart: a statement past ``statement_timeout`` says how to
    raise it).

    Raises:
        LedgerUnavailableError: the server cannot be reached within ``timeout``.
        MigrationError: the database was migrated by a newer airlock.
    """

    def __init__(
        self,
        url: str,
        *,
        min_size: int = 1,
        max_size: int = 8,
        timeout: float = 30.0,
        migrate: bool = True,
        label: str = "the database",
        lock_timeout: float | None = LOCK_TIMEOUT,
        statement_timeout: float | None = STATEMENT_TIMEOUT,
        idle_in_transaction_timeout: float | None = IDLE_IN_TRANSACTION_TIMEOUT,
    ) -> None:
        self.url = url
        self.label = label
        self._sizes = (min_size, max_size)
        self._timeout = timeout
        self._connect = connect_arguments(
            url, SessionLimits(lock_timeout, statement_timeout, idle_in_transaction_timeout)
        )
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self.applied: list[int] = []
        """The migrations this process applied when it opened the database."""
        # One connection first: a server that does not answer fails at once, in one error
        # (the pool would retry in the background and log each attempt), and it migrates.
        with (
            map_postgres_errors(url, label),
            psycopg.connect(
                url, autocommit=True, connect_timeout=max(1, round(timeout)), **self._connect
            ) as first,
        ):
            if migrate:
                self.applied = migrate_schema(first)
        self._pool: ConnectionPool[Connection] | None = self._open()

    def _open(self) -> ConnectionPool[Connection]:
        pool: ConnectionPool[Connection] = ConnectionPool(
            self.url,
            min_size=self._sizes[0],
            max_size=self._sizes[1],
            timeout=self._timeout,
            kwargs={"autocommit": True, **self._connect},
            # One round trip before a connection is handed out: a connection the server
            # closed (restart, failover, pg_terminate_backend, an idle one a firewall
            # dropped) is replaced here instead of failing the caller's next operation.
            check=ConnectionPool.check_connection,
            name="airlock",
            open=False,
        )
        try:
            with map_postgres_errors(self.url, self.label):
                pool.open(wait=True, timeout=self._timeout)
        except LedgerError:
            pool.close()
            raise
        return pool

    def _current(self) -> ConnectionPool[Connection]:
        with self._lock:
            if self._pool is None:
                where = redact_url(self.url)
                raise LedgerClosedError(
                    f"{self.label} at {where!r} is closed: this process closed it, and "
                    "nothing more can be recorded in it",
                    path=where,
                    store=self.label,
                )
            if os.getpid() != self._pid:  # a forked child must not share the parent's sockets
                self._pid = os.getpid()
                self._pool = self._open()
            return self._pool

    @contextmanager
    def connection(self) -> Iterator[Connection]:
        """A connection of the pool (autocommit), returned to it when the block ends."""
        with map_postgres_errors(self.url, self.label), self._current().connection() as conn:
            yield conn

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        """A connection inside a transaction: committed when the block ends, rolled back
        when it raises.

        Raises:
            LedgerUnavailableError: as every method; and when the connection was lost while
                committing, saying that the change may have been written (the server may
                have committed it and its answer been lost).
        """
        with map_postgres_errors(self.url, self.label), self._current().connection() as conn:
            committing = False
            try:
                with conn.transaction():
                    yield conn
                    committing = True
            except psycopg.OperationalError as exc:
                if not (committing and conn.broken):
                    raise
                where = redact_url(self.url)
                raise LedgerUnavailableError(
                    f"{self.label} at {where!r} lost the connection while committing: the "
                    "change may or may not have been written; read it back before acting on "
                    "it (a step claimed so stays this process's until its lease runs out) "
                    f"(PostgreSQL: {_first_line(exc)})",
                    path=where,
                    store=self.label,
                ) from exc

    def read(self, fn: Callable[[Connection], T]) -> T:
        """``fn(connection)`` in autocommit mode: each statement sees what was committed
        before it began."""
        with self.connection() as conn:
            return fn(conn)

    def close(self) -> None:
        """Close this process's pool; a forked child leaves its parent's alone."""
        with self._lock:
            pool, self._pool = self._pool, None
            if pool is not None and os.getpid() == self._pid:
                pool.close()
