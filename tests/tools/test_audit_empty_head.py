"""A store is made with a head that counts no record, under the key's MAC, in the same
transaction as its tables (SQLite) or its key check (PostgreSQL): a store that has its tables
but no head was tampered with (every record and the head deleted), so ``verify`` reports it
and appends refuse, instead of a wiped log verifying as empty and starting again at record 1.
Each test runs on SQLite and on PostgreSQL."""

from __future__ import annotations

import pytest

from airlock.tools import program_hash
from airlock.tools._audit_chain import AuditStoreError, ChainProblem
from tests.tools.stores import Backend
from tests.tools.test_audit_chain import RECORDS, event, fill, tamper, verify

WIPE = ("DELETE FROM audit_effects", "DELETE FROM audit_events")

# Each case: whether the store held records first, what someone did with plain SQL, and what
# verify reports (None: nothing wrong).
EMPTY_HEADS: list[tuple[str, bool, tuple[str, ...], ChainProblem | None]] = [
    ("a new store, untouched", False, (), None),
    ("a new store, its head deleted", False, ("DELETE FROM audit_head",), "head"),
    ("every record deleted, head kept", True, WIPE, "truncated"),
    ("every record and the head deleted", True, (*WIPE, "DELETE FROM audit_head"), "head"),
    (
        "every record, program and the head deleted",
        True,
        (*WIPE, "DELETE FROM audit_programs", "DELETE FROM audit_head"),
        "head",
    ),
    ("the head deleted, records kept", True, ("DELETE FROM audit_head",), "head"),
    (
        "a new store's head moved to a count of one",
        False,
        ("UPDATE audit_head SET records = 1",),
        "head",
    ),
]


def _store(backend: Backend, filled: bool) -> Backend:
    if filled:
        return fill(backend)
    backend.audit().close()
    return backend


@pytest.mark.parametrize(
    ("name", "filled", "statements", "problem"), EMPTY_HEADS, ids=[c[0] for c in EMPTY_HEADS]
)
def test_a_store_without_its_head_is_tampered_and_refuses_appends(
    backend: Backend,
    name: str,
    filled: bool,
    statements: tuple[str, ...],
    problem: ChainProblem | None,
) -> None:
    db = _store(backend, filled)
    tamper(db, *statements)
    report = verify(db)
    assert report.problem == problem, (name, report)
    store = db.audit()
    try:
        if problem is None:
            store.append([event(1)])
        else:
            with pytest.raises(AuditStoreError, match="airlock audit verify") as caught:
                store.append([event(99)], {program_hash("late()\n"): "late()\n"})
            assert caught.value.code == "audit_store"
    finally:
        store.close()
    after = verify(db)
    assert after.problem == problem, (name, after)
    if problem is None:
        assert (after.records, after.head) == (1, 1)


def test_a_new_store_verifies_with_a_head_of_no_record(backend: Backend) -> None:
    for _ in range(2):  # opened again: the head is neither lost nor written twice
        backend.audit().close()
        report = verify(backend)
        assert report.ok, report
        assert (report.records, report.head) == (0, 0)
    assert [int(r[0]) for r in backend.sql("SELECT records FROM audit_head")] == [0]


def test_a_wiped_log_is_not_started_again_from_record_one(backend: Backend) -> None:
    db = fill(backend)
    tamper(db, *WIPE, "DELETE FROM audit_head")
    store = db.audit()
    try:
        with pytest.raises(AuditStoreError):
            store.append([event(1)])
    finally:
        store.close()
    assert int(db.sql("SELECT COUNT(*) FROM audit_events")[0][0]) == 0
    report = verify(db)
    assert (report.ok, report.problem, report.record) == (False, "head", 1)
    assert "head" in report.detail


def test_a_store_with_records_keeps_verifying_when_reopened(backend: Backend) -> None:
    db = fill(backend)
    db.audit().close()
    report = verify(db)
    assert report.ok, report
    assert (report.records, report.head) == (RECORDS, RECORDS)
