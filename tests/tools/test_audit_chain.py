"""Tampering with the audit store behind its back, with plain SQL as someone holding the file
(or a login to the database) would: every edit, deletion, reordering and truncation is found,
and ``verify`` names the first record that does not fit. Each test runs on SQLite and on
PostgreSQL."""

from __future__ import annotations

import dataclasses
import hmac
import json
from pathlib import Path
from typing import get_args

import pytest

from airlock.tools import PROGRAM_TOOL, AuditEvent, ChainReport, program_hash
from airlock.tools._audit_chain import GENESIS, ChainProblem, link
from airlock.tools._audit_schema import COLUMNS
from tests.tools.stores import Backend

RECORDS = 10
PROGRAMS = ("tools.a_b_c(x=1)\n", "sum(range(3))\n")
RAN = {3: PROGRAMS[0], 8: PROGRAMS[1]}
"""Records of programs: which program each ran."""


def event(i: int) -> AuditEvent:
    made = _call_event(i)
    if i in RAN:  # a program's own record: its args_hash names its text
        return dataclasses.replace(made, tool=PROGRAM_TOOL, args_hash=program_hash(RAN[i]))
    return made


def _call_event(i: int) -> AuditEvent:
    return AuditEvent(
        ts=1_000.0 + i,
        run_id=f"run_{i // 4}",
        call_id=f"c{i}",
        caller="code" if i % 2 else "direct",
        tool="billing_invoice_get",
        user_id="alice",
        tenant_id="acme",
        args_hash=f"{i:032x}",
        stage="done",
        decision="allow",
        rule="default",
        outcome="ok",
        code=None,
        duration_s=0.001,
        effects=(f"read(billing:invoice/inv_{i})", "read(billing:invoice/*)"),
        approver="bob" if i == 6 else None,
        final=i != 6,
    )


def fill(backend: Backend) -> Backend:
    """Write the records and programs of these tests to ``backend``'s audit store."""
    store = backend.audit()
    store.append([event(i) for i in range(1, 6)], {program_hash(PROGRAMS[0]): PROGRAMS[0]})
    store.append([event(i) for i in range(6, RECORDS + 1)], {program_hash(p): p for p in PROGRAMS})
    store.close()
    return backend


@pytest.fixture
def db(backend: Backend) -> Backend:
    return fill(backend)


def verify(db: Backend) -> ChainReport:
    store = db.audit(readonly=True)
    try:
        return store.verify()
    finally:
        store.close()


# What differs in PostgreSQL's SQL from the statements below, written for SQLite.
PG_SPELLING = {
    "zeroblob(32)": "decode(repeat('00', 32), 'hex')",
    "CAST('import os' AS BLOB)": "convert_to('import os', 'UTF8')",
}
PG_STATEMENTS = {
    # PostgreSQL checks a unique key row by row: renumber through negative ids.
    "UPDATE audit_events SET id = id - 1 WHERE id > 4": (
        "UPDATE audit_events SET id = -(id - 1) WHERE id > 4",
        "UPDATE audit_events SET id = -id WHERE id < 0",
    ),
}


def tamper(db: Backend, *statements: str) -> None:
    for statement in statements:
        if db.name == "sqlite":
            db.sql(statement)
            continue
        for spelled in PG_STATEMENTS.get(statement, (statement,)):
            for sqlite_form, pg_form in PG_SPELLING.items():
                spelled = spelled.replace(sqlite_form, pg_form)
            db.sql(spelled)


def test_an_untouched_store_verifies(db: Backend) -> None:
    report = verify(db)
    assert report.ok, report
    assert (report.records, report.head, report.programs) == (RECORDS, RECORDS, 2)
    assert len(report.last_chain) == 64


EDIT = (
    "UPDATE audit_events SET {col} = CASE "
    "WHEN typeof({col}) = 'real' THEN {col} + 1 "
    "WHEN typeof({col}) = 'integer' THEN 1 - {col} "
    "WHEN {col} IS NULL THEN 'x' ELSE {col} || 'x' END WHERE id = 4"
)
PG_NUMBERS = {"ts": "{col} + 1", "duration_s": "{col} + 1", "final": "1 - {col}"}
PG_NUMBERS["exercised"] = "1 - {col}"


def edit(db: Backend, column: str) -> str:
    """An edit of ``column`` of record 4 that changes its value, whatever its type."""
    if db.name == "sqlite":
        return EDIT.format(col=column)
    value = PG_NUMBERS.get(column, "COALESCE({col}, '') || 'x'").format(col=column)
    return f"UPDATE audit_events SET {column} = {value} WHERE id = 4"


