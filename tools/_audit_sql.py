"""The steps of the audit store that SQLite and PostgreSQL take alike.

Events are serialized and chained the same way in both (the chain must not depend on the
database), and the filters of :meth:`query` and :meth:`records` are written once with ``?``
placeholders: the SQLite store runs them as they are, the PostgreSQL store through a
:class:`~airlock.tools._postgres_audit.QmarkConnection`. What differs stays in each store:
transactions, the lock that serializes appenders and the index hints SQLite needs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from airlock.tools._audit import AuditEvent
from airlock.tools._audit_chain import GENESIS, Linker, split_effect
from airlock.tools._audit_schema import encoded_row
from airlock.tools._sql_rows import SQLConnection

__all__ = ["Encoded", "chain_rows", "encode_events", "filters", "page", "program_text"]

Encoded = tuple[list[tuple[Any, ...]], list[bytes], list[list[tuple[str, str, str | None]]]]


_SLICE = 128
"""Events serialized between two chances for other threads to take the GIL."""


def encode_events(
    events: Sequence[AuditEvent], text: Callable[[Any], Any] | None = None
) -> Encoded:
    """The rows of ``events`` (each value passed through ``text``), their canonical bytes
    for the chain (without the opening ``[``: :class:`~airlock.tools._audit_chain.Linker`),
    and their effects split for the index; done before the transaction."""
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
            row, tail, stored = encoded_row(event, text)
            add_row(row)
            add_tail(tail)
            add_effects([split_effect(effect) for effect in stored])
    return rows, tails, effects


def chain_rows(
    link: Linker, last: Any, prepared: Encoded
) -> tuple[int, bytes, list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """Number and chain the prepared rows after ``last`` (the last stored ``(id, chain)``
    or None): the last number, the last chain, the event rows and the effect rows."""
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
