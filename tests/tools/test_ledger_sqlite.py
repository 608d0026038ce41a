"""The ledger stores (SQLite and PostgreSQL, each test on both unless it is about one):
their invariants hold in single transactions, whoever calls them."""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from airlock.tools import (
    LedgerClosedError,
    LedgerReadOnlyError,
    Preview,
    SQLiteLedgerStore,
    StepStateError,
)
from tests.tools.ledger_records import make_approval, make_preview, make_receipt
from tests.tools.stores import Backend


@pytest.fixture
def store(backend: Backend) -> Iterator[SQLiteLedgerStore]:
    s = backend.ledger()
    yield s
    s.close()


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[SQLiteLedgerStore]:
    s = SQLiteLedgerStore(tmp_path / "ledger.db")
    yield s
    s.close()


def _to(store: SQLiteLedgerStore, preview: Preview, frm: str, to: str, **kw: object) -> Preview:
    return store.transition(
        preview.id,
        expect={frm},
        to=to,
        at=5.0,
        actor="t",
        how="t",
        **kw,  # type: ignore[arg-type]
    )


def test_a_preview_round_trips_exactly(store: SQLiteLedgerStore) -> None:
    preview = make_preview()
    assert store.add_preview(preview) == preview
    assert store.preview(preview.id) == preview
    assert store.previews(states={"prepared"}) == [preview]
    assert store.previews(states=set()) == []


def test_one_live_preview_per_key(store: SQLiteLedgerStore) -> None:
    first = store.add_preview(make_preview(1))
    again = store.add_preview(dataclasses.replace(make_preview(2), key=first.key, id="pv_other"))
    assert again == first
    assert len(store.previews()) == 1


def test_a_failed_preview_frees_its_key(store: SQLiteLedgerStore) -> None:
    first = store.add_preview(make_preview(1))
    _to(store, first, "prepared", "failed", error="preview_expired")
    second = store.add_preview(dataclasses.replace(make_preview(2), key=first.key))
    assert second.id == "pv_2"


def test_the_database_itself_refuses_two_live_previews_with_one_key(
    store: SQLiteLedgerStore, backend: Backend
) -> None:
    store.add_preview(make_preview(1))
    with pytest.raises(backend.integrity_error):
        backend.sql(
            "INSERT INTO previews SELECT 'pv_x', run_id, tool, user_id, tenant_id, principal, "
            "effect, effects, summary, key, fingerprint, rule, created, expires, state, updated, "
            "attempts, owner, lease_until, error FROM previews",
            store="ledger",
        )


def test_the_database_itself_refuses_a_second_receipt_for_a_key(
    store: SQLiteLedgerStore, backend: Backend
) -> None:
    first = store.add_preview(make_preview(1))
    _to(store, first, "prepared", "sending")
    _to(store, first, "sending", "committed", receipt=make_receipt(first))
    with pytest.raises(backend.integrity_error):
        backend.sql(
            "INSERT INTO receipts SELECT key, 'pv_2', tool, data, stored_at, resolved_by "
            "FROM receipts",
            store="ledger",
        )


def test_transition_is_a_compare_and_set(store: SQLiteLedgerStore) -> None:
    preview = store.add_preview(make_preview())
    with pytest.raises(StepStateError) as stale:
        _to(store, preview, "approved", "sending")
    assert stale.value.preview.state == "prepared"
    approved = _to(store, preview, "prepared", "approved", approval=make_approval(preview))
    sending = _to(store, approved, "approved", "sending", consume_approval=True, owner="h:1")
    assert (sending.attempts, sending.owner) == (1, "h:1")
    with pytest.raises(StepStateError):
        store.transition(
            preview.id,
            expect={"sending"},
            expect_attempts=0,
            to="unknown",
            at=6,
            actor="t",
            how="t",
        )
    with pytest.raises(KeyError):
        store.transition("pv_missing", expect={"prepared"}, to="denied", at=6, actor="t", how="t")