@pytest.mark.parametrize("column", [*COLUMNS.split(", "), "chain"])
def test_editing_any_column_of_a_record_is_found_at_that_record(db: Backend, column: str) -> None:
    statement = (
        "UPDATE audit_events SET chain = zeroblob(32) WHERE id = 4"
        if column == "chain"
        else edit(db, column)
    )
    tamper(db, statement)
    report = verify(db)
    assert (report.problem, report.record) == ("changed", 4), report
    assert report.records == 3


# Each case: what someone did with sqlite3, the problem verify reports, the record it names.
TAMPERING: list[tuple[str, tuple[str, ...], ChainProblem, int]] = [
    ("delete a record", ("DELETE FROM audit_events WHERE id = 4",), "missing", 4),
    ("delete the first record", ("DELETE FROM audit_events WHERE id = 1",), "missing", 1),
    (
        "swap two records",
        (
            "UPDATE audit_events SET id = -3 WHERE id = 3",
            "UPDATE audit_events SET id = 3 WHERE id = 4",
            "UPDATE audit_events SET id = 4 WHERE id = -3",
        ),
        "changed",
        3,
    ),
    (
        "renumber to hide a deletion",
        (
            "DELETE FROM audit_events WHERE id = 4",
            "UPDATE audit_events SET id = id - 1 WHERE id > 4",
        ),
        "changed",
        4,
    ),
    ("truncate the last records", ("DELETE FROM audit_events WHERE id > 7",), "truncated", 8),
    (
        "truncate everything",
        ("DELETE FROM audit_events", "DELETE FROM audit_effects"),
        "truncated",
        1,
    ),
    (
        "truncate and move the head back",
        (
            "DELETE FROM audit_events WHERE id > 7",
            "DELETE FROM audit_effects WHERE event_id > 7",
            "UPDATE audit_head SET records = 7, "
            "chain = (SELECT chain FROM audit_events WHERE id = 7)",
        ),
        "head",
        7,
    ),
    ("delete the head", ("DELETE FROM audit_head",), "head", RECORDS),
    ("forge the head's count", ("UPDATE audit_head SET records = 12",), "head", RECORDS),
    (
        "edit a stored program",
        ("UPDATE audit_programs SET text = CAST('import os' AS BLOB)",),
        "program",
        RECORDS,
    ),
    (
        "delete the text of a program that ran",
        (f"DELETE FROM audit_programs WHERE hash = '{program_hash(PROGRAMS[1])}'",),
        "program",
        8,
    ),
    (
        "swap in another program under its own hash",
        (
            f"DELETE FROM audit_programs WHERE hash = '{program_hash(PROGRAMS[0])}'",
            f"INSERT INTO audit_programs VALUES ('{program_hash('import os')}', "
            "CAST('import os' AS BLOB))",
        ),
        "program",
        3,
    ),
    (
        "drop a record from the effect index",
        ("DELETE FROM audit_effects WHERE event_id = 5 AND target LIKE '%inv_5'",),
        "index",
        5,
    ),
    (
        "point the index at another record",
        ("UPDATE audit_effects SET target = 'billing:invoice/inv_9' WHERE target LIKE '%inv_5'",),
        "index",
        5,
    ),
    (
        "add an index row for no record",
        ("INSERT INTO audit_effects VALUES (99, 'read', 'billing:invoice/inv_99', NULL)",),
        "index",
        99,
    ),
]


@pytest.mark.parametrize(
    ("name", "statements", "problem", "record"), TAMPERING, ids=[t[0] for t in TAMPERING]
)
def test_tampering_is_found_at_the_first_bad_record(
    db: Backend, name: str, statements: tuple[str, ...], problem: ChainProblem, record: int
) -> None:
    assert verify(db).ok
    tamper(db, *statements)
    report = verify(db)
    assert (report.problem, report.record) == (problem, record), (name, report)
    assert report.detail


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE audit_events SET tool = CAST(tool AS BLOB) WHERE id = 4",
        "UPDATE audit_events SET chain = 'not a digest' WHERE id = 4",
        "UPDATE audit_events SET duration_s = 'fast' WHERE id = 4",
    ],
)
def test_a_value_of_another_type_is_found_at_its_record(tmp_path: Path, statement: str) -> None:
    # SQLite alone lets a column hold a value of another type.
    sqlite = Backend("sqlite", tmp_path)
    fill(sqlite)
    tamper(sqlite, statement)
    report = verify(sqlite)
    assert (report.problem, report.record) == ("changed", 4), report


