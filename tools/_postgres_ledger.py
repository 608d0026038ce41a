"""The ledger on PostgreSQL: the same invariants as SQLite, held by row locks across hosts.

Several harness processes (on one host or many) share one database:

* a transition reads the step with ``SELECT ... FOR UPDATE``: of two processes moving the same
  step, the second waits for the first to commit and then sees the state it left, so the
  compare-and-set on (state, attempts) cannot interleave and one claim wins;
* the partial unique index on live previews' keys (``INSERT ... ON CONFLICT DO NOTHING``)
  keeps one live preview per key, whoever inserts it;
* a receipt is inserted in the transaction that marks its step ``committed``; its key and its
  preview are unique, so a second receipt fails that transaction and changes nothing;
* an approval is consumed by ``UPDATE ... WHERE consumed_at IS NULL``, at most once.

A claimed step carries its owner (:class:`~airlock.tools.ProcessMark`) and a lease expiry in
wall-clock seconds. A process on another host cannot tell whether the owner still runs, so
there the lease's expiry is what lets reconciliation take the step over (hosts keep their
clocks in step with NTP; the lease's grace covers the skew).

Rows are mapped to records as in :mod:`airlock.tools._sqlite_ledger` (the same columns, the
same JSON in text columns), so both stores hold the same data in the same form.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import Any

from psycopg import errors

from airlock.tools._batch_records import Batch
from airlock.tools._ledger import StepStateError
from airlock.tools._postgres_connection import Connection, PostgresDatabase
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
from airlock.tools._sqlite_ledger import (
    _APPROVAL_COLUMNS,
    _BATCH_COLUMNS,
    _PREVIEW_COLUMNS,
    _RECEIPT_COLUMNS,
    _approval,
    _batch,
    _preview,
    _preview_row,
    _receipt,
    _state,
)

__all__ = ["PostgresLedgerStore"]

LABEL = "the ledger"

_LIVE = ", ".join(f"'{s}'" for s in sorted(LIVE_STATES))


def _marks(columns: str) -> str:
    return ", ".join(["%s"] * len(columns.split(",")))


class PostgresLedgerStore:
    """A :class:`~airlock.tools.LedgerStore` in a PostgreSQL database, shared by processes.

    Args:
        database: a ``postgresql://`` URL (the store opens and closes its own pool), or a
            :class:`~airlock.tools.postgres.PostgresDatabase` shared with the audit store
            (its owner closes it).

    Raises:
        LedgerError: psycopg failed (ledger_unavailable: the server cannot be reached).
        MigrationError: the database was migrated by a newer airlock.
    """

    def __init__(self, database: str | PostgresDatabase) -> None:
        self._owned = isinstance(database, str)
        self._db = (
            PostgresDatabase(database, label=LABEL) if isinstance(database, str) else database
        )
        self.url = self._db.url

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
            where.append("state = ANY(%s)")
            params.append(wanted)
        if run_id is not None:
            where.append("run_id = %s")
            params.append(run_id)
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY created DESC, id LIMIT %s"
        params.append(int(limit))
        rows = self._db.read(lambda conn: conn.execute(sql.encode(), params).fetchall())
        return [_preview(row) for row in rows]

    def approval(self, preview_id: str) -> Approval | None:
        sql = f"SELECT {_APPROVAL_COLUMNS} FROM approvals WHERE preview_id = %s"
        row = self._db.read(lambda conn: conn.execute(sql.encode(), (preview_id,)).fetchone())
        return None if row is None else _approval(row)

    def receipt(self, key: str) -> Receipt | None:
        sql = f"SELECT {_RECEIPT_COLUMNS} FROM receipts WHERE key = %s"
        row = self._db.read(lambda conn: conn.execute(sql.encode(), (key,)).fetchone())
        return None if row is None else _receipt(row)

    def receipts(self, *, limit: int = 100) -> list[Receipt]:
        sql = f"SELECT {_RECEIPT_COLUMNS} FROM receipts ORDER BY stored_at DESC, key LIMIT %s"
        rows = self._db.read(lambda conn: conn.execute(sql.encode(), (int(limit),)).fetchall())
        return [_receipt(row) for row in rows]

    def history(self, preview_id: str) -> list[StepEvent]:
        rows = self._db.read(
            lambda conn: conn.execute(
                "SELECT preview_id, at, from_state, to_state, actor, how FROM step_events "
                "WHERE preview_id = %s ORDER BY id",
                (preview_id,),
            ).fetchall()
        )
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
        sql = f"SELECT {_BATCH_COLUMNS} FROM batches WHERE id = %s"
        row = self._db.read(lambda conn: conn.execute(sql.encode(), (batch_id,)).fetchone())
        return None if row is None else _batch(row)

    def batches(self, *, run_id: str | None = None, limit: int = 100) -> list[Batch]:
        sql = f"SELECT {_BATCH_COLUMNS} FROM batches"
        params: list[object] = []
        if run_id is not None:
            sql += " WHERE run_id = %s"
            params.append(run_id)
        sql += " ORDER BY created DESC, id LIMIT %s"
        params.append(int(limit))
        rows = self._db.read(lambda conn: conn.execute(sql.encode(), params).fetchall())
        return [_batch(row) for row in rows]

    # -- writes -------------------------------------------------------------------------

    def add_batch(self, batch: Batch) -> None:
        with self._db.transaction() as conn:
            found = conn.execute(
                "SELECT COUNT(*) FROM previews WHERE id = ANY(%s)", (list(batch.items),)
            ).fetchone()
            if found is None or found[0] != len(set(batch.items)):
                raise ValueError(f"batch {batch.id!r} names previews the ledger does not hold")
            inserted = conn.execute(
                f"INSERT INTO batches ({_BATCH_COLUMNS}) VALUES ({_marks(_BATCH_COLUMNS)}) "
                "ON CONFLICT (id) DO NOTHING RETURNING id".encode(),
                (
                    batch.id,
                    batch.run_id,
                    batch.principal.model_dump_json(),
                    json.dumps(list(batch.items)),
                    batch.fingerprint,
                    batch.created,
                ),
            ).fetchone()
            if inserted is None:
                raise ValueError(f"batch {batch.id!r} exists already")

    def add_preview(self, preview: Preview) -> Preview:
        if preview.state != "prepared":
            raise ValueError(f"a new preview must be 'prepared', not {preview.state!r}")
        insert = (
            f"INSERT INTO previews ({_PREVIEW_COLUMNS}) VALUES ({_marks(_PREVIEW_COLUMNS)}) "
            f"ON CONFLICT (key) WHERE state IN ({_LIVE}) DO NOTHING RETURNING id"
        ).encode()
        live = f"SELECT {_PREVIEW_COLUMNS} FROM previews WHERE key = %s AND state IN ({_LIVE})"
        # The live preview that holds the key may leave the live states between the insert
        # that collided with it and the read of it; then the key is free: insert again.
        for _ in range(10):
            with self._db.transaction() as conn:
                if conn.execute(insert, _preview_row(preview)).fetchone() is not None:
                    _event(
                        conn, preview.id, preview.created, None, "prepared", "ledger", "prepared"
                    )
                    return preview
                row = conn.execute(live.encode(), (preview.key,)).fetchone()
                if row is not None:
                    return _preview(row)
        prepared: tuple[StepState, ...] = ("prepared",)
        raise StepStateError(preview, prepared)

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
        current: Preview | None = None
        try:
            with self._db.transaction() as conn:
                current = _get_preview(conn, preview_id, lock=True)
                if current is None:
                    raise KeyError(preview_id)
                if current.state not in expect or (
                    expect_attempts is not None and current.attempts != expect_attempts
                ):
                    raise StepStateError(current, expect)
                _apply(conn, current, expect, approval, consume_approval, receipt, at)
                attempts = current.attempts + (1 if to == "sending" else 0)
                conn.execute(
                    "UPDATE previews SET state = %s, updated = %s, attempts = %s, owner = %s, "
                    "lease_until = %s, error = %s WHERE id = %s",
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
        except errors.UniqueViolation:  # a second approval or receipt: someone was first
            assert current is not None  # the violation comes after the step was read
            raise StepStateError(current, expect) from None
        assert updated is not None  # written in this transaction
        return updated

    def close(self) -> None:
        if self._owned:
            self._db.close()


def _apply(
    conn: Connection,
    current: Preview,
    expect: Collection[StepState],
    approval: Approval | None,
    consume_approval: bool,
    receipt: Receipt | None,
    at: float,
) -> None:
    """The side records of one transition: a new approval, its consumption, a receipt."""
    if approval is not None:
        conn.execute(
            f"INSERT INTO approvals ({_APPROVAL_COLUMNS}) "
            f"VALUES ({_marks(_APPROVAL_COLUMNS)})".encode(),
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
            "UPDATE approvals SET consumed_at = %s WHERE preview_id = %s AND consumed_at IS NULL",
            (at, current.id),
        ).rowcount
        if used != 1:
            raise StepStateError(current, expect)
    if receipt is not None:
        conn.execute(
            f"INSERT INTO receipts ({_RECEIPT_COLUMNS}) "
            f"VALUES ({_marks(_RECEIPT_COLUMNS)})".encode(),
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
    conn: Connection,
    preview_id: str,
    at: float,
    from_state: StepState | None,
    to_state: StepState,
    actor: str,
    how: str,
) -> None:
    conn.execute(
        "INSERT INTO step_events (preview_id, at, from_state, to_state, actor, how) "
        "VALUES (%s, %s, %s, %s, %s, %s)",
        (preview_id, at, from_state, to_state, actor, how[:500]),
    )


def _get_preview(conn: Connection, preview_id: str, *, lock: bool = False) -> Preview | None:
    sql = f"SELECT {_PREVIEW_COLUMNS} FROM previews WHERE id = %s{' FOR UPDATE' if lock else ''}"
    row: Any = conn.execute(sql.encode(), (preview_id,)).fetchone()
    return None if row is None else _preview(row)
