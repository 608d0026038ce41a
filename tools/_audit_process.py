"""What the audit logs of one process share: the set of open logs, flushed at exit (their
writer threads are daemons) and reset in a forked child; and waking a coroutine on its own
event loop from a writer thread.

The flush at exit is bounded (:data:`EXIT_FLUSH_S`): a store that no longer answers must not
keep the process from ending; what it did not take is logged as lost. The sinks then close
in what is left of it (:func:`close_sinks`): a collector that takes the connection and never
answers holds the exit no longer. A child that
``multiprocessing`` started ends with ``os._exit``, which runs no ``atexit`` function, so
there the flush is also a multiprocessing finalizer (:func:`arm_exit`). A process killed by a
signal runs neither: ``Pool.terminate()`` (what leaving ``with Pool(...)`` does) kills its
workers with SIGTERM, so a task should close its log, or the pool be closed and joined.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import sys
import threading
import time
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple, Protocol

if TYPE_CHECKING:
    from airlock.tools._audit import AuditSink

__all__ = [
    "EXIT_FLUSH_S",
    "LoopWaiter",
    "OpenLog",
    "arm_exit",
    "close_sinks",
    "forget",
    "register",
    "release",
]

_log = logging.getLogger("airlock.audit")
EXIT_FLUSH_S = 10.0
"""How long a process's exit waits, in all, for its audit logs to store what they hold and
their sinks to send it; how long closing one log waits for its sinks."""


class OpenLog(Protocol):
    """What the process-wide hooks need of an audit log."""

    def flush(self, *, timeout: float | None = None) -> None: ...
    @property
    def pending(self) -> int: ...
    def _close_sinks(self, timeout: float) -> None: ...
    def _after_fork(self) -> None: ...


class LoopWaiter(NamedTuple):
    """A coroutine waiting until the log stored its first ``target`` items."""

    target: int
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[None]


def release(waiters: list[LoopWaiter], exc: BaseException | None) -> None:
    """Wake ``waiters`` on their loops (with ``exc`` raised in them, if given); callable
    from any thread. One wake-up per loop settles all of that loop's waiters: each wake-up
    from another thread writes to the loop's self-pipe, and a group commit releases many
    waiters of one loop at once."""
    by_loop: dict[asyncio.AbstractEventLoop, list[asyncio.Future[None]]] = {}
    for waiter in waiters:
        by_loop.setdefault(waiter.loop, []).append(waiter.future)
    for loop, futures in by_loop.items():
        try:
            loop.call_soon_threadsafe(_settle, futures, exc)
        except RuntimeError:  # that loop is closed: nobody waits any more
            continue


def _settle(futures: list[asyncio.Future[None]], exc: BaseException | None) -> None:
    for future in futures:
        if future.done():  # the waiting task was cancelled
            continue
        if exc is None:
            future.set_result(None)
        else:
            future.set_exception(exc)


_OPEN: weakref.WeakSet[OpenLog] = weakref.WeakSet()


def register(log: OpenLog) -> None:
    """Flush ``log`` at exit and reset it in a forked child, while it is open."""
    _OPEN.add(log)


def forget(log: OpenLog) -> None:
    """``log`` was closed."""
    _OPEN.discard(log)


def _reset_in_child() -> None:
    for log in list(_OPEN):
        log._after_fork()


os.register_at_fork(after_in_child=_reset_in_child)


@atexit.register
def _flush_at_exit() -> None:
    # The writers are daemon threads: events recorded outside any awaited call (a script's
    # last calls) are stored before the interpreter stops them, then sinks send theirs.
    deadline = time.monotonic() + EXIT_FLUSH_S
    for log in list(_OPEN):
        try:
            log.flush(timeout=max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            _log.error(
                "%d audit events were lost at exit: the store took none of them in %.0f s",
                log.pending,
                EXIT_FLUSH_S,
            )
        except Exception:
            _log.exception("%d audit events could not be stored at exit", log.pending)
        log._close_sinks(max(0.0, deadline - time.monotonic()))


def close_sinks(sinks: Sequence[AuditSink], timeout: float) -> None:
    """Close ``sinks`` (each once, in order), waiting at most ``timeout`` seconds: they close
    on a daemon thread, left to finish without the caller (or to end with the process)
    once the time is up. A sink's close may wait for a collector, and the SDK's own bounds
    (30 s to join its exporting thread, a request's timeout) are not the caller's."""
    closer = threading.Thread(
        target=_close_each, args=(sinks,), name="airlock-audit-sinks", daemon=True
    )
    try:
        closer.start()
    except RuntimeError:  # the interpreter is ending and starts no thread (3.12.0, 3.12.1)
        _close_each(sinks)
        return
    closer.join(timeout)
    if closer.is_alive():
        _log.error(
            "audit sinks did not close in %.1f s: what they had not sent may be lost", timeout
        )


def _close_each(sinks: Sequence[AuditSink]) -> None:
    for sink in sinks:
        try:
            sink.close()
        except Exception:
            _log.exception("audit sink %r failed to close", sink)


_armed = 0
"""The process whose exit runs :func:`_flush_at_exit` as a multiprocessing finalizer."""


def arm_exit() -> None:
    """Flush the open logs when this process ends, also if ``multiprocessing`` started it
    (called when a writer starts: a child starts its own). Cheap after the first call."""
    global _armed
    util = sys.modules.get("multiprocessing.util")
    if _armed == os.getpid() or util is None:  # (no multiprocessing: no such child)
        return
    _armed = os.getpid()
    # A child's multiprocessing runs its finalizers on the way out; the registry is emptied
    # when the child starts, so this is called again in the child. In the parent, it runs
    # beside atexit's call: the second flush finds nothing to do.
    util.Finalize(None, _flush_at_exit, exitpriority=10)
