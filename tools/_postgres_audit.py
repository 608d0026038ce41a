"""The audit store on PostgreSQL: one hash chain, extended by every harness process.

The tables, the chain and the effect index are those of the SQLite store
(:mod:`airlock.tools._audit_schema`, :mod:`airlock.tools._audit_chain`): the same columns in
the same hashing order, so ``airlock audit find/export/effects/verify`` answer the same on
either. A batch is appended in one transaction that first takes ``audit_head`` in ``EXCLUSIVE``
mode: appenders in other processes (on any host) wait for it and then extend the chain from
the record the head names (:func:`~airlock.tools._audit_sql.vouched_tail`), while readers go
on reading. A batch is durable when its commit returns; one whose commit's answer was lost
is not stored twice when it is sent again (:mod:`airlock.tools._audit_resend`). Its rows are
sent with ``COPY``, one statement per table.

Every process that writes must hold the same chain key (a file, as for SQLite; give each host
a copy, as a secret). The database keeps a MAC of a fixed text under the key that first wrote
to it, so a process started with another key is refused at once instead of writing records
that ``verify`` would later call changed; the MAC tells nothing about the key. The first
writer stores it together with the head for no record, so a database whose head is gone
had it deleted (with every record) and is refused, not started again at record 1.
"""

from __future__ import annotations

import functools
import hmac
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import psycopg

from airlock.tools._audit import AuditEvent, RunSummary
from airlock.tools._audit_chain import (
    GENESIS,
    AuditStoreError,
    ChainReport,
    Linker,
    head_mac,
    load_key,
    verify_chain,
)
from airlock.tools._audit_resend import UnconfirmedAppends, sent_entries
from airlock.tools._audit_schema import COLUMNS, event_of_row
from airlock.tools._audit_sql import (
    chain_rows,
    encode_events,
    filters,
    first_record,
    page,
    program_text,
    vouched_tail,
)
from airlock.tools._errors import LedgerReadOnlyError
from airlock.tools._postgres_connection import Connection, PostgresDatabase, redact_url
from airlock.tools._sql_rows import SQLConnection

__all__ = ["PostgresAuditStore", "QmarkConnection"]

LABEL = "the audit store"

T = TypeVar("T")
# A batch's rows are sent with COPY: a third of the client's CPU of one INSERT per row.
# Nothing can conflict: the numbers are new (taken under the head's lock), and an event's
# effects are made distinct first.
_COPY_EVENTS = f"COPY audit_events (id, {COLUMNS}, chain) FROM STDIN".encode()
_COPY_EFFECTS = b"COPY audit_effects (event_id, kind, target, prefix) FROM STDIN"
_INSERT_PROGRAM = b"INSERT INTO audit_programs (hash, text) VALUES (%s, %s) ON CONFLICT DO NOTHING"
_SET_HEAD = (
    b"INSERT INTO audit_head (one, records, chain, mac) VALUES (1, %s, %s, %s) "
    b"ON CONFLICT (one) DO UPDATE SET records = EXCLUDED.records, chain = EXCLUDED.chain, "
    b"mac = EXCLUDED.mac"
)
_FIRST_HEAD = (
    b"INSERT INTO audit_head (one, records, chain, mac) VALUES (1, %s, %s, %s) "
    b"ON CONFLICT (one) DO NOTHING"
)
_KEY_CHECK_TEXT = b"airlock audit key check"
_INDEXED_BY = re.compile(r"\s+INDEXED BY \w+")


