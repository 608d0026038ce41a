"""The audit log and its stores: queries, programs, the writer thread, group commits,
durable waits that never block the event loop, failures, provisional logs and sinks. What a
store does runs on each store: in memory, SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import sqlite3
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from airlock.policies import UsageError
from airlock.tools import (
    AuditEvent,
    AuditLog,
    LedgerIOError,
    LedgerReadOnlyError,
    MemoryAuditStore,
    RunSummary,
    SQLiteAuditStore,
    program_hash,
)
from airlock.tools._audit_process import LoopWaiter, release
from tests.audit_events import stored_event
from tests.tools.stores import BACKENDS, Backend, make_backend


def event(
    run: str = "r1", call: str = "c1", tool: str = "billing_invoice_get", **kw: object
) -> AuditEvent:
    return stored_event(run_id=run, call_id=call, tool=tool, **kw)


@pytest.fixture(params=["memory", *BACKENDS])
def store(request: pytest.FixtureRequest, tmp_path: Path):  # type: ignore[no-untyped-def]
    if request.param == "memory":
        yield MemoryAuditStore()
    else:
        durable = make_backend(request.param, tmp_path, request).audit()
        yield durable
        durable.close()


def test_query_by_run_tool_and_time(store) -> None:  # type: ignore[no-untyped-def]
    store.append(
        [
            event("r1", "c1", ts=100.0),
            event("r1", "c2", tool="orders_status_get", outcome="error", code="denied", ts=200.0),
            event("r2", "c1", outcome="unknown", code="timeout", ts=300.0),
        ]
    )
    assert [e.call_id for e in store.query(run_id="r1")] == ["c1", "c2"]
    assert [e.run_id for e in store.query(tool="billing_invoice_get")] == ["r1", "r2"]
    assert store.query(run_id="r1", tool="orders_status_get")[0].code == "denied"
    assert store.query(run_id="r1")[0] == event("r1", "c1", ts=100.0)
    assert [(e.run_id, e.call_id) for e in store.query(since=200.0)] == [("r1", "c2"), ("r2", "c1")]
    runs = {r.run_id: r for r in store.runs()}
    assert (runs["r1"].calls, runs["r1"].ok, runs["r1"].error) == (2, 1, 1)
    assert runs["r2"].unknown == 1
    assert runs["r1"].users == ("alice",)
    assert store.query(limit=1)[0].call_id == "c1"
    assert [r.run_id for r in store.runs(limit=1)] == ["r2"]


def test_fields_round_trip_as_stored(store) -> None:  # type: ignore[no-untyped-def]
    # An integer time, a lone surrogate from a model's JSON escape and a NUL all come back
    # as the store can hold them, and the same every time (the chain depends on it).
    odd = event(ts=100, tool="x\ud800y", detail="a\x00b", approver="bob", final=False)
    store.append([odd])
    [back] = store.query()
    assert back.ts == 100.0
    # PostgreSQL's text cannot hold a NUL: both databases store (and chain) it as U+FFFD,
    # so their chains agree; memory keeps it.
    assert back.detail == ("a\x00b" if isinstance(store, MemoryAuditStore) else "a\ufffdb")
    assert back.approver == "bob"
    assert back.final is False
    assert back.tool in ("x\ud800y", "x?y")  # memory keeps it; SQLite writes what UTF-8 can
    if not isinstance(store, MemoryAuditStore):
        assert isinstance(back.ts, float)
        assert store.verify().ok


def test_programs_are_stored_once_by_hash(store) -> None:  # type: ignore[no-untyped-def]
    text = "total = sum(tools.x_y_z(i=i)['n'] for i in range(3))\ntotal\n"
    digest = program_hash(text)
    store.append([], {digest: text})
    store.append([event()], {digest: "ignored: a hash is stored once"})
    assert store.program(digest) == text
    assert store.program("0" * 32) is None
    assert len(digest) == 32


def test_runs_are_the_most_recent_by_their_last_record(backend: Backend) -> None:
    store = backend.audit()
    store.append([event("old", "c1"), event("mid", "c1"), event("old", "c2")])
    assert [r.run_id for r in store.runs()] == ["old", "mid"]
    assert [r.run_id for r in store.runs(limit=1)] == ["old"]
    store.close()


def test_records_come_in_pages_with_their_number_and_chain(backend: Backend) -> None:
    store = backend.audit()
    store.append([event(call=f"c{i}", ts=float(i)) for i in range(2500)])
    records = list(store.records(since=10.0))
    assert [n for n, _, _ in records] == list(range(11, 2501))
    assert all(len(chain) == 64 for _, _, chain in records)
    assert [e.call_id for _, e, _ in store.records(run_id="r1", since=2498.0)] == [
        "c2498",
        "c2499",
    ]
    store.close()


def test_sqlite_uses_wal_and_survives_reopening(tmp_path: Path) -> None:
    path = tmp_path / "audit.db"
    with AuditLog(SQLiteAuditStore(path)) as log:
        log.record(event())
    mode = sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"
    assert (path.parent / "audit.db.key").stat().st_mode & 0o777 == 0o600
    reader = SQLiteAuditStore(path, readonly=True)
    assert len(reader.query(run_id="r1")) == 1
    with pytest.raises(LedgerReadOnlyError):
        reader.append([event()])
    reader.close()


def test_an_older_store_without_a_chain_is_refused_with_what_to_do(tmp_path: Path) -> None:
    path = tmp_path / "audit.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE audit_events (id INTEGER PRIMARY KEY, ts REAL NOT NULL)")
    conn.close()
    for readonly in (False, True):
        with pytest.raises(UsageError, match="older airlock") as caught:
            SQLiteAuditStore(path, readonly=readonly)
        assert caught.value.code == "audit_store"
        assert f"mv {path} {path}.old" in str(caught.value)


def test_a_store_with_records_and_no_key_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "audit.db"
    SQLiteAuditStore(path).append([event()])
    (tmp_path / "audit.db.key").unlink()
    with pytest.raises(UsageError, match=r"key .* is missing"):
        SQLiteAuditStore(path)


# -- the log ------------------------------------------------------------------------------


class GatedStore:
    """An audit store (in memory, but not a ``MemoryAuditStore``, so the log writes it from
    its writer thread as it would a disk) whose appends wait for a gate, can fail, and are
    counted."""

    def __init__(self) -> None:
        self.inner = MemoryAuditStore()
        self.gate = threading.Event()
        self.gate.set()
        self.batches: list[int] = []
        self.fail: Exception | None = None

    def append(
        self, events: Sequence[AuditEvent], programs: Mapping[str, str] | None = None
    ) -> None:
        self.gate.wait(10)
        if self.fail is not None:
            raise self.fail
        self.batches.append(len(events))
        self.inner.append(events, programs)

    def query(self, **kw: object) -> list[AuditEvent]:
        return self.inner.query(**kw)  # type: ignore[arg-type]

    def runs(self, *, limit: int = 50) -> list[RunSummary]:
        return self.inner.runs(limit=limit)

    def program(self, digest: str) -> str | None:
        return self.inner.program(digest)

    def close(self) -> None:
        return None


def threaded(store: GatedStore, **kw: object) -> AuditLog:
    return AuditLog(store, **kw)  # type: ignore[arg-type]


def test_record_returns_before_the_write_and_flush_waits_for_it() -> None:
    store = GatedStore()
    store.gate.clear()
    log = threaded(store)
    log.record(event(call="a"))  # returns although the store cannot write yet
    assert store.query() == []
    assert log.pending == 1
    store.gate.set()
    log.flush()
    assert [e.call_id for e in store.query()] == ["a"]
    assert log.pending == 0


def test_events_recorded_during_a_write_share_the_next_transaction() -> None:
    store = GatedStore()
    log = threaded(store)
    store.gate.clear()
    log.record(event(call="first"))
    time.sleep(0.1)  # the writer holds "first" and waits at the gate
    for i in range(50):
        log.record(event(call=f"c{i}"))
    store.gate.set()
    log.flush()
    assert store.batches == [1, 50]
    assert [e.call_id for e in store.query()][:2] == ["first", "c0"]


def test_batch_size_bounds_a_transaction() -> None:
    store = GatedStore()
    store.gate.clear()
    log = threaded(store, batch_size=7)
    for i in range(20):
        log.record(event(call=f"c{i}"))
    store.gate.set()
    log.flush()
    assert max(store.batches) <= 7
    assert sum(store.batches) == 20


@pytest.mark.anyio
async def test_wait_durable_keeps_the_event_loop_running() -> None:
    store = GatedStore()
    store.gate.clear()
    log = threaded(store)
    log.record(event())
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.005)

    ticker = asyncio.create_task(tick())
    waiting = asyncio.create_task(log.wait_durable())
    await asyncio.sleep(0.2)
    assert not waiting.done()
    assert ticks >= 3  # the loop kept running while the write waited at the gate
    store.gate.set()
    await asyncio.wait_for(waiting, 5)
    ticker.cancel()
    assert len(store.query()) == 1


async def release_waiters_held_by_one_write(n: int = 100) -> tuple[GatedStore, AuditLog]:
    """Record ``n`` events whose callers wait until they are durable while the store is held,
    then let it write; the store and log, once every caller was released."""
    store = GatedStore()
    store.gate.clear()
    log = threaded(store)

    async def call(i: int) -> None:
        log.record(event(call=f"c{i}"))
        await log.wait_durable()

    calls = asyncio.gather(*(call(i) for i in range(n)))
    await asyncio.sleep(0.1)
    store.gate.set()
    await asyncio.wait_for(calls, 5)
    assert sum(store.batches) == n
    return store, log


@pytest.mark.anyio
async def test_many_waiters_are_released_by_one_write() -> None:
    store, _ = await release_waiters_held_by_one_write()
    assert len(store.batches) <= 3


@pytest.mark.anyio
async def test_a_write_wakes_each_loop_once_whatever_its_waiters(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Each wake-up from the writer thread writes to the loop's self-pipe: 100 waiters
    # released by one group commit must cost one, not 100.
    loop = asyncio.get_running_loop()
    wakes: list[str] = []
    wake = loop.call_soon_threadsafe

    def counted(*args: Any) -> asyncio.Handle:
        wakes.append(threading.current_thread().name)
        return wake(*args)

    monkeypatch.setattr(loop, "call_soon_threadsafe", counted)
    store, log = await release_waiters_held_by_one_write()
    assert 1 <= len(wakes) <= len(store.batches) <= 3
    assert set(wakes) == {"airlock-audit-writer"}
    log.close()


@pytest.mark.parametrize("failure", [None, OSError("disk full")], ids=["stored", "failed"])
def test_release_settles_every_waiter_of_every_open_loop(failure: Exception | None) -> None:
    loops = [asyncio.new_event_loop() for _ in range(3)]
    closed = asyncio.new_event_loop()
    closed.close()
    try:
        waiters = [LoopWaiter(n, loop, loop.create_future()) for n in range(4) for loop in loops]
        cancelled = waiters[0].future
        cancelled.cancel()
        release([*waiters, LoopWaiter(9, closed, loops[0].create_future())], failure)
        for loop in loops:
            loop.run_until_complete(asyncio.sleep(0))
        for waiter in waiters[1:]:
            assert waiter.future.done()
            assert waiter.future.exception() is failure
        assert cancelled.cancelled()
    finally:
        for loop in loops:
            loop.close()


@pytest.mark.anyio
async def test_a_cancelled_waiter_leaves_the_log_working() -> None:
    store = GatedStore()
    store.gate.clear()
    log = threaded(store)
    log.record(event(call="a"))
    waiting = asyncio.create_task(log.wait_durable())
    await asyncio.sleep(0.05)
    waiting.cancel()
    store.gate.set()
    log.record(event(call="b"))
    await asyncio.wait_for(log.wait_durable(), 5)
    assert [e.call_id for e in store.query()] == ["a", "b"]


@pytest.mark.anyio
async def test_a_failing_store_fails_the_waiters_and_keeps_the_events() -> None:
    store = GatedStore()
    store.fail = OSError("disk full")
    log = threaded(store)
    log.record(event(call="a"))
    with pytest.raises(LedgerIOError, match="disk full"):
        await asyncio.wait_for(log.wait_durable(), 5)
    with pytest.raises(LedgerIOError, match="disk full"):
        log.flush()
    assert log.pending == 1
    store.fail = None
    log.flush()  # the writer retried
    assert [e.call_id for e in store.query()] == ["a"]
    log.close()


def test_a_memory_log_writes_inline_without_a_thread() -> None:
    store = MemoryAuditStore()
    log = AuditLog(store)
    before = threading.active_count()
    log.record(event(call="a"))
    assert [e.call_id for e in store.query()] == ["a"]
    assert log.pending == 0
    assert threading.active_count() == before


def test_a_provisional_log_moves_what_it_recorded_into_its_store(tmp_path: Path) -> None:
    log = AuditLog()
    assert log.provisional
    assert isinstance(log.store, MemoryAuditStore)
    log.record(event(call="early"))
    digest = log.record_program("1 + 1")
    log.attach(SQLiteAuditStore(tmp_path / "audit.db"))
    log.record(event(call="late"))
    assert not log.provisional
    assert [e.call_id for e in log.events()] == ["early", "late"]
    assert log.program(digest) == "1 + 1"
    with pytest.raises(UsageError, match="already writes to SQLiteAuditStore"):
        log.attach(MemoryAuditStore())
    log.close()


class Sink:
    def __init__(self, fail: bool = False) -> None:
        self.seen: list[str] = []
        self.closed = False
        self.fail = fail

    def emit(self, events: Sequence[AuditEvent]) -> None:
        if self.fail:
            raise RuntimeError("exporter down")
        self.seen.extend(e.call_id for e in events)

    def close(self) -> None:
        self.closed = True


def test_sinks_see_stored_batches_and_a_failing_one_changes_nothing(tmp_path: Path) -> None:
    good, bad = Sink(), Sink(fail=True)
    log = AuditLog(SQLiteAuditStore(tmp_path / "audit.db"), sinks=[bad])
    log.add_sink(good)
    for i in range(5):
        log.record(event(call=f"c{i}"))
    log.flush()
    deadline = time.monotonic() + 5
    while len(good.seen) < 5 and time.monotonic() < deadline:  # sinks run after the release
        time.sleep(0.01)
    assert good.seen == [f"c{i}" for i in range(5)]
    log.close()
    assert good.closed
    assert bad.closed
    with pytest.raises(RuntimeError, match="closed"):
        log.record(event())


def test_threads_share_one_log(backend: Backend) -> None:
    log = AuditLog(backend.audit(), batch_size=7)

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
    assert log.store.verify().ok  # type: ignore[attr-defined]
    log.close()


def _write_from_process(backend: Backend, run: str) -> None:
    with AuditLog(backend.audit(), batch_size=10) as log:
        for i in range(100):
            log.record(event(run=run, call=f"c{i}"))


def test_processes_extend_one_chain(backend: Backend) -> None:
    backend.audit().close()
    spawn = multiprocessing.get_context("spawn")
    workers = [spawn.Process(target=_write_from_process, args=(backend, f"p{n}")) for n in range(3)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=30)
        assert worker.exitcode == 0
    store = backend.audit()
    assert len(store.query()) == 300
    assert sorted(r.run_id for r in store.runs()) == ["p0", "p1", "p2"]
    report = store.verify()
    assert report.ok, report
    assert report.records == 300
    store.close()


def test_a_forked_child_writes_its_own_events_only(backend: Backend) -> None:
    log = AuditLog(backend.audit())
    store = GatedStore()
    store.gate.clear()
    held = threaded(store)
    held.record(event(call="parent-queued"))
    log.record(event(call="parent"))
    log.flush()
    pid = os.fork()
    if pid == 0:  # the child: the held log's queue was the parent's, and is dropped
        try:
            log.record(event(call="child"))
            log.flush()
            os._exit(0 if held.pending == 0 else 3)
        except BaseException:
            os._exit(4)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert [e.call_id for e in log.events()] == ["parent", "child"]
    store.gate.set()
    held.flush()
    log.close()


def test_batch_size_must_be_positive() -> None:
    with pytest.raises(ValueError, match="batch_size"):
        AuditLog(MemoryAuditStore(), batch_size=0)


def test_run_summary_counts_previews_apart(backend: Backend) -> None:
    store = backend.audit()
    store.append([event(outcome="preview", code="needs_approval", decision="ask")])
    [summary] = store.runs()
    assert isinstance(summary, RunSummary)
    assert (summary.calls, summary.ok, summary.previews, summary.error) == (1, 0, 1, 0)
    store.close()
