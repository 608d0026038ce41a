"""The writer thread of an :class:`~airlock.tools.AuditLog`, and the state it shares with
the threads that record: the queue, how many items were recorded and stored, the waiters.

One writer per log takes whatever is queued (up to ``batch_size`` items) and stores it in
one transaction, lingering a moment first while nobody waits; then it releases the waiters
the batch satisfied and hands the batch to the sinks. A store that fails gets the batch
back at the head of the queue and the waiters get the error, and the writer retries. An
idle writer ends; the next record starts another.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Iterable
from typing import NamedTuple

from airlock.tools._audit import AuditEvent, AuditSink, AuditStore
from airlock.tools._audit_process import LoopWaiter, arm_exit, release

__all__ = ["RETRY_S", "AuditWriter", "QueuedProgram"]

_log = logging.getLogger("airlock.audit")
_IDLE_EXIT_S = 2.0
"""An idle writer thread ends after this long; the next record starts another."""
RETRY_S = 0.5
"""How long the writer waits before retrying a store that failed."""
_LINGER_S = 0.01
"""How long the writer lets a small batch grow while nobody waits for it to be durable:
fewer, larger transactions cost the process less CPU under load. A waiter cuts it short."""


class QueuedProgram(NamedTuple):
    """The text of a program, queued to be stored under its hash."""

    digest: str
    text: str


class AuditWriter:
    """The queue of an audit log and the thread that stores it (the log is one)."""

    def __init__(self, store: AuditStore, *, batch_size: int, sinks: Iterable[AuditSink]) -> None:
        self._store = store
        self._batch_size = batch_size
        self._sinks = list(sinks)
        # Recording takes the lock alone (the condition's own methods cost more per call).
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._queue: deque[AuditEvent | QueuedProgram] = deque()
        self._recorded = 0  # items queued since the start, in order
        self._stored = 0  # of those, how many the store holds (always a prefix)
        self._failures = 0
        self._failure: BaseException | None = None
        self._waiters: list[LoopWaiter] = []
        self._flushing = 0  # threads blocked in flush()
        self._announced = 0  # queued events at the head of the queue the sinks saw already
        self._writer: threading.Thread | None = None
        self._idle = False
        self._closed = False

    def _kick(self, *, urgent: bool = False) -> None:
        # Called with the lock held: make sure a writer will see the queue (at once when
        # someone waits for it, else when it stops lingering).
        if self._writer is None:
            self._writer = threading.Thread(
                target=self._run, name="airlock-audit-writer", daemon=True
            )
            self._writer.start()
            arm_exit()  # (this may be a multiprocessing child of the process that made it)
        elif self._idle or urgent:
            self._cond.notify_all()

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
            programs = {item.digest: item.text for item in batch if isinstance(item, QueuedProgram)}
            try:
                store.append(events, programs or None)
            except Exception as exc:
                if self._failed(batch, exc):
                    return
                continue
            with self._cond:
                self._stored += count
                seen = min(self._announced, len(events))
                self._announced -= seen
                ready = [w for w in self._waiters if w.target <= self._stored]
                if ready:
                    self._waiters = [w for w in self._waiters if w.target > self._stored]
                self._cond.notify_all()
            release(ready, None)
            self._emit(events[seen:])

    def _urgent(self) -> bool:
        return bool(self._waiters or self._flushing or self._closed)

    def _failed(self, batch: list[AuditEvent | QueuedProgram], exc: Exception) -> bool:
        """Requeue ``batch``, fail every waiter, wait a little; whether to stop writing."""
        _log.error("the audit store failed; retrying in %.1f s", RETRY_S, exc_info=exc)
        with self._cond:
            self._queue.extendleft(reversed(batch))
            self._failures += 1
            self._failure = exc
            waiting, self._waiters = self._waiters, []
            self._cond.notify_all()
            closed = self._closed
            if closed:
                self._writer = None
        release(waiting, exc)  # (closed or not: nobody else would ever wake them)
        if closed:
            return True
        with self._cond:
            self._cond.wait(RETRY_S)
        return False

    def _emit(self, events: list[AuditEvent]) -> None:
        if not events:
            return
        for sink in list(self._sinks):
            try:
                sink.emit(events)
            except Exception:  # a sink must never stop the audit log
                _log.exception("audit sink %r failed", sink)
