"""The audit log's SQLite store: WAL mode, one transaction per batch, safe across processes,
each record chained to the one before it, and indexes for the questions asked of it.

Tables: ``audit_events`` (one row per event, numbered 1, 2, 3, ... by ``id``, with its
``chain``; see :mod:`airlock.tools._audit_chain`), ``audit_effects`` (each event's effects
split into kind and target: what ``airlock audit find`` searches), ``audit_programs`` (the
text of each program once, by hash) and ``audit_head`` (how many records were written).
Indexes on run, tool, time, effect target and effect kind keep queries of a period or a
resource from reading the whole log.
An append continues from the record the head names, and refuses a log whose last records
were deleted behind its back (:func:`~airlock.tools._audit_sql.vouched_tail`).
"""

from __future__ import annotations

import functools
import itertools
import sqlite3
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

from airlock.tools._audit import AuditEvent, RunSummary
from airlock.tools._audit_chain import (
    GENESIS,
    ChainReport,
    Linker,
    head_mac,
    load_key,
    verify_chain,
)
from airlock.tools._audit_resend import UnconfirmedAppends, sent_entries
from airlock.tools._audit_schema import (
    COLUMNS,
    INSERT_EFFECT,
    INSERT_EVENT,
    INSERT_PROGRAM,
    SCHEMA,
    SET_HEAD,
    event_of_row,
    refuse_old_schema,
)
from airlock.tools._audit_sql import (
    chain_rows,
    encode_events,
    filters,
    first_record,
    page,
    program_text,
    vouched_tail,
)
from airlock.tools._sqlite_connection import SQLiteConnection

__all__ = ["SQLiteAuditStore"]

T = TypeVar("T")


