"""The writer thread of an :class:`~airlock.tools.AuditLog`, and the state it shares with
the threads that record: the queue, how many items were recorded and stored, the waiters.

One writer per log takes whatever is queued (up to ``batch_size`` items) and stores it in
one transaction, lingering a moment first while nobody waits; then it releases the waiters
the batch satisfied and hands the batch to the sinks. A store that fails gets the batch
back at the head of the queue and the waiters get the error, and the writer retries. An
idle writer ends; the next record starts another.

What a store raises reaches the waiters typed (:func:`_store_failure`): an
:class:`~airlock.policies.AirlockError` as it is, an ``OSError`` as ``ledger_io``, anything
else as ``ledger_unavailable``, both retryable. A writer that cannot start (the process is at
its limit of threads) is not kept, and a store's ``BaseException`` ends its writer, its batch
back in the queue: the waiters are failed, and the next record or wait starts another. A
sink's ``BaseException`` ends its writer too, after the batch was stored: another takes over.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections import deque
from collections.abc import Iterable
from typing import NamedTuple

from airlock.policies import AirlockError
from airlock.tools._audit import AuditEvent, AuditSink, AuditStore
from airlock.tools._audit_process import LoopWaiter, arm_exit, release
from airlock.tools._errors import LedgerError, LedgerIOError, LedgerUnavailableError

__all__ = ["RETRY_S", "AuditUnavailableError", "AuditWriter", "QueuedProgram"]

_log = logging.getLogger("airlock.audit")
_WRITER_NAME = "airlock-audit-writer"
_IDLE_EXIT_S = 2.0
"""An idle writer thread ends after this long; the next record starts another."""
RETRY_S = 0.5
"""How long the writer waits before retrying a store that failed."""
_LINGER_S = 0.01
"""How long the writer lets a small batch grow while nobody waits for it to be durable:
fewer, larger transactions cost the process less CPU under load. A waiter cuts it short."""


class AuditUnavailableError(LedgerUnavailableError):
    """The audit log cannot store its events right now: its writer thread cannot start (the
    process is at its limit of threads) or was ended by a ``BaseException``, or its store
    raised an error of no known kind. The events stay queued and the log tries again, so,
    unlike its parent class, it is retryable."""

    retryable = True


def _store_failure(exc: BaseException, store: AuditStore) -> BaseException:
    """What the waiters of a batch ``store`` could not append are told, for ``exc``: an
    :class:`~airlock.policies.AirlockError` (a ``LedgerError``, an ``AuditStoreError``) as
    it is; an ``OSError`` as :class:`~airlock.tools.LedgerIOError`; anything else as
    :class:`AuditUnavailableError`; each caused by ``exc``."""
    if isinstance(exc, AirlockError):
        return exc
    said = f"{type(exc).__name__}: {exc}"
    retried = "the audit log keeps the events and tries again"
    if isinstance(exc, OSError):
        what = f"could not be written (the disk failed or is full: {said}); fix it: {retried}"
        failure = _unavailable(store, what, kind=LedgerIOError)
    else:
        failure = _unavailable(store, f"failed ({said}); {retried}")
    failure.__cause__ = exc
    return failure


def _unavailable(
    store: AuditStore, what: str, *, kind: type[LedgerError] = AuditUnavailableError
) -> LedgerError:
    path = str(getattr(store, "path", "") or type(store).__name__)
    return kind(f"the audit store {path!r} {what}", path=path, store="the audit store")


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
        """Called with the lock held: make sure a writer will see the queue (at once when
        someone waits for it, else when it stops lingering).

        Raises:
            AuditUnavailableError: no writer thread can start; none is left behind, so the
                next record or wait tries again.
        """
        writer = self._writer
        if writer is not None and writer.is_alive():
            if self._idle or urgent:
                self._cond.notify_all()
            return
        # A thread that never ran must not pass for the writer: assigned once started.
        writer = threading.Thread(target=self._run, name=_WRITER_NAME, daemon=True)
        try:
            writer.start()
        except RuntimeError as exc:  # (pthread_create: EAGAIN, the limit of threads)
            self._writer = None
            failure = _unavailable(
                self._store,
                f"cannot be written now: no writer thread can start ({exc}: the process is at "
                "its limit of threads); the events stay queued, the next record or wait tries "
                "again",
            )
            self._failures += 1
            self._failure = failure
            _log.error("%s", failure)
            raise failure from exc
        self._writer = writer
        arm_exit()  # (this may be a multiprocessing child of the process that made it)

    def _nudge(self) -> None:
        # Called with the lock held, by a record: it never fails for the writer's sake (its
        # item is queued; the next record or wait starts a writer).
        with contextlib.suppress(AuditUnavailableError):
            self._kick()

    def _run(self) -> None:
        try:
            self._write()
        except BaseException as exc:  # (a store's or a sink's): this writer ends, not the log
            self._ended(exc)

    def _write(self) -> None:
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
                if self._failed(batch, _store_failure(exc, store)):
                    return
                continue
            except BaseException as exc:  # it ends this writer, not the log
                self._failed(batch, _store_failure(exc, store), again=False)
                return
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

    def _ended(self, exc: BaseException) -> None:
        """The writer thread ends on ``exc`` (a sink's ``BaseException``, after its batch was
        stored, or a bug): another writer takes what is queued, or, when none can start,
        the waiters are failed and the next record or wait tries again."""
        _log.error("the audit log's writer thread ended; starting another", exc_info=exc)
        with self._cond:
            if self._writer is threading.current_thread():
                self._writer = None
            self._idle = False
            if not (self._queue or self._waiters):
                return
            try:
                self._kick(urgent=True)
            except AuditUnavailableError as failure:
                waiting, self._waiters = self._waiters, []
                self._cond.notify_all()
                release(waiting, failure)  # (it only schedules the wake-ups)

    def _failed(
        self, batch: list[AuditEvent | QueuedProgram], exc: BaseException, *, again: bool = True
    ) -> bool:
        """Requeue ``batch`` and fail every waiter; then, ``again``, wait a little, else end
        this writer (the next record or wait starts another); whether to stop writing."""
        then = f"retrying in {RETRY_S} s" if again else "the next record or wait tries again"
        _log.error("the audit store failed; %s", then, exc_info=exc)
        with self._cond:
            self._queue.extendleft(reversed(batch))
            self._failures += 1
            self._failure = exc
            waiting, self._waiters = self._waiters, []
            self._cond.notify_all()
            stop = self._closed or not again
            if stop:
                self._writer = None
        release(waiting, exc)  # (stopped or not: nobody else would ever wake them)
        if stop:
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
