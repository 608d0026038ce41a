"""The audit writer's shortcuts, held to the plain way: the SQLite store's inserts of many rows
per statement (:func:`insert_rows`) leave a table exactly as one statement per row does (the
same rows, in the same order, the same duplicates ignored, for every batch size around the
statement sizes it uses and under limits of bound variables that force smaller statements),
and a batch encoded in slices is each of its events encoded alone."""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest

from airlock.tools._audit_chain import split_effect
from airlock.tools._audit_schema import encoded_row
from airlock.tools._audit_sql import encode_events
from airlock.tools._sqlite_audit import MOST_ROWS_PER_INSERT, insert_rows
from tests.audit_events import stored_event
from tests.tools.test_audit_rows import CASES

_TABLE = "CREATE TABLE t (k INTEGER, kind TEXT, target TEXT, prefix TEXT, blob BLOB, x REAL, "
_TABLE += "PRIMARY KEY (k, kind)) WITHOUT ROWID"
_LOG = "CREATE TABLE t (n INTEGER PRIMARY KEY, kind TEXT, target TEXT, prefix TEXT, blob BLOB, "
_LOG += "x REAL)"
INSERTS = {
    "plain": (_LOG, "INSERT INTO t (n, kind, target, prefix, blob, x) VALUES (?, ?, ?, ?, ?, ?)"),
    "or ignore": (_TABLE, "INSERT OR IGNORE INTO t VALUES (?, ?, ?, ?, ?, ?)"),
}
COUNTS = sorted(
    {0, 1, 2, 3, 7, 31, 32, 33, 100}
    | {MOST_ROWS_PER_INSERT + d for d in (-1, 0, 1)}
    | {2 * MOST_ROWS_PER_INSERT + 5, 3 * MOST_ROWS_PER_INSERT - 1}
)
# Bound variables a statement may hold: SQLite's own, and ones that allow one row of six
# columns a statement, two, and four (30 // 6 = 5 rows, rounded down to a power of two).
LIMITS = [None, 6, 13, 30]


def _rows(count: int) -> list[tuple[Any, ...]]:
    # Every kind of value a store binds (text, NULL, bytes, float), and in the "or ignore"
    # table every seventh row a duplicate of an earlier key with other values.
    return [
        (
            n if n % 7 else n // 7,
            "read" if n % 7 else "",
            f"records:record/rec_{n}",
            None if n % 3 else f"records:{n}",
            bytes([n % 256]) * 32,
            n / 3,
        )
        for n in range(1, count + 1)
    ]


def _table(create: str, *, limit: int | None = None) -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.execute(create)
    if limit is not None:
        conn.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, limit)
    return conn


@pytest.mark.parametrize("limit", LIMITS, ids=lambda n: f"limit-{n}")
@pytest.mark.parametrize("count", COUNTS)
@pytest.mark.parametrize("name", sorted(INSERTS))
def test_many_rows_a_statement_store_what_one_a_statement_stores(
    name: str, count: int, limit: int | None
) -> None:
    create, one = INSERTS[name]
    rows = _rows(count)
    if name == "plain":  # a primary key of its own: no duplicates to refuse
        rows = [(n, *row[1:]) for n, row in enumerate(rows, 1)]
    reference, many = _table(create), _table(create, limit=limit)
    reference.executemany(one, rows)
    insert_rows(many, one, rows)
    read = "SELECT * FROM t ORDER BY 1, 2"
    assert many.execute(read).fetchall() == reference.execute(read).fetchall()
    assert many.total_changes == reference.total_changes


def test_a_row_that_breaks_a_constraint_fails_the_insert_as_one_a_statement_does() -> None:
    create, one = INSERTS["plain"]
    rows = _rows(40)
    rows = [(n, *row[1:]) for n, row in enumerate(rows, 1)] + [(3, "read", "x", None, b"", 0.0)]
    conn = _table(create)
    with pytest.raises(sqlite3.IntegrityError):
        insert_rows(conn, one, rows)


@pytest.mark.parametrize("count", [0, 1, 127, 128, 129, 300])
def test_a_batch_encodes_as_its_events_do_one_by_one(count: int) -> None:
    # encode_events works in slices (other threads get the interpreter lock between them):
    # across their edges, each event's row, bytes and effect rows are its own.
    names = sorted(CASES)
    events = [
        stored_event(**({"call_id": f"c{n}"} | CASES[names[n % len(names)]])) for n in range(count)
    ]
    rows, tails, effects = encode_events(events)
    alone = [encoded_row(event) for event in events]
    assert [repr(r) for r in rows] == [repr(row) for row, _, _ in alone]
    assert tails == [tail for _, tail, _ in alone]
    assert effects == [[split_effect(e) for e in stored] for _, _, stored in alone]