class SQLiteAuditStore:
    """An :class:`~airlock.tools.AuditStore` in one SQLite file, chained and indexed.

    WAL mode lets readers (``airlock audit``) work while a harness writes; writers in other
    processes wait up to ``busy_timeout`` seconds and extend the same chain. Within a
    process one connection serves all threads under a lock; a forked child opens its own.
    ``synchronous="FULL"`` (the default) syncs each batch to disk; ``"NORMAL"`` survives a
    crash of the process but not of the machine. ``readonly`` opens an existing file
    without creating or changing anything.

    The chain's key is read from ``key_file`` (default: the database's path plus ``.key``),
    which a new store creates (mode 0600). A read-only store reads it only to :meth:`verify`.

    Raises:
        AuditStoreError: the file was written by an older airlock (no chain), or it holds
            records and its key is missing.
        LedgerError: the file cannot be used (see :class:`~airlock.tools.SQLiteLedgerStore`);
            the same errors, naming the audit store, come from any later operation.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        key_file: str | Path | None = None,
        synchronous: Literal["FULL", "NORMAL", "OFF"] = "FULL",
        busy_timeout: float = 10.0,
        readonly: bool = False,
    ) -> None:
        self.path = Path(path)
        memory = str(path) == ":memory:"
        self.key_file = Path(key_file) if key_file is not None else Path(f"{self.path}.key")
        opening = functools.partial(
            SQLiteConnection,
            self.path,
            label="the audit store",
            marker="audit_events",
            synchronous=synchronous,
            busy_timeout=busy_timeout,
        )
        self._key: bytes | None = None
        if memory:
            self._key = bytes(32)
        else:
            refuse_old_schema(self.path, timeout=busy_timeout)
            if not readonly and _unmade(self.path):
                self._key = _make(opening("", readonly=False), self.key_file)
        self._db = opening(SCHEMA, readonly=readonly)
        if memory:
            with self._db.transaction() as conn:
                conn.execute(SET_HEAD, (0, GENESIS, head_mac(bytes(32), 0, GENESIS)))
        elif not readonly and self._key is None:
            has_records = self._db.read(
                lambda conn: conn.execute("SELECT 1 FROM audit_events LIMIT 1").fetchone()
            )
            self._key = load_key(self.key_file, create=has_records is None)
        self._linker = None if self._key is None else Linker(self._key)
        self._unconfirmed = UnconfirmedAppends()

    # -- writing --------------------------------------------------------------------------

    def append(
        self, events: Sequence[AuditEvent], programs: Mapping[str, str] | None = None
    ) -> None:
        key, linker = self._chain_key()
        encoded = encode_events(events)
        with self._db.transaction() as conn:
            tail = vouched_tail(conn, key)
            prepared, stored = self._unconfirmed.stored_already(conn, encoded)
            number, chain, chained, indexed = chain_rows(linker, tail, prepared)
            sent = sent_entries(stored, prepared[1], chained)
            self._unconfirmed.sending(sent)
            insert_rows(conn, INSERT_EVENT, chained)
            if indexed:
                insert_rows(conn, INSERT_EFFECT, indexed)
            if programs:
                conn.executemany(
                    INSERT_PROGRAM,
                    [(d, t.encode("utf-8", "surrogatepass")) for d, t in programs.items()],
                )
            if chained:
                conn.execute(SET_HEAD, (number, chain, head_mac(key, number, chain)))
        self._unconfirmed.returned(sent)

    def _chain_key(self) -> tuple[bytes, Linker]:
        if self._key is None or self._linker is None:
            raise self._db.refuse_write()
        return self._key, self._linker

    # -- reading --------------------------------------------------------------------------

    def query(
        self,
        *,
        run_id: str | None = None,
        tool: str | None = None,
        since: float | None = None,
        limit: int | None = None,
    ) -> list[AuditEvent]:
        where, params = filters(run_id=run_id, tool=tool, since=since)
        hint = _index_for(run_id=run_id, tool=tool, since=since)
        sql = f"SELECT {COLUMNS} FROM audit_events{hint}{where} ORDER BY id"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        rows = self._db.read(lambda conn: conn.execute(sql, params).fetchall())
        return [event_of_row(row) for row in rows]

    def records(
        self, *, run_id: str | None = None, since: float | None = None, until: float | None = None
    ) -> Iterator[tuple[int, AuditEvent, str]]:
        """Every stored event as (record number, event, chain in hex), in order, read in
        pages so that exporting a large log holds one page in memory."""
        where, params = filters(run_id=run_id, since=since, until=until)
        # A period starts at its first record, and pages are read by record number from
        # there: through the time index, each page would sort the rest of the period again.
        hint = " INDEXED BY audit_events_run" if run_id is not None else " NOT INDEXED"
        sql = (
            f"SELECT id, {COLUMNS}, chain FROM audit_events{hint}{where}"
            f"{' AND' if where else ' WHERE'} id > ? ORDER BY id LIMIT 1000"
        )
        after = 0 if since is None else self._db.read(lambda c: first_record(c, since)) - 1
        while True:
            rows = self._db.read(functools.partial(page, sql, [*params, after]))
            if not rows:
                return
            for row in rows:
                yield int(row[0]), event_of_row(row[1:-1]), bytes(row[-1]).hex()
            after = int(rows[-1][0])

    def runs(self, *, limit: int = 50) -> list[RunSummary]:
        def recent(conn: sqlite3.Connection) -> list[Any]:
            # The most recent runs by their latest record, found from the end of the log
            # (not by grouping all of it), then summed up by the run index.
            chosen: dict[str, None] = {}
            for (run,) in conn.execute("SELECT run_id FROM audit_events ORDER BY id DESC"):
                chosen.setdefault(run)
                if len(chosen) >= limit:
                    break
            # A few hundred runs a statement: SQLite takes at most 250,000 variables.
            runs = list(chosen)
            found: list[Any] = []
            size = min(_RUNS_PER_QUERY, conn.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER))
            for start in range(0, len(runs), size):
                part = runs[start : start + size]
                found += conn.execute(
                    f"""SELECT run_id, MIN(ts - duration_s), MAX(ts),
                       SUM(final), SUM(final AND outcome = 'ok'),
                       SUM(final AND outcome = 'error'), SUM(final AND outcome = 'unknown'),
                       GROUP_CONCAT(DISTINCT user_id), SUM(final AND outcome = 'preview'),
                       MAX(id)
                    FROM audit_events WHERE run_id IN ({", ".join("?" * len(part))})
                    GROUP BY run_id""",
                    part,
                ).fetchall()
            return sorted(found, key=lambda r: int(r[9]), reverse=True)

        return [
            RunSummary(
                run_id=r[0],
                started=r[1],
                ended=r[2],
                calls=r[3],
                ok=r[4],
                error=r[5],
                unknown=r[6],
                users=tuple(sorted(str(r[7]).split(","))),
                previews=r[8],
            )
            for r in self._db.read(recent)
        ]

    def program(self, digest: str) -> str | None:
        return self._db.read(lambda conn: program_text(conn, digest))

    def read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """``fn(connection)`` under the store's lock: for queries of its own
        (:func:`~airlock.tools.find_calls`)."""
        return self._db.read(fn)

    def verify(self) -> ChainReport:
        """Check every record against the chain, the head, the effect index and every
        stored program, in one snapshot of the file (records and the head a writer commits
        meanwhile are not mixed in); the report names the first that does not fit.

        Raises:
            AuditStoreError: the key is missing or unreadable.
        """
        key = self._key if self._key is not None else load_key(self.key_file, create=False)
        return self._db.snapshot(lambda conn: verify_chain(conn, key, COLUMNS))

    def close(self) -> None:
        self._db.close()


def _unmade(path: Path) -> bool:
    """Whether ``path`` holds no audit store yet (no file, an empty one, or a database
    without its tables), so a writer makes one; when it cannot tell, the store's connection
    says what is wrong with the file."""
    try:
        if not path.exists() or (path.is_file() and path.stat().st_size == 0):
            return True
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            return conn.execute(_MADE).fetchone() is None
        finally:
            conn.close()
    except (OSError, sqlite3.Error):
        return False


_MADE = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'audit_events'"


def _make(maker: SQLiteConnection, key_file: Path) -> bytes:
    """Make the store's tables and its head for no record, under the key's MAC, in one
    transaction (closing ``maker``, a connection that made nothing on opening), and return
    the key. A store with tables and no head is then one whose head was deleted, with every
    record (:func:`~airlock.tools._audit_sql.vouched_tail`); a process that stops half-way
    leaves no tables. Another process that made the store meanwhile left it as it is."""
    try:
        key = load_key(key_file, create=True)
        with maker.transaction() as conn:
            made = conn.execute(_MADE).fetchone()
            for statement in _statements(SCHEMA):
                conn.execute(statement)
            if made is None:
                conn.execute(SET_HEAD, (0, GENESIS, head_mac(key, 0, GENESIS)))
    finally:
        maker.close()
    return key


@functools.cache
def _statements(script: str) -> tuple[str, ...]:
    """The statements of ``script``, one by one: ``executescript`` would commit first."""
    statements: list[str] = []
    part = ""
    for line in script.splitlines(keepends=True):
        part += line
        if sqlite3.complete_statement(part):
            statements.append(part.strip())
            part = ""
    return tuple(statements)


_RUNS_PER_QUERY = 500

MOST_ROWS_PER_INSERT = 8
"""Rows one ``INSERT`` statement of :func:`insert_rows` writes at most. More would save a
little more, but a statement's values are bound while the writer holds the interpreter lock,
which the event loop then waits for: a few rows at a time keep that wait short."""


def insert_rows(conn: sqlite3.Connection, one: str, rows: Sequence[tuple[Any, ...]]) -> None:
    """Insert ``rows`` as ``one`` (an ``INSERT ... VALUES (?, ...)`` of one row) would, one
    after another, with statements of several rows each: up to
    :data:`MOST_ROWS_PER_INSERT` rows at a time, then the rest in halving parts (4, 2, 1: a
    few statements of fixed sizes, which the connection keeps prepared).

    A statement per row costs a statement step, and a release and new take of the
    interpreter lock (contended by the event loop), for every row; statements of eight rows
    write the same rows in the same order, and an event built and stored by :meth:`append
    <SQLiteAuditStore.append>` (encoded, chained, inserted) costs about 9% fewer instructions.
    """
    if not rows:
        return
    width = len(rows[0])
    size = min(MOST_ROWS_PER_INSERT, conn.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER) // width)
    size = 1 << max(size, 1).bit_length() - 1  # (a power of two: halving reaches 1)
    flat = itertools.chain.from_iterable
    start = 0
    while start < len(rows):
        while size > len(rows) - start:
            size //= 2
        conn.execute(_rows_sql(one, size), list(flat(rows[start : start + size])))
        start += size


@functools.cache
def _rows_sql(one: str, count: int) -> str:
    """``one`` (an ``INSERT ... VALUES (...)`` of one row) for ``count`` rows."""
    head, values = one.split(" VALUES ")
    return f"{head} VALUES " + ", ".join([values] * count)


def _index_for(
    *, run_id: str | None = None, tool: str | None = None, since: float | None = None
) -> str:
    # Without statistics SQLite would rather scan the table in id order than sort what an
    # index finds; these filters are narrow, so the index is the right choice.
    if run_id is not None:
        return " INDEXED BY audit_events_run"
    if tool is not None:
        return " INDEXED BY audit_events_tool"
    return "" if since is None else " INDEXED BY audit_events_ts"
