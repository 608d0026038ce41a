"""The ledger in one SQLite file: WAL, ``BEGIN IMMEDIATE`` per step, unique keys.

Several processes may share the file. Each transaction takes the write lock up front
(``BEGIN IMMEDIATE``), reads the step and writes it, so a compare-and-set on the state cannot
interleave with another process's; writers wait up to ``busy_timeout`` seconds. The unique
index on live previews' keys and the primary key on ``receipts.key`` hold the idempotency
invariants even against a buggy caller. The steps of a transition and the mapping between
rows and records are shared with the PostgreSQL store (:mod:`airlock.tools._ledger_sql`).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Literal, TypeVar

from airlock.tools._batch_records import Batch
from airlock.tools._ledger import ClaimedFrom, StepRef, StepStateError
from airlock.tools._ledger_rows import preview_of, preview_row, readable_rows
from airlock.tools._ledger_sql import (
    BATCH_COLUMNS,
    PREVIEW_COLUMNS,
    apply,
    current_step,
    event,
    get_preview,
    move_step,
    previews_query,
    read_approval,
    read_batch,
    read_batches,
    read_history,
    read_receipt,
    read_receipts,
    read_steps,
    release_step,
)
from airlock.tools._preview import (
    LIVE_STATES,
    STEP_STATES,
    Approval,
    Preview,
    Receipt,
    StepEvent,
    StepState,
)
from airlock.tools._sqlite_connection import SQLiteConnection

__all__ = ["SQLiteLedgerStore"]

T = TypeVar("T")

_STATES = ", ".join(f"'{s}'" for s in STEP_STATES)
_LIVE = ", ".join(f"'{s}'" for s in sorted(LIVE_STATES))
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS previews (
    id TEXT PRIMARY KEY,
    run_id TEXT NOT NULL,
    tool TEXT NOT NULL,
    user_id TEXT NOT NULL,
    tenant_id TEXT NOT NULL,
    principal TEXT NOT NULL,
    effect TEXT NOT NULL,
    effects TEXT NOT NULL,
    summary TEXT NOT NULL,
    key TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    rule TEXT NOT NULL,
    created REAL NOT NULL,
    expires REAL NOT NULL,
    state TEXT NOT NULL CHECK (state IN ({_STATES})),
    updated REAL NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    owner TEXT,
    lease_until REAL,
    error TEXT
);
CREATE UNIQUE INDEX IF NOT EXISTS previews_live_key ON previews (key) WHERE state IN ({_LIVE});
CREATE INDEX IF NOT EXISTS previews_state ON previews (state, created);
CREATE INDEX IF NOT EXISTS previews_run ON previews (run_id, created);
CREATE TABLE IF NOT EXISTS approvals (
    preview_id TEXT PRIMARY KEY REFERENCES previews (id),
    fingerprint TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('policy', 'person')),
    approver TEXT NOT NULL,
    rule TEXT NOT NULL,
    at REAL NOT NULL,
    reason TEXT NOT NULL,
    consumed_at REAL
);
CREATE TABLE IF NOT EXISTS receipts (
    key TEXT PRIMARY KEY,
    preview_id TEXT NOT NULL UNIQUE REFERENCES previews (id),
    tool TEXT NOT NULL,
    data TEXT NOT NULL,
    stored_at REAL NOT NULL,
    resolved_by TEXT NOT NULL CHECK (resolved_by IN ('send', 'resend', 'query'))
);
CREATE TABLE IF NOT EXISTS step_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    preview_id TEXT NOT NULL REFERENCES previews (id),
    at REAL NOT NULL,
    from_state TEXT,
    to_state TEXT NOT NULL,
    actor TEXT NOT NULL,
    how TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS step_events_preview ON step_events (preview_id, id);
CREATE TABLE IF NOT EXISTS batches (
    id TEXT PRIMARY KEY,
    run_id TEXT NOT NULL,
    principal TEXT NOT NULL,
    items TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    created REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS batches_run ON batches (run_id, created);
PRAGMA user_version = 1;
"""