class QmarkConnection:
    """A PostgreSQL connection that runs statements written for SQLite's ``?`` placeholders
    (see :mod:`airlock.tools._sql_rows`): ``?`` becomes ``%s`` and an ``INDEXED BY`` hint,
    which PostgreSQL's planner does not need, is dropped."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    def execute(self, sql: str, parameters: Sequence[Any] = (), /) -> psycopg.Cursor[Any]:
        if parameters:
            return self._conn.execute(_translate(sql), list(parameters))
        return self._conn.execute(_INDEXED_BY.sub("", sql).encode())


@functools.lru_cache(maxsize=256)
def _translate(sql: str) -> bytes:
    return _INDEXED_BY.sub("", sql).replace("%", "%%").replace("?", "%s").encode()


def _distinct(indexed: list[tuple[Any, ...]]) -> Iterable[tuple[Any, ...]]:
    """The effect rows, the first of each key ``(event_id, kind, target)`` only (what
    SQLite's ``INSERT OR IGNORE`` keeps): an event may list one effect twice."""
    first: dict[tuple[Any, ...], tuple[Any, ...]] = {}
    for row in indexed:
        first.setdefault(row[:3], row)
    return first.values()


class PostgresAuditStore:
    """An :class:`~airlock.tools.AuditStore` in a PostgreSQL database, chained and indexed.

    Args:
        database: a ``postgresql://`` URL (the store opens and closes its own pool), or a
            :class:`~airlock.tools.postgres.PostgresDatabase` shared with the ledger.
        key_file: the chain's key; created (mode 0600) when the database holds no record yet.
        readonly: read and verify only; :meth:`append` refuses.

    Raises:
        AuditStoreError: the database holds records and the key is missing, or it was
            written under another key.
        LedgerError: psycopg failed (ledger_unavailable: the server cannot be reached).
    """

    def __init__(
        self,
        database: str | PostgresDatabase,
        *,
        key_file: str | Path,
        readonly: bool = False,
    ) -> None:
        self._owned = isinstance(database, str)
        self._db = (
            PostgresDatabase(database, label=LABEL) if isinstance(database, str) else database
        )
        self.url = self._db.url
        self.key_file = Path(key_file)
        self._key: bytes | None = None
        if not readonly:
            has_records = self._db.read(
                lambda conn: conn.execute("SELECT 1 FROM audit_events LIMIT 1").fetchone()
            )
            self._key = load_key(self.key_file, create=has_records is None)
            self._check_key(self._key)
        self._linker = None if self._key is None else Linker(self._key)
        self._unconfirmed = UnconfirmedAppends()

    def _check_key(self, key: bytes) -> None:
        mac = hmac.digest(key, _KEY_CHECK_TEXT, "sha256")
        with self._db.transaction() as conn:
            first = conn.execute(
                "INSERT INTO audit_key (one, mac) VALUES (1, %s) ON CONFLICT DO NOTHING "
                "RETURNING one",
                (mac,),
            ).fetchone()
            if first is not None:
                # The first writer's key check and the head for no record commit together:
                # a database with a key check and no head had its head deleted, with every
                # record (vouched_tail, verify_chain).
                empty = (0, GENESIS, head_mac(key, 0, GENESIS))
                conn.execute(_FIRST_HEAD, empty)
            row = conn.execute("SELECT mac FROM audit_key").fetchone()
        if row is None or not hmac.compare_digest(bytes(row[0]), mac):
            raise AuditStoreError(
                f"the audit key {str(self.key_file)!r} is not the one this database's chain "
                "was written with; copy the key file of the first harness to this host"
            )

    # -- writing --------------------------------------------------------------------------

    def append(
        self, events: Sequence[AuditEvent], programs: Mapping[str, str] | None = None
    ) -> None:
        if self._key is None or self._linker is None:
            where = redact_url(self.url)
            raise LedgerReadOnlyError(
                f"the audit store at {where!r} was opened read-only; open it without "
                "readonly=True to record",
                path=where,
                store=LABEL,
            )
        key, linker = self._key, self._linker
        encoded = encode_events(events)
        with self._db.transaction() as conn:
            conn.execute("LOCK TABLE audit_head IN EXCLUSIVE MODE")
            qmark = QmarkConnection(conn)
            tail = vouched_tail(qmark, key)
            prepared, stored = self._unconfirmed.stored_already(qmark, encoded)
            number, chain, chained, indexed = chain_rows(linker, tail, prepared)
            sent = sent_entries(stored, prepared[1], chained)
            self._unconfirmed.sending(sent)
            with conn.cursor() as cursor:
                if chained:
                    with cursor.copy(_COPY_EVENTS) as copy:
                        for row in chained:
                            copy.write_row(row)
                if indexed:
                    with cursor.copy(_COPY_EFFECTS) as copy:
                        for row in _distinct(indexed):
                            copy.write_row(row)
                if programs:
                    cursor.executemany(
                        _INSERT_PROGRAM,
                        [(d, t.encode("utf-8", "surrogatepass")) for d, t in programs.items()],
                    )
            if chained:
                conn.execute(_SET_HEAD, (number, chain, head_mac(key, number, chain)))
        self._unconfirmed.returned(sent)

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
        sql = f"SELECT {COLUMNS} FROM audit_events{where} ORDER BY id"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        rows = self.read(lambda conn: conn.execute(sql, params).fetchall())
        return [event_of_row(row) for row in rows]

    def records(
        self, *, run_id: str | None = None, since: float | None = None, until: float | None = None
    ) -> Iterator[tuple[int, AuditEvent, str]]:
        """Every stored event as (record number, event, chain in hex), in order, read in
        pages so that exporting a large log holds one page in memory."""
        where, params = filters(run_id=run_id, since=since, until=until)
        sql = (
            f"SELECT id, {COLUMNS}, chain FROM audit_events{where}"
            f"{' AND' if where else ' WHERE'} id > ? ORDER BY id LIMIT 1000"
        )
        # (A period is read from its first record on: see first_record.)
        after = 0 if since is None else self.read(lambda c: first_record(c, since)) - 1
        while True:
            rows = self.read(functools.partial(page, sql, [*params, after]))
            if not rows:
                return
            for row in rows:
                yield int(row[0]), event_of_row(row[1:-1]), bytes(row[-1]).hex()
            after = int(rows[-1][0])

    def runs(self, *, limit: int = 50) -> list[RunSummary]:
        def recent(conn: Connection) -> list[Any]:
            # The most recent runs by their latest record, found from the end of the log in
            # pages (not by grouping all of it), then summed up by the run index.
            chosen: dict[str, None] = {}
            before: int | None = None
            while len(chosen) < limit:
                page = conn.execute(
                    "SELECT id, run_id FROM audit_events WHERE id < %s ORDER BY id DESC LIMIT 1000",
                    (before if before is not None else 2**62,),
                ).fetchall()
                if not page:
                    break
                for _, run in page:
                    chosen.setdefault(run)
                    if len(chosen) >= limit:
                        break
                before = int(page[-1][0])
            if not chosen:
                return []
            return conn.execute(
                """SELECT run_id, MIN(ts - duration_s), MAX(ts), SUM(final),
                       SUM(CASE WHEN final = 1 AND outcome = 'ok' THEN 1 ELSE 0 END),
                       SUM(CASE WHEN final = 1 AND outcome = 'error' THEN 1 ELSE 0 END),
                       SUM(CASE WHEN final = 1 AND outcome = 'unknown' THEN 1 ELSE 0 END),
                       string_agg(DISTINCT user_id, ','),
                       SUM(CASE WHEN final = 1 AND outcome = 'preview' THEN 1 ELSE 0 END),
                       MAX(id)
                FROM audit_events WHERE run_id = ANY(%s)
                GROUP BY run_id ORDER BY MAX(id) DESC""",
                (list(chosen),),
            ).fetchall()

        return [
            RunSummary(
                run_id=str(r[0]),
                started=float(r[1]),
                ended=float(r[2]),
                calls=int(r[3]),
                ok=int(r[4]),
                error=int(r[5]),
                unknown=int(r[6]),
                users=tuple(sorted(str(r[7]).split(","))),
                previews=int(r[8]),
            )
            for r in self._db.read(recent)
        ]

    def program(self, digest: str) -> str | None:
        return self._db.read(lambda conn: program_text(QmarkConnection(conn), digest))

    def read(self, fn: Callable[[SQLConnection], T]) -> T:
        """``fn(connection)`` on a connection that takes SQLite's placeholders (see
        :class:`QmarkConnection`): for queries of its own (:func:`~airlock.tools.find_calls`).
        """
        return self._db.read(lambda conn: fn(QmarkConnection(conn)))

    def verify(self) -> ChainReport:
        """Check every record against the chain, the head, the effect index and every
        stored program, in one snapshot of the database; the report names the first that
        does not fit.

        Raises:
            AuditStoreError: the key is missing or unreadable.
        """
        key = self._key if self._key is not None else load_key(self.key_file, create=False)
        with self._db.transaction() as conn:
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            return verify_chain(QmarkConnection(conn), key, COLUMNS)

    def close(self) -> None:
        if self._owned:
            self._db.close()
