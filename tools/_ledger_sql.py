"""The steps of the ledger that SQLite and PostgreSQL take alike.

Both stores hold the same columns with the same JSON in text columns (the rows as records:
:mod:`airlock.tools._ledger_rows`). The steps of a
transition (read the step, check it, write its side records, move it, record the event) are
written once here, in SQL both databases speak, with ``?`` placeholders: the SQLite store
passes its ``sqlite3.Connection``, the PostgreSQL store a
:class:`~airlock.tools._postgres_audit.QmarkConnection`. What differs stays in each store:
transactions, the row lock (``FOR UPDATE``) and which exception says a unique key was taken.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
from typing import Any, Protocol

from airlock.tools._batch_records import Batch
from airlock.tools._ledger import ClaimedFrom, StepRef, StepStateError
from airlock.tools._ledger_rows import (
    approval_of,
    batch_of,
    event_of,
    ledger_text,
    preview_of,
    receipt_of,
    step_ref_of,
)
from airlock.tools._preview import Approval, Preview, Receipt, StepEvent, StepState, canonical_json

__all__ = [
    "APPROVAL_COLUMNS",
    "BATCH_COLUMNS",
    "PREVIEW_COLUMNS",
    "RECEIPT_COLUMNS",
    "LedgerConnection",
    "apply",
    "current_step",
    "event",
    "get_preview",
    "move_step",
    "previews_query",
    "read_approval",
    "read_batch",
    "read_batches",
    "read_history",
    "read_receipt",
    "read_receipts",
    "read_steps",
    "release_step",
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
                ledger_text(approval.reason),
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
    the step as it now is (``error`` as :func:`~airlock.tools._ledger_rows.ledger_text`
    stores it)."""
    error = None if error is None else ledger_text(error)
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


def release_step(
    conn: LedgerConnection,
    preview_id: str,
    *,
    to: ClaimedFrom,
    expect_attempts: int,
    expect_owner: str,
    at: float,
    actor: str,
    how: str,
    error: str | None,
    lock: str = "",
) -> Preview:
    """The steps of :meth:`~airlock.tools.LedgerStore.release_claim` (``lock`` as in
    :func:`get_preview`): the step as it now is.

    Raises:
        ValueError: ``to`` is no state a send is claimed from.
        KeyError: the ledger holds no such step.
        StepStateError: it is not the claim described, or (back to ``approved``) its
            approval was not consumed by it.
    """
    if to not in ("approved", "unknown"):
        raise ValueError(f"a claim is released to 'approved' or 'unknown', not {to!r}")
    sending: tuple[StepState, ...] = ("sending",)
    current = current_step(conn, preview_id, sending, expect_attempts, lock=lock)
    # Only a first claim came from ``approved``: a step sent before may have acted.
    first = current.attempts == 1
    if current.owner != expect_owner or (to == "approved" and not first):
        raise StepStateError(current, sending)
    if to == "approved":
        # The claim consumed the approval at its own time, the step's ``updated`` (the same
        # value written in one transaction): that consumption only, not an earlier one.
        freed = conn.execute(
            "UPDATE approvals SET consumed_at = NULL WHERE preview_id = ? AND consumed_at = ?",
            (current.id, current.updated),
        ).rowcount
        if freed != 1:
            raise StepStateError(current, sending)
    released = dataclasses.replace(
        current,
        state=to,
        updated=float(at),
        attempts=current.attempts - 1,
        owner=None if to == "approved" else current.owner,
        lease_until=None,
        error=None if error is None else ledger_text(error),
    )
    conn.execute(
        "UPDATE previews SET state = ?, updated = ?, attempts = ?, owner = ?, "
        "lease_until = NULL, error = ? WHERE id = ?",
        (to, released.updated, released.attempts, released.owner, released.error, current.id),
    )
    event(conn, current.id, at, current.state, to, actor, how)
    return released


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
        (preview_id, at, from_state, to_state, ledger_text(actor), ledger_text(how)[:500]),
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


def read_steps(conn: LedgerConnection, states: Collection[StepState], limit: int) -> list[StepRef]:
    """The query of :meth:`~airlock.tools.LedgerStore.steps`."""
    wanted = sorted(set(states))
    if not wanted:
        return []
    sql = (
        f"SELECT id, tool, state FROM previews WHERE state IN ({', '.join('?' * len(wanted))}) "
        "ORDER BY created DESC, id LIMIT ?"
    )
    return [step_ref_of(row) for row in conn.execute(sql, (*wanted, int(limit))).fetchall()]


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
    return [event_of(r) for r in rows]


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