class SQLiteLedgerStore:
    """A :class:`~airlock.tools.LedgerStore` in one SQLite file (or ``":memory:"``, for measuring).

    ``synchronous="FULL"`` (the default) syncs every step to disk before it returns, so a
    claimed send is on disk before anything is sent; ``"NORMAL"`` survives a crash of the
    process but not of the machine. Within a process one connection serves all threads
    under a lock; a forked child opens its own. ``readonly`` opens an existing file for
    inspection without creating or changing anything.

    A file that cannot serve as the ledger (a directory, not a database, damaged, read-only,
    locked past ``busy_timeout``) raises :class:`~airlock.tools.LedgerError` naming it, at
    opening or at the first operation that meets the fault; so does a file deleted or
    replaced while it is open, before any transaction writes. A zero-byte file is a new
    ledger when opened to write. No ``sqlite3`` exception leaves the store.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        synchronous: Literal["FULL", "NORMAL", "OFF"] = "FULL",
        busy_timeout: float = 30.0,
        readonly: bool = False,
    ) -> None:
        self.path = str(path)
        self._db = SQLiteConnection(
            self.path,
            _SCHEMA,
            label="the ledger",
            marker="previews",
            pragmas=("foreign_keys=ON",),
            synchronous=synchronous,
            busy_timeout=busy_timeout,
            readonly=readonly,
        )

    # -- reads --------------------------------------------------------------------------

    def preview(self, preview_id: str) -> Preview | None:
        return self._read(lambda conn: get_preview(conn, preview_id))

    def previews(
        self,
        *,
        states: Collection[StepState] | None = None,
        limit: int = 100,
        run_id: str | None = None,
    ) -> list[Preview]:
        query = previews_query(states, limit, run_id)
        if query is None:
            return []
        return self._read(lambda conn: [preview_of(r) for r in conn.execute(*query).fetchall()])

    def steps(self, *, states: Collection[StepState], limit: int = 100) -> list[StepRef]:
        return self._read(lambda conn: read_steps(conn, states, limit))

    def approval(self, preview_id: str) -> Approval | None:
        return self._read(lambda conn: read_approval(conn, preview_id))

    def receipt(self, key: str) -> Receipt | None:
        return self._read(lambda conn: read_receipt(conn, key))

    def receipts(self, *, limit: int = 100) -> list[Receipt]:
        return self._read(lambda conn: read_receipts(conn, limit))

    def history(self, preview_id: str) -> list[StepEvent]:
        return self._read(lambda conn: read_history(conn, preview_id))

    def batch(self, batch_id: str) -> Batch | None:
        return self._read(lambda conn: read_batch(conn, batch_id))

    def batches(self, *, run_id: str | None = None, limit: int = 100) -> list[Batch]:
        return self._read(lambda conn: read_batches(conn, run_id, limit))

    def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        with readable_rows(self.path):
            return self._db.read(fn)

    # -- writes -------------------------------------------------------------------------

    def add_batch(self, batch: Batch) -> None:
        with self._db.transaction() as conn:
            marks = ", ".join("?" * len(batch.items))
            found = conn.execute(
                f"SELECT COUNT(*) FROM previews WHERE id IN ({marks})", batch.items
            ).fetchone()[0]
            if found != len(set(batch.items)):
                raise ValueError(f"batch {batch.id!r} names previews the ledger does not hold")
            try:
                conn.execute(
                    f"INSERT INTO batches ({BATCH_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)",
                    (
                        batch.id,
                        batch.run_id,
                        batch.principal.model_dump_json(),
                        json.dumps(list(batch.items)),
                        batch.fingerprint,
                        batch.created,
                    ),
                )
            except sqlite3.IntegrityError:
                raise ValueError(f"batch {batch.id!r} exists already") from None

    def add_preview(self, preview: Preview) -> Preview:
        if preview.state != "prepared":
            raise ValueError(f"a new preview must be 'prepared', not {preview.state!r}")
        with readable_rows(self.path), self._db.transaction() as conn:
            live = conn.execute(
                f"SELECT {PREVIEW_COLUMNS} FROM previews WHERE key = ? AND state IN ({_LIVE})",
                (preview.key,),
            ).fetchone()
            if live is not None:
                return preview_of(live)
            conn.execute(
                f"INSERT INTO previews ({PREVIEW_COLUMNS}) VALUES ({', '.join('?' * 20)})",
                preview_row(preview),
            )
            event(conn, preview.id, preview.created, None, "prepared", "ledger", "prepared")
        return preview

    def transition(
        self,
        preview_id: str,
        *,
        expect: Collection[StepState],
        to: StepState,
        at: float,
        actor: str,
        how: str,
        expect_attempts: int | None = None,
        approval: Approval | None = None,
        consume_approval: bool = False,
        receipt: Receipt | None = None,
        owner: str | None = None,
        lease_until: float | None = None,
        error: str | None = None,
    ) -> Preview:
        if to not in STEP_STATES:
            raise ValueError(f"unknown step state {to!r}; use one of {STEP_STATES}")
        with readable_rows(self.path), self._db.transaction() as conn:
            current = current_step(conn, preview_id, expect, expect_attempts)
            try:
                apply(conn, current, expect, approval, consume_approval, receipt, at)
            except sqlite3.IntegrityError:  # a second approval or receipt: someone was first
                raise StepStateError(current, expect) from None
            return move_step(
                conn,
                current,
                to=to,
                at=at,
                actor=actor,
                how=how,
                owner=owner,
                lease_until=lease_until,
                error=error,
            )

    def release_claim(
        self,
        preview_id: str,
        *,
        to: ClaimedFrom,
        expect_attempts: int,
        expect_owner: str,
        at: float,
        actor: str,
        how: str,
        error: str | None = None,
    ) -> Preview:
        with readable_rows(self.path), self._db.transaction() as conn:
            return release_step(
                conn,
                preview_id,
                to=to,
                expect_attempts=expect_attempts,
                expect_owner=expect_owner,
                at=at,
                actor=actor,
                how=how,
                error=error,
            )

    def close(self) -> None:
        self._db.close()