# The head row, or a record's chain, given a value of another type (SQLite alone lets a
# column hold one): verify reports where, never a traceback, and never allocates what a
# number asks for (``bytes(n)`` is n zero bytes).
UNREADABLE: list[tuple[str, str, ChainProblem, int]] = [
    ("the head's count as words", "UPDATE audit_head SET records = 'abc'", "head", RECORDS),
    ("the head's count below zero", "UPDATE audit_head SET records = -1", "head", RECORDS),
    ("the head's count as a fraction", "UPDATE audit_head SET records = 9.5", "head", RECORDS),
    ("the head's chain as text", "UPDATE audit_head SET chain = 'zz'", "head", RECORDS),
    (
        "the head's chain as a number",
        "UPDATE audit_head SET chain = 1000000000000",
        "head",
        RECORDS,
    ),
    ("the head's MAC as text", "UPDATE audit_head SET mac = 'zz'", "head", RECORDS),
    ("the head's MAC as a number", "UPDATE audit_head SET mac = 32", "head", RECORDS),
    (
        "a program's text as a number",
        "UPDATE audit_programs SET text = 1000000000000",
        "program",
        RECORDS,
    ),
    (
        "a record's chain as a number",
        "UPDATE audit_events SET chain = 1000000000000 WHERE id = 4",
        "changed",
        4,
    ),
    # An index row whose record number is no int sorts after every int one (SQLite orders
    # numbers, then text, then blobs), a fraction between them.
    (
        "an index row's record as words",
        "INSERT INTO audit_effects VALUES ('abc', 'read', 'x:y/z', NULL)",
        "index",
        RECORDS,
    ),
    (
        "an index row's record as a blob",
        "INSERT INTO audit_effects VALUES (x'00', 'read', 'x:y/z', NULL)",
        "index",
        RECORDS,
    ),
    (
        "an index row's record as a fraction",
        "INSERT INTO audit_effects VALUES (1.5, 'read', 'x:y/z', NULL)",
        "index",
        2,
    ),
    (
        "an index row's kind as a blob",
        "UPDATE audit_effects SET kind = x'72656164' WHERE event_id = 4",
        "index",
        4,
    ),
    (
        "an index row's target as a number",
        "INSERT INTO audit_effects VALUES (4, 'read', 12, NULL)",
        "index",
        4,
    ),
    (
        "an index row's prefix as a blob",
        "UPDATE audit_effects SET prefix = x'00' WHERE event_id = 4 AND prefix IS NOT NULL",
        "index",
        4,
    ),
]


@pytest.mark.parametrize(
    ("name", "statement", "problem", "record"), UNREADABLE, ids=[u[0] for u in UNREADABLE]
)
def test_a_head_or_chain_that_does_not_read_back_is_reported_where_it_is(
    tmp_path: Path, name: str, statement: str, problem: ChainProblem, record: int
) -> None:
    sqlite = Backend("sqlite", tmp_path)
    fill(sqlite)
    tamper(sqlite, statement)
    report = verify(sqlite)
    assert (report.problem, report.record) == (problem, record), (name, report)
    assert report.detail


def test_every_problem_verify_can_report_has_a_tampering_case() -> None:
    assert {t[2] for t in TAMPERING} | {"changed"} == set(get_args(ChainProblem))


def test_a_chain_recomputed_without_the_key_is_found_at_record_one(db: Backend) -> None:
    # Someone who can write the file but not read the key rebuilds every chain value.
    rows = db.sql(f"SELECT id, {COLUMNS} FROM audit_events ORDER BY id")
    guess, chain = b"\x01" * 32, GENESIS
    for row in rows:
        chain = link(guess, chain, row)
        db.sql("UPDATE audit_events SET chain = ? WHERE id = ?", (chain, row[0]))
    report = verify(db)
    assert (report.problem, report.record) == ("changed", 1)


def test_verify_with_another_key_fails_and_without_one_says_so(db: Backend) -> None:
    key_file = db.root / "audit.db.key"
    original = key_file.read_text()
    key_file.write_text("ab" * 32)
    assert (verify(db).problem, verify(db).record) == ("changed", 1)
    key_file.unlink()
    with pytest.raises(Exception, match="key") as caught:
        verify(db)
    assert getattr(caught.value, "code", None) == "audit_store"
    moved = db.root / "elsewhere.key"
    moved.write_text(original)
    store = db.audit(readonly=True, key_file=moved)
    assert store.verify().ok
    store.close()


def test_the_chain_links_each_record_to_the_one_before(db: Backend) -> None:
    key = bytes.fromhex((db.root / "audit.db.key").read_text().strip())
    previous = GENESIS
    for row in db.sql(f"SELECT id, {COLUMNS}, chain FROM audit_events ORDER BY id"):
        assert hmac.compare_digest(link(key, previous, row[:-1]), bytes(row[-1]))
        assert json.loads(row[COLUMNS.split(", ").index("effects") + 1])
        previous = bytes(row[-1])


def test_writers_after_a_reopen_extend_the_same_chain(db: Backend) -> None:
    store = db.audit()
    store.append([event(11)])
    store.close()
    report = verify(db)
    assert report.ok, report
    assert report.records == RECORDS + 1
