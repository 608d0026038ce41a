"""An append continues the log only from the tail its head vouches for: someone who can write
the database but not read the key deletes the newest records (or forges the head), and the
next append refuses instead of chaining over the gap, so ``verify`` keeps reporting it. Each
test runs on SQLite and on PostgreSQL."""

from __future__ import annotations

import pytest

from airlock.tools import AuditLog, program_hash
from airlock.tools._audit_chain import AuditStoreError, ChainProblem
from tests.tools.stores import Backend
from tests.tools.test_audit_chain import RECORDS, _call_event, event, fill, tamper, verify

# Each case: what someone did with plain SQL, and the problem verify reports before and after
# the refused append (nothing written, so the same).
BROKEN_TAILS: list[tuple[str, tuple[str, ...], ChainProblem]] = [
    (
        "delete the newest records",
        ("DELETE FROM audit_effects WHERE event_id > 7", "DELETE FROM audit_events WHERE id > 7"),
        "truncated",
    ),
    (
        "delete the newest record, index kept",
        ("DELETE FROM audit_events WHERE id = 10",),
        "truncated",
    ),
    ("delete every record", ("DELETE FROM audit_effects", "DELETE FROM audit_events"), "truncated"),
    ("delete the head", ("DELETE FROM audit_head",), "head"),
    ("forge the head's count", ("UPDATE audit_head SET records = 7",), "head"),
    (
        "move the head back to the cut",
        (
            "DELETE FROM audit_effects WHERE event_id > 7",
            "DELETE FROM audit_events WHERE id > 7",
            "UPDATE audit_head SET records = 7, "
            "chain = (SELECT chain FROM audit_events WHERE id = 7)",
        ),
        "head",
    ),
    ("blank the head's MAC", ("UPDATE audit_head SET mac = zeroblob(32)",), "head"),
    (
        "replace the newest record's chain",
        ("UPDATE audit_events SET chain = zeroblob(32) WHERE id = 10",),
        "changed",
    ),
    (
        "add a record past the head",
        (
            "INSERT INTO audit_events SELECT id + 1, ts, run_id, call_id, caller, tool, "
            "user_id, tenant_id, args_hash, stage, decision, rule, outcome, code, duration_s, "
            "effects, detail, final, approver, exercised, chain FROM audit_events WHERE id = 10",
        ),
        "changed",
    ),
]


def count(db: Backend, table: str) -> int:
    return int(db.sql(f"SELECT COUNT(*) FROM {table}")[0][0])


@pytest.mark.parametrize(
    ("name", "statements", "problem"), BROKEN_TAILS, ids=[t[0] for t in BROKEN_TAILS]
)
def test_an_append_never_extends_a_log_whose_tail_does_not_match_its_head(
    backend: Backend, name: str, statements: tuple[str, ...], problem: ChainProblem
) -> None:
    db = fill(backend)
    tamper(db, *statements)
    assert verify(db).problem == problem, name
    before = [count(db, t) for t in ("audit_events", "audit_effects", "audit_programs")]
    store = db.audit()
    try:
        with pytest.raises(AuditStoreError, match="airlock audit verify") as caught:
            store.append([event(99)], {program_hash("late()\n"): "late()\n"})
    finally:
        store.close()
    assert caught.value.code == "audit_store"
    assert [count(db, t) for t in ("audit_events", "audit_effects", "audit_programs")] == before
    assert verify(db).problem == problem, name


def test_a_log_whose_tail_broke_keeps_failing_loudly(backend: Backend) -> None:
    # The writer retries the batch; every flush says why, and nothing is ever written.
    db = fill(backend)
    tamper(db, "DELETE FROM audit_events WHERE id > 7")
    log = AuditLog(db.audit())
    log.record(event(99))
    for _ in range(2):
        with pytest.raises(AuditStoreError, match="airlock audit verify"):
            log.flush()
    assert count(db, "audit_events") == 7
    with pytest.raises(AuditStoreError):
        log.close()


def test_appends_extend_a_new_log_a_reopened_one_and_one_with_only_programs(
    backend: Backend,
) -> None:
    store = backend.audit()
    store.append([], {program_hash("a()\n"): "a()\n"})  # no record: the head still counts none
    store.append([_call_event(1)])
    store.append([_call_event(i) for i in range(2, 6)])
    store.close()
    again = backend.audit()
    again.append([_call_event(i) for i in range(6, RECORDS + 1)])
    again.append([], {program_hash("b()\n"): "b()\n"})
    again.close()
    report = verify(backend)
    assert report.ok, report
    assert (report.records, report.head) == (RECORDS, RECORDS)


def test_a_provisional_log_moves_into_a_store_that_holds_records(backend: Backend) -> None:
    fill(backend)
    log = AuditLog()
    for i in range(11, 14):
        log.record(_call_event(i))
    log.attach(backend.audit())
    log.record(_call_event(14))
    log.flush()
    log.close()
    report = verify(backend)
    assert report.ok, report
    assert report.records == RECORDS + 4
