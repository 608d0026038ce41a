"""The audit log and its stores across threads and processes: a fork while another thread
holds a store's lock or is inside a transaction, multiprocessing children that end without
running ``atexit``, ``verify`` while another process writes, and the writer letting the
event loop run while it chains a large batch."""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from airlock.tools import AuditLog, MemoryAuditStore, SQLiteAuditStore
from airlock.tools._audit_chain import Linker
from airlock.tools._audit_sql import chain_rows, encode_events
from tests.audit_events import stored_event
from tests.tools.stores import Backend

# -- fork --------------------------------------------------------------------------------------


def _fork_and_flush(log: AuditLog, busy: Callable[[threading.Event], None]) -> int:
    """Fork while a thread is in ``busy`` (for about 0.3 s after it sets its event); the
    child records an event and flushes, and is killed if that takes 5 s. Its exit code."""
    started = threading.Event()
    holder = threading.Thread(target=busy, args=(started,))
    holder.start()
    assert started.wait(5)
    pid = os.fork()
    if pid == 0:
        try:
            signal.signal(signal.SIGALRM, signal.SIG_DFL)
            signal.alarm(5)  # (a child that hangs is killed: the test then fails)
            log.record(stored_event(run_id="child", call_id="child"))
            log.flush()
            os._exit(0)
        except BaseException:
            os._exit(3)
    holder.join()
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def _hold_lock(store: SQLiteAuditStore) -> Callable[[threading.Event], None]:
    def busy(started: threading.Event) -> None:
        def read(conn: Any) -> None:
            started.set()
            time.sleep(0.3)

        store.read(read)

    return busy


def _in_transaction(store: SQLiteAuditStore) -> Callable[[threading.Event], None]:
    def busy(started: threading.Event) -> None:
        def write(conn: Any) -> None:
            conn.execute("BEGIN IMMEDIATE")  # SQLite's write lock, as an append holds it
            conn.execute("DELETE FROM audit_effects WHERE event_id < 0")
            started.set()
            time.sleep(0.3)
            conn.execute("COMMIT")

        store.read(write)

    return busy


@pytest.mark.parametrize("busy", [_hold_lock, _in_transaction], ids=["lock", "transaction"])
def test_a_child_forked_while_a_thread_uses_the_store_can_write(
    tmp_path: Path, busy: Callable[[SQLiteAuditStore], Callable[[threading.Event], None]]
) -> None:
    store = SQLiteAuditStore(tmp_path / "audit.db")
    log = AuditLog(store)
    log.record(stored_event(call_id="parent"))
    log.flush()
    assert _fork_and_flush(log, busy(store)) == 0
    assert [e.call_id for e in store.query(run_id="child")] == ["child"]
    assert store.verify().ok
    log.close()


def test_a_child_forked_while_a_thread_holds_a_memory_store_can_write() -> None:
    store = MemoryAuditStore()
    log = AuditLog(store)

    def busy(started: threading.Event) -> None:
        with store._lock:  # (as a long query of the store would)
            started.set()
            time.sleep(0.3)

    assert _fork_and_flush(log, busy) == 0


# -- multiprocessing -----------------------------------------------------------------------------


def _record_and_return(db: str, run: str) -> None:
    log = AuditLog(SQLiteAuditStore(db))
    for i in range(100):
        log.record(stored_event(run_id=run, call_id=f"c{i}"))
    # No flush, no close: a worker's function just returns.


@pytest.mark.skipif(sys.platform != "linux", reason="the fork start method")
def test_events_of_a_multiprocessing_child_are_stored_when_it_ends(tmp_path: Path) -> None:
    db = str(tmp_path / "audit.db")
    SQLiteAuditStore(db).close()
    fork = multiprocessing.get_context("fork")
    workers = [fork.Process(target=_record_and_return, args=(db, f"w{n}")) for n in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(30)
        assert worker.exitcode == 0
    pool = fork.Pool(2)
    pool.starmap(_record_and_return, [(db, "p0"), (db, "p1")])
    pool.close()
    pool.join()
    store = SQLiteAuditStore(db)
    assert {run: len(store.query(run_id=run)) for run in ["w0", "w1", "p0", "p1"]} == {
        "w0": 100,
        "w1": 100,
        "p0": 100,
        "p1": 100,
    }
    assert store.verify().ok
    store.close()


# -- verify beside a writer ----------------------------------------------------------------------


def test_verify_sees_one_snapshot_while_another_connection_writes(backend: Backend) -> None:
    backend.audit().append([stored_event(call_id="first")])
    stop = threading.Event()
    written = 0

    def write() -> None:
        nonlocal written
        writer = backend.audit()
        while not stop.is_set():
            writer.append([stored_event(call_id=f"c{written}")])
            written += 1
        writer.close()

    thread = threading.Thread(target=write)
    thread.start()
    reader = backend.audit(readonly=True)
    try:
        reports = []
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline or len(reports) < 10:
            reports.append(reader.verify())
    finally:
        stop.set()
        thread.join(10)
    assert written > 10
    assert [(r.problem, r.detail) for r in reports if not r.ok] == []
    reader.close()


# -- the writer and the event loop -------------------------------------------------------------


def test_chaining_a_large_batch_lets_other_threads_run_between_slices() -> None:
    # Each HMAC link runs with the GIL held; what happens between them (a yield or not) is
    # seen by a profile function, which sees calls of C functions such as time.sleep.
    trail: list[str] = []
    linker = Linker(bytes(32))

    def link(previous: bytes, number: int, tail: bytes) -> bytes:
        trail.append("link")
        return linker(previous, number, tail)

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "c_call" and arg is time.sleep:
            trail.append("yield")

    prepared = encode_events([stored_event(call_id=f"c{i}") for i in range(1024)])
    sys.setprofile(profile)
    try:
        number, _, chained, _ = chain_rows(link, None, prepared)  # type: ignore[arg-type]
    finally:
        sys.setprofile(None)
    assert (number, len(chained)) == (1024, 1024)
    runs = "".join("L" if step == "link" else "|" for step in trail).split("|")
    assert len(runs) >= 8
    assert max(len(run) for run in runs) <= 128
