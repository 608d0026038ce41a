"""``verify`` reads the log a page at a time, so checking a log of millions of records holds
one page of it in memory (psycopg reads a statement's whole result before its first row),
and finds every kind of tampering wherever the pages happen to break."""

from __future__ import annotations

from typing import Any

import pytest

from airlock.tools import _audit_chain
from airlock.tools._audit_chain import ChainProblem
from airlock.tools._postgres_audit import QmarkConnection
from tests.tools.stores import Backend, make_backend
from tests.tools.test_audit_chain import TAMPERING, _call_event, fill, tamper, verify


@pytest.fixture
def db(backend: Backend) -> Backend:
    return fill(backend)


@pytest.mark.parametrize("page", [1, 2, 3])
@pytest.mark.parametrize(
    ("name", "statements", "problem", "record"), TAMPERING, ids=[t[0] for t in TAMPERING]
)
def test_tampering_is_found_at_the_same_record_whatever_the_page_size(
    db: Backend,
    monkeypatch: pytest.MonkeyPatch,
    page: int,
    name: str,
    statements: tuple[str, ...],
    problem: ChainProblem,
    record: int,
) -> None:
    monkeypatch.setattr(_audit_chain, "VERIFY_PAGE", page)
    assert verify(db).ok
    tamper(db, *statements)
    report = verify(db)
    assert (report.problem, report.record) == (problem, record), (name, report)


def test_verify_on_postgresql_holds_one_page_of_the_log_at_a_time(
    request: pytest.FixtureRequest, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    records, page = 2_000, 250
    db = make_backend("postgres", tmp_path, request)
    store = db.audit()
    for start in range(0, records, 500):
        store.append([_call_event(i) for i in range(start + 1, start + 501)])
    held: list[int] = []
    execute = QmarkConnection.execute

    def counted(self: QmarkConnection, sql: str, parameters: Any = (), /) -> Any:
        cursor = execute(self, sql, parameters)
        held.append(cursor.pgresult.ntuples if cursor.pgresult is not None else 0)
        return cursor

    monkeypatch.setattr(_audit_chain, "VERIFY_PAGE", page)
    monkeypatch.setattr(QmarkConnection, "execute", counted)
    report = store.verify()
    store.close()
    assert report.ok, report
    assert report.records == records
    assert max(held) == page  # never more rows in the client at once than a page
    assert sum(held) >= 3 * records  # every record and its two index rows were read
