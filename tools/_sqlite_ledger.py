"""The ledger in one SQLite file: WAL, ``BEGIN IMMEDIATE`` per step, unique keys.

Several processes may share the file. Each transaction takes the write lock up front
(``BEGIN IMMEDIATE``), reads the step and writes it, so a compare-and-set on the state cannot
interleave with another process's; writers wait up to ``busy_timeout`` seconds. The unique
index on live previews' keys and the primary key on ``receipts.key`` hold the idempotency
invariants even against a buggy caller.

It is one module over 400 lines on purpose: the schema, the transactions and the mapping
between rows and records are one job, and a column added changes all three together.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Collection
from pathlib import Path
from typing import Any, Literal

from airlock.policies import Principal
from airlock.tools._batch_records import Batch
from airlock.tools._ledger import StepStateError
from airlock.tools._preview import (
    LIVE_STATES,
    STEP_STATES,
    Approval,
    Preview,
    Receipt,
    StepEvent,
    StepState,
    canonical_json,
)
from airlock.tools._sqlite_connection import SQLiteConnection

__all__ = ["SQLiteLedgerStore"]

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
_PREVIEW_COLUMNS = (
    "id, run_id, tool, user_id, tenant_id, principal, effect, effects, summary, key, "
    "fingerprint, rule, created, expires, state, updated, attempts, owner, lease_until, error"
)
_APPROVAL_COLUMNS = "preview_id, fingerprint, kind, approver, rule, at, reason, consumed_at"
_RECEIPT_COLUMNS = "key, preview_id, tool, data, stored_at, resolved_by"
_BATCH_COLUMNS = "id, run_id, principal, items, fingerprint, created"


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
        return self._db.read(lambda conn: _get_preview(conn, preview_id))

    def previews(
        self,
        *,
        states: Collection[StepState] | None = None,
        limit: int = 100,
        run_id: str | None = None,
    ) -> list[Preview]:
        sql = f"SELECT {_PREVIEW_COLUMNS} FROM previews"
        where: list[str] = []
        params: list[object] = []
        if states is not None:
            wanted = sorted(set(states))
            if not wanted:
                return []
            where.append(f"state IN ({', '.join('?' * len(wanted))})")
            params.extend(wanted)
        if run_id is not None:
            where.append("run_id = ?")
            params.append(run_id)
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY created DESC, id LIMIT ?"
        params.append(int(limit))
        rows = self._db.read(lambda conn: conn.execute(sql, params).fetchall())
        return [_preview(row) for row in rows]

    def approval(self, preview_id: str) -> Approval | None:
        sql = f"SELECT {_APPROVAL_COLUMNS} FROM approvals WHERE preview_id = ?"
        row = self._db.read(lambda conn: conn.execute(sql, (preview_id,)).fetchone())
        return None if row is None else _approval(row)

    def receipt(self, key: str) -> Receipt | None:
        sql = f"SELECT {_RECEIPT_COLUMNS} FROM receipts WHERE key = ?"
        row = self._db.read(lambda conn: conn.execute(sql, (key,)).fetchone())
        return None if row is None else _receipt(row)

    def receipts(self, *, limit: int = 100) -> list[Receipt]:
        sql = f"SELECT {_RECEIPT_COLUMNS} FROM receipts ORDER BY stored_at DESC, key LIMIT ?"
        rows = self._db.read(lambda conn: conn.execute(sql, (int(limit),)).fetchall())
        return [_receipt(row) for row in rows]

    def history(self, preview_id: str) -> list[StepEvent]:
        sql = (
            "SELECT preview_id, at, from_state, to_state, actor, how FROM step_events "
            "WHERE preview_id = ? ORDER BY id"
        )
        rows = self._db.read(lambda conn: conn.execute(sql, (preview_id,)).fetchall())
        return [
            StepEvent(
                preview_id=str(r[0]),
                at=float(r[1]),
                from_state=None if r[2] is None else _state(r[2]),
                to_state=_state(r[3]),
                actor=str(r[4]),
                how=str(r[5]),
            )
            for r in rows
        ]

    def batch(self, batch_id: str) -> Batch | None:
        sql = f"SELECT {_BATCH_COLUMNS} FROM batches WHERE id = ?"
        row = self._db.read(lambda conn: conn.execute(sql, (batch_id,)).fetchone())
        return None if row is None else _batch(row)

    def batches(self, *, run_id: str | None = None, limit: int = 100) -> list[Batch]:
        sql = f"SELECT {_BATCH_COLUMNS} FROM batches"
        params: list[object] = []
        if run_id is not None:
            sql += " WHERE run_id = ?"
            params.append(run_id)
        sql += " ORDER BY created DESC, id LIMIT ?"
        params.append(int(limit))
        rows = self._db.read(lambda conn: conn.execute(sql, params).fetchall())
        return [_batch(row) for row in rows]

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
                    f"INSERT INTO batches ({_BATCH_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)",
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
        with self._db.transaction() as conn:
            live = conn.execute(
                f"SELECT {_PREVIEW_COLUMNS} FROM previews WHERE key = ? AND state IN ({_LIVE})",
                (preview.key,),
            ).fetchone()
            if live is not None:
                return _preview(live)
            conn.execute(
                f"INSERT INTO previews ({_PREVIEW_COLUMNS}) VALUES ({', '.join('?' * 20)})",
                _preview_row(preview),
            )
            _event(conn, preview.id, preview.created, None, "prepared", "ledger", "prepared")
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
        with self._db.transaction() as conn:
            current = _get_preview(conn, preview_id)
            if current is None:
                raise KeyError(preview_id)
            if current.state not in expect or (
                expect_attempts is not None and current.attempts != expect_attempts
            ):
                raise StepStateError(current, expect)
            try:
                _apply(conn, current, expect, approval, consume_approval, receipt, at)
            except sqlite3.IntegrityError:  # a second approval or receipt: someone was first
                raise StepStateError(current, expect) from None
            attempts = current.attempts + (1 if to == "sending" else 0)
            conn.execute(
                "UPDATE previews SET state = ?, updated = ?, attempts = ?, owner = ?, "
                "lease_until = ?, error = ? WHERE id = ?",
                (
                    to,
                    at,
                    attempts,
                    owner if owner is not None else current.owner,
                    lease_until,
                    error,
                    preview_id,
                ),
            )
            _event(conn, preview_id, at, current.state, to, actor, how)
            updated = _get_preview(conn, preview_id)
        assert updated is not None  # written in this transaction
        return updated

    def close(self) -> None:
        self._db.close()


def _apply(
    conn: sqlite3.Connection,
    current: Preview,
    expect: Collection[StepState],
    approval: Approval | None,
    consume_approval: bool,
    receipt: Receipt | None,
    at: float,
) -> None:
    """The side records of one transition: a new approval, its consumption, a receipt."""
    preview_id = current.id
    if approval is not None:
        conn.execute(
            f"INSERT INTO approvals ({_APPROVAL_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                approval.preview_id,
                approval.fingerprint,
                approval.kind,
                approval.approver,
                approval.rule,
                approval.at,
                approval.reason,
                approval.consumed_at,
            ),
        )
    if consume_approval:
        used = conn.execute(
            "UPDATE approvals SET consumed_at = ? WHERE preview_id = ? AND consumed_at IS NULL",
            (at, preview_id),
        ).rowcount
        if used != 1:
            raise StepStateError(current, expect)
    if receipt is not None:
        conn.execute(
            f"INSERT INTO receipts ({_RECEIPT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)",
            (
                receipt.key,
                receipt.preview_id,
                receipt.tool,
                canonical_json(receipt.data).decode(),
                receipt.stored_at,
                receipt.resolved_by,
            ),
        )


def _event(
    conn: sqlite3.Connection,
    preview_id: str,
    at: float,
    from_state: StepState | None,
    to_state: StepState,
    actor: str,
    how: str,
) -> None:
    conn.execute(
        "INSERT INTO step_events (preview_id, at, from_state, to_state, actor, how) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        (preview_id, at, from_state, to_state, actor, how[:500]),
    )


def _get_preview(conn: sqlite3.Connection, preview_id: str) -> Preview | None:
    row = conn.execute(
        f"SELECT {_PREVIEW_COLUMNS} FROM previews WHERE id = ?", (preview_id,)
    ).fetchone()
    return None if row is None else _preview(row)


def _preview_row(p: Preview) -> tuple[object, ...]:
    return (
        p.id,
        p.run_id,
        p.tool,
        p.principal.user_id,
        p.principal.tenant_id,
        p.principal.model_dump_json(),
        canonical_json(p.effect).decode(),
        json.dumps(list(p.effects)),
        p.summary,
        p.key,
        p.fingerprint,
        p.rule,
        p.created,
        p.expires,
        p.state,
        p.updated,
        p.attempts,
        p.owner,
        p.lease_until,
        p.error,
    )


def _state(value: object) -> StepState:
    if value not in STEP_STATES:
        raise ValueError(f"the ledger holds an unknown state {value!r}")
    return value


def _preview(r: tuple[Any, ...]) -> Preview:
    return Preview(
        id=str(r[0]),
        run_id=str(r[1]),
        tool=str(r[2]),
        principal=Principal.model_validate_json(r[5]),
        effect=json.loads(r[6]),
        effects=tuple(str(e) for e in json.loads(r[7])),
        summary=str(r[8]),
        key=str(r[9]),
        fingerprint=str(r[10]),
        rule=str(r[11]),
        created=float(r[12]),
        expires=float(r[13]),
        state=_state(r[14]),
        updated=float(r[15]),
        attempts=int(r[16]),
        owner=None if r[17] is None else str(r[17]),
        lease_until=None if r[18] is None else float(r[18]),
        error=None if r[19] is None else str(r[19]),
    )


def _approval(r: tuple[Any, ...]) -> Approval:
    kind = r[2]
    if kind not in ("policy", "person"):
        raise ValueError(f"the ledger holds an unknown approver kind {kind!r}")
    return Approval(
        preview_id=str(r[0]),
        fingerprint=str(r[1]),
        kind=kind,
        approver=str(r[3]),
        rule=str(r[4]),
        at=float(r[5]),
        reason=str(r[6]),
        consumed_at=None if r[7] is None else float(r[7]),
    )


def _batch(r: tuple[Any, ...]) -> Batch:
    return Batch(
        id=str(r[0]),
        run_id=str(r[1]),
        principal=Principal.model_validate_json(r[2]),
        items=tuple(str(i) for i in json.loads(r[3])),
        fingerprint=str(r[4]),
        created=float(r[5]),
    )


def _receipt(r: tuple[Any, ...]) -> Receipt:
    resolved = r[5]
    if resolved not in ("send", "resend", "query"):
        raise ValueError(f"the ledger holds an unknown resolution {resolved!r}")
    return Receipt(
        key=str(r[0]),
        preview_id=str(r[1]),
        tool=str(r[2]),
        data=json.loads(r[3]),
        stored_at=float(r[4]),
        resolved_by=resolved,
    )
