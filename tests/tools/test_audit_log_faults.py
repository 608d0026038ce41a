"""The audit log where it used to hang or lose events: a store that fails while the log
closes, a sink that reads the log, an event no store can hold, a provisional log's sinks,
and a process whose exit must not wait forever for its store."""

from __future__ import annotations

import asyncio
import math
import subprocess
import sys
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
    MemoryAuditStore,
    RunSummary,
    SQLiteAuditStore,
)
from tests.audit_events import stored_event
from tests.tools.stores import Backend


class FailingStore:
    """An audit store whose appends fail, after ``delay`` seconds (a dying disk, or a file
    locked past its busy timeout)."""

    def __init__(self, delay: float = 0.0) -> None:
        self.inner = MemoryAuditStore()
        self.delay = delay

    def append(
        self, events: Sequence[AuditEvent], programs: Mapping[str, str] | None = None
    ) -> None:
        time.sleep(self.delay)
        raise OSError("disk full")

    def query(self, **kw: Any) -> list[AuditEvent]:
        return self.inner.query(**kw)

    def runs(self, *, limit: int = 50) -> list[RunSummary]:
        return self.inner.runs(limit=limit)

    def program(self, digest: str) -> str | None:
        return self.inner.program(digest)

    def close(self) -> None:
        return None


def failing_log(delay: float = 0.0) -> AuditLog:
    return AuditLog(FailingStore(delay))  # type: ignore[arg-type]


# -- closing while the store fails ----------------------------------------------------------


@pytest.mark.anyio
async def test_a_wait_after_a_failed_close_raises_the_failure() -> None:
    log = failing_log()
    log.record(stored_event(call_id="c1"))
    with pytest.raises(LedgerIOError, match="disk full"):
        log.close()
    with pytest.raises(LedgerIOError, match="disk full"):
        await asyncio.wait_for(log.wait_durable(), 5)
    with pytest.raises(LedgerIOError, match="disk full"):
        log.flush(timeout=5)
    assert log.pending == 1


@pytest.mark.anyio
async def test_a_wait_while_the_log_closes_on_a_failing_store_raises_the_failure() -> None:
    # The writer retries once more after close() gave up; a call awaiting durability then
    # is released with that failure, not left waiting.
    log = failing_log(delay=0.3)
    log.record(stored_event(call_id="c1"))
    closed: list[BaseException] = []

    def close() -> None:
        try:
            log.close()
        except LedgerIOError as exc:
            closed.append(exc)

    closing = threading.Thread(target=close)
    closing.start()
    await asyncio.sleep(0.45)  # close's flush saw the first failure; the writer retries
    with pytest.raises(LedgerIOError, match="disk full"):
        await asyncio.wait_for(log.wait_durable(), 5)
    closing.join(10)
    assert [str(e.__cause__) for e in closed] == ["disk full"]  # typed, caused by the OSError


# -- a sink on the writer thread --------------------------------------------------------------


class ReadingSink:
    """A sink that reads the log it is a sink of, as a dashboard refreshing its runs."""

    def __init__(self) -> None:
        self.log: AuditLog | None = None
        self.seen: list[int] = []

    def emit(self, events: Sequence[AuditEvent]) -> None:
        assert self.log is not None
        self.seen.append(sum(r.calls for r in self.log.runs()))

    def close(self) -> None:
        return None


def test_a_sink_that_reads_the_log_does_not_stop_the_writer(tmp_path: Path) -> None:
    sink = ReadingSink()
    log = AuditLog(SQLiteAuditStore(tmp_path / "audit.db"), sinks=[sink])
    sink.log = log
    for i in range(50):
        log.record(stored_event(call_id=f"c{i}"))
        time.sleep(0.001)
    deadline = time.monotonic() + 5
    while log.pending and time.monotonic() < deadline:
        time.sleep(0.01)
    assert log.pending == 0
    log.flush(timeout=5)
    assert sink.seen
    assert sink.seen[-1] <= 50
    log.close()


class WaitingSink:
    """A sink that waits for the log to be durable: it would wait for itself."""

    def __init__(self, wait: str) -> None:
        self.log: AuditLog | None = None
        self.wait = wait
        self.raised: list[BaseException] = []

    def emit(self, events: Sequence[AuditEvent]) -> None:
        assert self.log is not None
        try:
            if self.wait == "flush":
                self.log.flush()
            else:
                asyncio.run(self.log.wait_durable())
        except BaseException as exc:
            self.raised.append(exc)
            raise

    def close(self) -> None:
        return None


@pytest.mark.parametrize("wait", ["flush", "wait_durable"])
def test_waiting_on_the_writer_thread_is_refused_at_once(tmp_path: Path, wait: str) -> None:
    sink = WaitingSink(wait)
    log = AuditLog(SQLiteAuditStore(tmp_path / "audit.db"), sinks=[sink])
    sink.log = log
    log.record(stored_event(call_id="a"))
    log.flush(timeout=5)
    log.record(stored_event(call_id="b"))  # recorded while the sink runs, or after it
    log.flush(timeout=5)
    deadline = time.monotonic() + 5
    while len(sink.raised) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [type(e) for e in sink.raised] == [UsageError, UsageError]
    assert f"{wait}() waits for the audit log's writer thread" in str(sink.raised[0])
    log.close()


