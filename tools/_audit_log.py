"""The audit log: events recorded without waiting, written by one thread in group commits,
and durable before the call that produced them returns.

:meth:`AuditLog.record` queues an event and returns at once: it never writes to a disk on
the caller's thread, so never on the event loop. One writer thread per log takes whatever
is queued (up to ``batch_size`` events) and stores it in one transaction; events recorded
while it writes wait for the next one, so concurrent calls share a commit (group commit)::

    record() ─► queue ─► writer thread: store.append(batch) ─► waiters released ─► sinks
                               (one transaction, synced)

:meth:`AuditLog.wait_durable` (a coroutine; the loop keeps running) and :meth:`AuditLog.flush`
(a blocking call, for threads and scripts) return once every event recorded before them is
stored. :class:`~airlock.Session` awaits it before a call's answer is returned, so what a
crash can lose is only events of calls that had not returned yet. A
:class:`~airlock.tools.MemoryAuditStore` is written inline: no disk, no thread.

A log built without a store is *provisional*: in memory until :meth:`AuditLog.attach` gives
it one (a :class:`~airlock.Harness` attaches the SQLite store under ``$AIRLOCK_HOME``), so
a bare ``Registry()`` in a unit test writes no file. The writer thread is
:mod:`airlock.tools._audit_writer`; what the logs of a process share (flushing at exit,
resetting in a forked child) is :mod:`airlock.tools._audit_process`.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections.abc import Iterable
from types import TracebackType

import anyio.to_thread

from airlock.policies import UsageError
from airlock.tools._audit import AuditEvent, AuditSink, AuditStore, RunSummary, program_hash
from airlock.tools._audit_process import (
    EXIT_FLUSH_S,
    LoopWaiter,
    close_sinks,
    forget,
    register,
)
from airlock.tools._audit_writer import RETRY_S, AuditWriter, QueuedProgram
from airlock.tools._memory_audit import MemoryAuditStore

__all__ = ["AuditLog"]

_log = logging.getLogger("airlock.audit")


class AuditLog(AuditWriter):
    """Records audit events without blocking and writes them to a store; thread-safe.

    Args:
        store: where events go; ``None`` for a provisional log in memory (see
            :attr:`provisional`).
        batch_size: most events written in one transaction.
        sinks: see every stored batch (:class:`~airlock.tools.AuditSink`); more with
            :meth:`add_sink`.

    Use as a context manager to flush and close.
    """

    def __init__(
        self,
        store: AuditStore | None = None,
        *,
        batch_size: int = 1024,
        sinks: Iterable[AuditSink] = (),
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, not {batch_size!r}")
        super().__init__(
            store if store is not None else MemoryAuditStore(),
            batch_size=batch_size,
            sinks=sinks,
        )
        self.provisional = store is None
        """Built without a store: in memory until :meth:`attach` gives it one."""
        self._inline = isinstance(self._store, MemoryAuditStore)
        register(self)

    @property
    def store(self) -> AuditStore:
        """The store events are written to."""
        return self._store

    def attach(self, store: AuditStore) -> None:
        """Give a provisional log its store; what it recorded in memory is written there
        first, in order.

        Raises:
            UsageError: the log already has a store of its own.
        """
        with self._cond:
            old = self._store
            if not self.provisional or not isinstance(old, MemoryAuditStore):
                raise UsageError(
                    f"this audit log already writes to {type(old).__name__}; give the store "
                    "to the log when you build it, or build the registry without audit="
                )
            self._store = store
            self.provisional = False
            self._inline = isinstance(store, MemoryAuditStore)
            moved: list[AuditEvent | QueuedProgram] = [
                *(QueuedProgram(d, t) for d, t in old.programs().items()),
                *old.query(),
            ]
            if not moved:
                return
            if self._inline:
                store.append([m for m in moved if isinstance(m, AuditEvent)], old.programs())
                return
            self._queue.extendleft(reversed(moved))
            self._recorded += len(moved)
            # The sinks saw these when they were recorded (a memory store writes inline).
            self._announced = sum(isinstance(m, AuditEvent) for m in moved)
            self._nudge()

    def add_sink(self, sink: AuditSink) -> None:
        """Let ``sink`` see every batch stored from now on."""
        with self._cond:
            self._sinks.append(sink)

    # -- recording ------------------------------------------------------------------------

    def record(self, event: AuditEvent) -> None:
        """Queue ``event`` for the writer; never waits for a disk, and never fails for the
        writer's sake (a writer thread that cannot start is started by the next record or
        wait, which then takes this event too).

        Raises:
            UsageError: its ``ts`` or ``duration_s`` is NaN or not a number: refused here,
                since the writer could store neither it nor the events queued behind it.
            RuntimeError: the log is closed.
        """
        try:
            unstorable = _isnan(event.ts) or _isnan(event.duration_s)
        except TypeError:  # not a number at all
            unstorable = True
        if unstorable:
            raise _unstorable(event)
        with self._lock:  # (``_put`` inlined: every call records one event)
            if self._closed:
                raise RuntimeError("this audit log is closed; nothing more can be recorded")
            if self._inline:  # a memory store appends in microseconds
                events = [event]
                self._store.append(events)
                if self._sinks:
                    self._emit(events)
                return
            self._queue.append(event)
            self._recorded += 1
            if self._writer is None or self._idle:
                self._nudge()

    def record_program(self, text: str) -> str:
        """Queue the text of a program to be stored once under its hash; returns the hash
        (:func:`~airlock.tools.program_hash`), for the ``args_hash`` of its event."""
        digest = program_hash(text)
        self._put(QueuedProgram(digest, text))
        return digest

    def _put(self, item: AuditEvent | QueuedProgram) -> None:
        with self._lock:
            if self._closed:
                raise RuntimeError("this audit log is closed; nothing more can be recorded")
            if self._inline:
                self._write_inline(item)
                return
            self._queue.append(item)
            self._recorded += 1
            self._nudge()

    def _write_inline(self, item: AuditEvent | QueuedProgram) -> None:
        # Called with the lock held: a memory store appends in microseconds.
        if isinstance(item, QueuedProgram):
            self._store.append([], {item.digest: item.text})
            return
        events = [item]
        self._store.append(events)
        if self._sinks:
            self._emit(events)

    # -- waiting --------------------------------------------------------------------------

    def flush(self, *, timeout: float | None = None) -> None:
        """Block until every event recorded so far is stored (use :meth:`wait_durable` on
        an event loop), for at most ``timeout`` seconds if given.

        Raises:
            TimeoutError: ``timeout`` passed first; the events stay queued.
            UsageError: called on the log's writer thread (a sink's ``emit``), where it
                would wait for itself.
            LedgerError: the store failed while this waited (an ``OSError`` of its own is
                ``ledger_io``, an error of no known kind or a writer thread that cannot
                start ``ledger_unavailable``, both retryable); the events stay queued and
                the writer retries them (until the log is closed).
            AuditStoreError: the store refuses to extend a log whose tail was changed.
        """
        self._refuse_on_writer("flush")
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            target = self._recorded
            failures = self._failures
            self._flushing += 1
            try:
                while self._stored < target:
                    if self._failures != failures and self._failure is not None:
                        raise self._failure
                    self._refuse_closed()
                    wait = RETRY_S
                    if deadline is not None:
                        wait = min(wait, deadline - time.monotonic())
                        if wait <= 0:
                            raise TimeoutError(
                                f"{target - self._stored} audit events were not stored "
                                f"within {timeout!r} s; they stay queued"
                            )
                    self._kick(urgent=True)
                    self._cond.wait(wait)
            finally:
                self._flushing -= 1

    async def wait_durable(self) -> None:
        """Wait until every event recorded so far is stored, without blocking the event
        loop (the writer thread releases the wait).

        Raises:
            UsageError: called on the log's writer thread, as :meth:`flush`.
            LedgerError, AuditStoreError: the store failed while this waited, as
                :meth:`flush`.
        """
        self._refuse_on_writer("wait_durable")
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # another event loop library: wait in a worker thread
            await anyio.to_thread.run_sync(self.flush)
            return
        with self._cond:
            if self._stored >= self._recorded:
                return
            self._refuse_closed()
            self._kick(urgent=True)  # (a writer that ended, or never started, is started)
            future: asyncio.Future[None] = loop.create_future()
            self._waiters.append(LoopWaiter(self._recorded, loop, future))
        await future

    def _refuse_on_writer(self, what: str) -> None:
        if threading.current_thread() is self._writer:
            raise UsageError(
                f"{what}() waits for the audit log's writer thread and was called on it (from "
                "a sink's emit(), which runs there); a sink may read the log (events(), "
                "runs()), which needs no wait there, or hand the work to another thread"
            )

    def _refuse_closed(self) -> None:
        # Called with the lock held: a closed log whose writer stopped stores nothing more.
        if self._closed and self._writer is None:
            raise self._failure or RuntimeError(
                f"this audit log was closed with {self._recorded - self._stored} events not stored"
            )

    @property
    def pending(self) -> int:
        """Events and programs recorded but not yet stored."""
        with self._cond:
            return self._recorded - self._stored

    # -- reading and closing --------------------------------------------------------------

    def events(
        self,
        *,
        run_id: str | None = None,
        tool: str | None = None,
        since: float | None = None,
        limit: int | None = None,
    ) -> list[AuditEvent]:
        """Flush (but not on the writer thread, where a sink reads what is stored), then
        query the store."""
        self._flush_to_read()
        return self._store.query(run_id=run_id, tool=tool, since=since, limit=limit)

    def runs(self, *, limit: int = 50) -> list[RunSummary]:
        """Flush (as :meth:`events`), then summarize the most recent runs."""
        self._flush_to_read()
        return self._store.runs(limit=limit)

    def program(self, digest: str) -> str | None:
        """Flush (as :meth:`events`), then the stored text of the program ``digest``."""
        self._flush_to_read()
        return self._store.program(digest)

    def _flush_to_read(self) -> None:
        # A sink that reads the log runs on the writer thread, which must not wait for
        # itself; what it reads there includes every batch sinks were given.
        if threading.current_thread() is not self._writer:
            self.flush()

    def close(self) -> None:
        """Flush, stop the writer, close the sinks (waiting for them at most
        :data:`~airlock.tools._audit_process.EXIT_FLUSH_S`) and close the store.

        Raises:
            Exception: as :meth:`flush`; the store is closed all the same.
        """
        try:
            self.flush()
        finally:
            with self._cond:
                self._closed = True
                writer = self._writer
                self._cond.notify_all()
            if writer is not None and writer is not threading.current_thread():
                writer.join(5.0)
            forget(self)
            self._close_sinks(EXIT_FLUSH_S)
            self._store.close()

    def _close_sinks(self, timeout: float) -> None:
        with self._cond:
            sinks, self._sinks = self._sinks, []
        if sinks:
            close_sinks(sinks, timeout)

    def _after_fork(self) -> None:
        # A forked child has no writer thread and may have inherited a held lock; what the
        # parent had queued is the parent's to write.
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._queue.clear()
        self._recorded = self._stored = 0
        self._waiters = []
        self._flushing = self._announced = 0
        self._writer = None
        self._idle = False

    def __enter__(self) -> AuditLog:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


_isnan = math.isnan


def _unstorable(event: AuditEvent) -> UsageError:
    # (An infinite time is stored and read back as it is; NaN is not: SQLite stores NULL.)
    return UsageError(
        f"audit event {event.call_id!r} has ts={event.ts!r} and duration_s="
        f"{event.duration_s!r}: both must be numbers of seconds, not NaN, or no store can "
        "hold the event; take them from time.time() and a clock's difference"
    )
