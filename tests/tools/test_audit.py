from __future__ import annotations

import multiprocessing
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from airlock.tools import AuditEvent, AuditLog, MemoryAuditStore, SQLiteAuditStore


def event(run: str = "r1", call: str = "c1", tool: str = "billing_invoice_get", **kw: object):
    fields: dict[str, object] = {
        "ts": time.time(),
        "run_id": run,
        "call_id": call,
        "caller": "direct",
        "tool": tool,
        "user_id": "alice",
        "tenant_id": "acme",
        "args_hash": "0" * 32,
        "stage": "done",
        "decision": "allow",
        "rule": "default",
        "outcome": "ok",
        "code": None,
        "duration_s": 0.001,
        "effects": ("read(billing:invoice/inv_1)",),
    } | kw
    return AuditEvent(**fields)  # type: ignore[arg-type]


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path):  # type: ignore[no-untyped-def]
    if request.param == "memory":
        yield MemoryAuditStore()
    else:
        sqlite_store = SQLiteAuditStore(tmp_path / "audit.db")
        yield sqlite_store
        sqlite_store.close()


def test_query_by_run_and_by_tool(store) -> None:  # type: ignore[no-untyped-def]
    store.append(
        [
            event("r1", "c1"),
            event("r1", "c2", tool="orders_status_get", outcome="error", code="denied"),
            event("r2", "c1", outcome="unknown", code="timeout"),
        ]
    )
    assert [e.call_id for e in store.query(run_id="r1")] == ["c1", "c2"]
    assert [e.run_id for e in store.query(tool="billing_invoice_get")] == ["r1", "r2"]
    assert store.query(run_id="r1", tool="orders_status_get")[0].code == "denied"
    assert store.query(run_id="r1")[0] == event("r1", "c1", ts=store.query()[0].ts)
    runs = {r.run_id: r for r in store.runs()}
    assert (runs["r1"].calls, runs["r1"].ok, runs["r1"].error) == (2, 1, 1)
    assert runs["r2"].unknown == 1
    assert runs["r1"].users == ("alice",)
    assert store.query(limit=1)[0].call_id == "c1"


def test_sqlite_uses_wal_and_survives_reopening(tmp_path: Path) -> None:
    path = tmp_path / "audit.db"
    with AuditLog(SQLiteAuditStore(path)) as log:
        log.record(event())
    mode = sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"
    reader = SQLiteAuditStore(path, readonly=True)
    assert len(reader.query(run_id="r1")) == 1
    with pytest.raises(sqlite3.OperationalError):
        reader.append([event()])
    reader.close()


def test_events_wait_in_the_buffer_until_flush_or_a_full_batch() -> None:
    store = MemoryAuditStore()
    log = AuditLog(store, batch_size=3)
    log.record(event(call="a"))
    log.record(event(call="b"))
    assert store.query() == []
    assert log.pending == 2
    log.record(event(call="c"))
    assert len(store.query()) == 3
    log.record(event(call="d"))
    log.flush()
    assert [e.call_id for e in store.query()] == ["a", "b", "c", "d"]


class FailingStore(MemoryAuditStore):
    def __init__(self) -> None:
        super().__init__()
        self.fail = True

    def append(self, events):  # type: ignore[no-untyped-def]
        if self.fail:
            raise OSError("disk full")
        super().append(events)


def test_a_failed_flush_keeps_the_events() -> None:
    store = FailingStore()
    log = AuditLog(store)
    log.record(event(call="a"))
    with pytest.raises(OSError, match="disk full"):
        log.flush()
    assert log.pending == 1
    store.fail = False
    log.flush()
    assert [e.call_id for e in store.query()] == ["a"]


def test_threads_share_one_log(tmp_path: Path) -> None:
    log = AuditLog(SQLiteAuditStore(tmp_path / "audit.db"), batch_size=7)

    def work(n: int) -> None:
        for i in range(200):
            log.record(event(run=f"t{n}", call=f"c{i}"))

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(log.events()) == 800
    assert all(len(log.events(run_id=f"t{n}")) == 200 for n in range(4))
    log.close()


def _write_from_process(path: str, run: str) -> None:
    with AuditLog(SQLiteAuditStore(path), batch_size=10) as log:
        for i in range(100):
            log.record(event(run=run, call=f"c{i}"))


def test_processes_write_to_one_file(tmp_path: Path) -> None:
    path = str(tmp_path / "audit.db")
    SQLiteAuditStore(path).close()
    spawn = multiprocessing.get_context("spawn")
    workers = [spawn.Process(target=_write_from_process, args=(path, f"p{n}")) for n in range(3)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=30)
        assert worker.exitcode == 0
    store = SQLiteAuditStore(path)
    assert len(store.query()) == 300
    assert sorted(r.run_id for r in store.runs()) == ["p0", "p1", "p2"]
    store.close()


def test_batch_size_must_be_positive() -> None:
    with pytest.raises(ValueError, match="batch_size"):
        AuditLog(MemoryAuditStore(), batch_size=0)
