"""Sending a batch again after an append raised stores each event once: when the answer to
COMMIT is lost (a failover, a network cut) the batch may be stored although the append
raised, and the writer sends it again. Each test runs on SQLite and on PostgreSQL; the
failure is made deterministic by failing the store's transaction just before or just after
its COMMIT, as a dropped connection does."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Literal

import pytest

from airlock.tools import AuditEvent, AuditLog
from airlock.tools._errors import LedgerUnavailableError
from tests.tools.stores import Backend
from tests.tools.test_audit_chain import _call_event as call_event
from tests.tools.test_audit_chain import verify

Fault = Literal["answer lost", "before commit"]


class Faults:
    """Fails the next transactions of ``store`` (its database's, under the lock that
    serializes appenders), one planned fault each: ``answer lost`` commits and then raises
    what a connection dropped before COMMIT's answer raises; ``before commit`` raises
    inside the transaction, so it is rolled back."""

    def __init__(self, store: Any) -> None:
        self.plan: list[Fault] = []
        real = store._db.transaction

        @contextmanager
        def transaction() -> Iterator[Any]:
            fault = self.plan.pop(0) if self.plan else None
            with real() as conn:
                yield conn
                if fault == "before commit":
                    raise _dropped()
            if fault == "answer lost":
                raise _dropped()

        store._db.transaction = transaction


def _dropped() -> LedgerUnavailableError:
    return LedgerUnavailableError("the audit store cannot be reached", path="x", store="audit")


def call_ids(events: list[AuditEvent]) -> list[str]:
    return [e.call_id for e in events]


# Each case: the faults of the appends before the one that returns.
PLANS: list[tuple[str, list[Fault]]] = [
    ("the answer to COMMIT lost", ["answer lost"]),
    ("failed before COMMIT", ["before commit"]),
    ("the answer lost twice", ["answer lost", "answer lost"]),
    ("lost, then failed before COMMIT", ["answer lost", "before commit"]),
    ("failed before COMMIT, then lost", ["before commit", "answer lost"]),
    ("lost three times", ["answer lost", "answer lost", "answer lost"]),
]


@pytest.mark.parametrize(("name", "plan"), PLANS, ids=[p[0] for p in PLANS])
def test_a_batch_sent_again_after_a_failed_append_is_stored_once(
    backend: Backend, name: str, plan: list[Fault]
) -> None:
    store = backend.audit()
    store.append([call_event(1)])
    faults = Faults(store)
    batch = [call_event(i) for i in range(2, 5)]
    for fault in plan:
        faults.plan = [fault]
        with pytest.raises(LedgerUnavailableError):
            store.append(batch)
        # As the writer does: the batch again at the head of the queue, more behind it.
        batch = [*batch, call_event(len(batch) + 2)]
    store.append(batch)
    assert call_ids(store.query()) == call_ids([call_event(1), *batch]), name
    store.close()
    report = verify(backend)
    assert report.ok, report
    assert report.records == len(batch) + 1


def test_a_batch_whose_answer_was_lost_is_stored_once_after_others_appended(
    backend: Backend,
) -> None:
    # Another process extends the log between the lost answer and the second try.
    store, other = backend.audit(), backend.audit()
    faults = Faults(store)
    faults.plan = ["answer lost"]
    batch = [call_event(i) for i in range(1, 4)]
    with pytest.raises(LedgerUnavailableError):
        store.append(batch)
    other.append([call_event(50)])
    store.append([*batch, call_event(4)])
    assert call_ids(store.query()) == ["c1", "c2", "c3", "c50", "c4"]
    store.close()
    other.close()
    assert verify(backend).ok


def test_events_identical_to_stored_ones_are_stored_again_when_nothing_failed(
    backend: Backend,
) -> None:
    # Only an append that raised leaves anything to drop: the same events sent again after
    # an append that returned are new records (a caller's repeated call).
    store = backend.audit()
    batch = [call_event(i) for i in range(1, 3)]
    store.append(batch)
    store.append(batch)
    assert call_ids(store.query()) == ["c1", "c2", "c1", "c2"]
    store.close()


def test_a_log_whose_commit_answer_was_lost_records_each_call_once(backend: Backend) -> None:
    store = backend.audit()
    faults = Faults(store)
    log = AuditLog(store)
    faults.plan = ["answer lost"]
    for i in range(1, 4):
        log.record(call_event(i))
    with pytest.raises(LedgerUnavailableError):
        log.flush()
    log.flush()
    assert call_ids(log.events()) == ["c1", "c2", "c3"]
    assert [(r.calls, r.ok) for r in log.runs()] == [(3, 3)]
    log.close()
    assert verify(backend).ok


def test_a_batch_whose_answer_was_lost_is_stored_once_after_the_same_store_appended(
    backend: Backend,
) -> None:
    # Two logs (or writers) sharing one store object: the other one's append, which
    # returned, comes between the lost answer and the resend.
    store = backend.audit()
    faults = Faults(store)
    faults.plan = ["answer lost"]
    batch = [call_event(1), call_event(2)]
    with pytest.raises(LedgerUnavailableError):
        store.append(batch)
    store.append([call_event(3)])
    store.append(batch)
    assert call_ids(store.query()) == ["c1", "c2", "c3"]
    store.close()
    report = verify(backend)
    assert report.ok, report
    assert report.records == 3


def test_every_batch_whose_answer_was_lost_is_remembered(backend: Backend) -> None:
    # Two writers on one store each lose an answer, then each sends its batch again.
    store = backend.audit()
    faults = Faults(store)
    first, second = [call_event(1), call_event(2)], [call_event(3)]
    for batch in (first, second):
        faults.plan = ["answer lost"]
        with pytest.raises(LedgerUnavailableError):
            store.append(batch)
    store.append([*first, call_event(4)])
    store.append(second)
    assert call_ids(store.query()) == ["c1", "c2", "c3", "c4"]
    store.close()
    assert verify(backend).ok
