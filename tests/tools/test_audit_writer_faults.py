"""The audit log's writer thread where one failure used to wedge the log for the life of the
process: a thread that cannot start (the process at its limit of threads), a store or a sink
that raises a ``BaseException``, a store that raises an error of no known kind. Whatever
failed, nothing recorded is lost, the next wait finds its events stored within a bound, and
a waiter that is failed gets a typed, retryable :class:`~airlock.tools.LedgerError`."""

from __future__ import annotations

import asyncio
import errno
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import pytest

from airlock.tools import AuditEvent, AuditLog, LedgerError
from tests.audit_events import stored_event
from tests.tools.test_audit import GatedStore

pytestmark = pytest.mark.anyio

WRITER = "airlock-audit-writer"
"""The name of an audit log's writer thread."""
BOUND_S = 5.0
"""Longest any wait here may take: a wedged log fails the test instead of hanging it."""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Interrupted(BaseException):
    """Not an ``Exception``: what an ``except Exception`` lets through."""


class FaultyStore(GatedStore):
    """An audit store in memory (not a ``MemoryAuditStore``, so the log writes it from its
    writer thread) whose next append raises :attr:`raises`, once; it waits for :attr:`gate`
    first (closed at the start), so a test can have its wait registered before the store
    fails."""

    def __init__(self) -> None:
        super().__init__()
        self.gate.clear()
        self.raises: BaseException | None = None

    def append(
        self, events: Sequence[AuditEvent], programs: Mapping[str, str] | None = None
    ) -> None:
        self.gate.wait(BOUND_S)
        failure, self.raises = self.raises, None
        if failure is not None:
            raise failure
        self.inner.append(events, programs)


@dataclass
class OnceSink:
    """A sink whose first batch raises :attr:`raises`."""

    raises: BaseException | None = None
    seen: list[str] = field(default_factory=list)

    def emit(self, events: Sequence[AuditEvent]) -> None:
        failure, self.raises = self.raises, None
        if failure is not None:
            raise failure
        self.seen += [e.call_id for e in events]

    def close(self) -> None:
        return None


@dataclass
class Starts:
    """How many more starts of a writer thread fail (-1: every one, until disarmed)."""

    failing: int = 0

    def disarm(self) -> None:
        self.failing = 0


@pytest.fixture
def starts(monkeypatch: pytest.MonkeyPatch) -> Iterator[Starts]:
    """Writer threads fail to start as a process at its limit of threads does."""
    starts = Starts()
    start = threading.Thread.start

    def limited(thread: threading.Thread) -> None:
        if thread.name == WRITER and starts.failing:
            starts.failing -= 1
            raise RuntimeError("can't start new thread")
        start(thread)

    monkeypatch.setattr(threading.Thread, "start", limited)
    yield starts
    starts.disarm()


@dataclass
class World:
    store: FaultyStore
    sink: OnceSink
    starts: Starts


Arm = Callable[[World], None]


def _start_fails_once(world: World) -> None:
    world.starts.failing = 1


def _start_fails_throughout(world: World) -> None:
    world.starts.failing = -1


def _store_raises(failure: BaseException) -> Arm:
    def arm(world: World) -> None:
        world.store.raises = failure

    return arm


def _sink_raises(world: World) -> None:
    world.sink.raises = Interrupted("a sink's BaseException")


# (the fault during the first call, the code its wait fails with, or None: it succeeds)
FAULTS: list[tuple[str, Arm, str | None]] = [
    ("the writer thread cannot start once", _start_fails_once, None),
    ("no writer thread can start", _start_fails_throughout, "ledger_unavailable"),
    ("the store raises a BaseException", _store_raises(Interrupted("gone")), "ledger_unavailable"),
    ("a sink raises a BaseException", _sink_raises, None),
    (
        "the store raises an error of no known kind",
        _store_raises(RuntimeError("the driver lost its connection")),
        "ledger_unavailable",
    ),
    (
        "the store's disk is full",
        _store_raises(OSError(errno.ENOSPC, "No space left on device")),
        "ledger_io",
    ),
]
WAITS = ["wait_durable", "flush"]


async def _wait(log: AuditLog, how: str) -> None:
    if how == "wait_durable":
        await asyncio.wait_for(log.wait_durable(), BOUND_S)
    else:
        await asyncio.to_thread(log.flush, timeout=BOUND_S)


async def _call(log: AuditLog, store: FaultyStore, call_id: str, how: str) -> BaseException | None:
    """Record an event and wait for it, the store held until the wait is registered: what
    the wait raised, if anything (never a timeout)."""
    store.gate.clear()
    log.record(stored_event(call_id=call_id))  # never raises for the writer's sake
    waiting = asyncio.create_task(_wait(log, how))
    await asyncio.sleep(0.1)
    store.gate.set()
    try:
        await waiting
    except TimeoutError:
        raise
    except BaseException as exc:
        return exc
    return None


@pytest.mark.parametrize("how", WAITS)
@pytest.mark.parametrize(("fault", "arm", "code"), FAULTS, ids=[f[0] for f in FAULTS])
async def test_after_a_writer_fault_the_next_call_is_stored_and_nothing_is_lost(
    starts: Starts, fault: str, arm: Arm, code: str | None, how: str
) -> None:
    world = World(FaultyStore(), OnceSink(), starts)
    log = AuditLog(world.store, sinks=[world.sink])  # type: ignore[arg-type]
    arm(world)

    first = await _call(log, world.store, "first", how)
    starts.disarm()

    if code is None:
        assert first is None, (fault, first)
    else:
        assert isinstance(first, LedgerError), (fault, first)
        assert (first.code, first.retryable) == (code, True), fault
        assert first.store == "the audit store"
    assert await _call(log, world.store, "next", how) is None, fault
    assert [e.call_id for e in world.store.query()] == ["first", "next"]
    assert log.pending == 0
    log.close()


async def test_a_log_whose_writer_cannot_start_records_and_stores_once_it_can(
    starts: Starts,
) -> None:
    # No wait at all while threads are short: the events stay queued, and a record made
    # once a thread can start again takes them along.
    store = FaultyStore()
    store.gate.set()
    log = AuditLog(store)  # type: ignore[arg-type]
    starts.failing = -1
    for i in range(3):
        log.record(stored_event(call_id=f"c{i}"))
    assert log.pending == 3
    starts.disarm()
    log.record(stored_event(call_id="c3"))
    await asyncio.wait_for(log.wait_durable(), BOUND_S)
    assert [e.call_id for e in store.query()] == ["c0", "c1", "c2", "c3"]
    log.close()
