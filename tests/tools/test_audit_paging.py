"""Reads of a large SQLite audit log stay within SQLite's limits and linear in the log:
``runs`` asks about at most a few hundred runs per statement (SQLite takes at most 250,000
variables, so ``audit list --limit 300000`` failed), and ``records(since=...)`` pages by record
number from the period's first record instead of sorting the rest of the period for every
page. The answers are the same as before: checked against what a filter of every record
gives, with times out of order."""

from __future__ import annotations

import dataclasses
import sqlite3
from pathlib import Path

import pytest

from airlock.tools import AuditEvent, SQLiteAuditStore
from tests.tools.stores import Backend
from tests.tools.test_audit_chain import _call_event

# Times that go back now and then (clocks of several processes): a record before the first
# one in a period may still fall in it.
TIMES = [1_000.0 + i - (7 if i % 5 == 0 else 0) for i in range(1, 61)]


def _events() -> list[AuditEvent]:
    return [
        dataclasses.replace(_call_event(i), ts=TIMES[i - 1], run_id=f"run_{i % 13}")
        for i in range(1, 61)
    ]


@pytest.fixture
def filled(backend: Backend) -> Backend:
    store = backend.audit()
    store.append(_events())
    store.close()
    return backend


@pytest.mark.parametrize(
    ("since", "until"),
    [(None, None), (1_010.0, None), (1_030.5, 1_050.0), (None, 1_020.0), (2_000.0, None)],
)
@pytest.mark.parametrize("run_id", [None, "run_3"])
def test_records_of_a_period_are_those_a_filter_of_every_record_gives(
    filled: Backend, since: float | None, until: float | None, run_id: str | None
) -> None:
    store = filled.audit(readonly=True)
    try:
        every = list(store.records())
        expected = [
            r
            for r in every
            if (since is None or r[1].ts >= since)
            and (until is None or r[1].ts < until)
            and (run_id is None or r[1].run_id == run_id)
        ]
        assert list(store.records(since=since, until=until, run_id=run_id)) == expected
    finally:
        store.close()


def test_runs_are_those_of_one_statement_whatever_their_number(filled: Backend) -> None:
    store = filled.audit(readonly=True)
    try:
        everything = store.runs(limit=100)
        assert [r.run_id for r in everything][:3] == ["run_8", "run_7", "run_6"]
        assert len(everything) == 13
        assert store.runs(limit=5) == everything[:5]
    finally:
        store.close()


def _few_variables(store: SQLiteAuditStore, most: int) -> None:
    store.read(lambda conn: conn.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, most))


def test_runs_beyond_sqlites_variable_limit_are_listed(tmp_path: Path) -> None:
    # SQLite's limit lowered to 5 stands for its 250,000 with a log of more runs.
    store = SQLiteAuditStore(tmp_path / "audit.db")
    store.append(_events())
    expected = store.runs(limit=100)
    store.close()
    store = SQLiteAuditStore(tmp_path / "audit.db", readonly=True)  # (no statement cached)
    _few_variables(store, 5)
    try:
        assert store.runs(limit=100) == expected
    finally:
        store.close()


def _steps(store: SQLiteAuditStore, **period: float) -> int:
    """SQLite's work (in thousands of VM steps) to read every record of the period."""
    counted = [0]

    def tick() -> int:
        counted[0] += 1
        return 0

    store.read(lambda conn: conn.set_progress_handler(tick, 1000))
    try:
        for _ in store.records(**period):
            pass
    finally:
        store.read(lambda conn: conn.set_progress_handler(None, 1000))
    return counted[0]


def test_reading_a_period_costs_about_what_reading_the_whole_log_does(tmp_path: Path) -> None:
    store = SQLiteAuditStore(tmp_path / "audit.db", synchronous="OFF")
    events = [dataclasses.replace(_call_event(i), ts=1_000.0 + i) for i in range(1, 8001)]
    store.append(events)
    try:
        whole = _steps(store)
        assert _steps(store, since=0.0) < 1.5 * whole
        assert _steps(store, since=1_000.0 + 4000) < whole
    finally:
        store.close()
