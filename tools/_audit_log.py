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
a bare ``Registry()`` in a unit test writes no file.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import deque
from collections.abc import Iterable
from types import TracebackType
from typing import NamedTuple

import anyio.to_thread

from airlock.policies import UsageError
from airlock.tools._audit import AuditEvent, AuditSink, AuditStore, RunSummary, program_hash
from airlock.tools._audit_process import LoopWaiter, forget, register, release
from airlock.tools._memory_audit import MemoryAuditStore

__all__ = ["AuditLog"]

_log = logging.getLogger("airlock.audit")
_IDLE_EXIT_S = 2.0
"""An idle writer thread ends after this long; the next record starts another."""
_RETRY_S = 0.5
"""How long the writer waits before retrying a store that failed."""
_LINGER_S = 0.01
"""How long the writer lets a small batch grow while nobody waits for it to be durable:
fewer, larger transactions cost the process less CPU under load. A waiter cuts it short."""


class _Program(NamedTuple):
    digest: str
    text: str


class AuditLog:
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
        self.provisional = store is None
        """Built without a store: in memory until :meth:`attach` gives it one."""
        self._store: AuditStore = store if store is not None else MemoryAuditStore()
        self._inline = isinstance(self._store, MemoryAuditStore)
        self._batch_size = batch_size
        self._sinks = list(sinks)
        # Recording takes the lock alone (the condition's own methods cost more per call).
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._queue: deque[AuditEvent | _Program] = deque()
        self._recorded = 0  # items queued since the start, in order
        self._stored = 0  # of those, how many the store holds (always a prefix)
        self._failures = 0
        self._failure: BaseException | None = None
        self._waiters: list[LoopWaiter] = []
        self._flushing = 0  # threads blocked in flush()
        self._writer: threading.Thread | None = None
        self._idle = False
        self._closed = False
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
            moved: list[AuditEvent | _Program] = [
                *(_Program(d, t) for d, t in old.programs().items()),
                *old.query(),
            ]
            if not moved:
                return
            if self._inline:
                store.append([m for m in moved if isinstance(m, AuditEvent)], old.programs())
                return
            self._queue.extendleft(reversed(moved))
            self._recorded += len(moved)
            self._kick()

    def add_sink(self, sink: AuditSink) -> None:
        """Let ``sink`` see every batch stored from now on."""
        with self._cond:
            self._sinks.append(sink)

    # -- recording ------------------------------------------------------------------------

    def record(self, event: AuditEvent) -> None:
        """Queue ``event`` for the writer; never waits for a disk."""
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
                self._kick()

    def record_program(self, text: str) -> str:
        """Queue the text of a program to be stored once under its hash; returns the hash
        (:func:`~airlock.tools.program_hash`), for the ``args_hash`` of its event."""
        digest = program_hash(text)
        self._put(_Program(digest, text))
        return digest

    def _put(self, item: AuditEvent | _Program) -> None:
        with self._lock:
            if self._closed:
                raise RuntimeError("this audit log is closed; nothing more can be recorded")
            if self._inline:
                self._write_inline(item)
                return
            self._queue.append(item)
            self._recorded += 1
            self._kick()

    def _write_inline(self, item: AuditEvent | _Program) -> None:
        # Called with the lock held: a memory store appends in microseconds.
        if isinstance(item, _Program):
            self._store.append([], {item.digest: item.text})
            return
        events = [item]
        self._store.append(events)
        if self._sinks:
            self._emit(events)

    def _kick(self, *, urgent: bool = False) -> None:
        # Called with the lock held: make sure a writer will see the queue (at once when
        # someone waits for it, else when it stops lingering).
        if self._writer is None:
            self._writer = threading.Thread(
                target=self._run, name="airlock-audit-writer", daemon=True
            )
            self._writer.start()
        elif self._idle or urgent:
            self._cond.notify_all()

    # -- waiting --------------------------------------------------------------------------

    def flush(self) -> None:
        """Block until every event recorded so far is stored (use :meth:`wait_durable` on
        an event loop).

        Raises:
            Exception: whatever the store raised while this waited; the events stay queued
                and the writer retries them.
        """
        with self._cond:
            target = self._recorded
            failures = self._failures
            self._flushing += 1
            try:
                while self._stored < target:
                    if self._failures != failures and self._failure is not None:
                        raise self._failure
                    self._kick(urgent=True)
                    self._cond.wait(_RETRY_S)
            finally:
                self._flushing -= 1

    async def wait_durable(self) -> None:
        """Wait until every event recorded so far is stored, without blocking the event
        loop (the writer thread releases the wait).

        Raises:
            Exception: whatever the store raised while this waited.
        """
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # another event loop library: wait in a worker thread
            await anyio.to_thread.run_sync(self.flush)
            return
        with self._cond:
            if self._stored >= self._recorded:
                return
            future: asyncio.Future[None] = loop.create_future()
            self._waiters.append(LoopWaiter(self._recorded, loop, future))
            self._kick(urgent=True)
        await future

    @property
    def pending(self) -> int:
        """Events and programs recorded but not yet stored."""
        with self._cond:
            return self._recorded - self._stored

    # -- the writer thread ----------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue:
                    if self._closed:
                        self._writer = None
                        return
                    self._idle = True
                    self._cond.wait(_IDLE_EXIT_S)
                    self._idle = False
                    if not self._queue:
                        self._writer = None
                        return
                if not self._urgent() and len(self._queue) < self._batch_size:
                    self._cond.wait(_LINGER_S)  # let the batch grow; a waiter wakes it
                count = min(len(self._queue), self._batch_size)
                batch = [self._queue.popleft() for _ in range(count)]
                store = self._store
            events = [item for item in batch if isinstance(item, AuditEvent)]
            programs = {item.digest: item.text for item in batch if isinstance(item, _Program)}
            try:
                store.append(events, programs or None)
            except Exception as exc:
                if self._failed(batch, exc):
                    return
                continue
            with self._cond:
                self._stored += count
                ready = [w for w in self._waiters if w.target <= self._stored]
                if ready:
                    self._waiters = [w for w in self._waiters if w.target > self._stored]
                self._cond.notify_all()
            release(ready, None)
            self._emit(events)

    def _urgent(self) -> bool:
        return bool(self._waiters or self._flushing or self._closed)

    def _failed(self, batch: list[AuditEvent | _Program], exc: Exception) -> bool:
        """Requeue ``batch``, fail every waiter, wait a little; whether to stop writing."""
        _log.error("the audit store failed; retrying in %.1f s", _RETRY_S, exc_info=exc)
        with self._cond:
            self._queue.extendleft(reversed(batch))
            self._failures += 1
            self._failure = exc
            waiting, self._waiters = self._waiters, []
            self._cond.notify_all()
            if self._closed:
                self._writer = None
                return True
        release(waiting, exc)
        with self._cond:
            self._cond.wait(_RETRY_S)
        return False

    def _emit(self, events: list[AuditEvent]) -> None:
        if not events:
            return
        for sink in list(self._sinks):
            try:
                sink.emit(events)
            except Exception:  # a sink must never stop the audit log
                _log.exception("audit sink %r failed", sink)

    # -- reading and closing --------------------------------------------------------------

    def events(
        self,
        *,
        run_id: str | None = None,
        tool: str | None = None,
        since: float | None = None,
        limit: int | None = None,
    ) -> list[AuditEvent]:
        """Flush, then query the store."""
        self.flush()
        return self._store.query(run_id=run_id, tool=tool, since=since, limit=limit)

    def runs(self, *, limit: int = 50) -> list[RunSummary]:
        """Flush, then summarize the most recent runs."""
        self.flush()
        return self._store.runs(limit=limit)

    def program(self, digest: str) -> str | None:
        """Flush, then the text of the program stored under ``digest``."""
        self.flush()
        return self._store.program(digest)

    def close(self) -> None:
        """Flush, stop the writer and close the store.

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
            self._close_sinks()
            self._store.close()

    def _close_sinks(self) -> None:
        with self._cond:
            sinks, self._sinks = self._sinks, []
        for sink in sinks:
            try:
                sink.close()
            except Exception:
                _log.exception("audit sink %r failed to close", sink)

    def _after_fork(self) -> None:
        # A forked child has no writer thread and may have inherited a held lock; what the
        # parent had queued is the parent's to write.
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._queue.clear()
        self._recorded = self._stored = 0
        self._waiters = []
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