# Each step of a write's life, as (from, to, what the transition sets): the step a
# transition returns must be the step the ledger then holds, read back, field for field.
_STEPS: list[tuple[str, str, dict[str, object]]] = [
    ("prepared", "approved", {"at": 2}),  # an int time comes back a float
    ("approved", "sending", {"owner": "host:1", "lease_until": 30}),
    ("sending", "unknown", {"error": "upstream_timeout", "at": 4.25}),
    ("unknown", "sending", {"owner": None, "lease_until": 40.5}),  # the owner is kept
    ("sending", "committed", {"lease_until": None}),
]


def test_a_transition_returns_the_step_as_the_ledger_holds_it(store: SQLiteLedgerStore) -> None:
    step = store.add_preview(make_preview())
    for frm, to, sets in _STEPS:
        kw = {"at": 3.5, **sets}
        step = store.transition(step.id, expect={frm}, to=to, actor="t", how="t", **kw)  # type: ignore[arg-type]
        held = store.preview(step.id)
        assert step == held, (frm, to)
        assert isinstance(step.updated, float)
        assert step.state == to
    assert (step.attempts, step.owner, step.error) == (2, "host:1", None)


def test_an_approval_is_consumed_once(store: SQLiteLedgerStore) -> None:
    preview = store.add_preview(make_preview())
    _to(store, preview, "prepared", "approved", approval=make_approval(preview))
    _to(store, preview, "approved", "sending", consume_approval=True)
    _to(store, preview, "sending", "unknown")
    with pytest.raises(StepStateError):
        _to(store, preview, "unknown", "sending", consume_approval=True)
    approval = store.approval(preview.id)
    assert approval is not None
    assert approval.consumed_at == 5.0


def test_a_second_receipt_for_a_key_is_refused_and_rolled_back(store: SQLiteLedgerStore) -> None:
    first = store.add_preview(make_preview(1))
    _to(store, first, "prepared", "sending")
    _to(store, first, "sending", "committed", receipt=make_receipt(first))
    _to(store, first, "committed", "failed")  # (not a real path: frees the key for this test)
    second = store.add_preview(dataclasses.replace(make_preview(2), key=first.key))
    _to(store, second, "prepared", "sending")
    with pytest.raises(StepStateError):
        _to(store, second, "sending", "committed", receipt=make_receipt(second))
    assert store.preview(second.id).state == "sending"  # type: ignore[union-attr]
    assert [r.preview_id for r in store.receipts()] == [first.id]


def test_history_records_every_transition(store: SQLiteLedgerStore) -> None:
    preview = store.add_preview(make_preview())
    _to(store, preview, "prepared", "denied", error="no")
    assert [(e.from_state, e.to_state) for e in store.history(preview.id)] == [
        (None, "prepared"),
        ("prepared", "denied"),
    ]


def test_wal_mode_and_schema_version(sqlite_store: SQLiteLedgerStore, tmp_path: Path) -> None:
    with sqlite3.connect(tmp_path / "ledger.db") as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 1


def test_readonly_store_reads_but_cannot_write(
    sqlite_store: SQLiteLedgerStore, tmp_path: Path
) -> None:
    preview = sqlite_store.add_preview(make_preview())
    reader = SQLiteLedgerStore(tmp_path / "ledger.db", readonly=True)
    assert reader.preview(preview.id) == preview
    with pytest.raises(LedgerReadOnlyError):
        reader.add_preview(make_preview(2))
    reader.close()


def test_in_memory_store_works_and_closed_store_refuses() -> None:
    memory = SQLiteLedgerStore(":memory:")
    memory.add_preview(make_preview())
    assert len(memory.previews()) == 1
    memory.close()
    with pytest.raises(LedgerClosedError, match="is closed: this process closed it"):
        memory.previews()


def test_a_new_preview_must_start_prepared(store: SQLiteLedgerStore) -> None:
    with pytest.raises(ValueError, match="prepared"):
        store.add_preview(dataclasses.replace(make_preview(), state="approved"))
