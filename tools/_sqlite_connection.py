"""One SQLite connection per process to a store's file, shared by its threads under a lock.

The audit store and the ledger open their files the same way: WAL mode, the chosen
``synchronous`` level, autocommit (``isolation_level=None``) so each store writes with an
explicit ``BEGIN IMMEDIATE``, and their schema; or, ``readonly``, an existing file through a
``mode=ro`` URI that creates and changes nothing. A forked child must not share its parent's
handle, so a connection is opened again when the process id changes.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

__all__ = ["SQLiteConnection"]

T = TypeVar("T")


class SQLiteConnection:
    """The connection of one store to the SQLite file at ``path`` (or ``":memory:"``).

    Args:
        path: the file; its folder is created unless ``readonly``.
        schema: SQL run on each new writable connection (``CREATE TABLE IF NOT EXISTS ...``).
        label: what the store is called in errors, e.g. ``"the ledger"``.
        pragmas: more ``PRAGMA`` statements run before the schema (``"foreign_keys=ON"``).
        synchronous: the ``PRAGMA synchronous`` level, e.g. ``"FULL"``.
        busy_timeout: seconds a writer waits for another process's write lock.
        readonly: open an existing file without creating or changing anything.
    """

    def __init__(
        self,
        path: str | Path,
        schema: str,
        *,
        label: str,
        pragmas: Sequence[str] = (),
        synchronous: str,
        busy_timeout: float,
        readonly: bool,
    ) -> None:
        self._path = str(path)
        self._schema = schema
        self._synchronous = synchronous
        self._busy_timeout = busy_timeout
        self._readonly = readonly
        self._pragmas = tuple(pragmas)
        self._label = label
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._conn: sqlite3.Connection | None = self._connect()

    def _connect(self) -> sqlite3.Connection:
        if self._readonly:
            uri = f"{Path(self._path).resolve().as_uri()}?mode=ro"
            return sqlite3.connect(
                uri, uri=True, timeout=self._busy_timeout, check_same_thread=False
            )
        if self._path != ":memory:":
            Path(self._path).parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(
            self._path, timeout=self._busy_timeout, check_same_thread=False, isolation_level=None
        )
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={self._synchronous}")
        for pragma in self._pragmas:
            conn.execute(f"PRAGMA {pragma}")
        conn.executescript(self._schema)
        return conn

    def _connection(self) -> sqlite3.Connection:
        # Called with the lock held.
        if self._conn is None:
            raise RuntimeError(f"{self._label} {self._path} is closed")
        if os.getpid() != self._pid:  # a forked child must not share the parent's handle
            self._pid = os.getpid()
            self._conn = self._connect()
        return self._conn

    def read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """``fn(connection)`` under the lock, outside any explicit transaction.

        Raises:
            RuntimeError: the store is closed.
        """
        with self._lock:
            return fn(self._connection())

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """The connection inside ``BEGIN IMMEDIATE`` (the write lock taken up front):
        committed when the block ends, rolled back when it raises.

        Raises:
            RuntimeError: the store is closed.
            sqlite3.OperationalError: another process held the write lock past
                ``busy_timeout``.
        """
        with self._lock:
            conn = self._connection()
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def close(self) -> None:
        """Close this process's connection; a forked child leaves its parent's handle alone."""
        with self._lock:
            if self._conn is not None and os.getpid() == self._pid:
                self._conn.close()
            self._conn = None