def test_a_flush_with_a_timeout_gives_up_and_keeps_the_events() -> None:
    gate = threading.Event()

    class Stuck(FailingStore):
        def append(
            self, events: Sequence[AuditEvent], programs: Mapping[str, str] | None = None
        ) -> None:
            gate.wait(10)
            self.inner.append(events, programs)

    log = AuditLog(Stuck())  # type: ignore[arg-type]
    log.record(stored_event(call_id="a"))
    started = time.monotonic()
    with pytest.raises(TimeoutError, match=r"1 audit events were not stored within 0\.2 s"):
        log.flush(timeout=0.2)
    assert time.monotonic() - started < 2
    gate.set()
    log.flush(timeout=5)
    assert log.pending == 0
    log.close()


# An exit whose store never answers.
_STUCK_EXIT = """
import logging, sys, threading
import airlock.tools._audit_process as process
from airlock.tools import AuditLog, MemoryAuditStore
from tests.audit_events import stored_event
process.EXIT_FLUSH_S = 0.5
logging.basicConfig(level=logging.ERROR)

class Stuck:  # (not a MemoryAuditStore, which the log would write inline)
    def append(self, events, programs=None):
        threading.Event().wait(60)

    def close(self):
        pass

log = AuditLog(Stuck())
log.record(stored_event(call_id="c1"))
"""


def test_an_exit_waits_a_bounded_time_for_a_store_that_never_answers() -> None:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", _STUCK_EXIT],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - started < 20
    assert "1 audit events were lost at exit" in done.stderr


# -- events no store can hold ----------------------------------------------------------------

# (field values, what is wrong)
UNSTORABLE: list[tuple[dict[str, Any], str]] = [
    ({"duration_s": math.nan}, "duration_s=nan"),
    ({"ts": math.nan}, "ts=nan"),
    ({"ts": float("-nan")}, "ts=nan"),
    ({"ts": "1733250000"}, "ts='1733250000'"),
    ({"duration_s": None}, "duration_s=None"),
]


@pytest.mark.parametrize(("fields", "named"), UNSTORABLE, ids=[n for _, n in UNSTORABLE])
@pytest.mark.parametrize("where", ["sqlite", "memory"])
def test_an_event_no_store_can_hold_is_refused_when_recorded(
    tmp_path: Path, where: str, fields: dict[str, Any], named: str
) -> None:
    store = SQLiteAuditStore(tmp_path / "audit.db") if where == "sqlite" else MemoryAuditStore()
    log = AuditLog(store)
    with pytest.raises(UsageError, match=r"audit event 'bad' has .*not NaN") as raised:
        log.record(stored_event(call_id="bad", **fields))
    assert named in str(raised.value)
    assert raised.value.code == "usage_error"
    for i in range(3):  # the events behind it are stored
        log.record(stored_event(call_id=f"good{i}"))
    log.flush(timeout=5)
    assert [e.call_id for e in log.events()] == ["good0", "good1", "good2"]
    log.close()


@pytest.mark.parametrize("fields", [{"ts": -0.0}, {"duration_s": -0.0}, {"ts": math.inf}])
def test_odd_times_a_store_can_hold_keep_the_chain_whole(
    backend: Backend, fields: dict[str, float]
) -> None:
    store = backend.audit()
    log = AuditLog(store)
    for name in ("a", "b", "c"):
        log.record(stored_event(call_id=name, **(fields if name == "b" else {})))
    log.flush(timeout=5)
    store.append([stored_event(call_id="d", **fields)])  # and written straight to the store
    report = store.verify()
    assert report.ok, report.detail
    assert report.records == 4
    log.close()


# -- sinks of a provisional log ----------------------------------------------------------------


class Sink:
    def __init__(self) -> None:
        self.seen: list[str] = []

    def emit(self, events: Sequence[AuditEvent]) -> None:
        self.seen.extend(e.call_id for e in events)

    def close(self) -> None:
        return None


@pytest.mark.parametrize("attached", ["sqlite", "memory"])
def test_sinks_see_what_a_provisional_log_recorded_once(tmp_path: Path, attached: str) -> None:
    sink = Sink()
    log = AuditLog(sinks=[sink])
    log.record(stored_event(call_id="before-1"))
    log.record_program("1 + 1")
    log.record(stored_event(call_id="before-2"))
    log.attach(
        SQLiteAuditStore(tmp_path / "audit.db") if attached == "sqlite" else MemoryAuditStore()
    )
    log.record(stored_event(call_id="after"))
    log.flush(timeout=5)
    deadline = time.monotonic() + 5
    while len(sink.seen) < 3 and time.monotonic() < deadline:  # sinks run after the release
        time.sleep(0.01)
    time.sleep(0.05)
    assert sink.seen == ["before-1", "before-2", "after"]
    assert [e.call_id for e in log.events()] == ["before-1", "before-2", "after"]
    log.close()
