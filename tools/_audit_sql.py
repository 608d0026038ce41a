"""The steps of the audit store that SQLite and PostgreSQL take alike.

Events are serialized and chained the same way in both (the chain must not depend on the
database), and the filters of :meth:`query` and :meth:`records` are written once with ``?``
placeholders: the SQLite store runs them as they are, the PostgreSQL store through a
:class:`~airlock.tools._postgres_audit.QmarkConnection`. What differs stays in each store:
transactions, the lock that serializes appenders and the index hints SQLite needs.
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Sequence
from typing import Any

from airlock.tools._audit import AuditEvent
from airlock.tools._audit_chain import (
    GENESIS,
    MISSING_HEAD,
    AuditStoreError,
    Linker,
    head_mac,
    split_effect,
)
from airlock.tools._audit_schema import encoded_row
from airlock.tools._sql_rows import SQLConnection

__all__ = [
    "Encoded",
    "chain_rows",
    "encode_events",
    "filters",
    "first_record",
    "page",
    "program_text",
    "vouched_tail",
]

Encoded = tuple[list[tuple[Any, ...]], list[bytes], list[list[tuple[str, str, str | None]]]]


_SLICE = 128
"""Events serialized between two chances for other threads to take the GIL."""


def encode_events(events: Sequence[AuditEvent]) -> Encoded:
    """The rows of ``events``, their canonical bytes for the chain (without the opening
    ``[``: :class:`~airlock.tools._audit_chain.Linker`), and their effects split for the
    index; done before the transaction."""
    rows: list[tuple[Any, ...]] = []
    tails: list[bytes] = []
    effects: list[list[tuple[str, str, str | None]]] = []
    add_row, add_tail, add_effects = rows.append, tails.append, effects.append
    for start in range(0, len(events), _SLICE):
        if start:
            # Serializing is Python work under the GIL: let other threads (the event
            # loop) run between slices, so a large batch never holds them up for long.
            time.sleep(0)
        for event in events[start : start + _SLICE]:
            row, tail, stored = encoded_row(event)
            add_row(row)
            add_tail(tail)
            add_effects([split_effect(effect) for effect in stored])
    return rows, tails, effects


def vouched_tail(conn: SQLConnection, key: bytes) -> tuple[int, bytes] | None:
    """The number and chain of the last stored record, as the head's MAC vouches for them
    (``None``: no record was written yet, as the head made with the store says): where the
    next append continues. Called under the lock that serializes appenders, before anything
    is written.

    Someone who can write the database but not read the key can delete the newest records;
    ``verify`` then reports the log truncated. Were the next append to chain on from what
    is left, it would write a new head with a valid MAC over the gap, and from then on the
    log would verify as whole. So the last record must be the one the head names.

    Raises:
        AuditStoreError: the head is missing (every store is made with one, for no record:
            without it, the records and the head were deleted), its MAC is wrong, or the last
            record is not the one it names; nothing may be written until someone looks.
    """
    head = conn.execute("SELECT records, chain, mac FROM audit_head").fetchone()
    last = conn.execute("SELECT id, chain FROM audit_events ORDER BY id DESC LIMIT 1").fetchone()
    if head is None:
        # Every store is made with a head (for no record): a wiped log must not restart at 1.
        kept = "the head row is missing, yet records are stored"
        raise _broken(MISSING_HEAD if last is None else kept)
    try:
        records, chain, mac = int(head[0]), bytes(head[1]), bytes(head[2])
        stored = None if last is None else (int(last[0]), bytes(last[1]))
    except (TypeError, ValueError):  # (SQLite: a column given a value of another type)
        raise _broken("the head row or the last record does not read back") from None
    if not hmac.compare_digest(head_mac(key, records, chain), mac):
        raise _broken("the head row's MAC is wrong")
    if stored is None:
        if records == 0 and chain == GENESIS:
            return None
        raise _broken(f"the head says {records} records were written, the log holds none")
    if stored[0] != records:
        raise _broken(
            f"the head says {records} records were written, the last one stored is {stored[0]}"
        )
    if not hmac.compare_digest(stored[1], chain):
        raise _broken(f"record {records} is not the one the head names")
    return records, chain


def _broken(why: str) -> AuditStoreError:
    return AuditStoreError(
        f"the audit log's tail does not match its head ({why}): records were deleted or "
        "changed behind the store's back, so nothing more is written to it. Run `airlock "
        "audit verify` to see what does not fit, and restore the log from a backup"
    )


def chain_rows(
    link: Linker, last: Any, prepared: Encoded
) -> tuple[int, bytes, list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """Number and chain the prepared rows after ``last`` (the last stored ``(id, chain)``,
    from :func:`vouched_tail`, or None): the last number, the last chain, the event rows
    and the effect rows."""
    number, chain = (0, GENESIS) if last is None else (int(last[0]), bytes(last[1]))
    chained: list[tuple[Any, ...]] = []
    indexed: list[tuple[Any, ...]] = []
    rows, tails, effects = prepared
    for start in range(0, len(rows), _SLICE):
        if start:
            # A link is an HMAC of a short text, computed with the GIL held (about 2 us):
            # let the event loop run between slices, as encode_events does.
            time.sleep(0)
        end = start + _SLICE
        for row, tail, split in zip(
            rows[start:end], tails[start:end], effects[start:end], strict=True
        ):
            number += 1
            chain = link(chain, number, tail)
            chained.append((number, *row, chain))
            for kind, target, prefix in split:
                indexed.append((number, kind, target, prefix))
    return number, chain, chained, indexed


def first_record(conn: SQLConnection, since: float) -> int:
    """The lowest record number whose event ended at or after ``since`` (one past the last
    record when none did), found through the time index: records are numbered in the order
    they were written, so a period's records are read from there on by number."""
    row = conn.execute(
        "SELECT MIN(id) FROM audit_events INDEXED BY audit_events_ts WHERE ts >= ?", (since,)
    ).fetchone()
    if row is not None and row[0] is not None:
        return int(row[0])
    last = conn.execute("SELECT MAX(id) FROM audit_events").fetchone()
    return 1 + (0 if last is None or last[0] is None else int(last[0]))


def page(sql: str, params: list[Any], conn: SQLConnection) -> list[Any]:
    """The rows of one page of :meth:`records`."""
    return conn.execute(sql, params).fetchall()


def program_text(conn: SQLConnection, digest: str) -> str | None:
    """The stored program with the hash ``digest``, or None."""
    row = conn.execute("SELECT text FROM audit_programs WHERE hash = ?", (digest,)).fetchone()
    return None if row is None else bytes(row[0]).decode("utf-8", "surrogatepass")


def filters(
    *,
    run_id: str | None = None,
    tool: str | None = None,
    since: float | None = None,
    until: float | None = None,
) -> tuple[str, list[Any]]:
    """The ``WHERE`` clause (or ``""``) and its parameters for the filters given."""
    where: list[str] = []
    params: list[Any] = []
    for clause, value in (
        ("run_id = ?", run_id),
        ("tool = ?", tool),
        ("ts >= ?", since),
        ("ts < ?", until),
    ):
        if value is not None:
            where.append(clause)
            params.append(value)
    return (" WHERE " + " AND ".join(where) if where else ""), params
