"""The steps of the ledger that SQLite and PostgreSQL take alike, and its rows as records.

Both stores hold the same columns with the same JSON in text columns. The steps of a
transition (read the step, check it, write its side records, move it, record the event) are
written once here, in SQL both databases speak, with ``?`` placeholders: the SQLite store
passes its ``sqlite3.Connection``, the PostgreSQL store a
:class:`~airlock.tools._postgres_audit.QmarkConnection`. What differs stays in each store:
transactions, the row lock (``FOR UPDATE``) and which exception says a unique key was taken.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Collection
from typing import Any, Protocol

from airlock.policies import Principal
from airlock.tools._batch_records import Batch
from airlock.tools._ledger import StepStateError
from airlock.tools._preview import (
    STEP_STATES,
    Approval,
    Preview,
    Receipt,
    StepEvent,
    StepState,
    canonical_json,
)

__all__ = [
    "APPROVAL_COLUMNS",
    "BATCH_COLUMNS",
    "PREVIEW_COLUMNS",
    "RECEIPT_COLUMNS",
    "LedgerConnection",
    "apply",
    "approval_of",
    "batch_of",
    "current_step",
    "event",
    "get_preview",
    "move_step",
    "preview_of",
    "preview_row",
    "previews_query",
    "read_approval",
    "read_batch",
    "read_batches",
    "read_history",
    "read_receipt",
    "read_receipts",
    "receipt_of",
    "state_of",
]

PREVIEW_COLUMNS = (
    "id, run_id, tool, user_id, tenant_id, principal, effect, effects, summary, key, "
    "fingerprint, rule, created, expires, state, updated, attempts, owner, lease_until, error"
)
APPROVAL_COLUMNS = "preview_id, fingerprint, kind, approver, rule, at, reason, consumed_at"
RECEIPT_COLUMNS = "key, preview_id, tool, data, stored_at, resolved_by"
BATCH_COLUMNS = "id, run_id, principal, items, fingerprint, created"


class _Cursor(Protocol):
    @property
    def rowcount(self) -> int: ...
    def fetchone(self) -> Any: ...
    def fetchall(self) -> list[Any]: ...


class LedgerConnection(Protocol):
    """A connection that runs one statement with ``?`` placeholders."""

    def execute(self, sql: str, parameters: Any = ..., /) -> _Cursor: ...


def _marks(columns: str) -> str:
    return ", ".join("?" * len(columns.split(",")))


def get_preview(conn: LedgerConnection, preview_id: str, *, lock: str = "") -> Preview | None:
    """The step ``preview_id``, or None; ``lock`` is appended to the query (``" FOR UPDATE"``)."""
    row = conn.execute(
        f"SELECT {PREVIEW_COLUMNS} FROM previews WHERE id = ?{lock}", (preview_id,)
    ).fetchone()
    return None if row is None else preview_of(row)


def current_step(
    conn: LedgerConnection,
    preview_id: str,
    expect: Collection[StepState],
    expect_attempts: int | None,
    *,
    lock: str = "",
) -> Preview:
    """The step ``preview_id`` as it is before a transition.

    Raises:
        KeyError: the ledger holds no such step.
        StepStateError: it is in none of the states ``expect``, or has not made
            ``expect_attempts`` attempts.
    """
    current = get_preview(conn, preview_id, lock=lock)
    if current is None:
        raise KeyError(preview_id)
    if current.state not in expect or (
        expect_attempts is not None and current.attempts != expect_attempts
    ):
        raise StepStateError(current, expect)
    return current


def apply(
    conn: LedgerConnection,
    current: Preview,
    expect: Collection[StepState],
    approval: Approval | None,
    consume_approval: bool,
    receipt: Receipt | None,
    at: float,
) -> None:
    """The side records of one transition: a new approval, its consumption, a receipt.

    Raises:
        StepStateError: the approval to consume was consumed already (or never given).
    """
    if approval is not None:
        conn.execute(
            f"INSERT INTO approvals ({APPROVAL_COLUMNS}) VALUES ({_marks(APPROVAL_COLUMNS)})",
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
            (at, current.id),
        ).rowcount
        if used != 1:
            raise StepStateError(current, expect)
    if receipt is not None:
        conn.execute(
            f"INSERT INTO receipts ({RECEIPT_COLUMNS}) VALUES ({_marks(RECEIPT_COLUMNS)})",
            (
                receipt.key,
                receipt.preview_id,
                receipt.tool,
                canonical_json(receipt.data).decode(),
                receipt.stored_at,
                receipt.resolved_by,
            ),
        )


def move_step(
    conn: LedgerConnection,
    current: Preview,
    *,
    to: StepState,
    at: float,
    actor: str,
    how: str,
    owner: str | None,
    lease_until: float | None,
    error: str | None,
) -> Preview:
    """Move ``current`` to ``to`` (a send counts an attempt), record the event, and return
    the step as it now is."""
    # The step as the row now holds it, built from what was written rather than read back:
    # the columns are plain values (REAL, INTEGER, TEXT) that come back as they went in.
    updated = dataclasses.replace(
        current,
        state=to,
        updated=float(at),
        attempts=current.attempts + (1 if to == "sending" else 0),
        owner=owner if owner is not None else current.owner,
        lease_until=None if lease_until is None else float(lease_until),
        error=error,
    )
    conn.execute(
        "UPDATE previews SET state = ?, updated = ?, attempts = ?, owner = ?, "
        "lease_until = ?, error = ? WHERE id = ?",
        (
            to,
            updated.updated,
            updated.attempts,
            updated.owner,
            updated.lease_until,
            error,
            current.id,
        ),
    )
    event(conn, current.id, at, current.state, to, actor, how)
    return updated


def event(
    conn: LedgerConnection,
    preview_id: str,
    at: float,
    from_state: StepState | None,
    to_state: StepState,
    actor: str,
    how: str,
) -> None:
    """Record one step's move (``how`` cut to 500 characters)."""
    conn.execute(
        "INSERT INTO step_events (preview_id, at, from_state, to_state, actor, how) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        (preview_id, at, from_state, to_state, actor, how[:500]),
    )


def previews_query(
    states: Collection[StepState] | None, limit: int, run_id: str | None
) -> tuple[str, list[object]] | None:
    """The query and parameters of :meth:`~airlock.tools.LedgerStore.previews`, or None
    when no state is wanted (nothing can match)."""
    sql = f"SELECT {PREVIEW_COLUMNS} FROM previews"
    where: list[str] = []
    params: list[object] = []
    if states is not None:
        wanted = sorted(set(states))
        if not wanted:
            return None
        where.append(f"state IN ({', '.join('?' * len(wanted))})")
        params.extend(wanted)
    if run_id is not None:
        where.append("run_id = ?")
        params.append(run_id)
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY created DESC, id LIMIT ?"
    params.append(int(limit))
    return sql, params


def read_approval(conn: LedgerConnection, preview_id: str) -> Approval | None:
    sql = f"SELECT {APPROVAL_COLUMNS} FROM approvals WHERE preview_id = ?"
    row = conn.execute(sql, (preview_id,)).fetchone()
    return None if row is None else approval_of(row)


def read_receipt(conn: LedgerConnection, key: str) -> Receipt | None:
    row = conn.execute(f"SELECT {RECEIPT_COLUMNS} FROM receipts WHERE key = ?", (key,)).fetchone()
    return None if row is None else receipt_of(row)


def read_receipts(conn: LedgerConnection, limit: int) -> list[Receipt]:
    sql = f"SELECT {RECEIPT_COLUMNS} FROM receipts ORDER BY stored_at DESC, key LIMIT ?"
    return [receipt_of(row) for row in conn.execute(sql, (int(limit),)).fetchall()]


def read_history(conn: LedgerConnection, preview_id: str) -> list[StepEvent]:
    rows = conn.execute(
        "SELECT preview_id, at, from_state, to_state, actor, how FROM step_events "
        "WHERE preview_id = ? ORDER BY id",
        (preview_id,),
    ).fetchall()
    return [
        StepEvent(
            preview_id=str(r[0]),
            at=float(r[1]),
            from_state=None if r[2] is None else state_of(r[2]),
            to_state=state_of(r[3]),
            actor=str(r[4]),
            how=str(r[5]),
        )
        for r in rows
    ]


def read_batch(conn: LedgerConnection, batch_id: str) -> Batch | None:
    row = conn.execute(f"SELECT {BATCH_COLUMNS} FROM batches WHERE id = ?", (batch_id,)).fetchone()
    return None if row is None else batch_of(row)


def read_batches(conn: LedgerConnection, run_id: str | None, limit: int) -> list[Batch]:
    sql = f"SELECT {BATCH_COLUMNS} FROM batches"
    params: list[object] = []
    if run_id is not None:
        sql += " WHERE run_id = ?"
        params.append(run_id)
    sql += " ORDER BY created DESC, id LIMIT ?"
    params.append(int(limit))
    return [batch_of(row) for row in conn.execute(sql, params).fetchall()]


def preview_row(p: Preview) -> tuple[object, ...]:
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


def state_of(value: object) -> StepState:
    if value not in STEP_STATES:
        raise ValueError(f"the ledger holds an unknown state {value!r}")
    return value


def preview_of(r: tuple[Any, ...]) -> Preview:
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
        state=state_of(r[14]),
        updated=float(r[15]),
        attempts=int(r[16]),
        owner=None if r[17] is None else str(r[17]),
        lease_until=None if r[18] is None else float(r[18]),
        error=None if r[19] is None else str(r[19]),
    )


def approval_of(r: tuple[Any, ...]) -> Approval:
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


def batch_of(r: tuple[Any, ...]) -> Batch:
    return Batch(
        id=str(r[0]),
        run_id=str(r[1]),
        principal=Principal.model_validate_json(r[2]),
        items=tuple(str(i) for i in json.loads(r[3])),
        fingerprint=str(r[4]),
        created=float(r[5]),
    )


def receipt_of(r: tuple[Any, ...]) -> Receipt:
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
