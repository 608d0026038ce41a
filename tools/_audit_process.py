"""What the audit logs of one process share: the set of open logs, flushed at exit (their
writer threads are daemons) and reset in a forked child; and waking a coroutine on its own
event loop from a writer thread."""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import weakref
from typing import NamedTuple, Protocol

__all__ = ["LoopWaiter", "OpenLog", "forget", "register", "release"]

_log = logging.getLogger("airlock.audit")


class OpenLog(Protocol):
    """What the process-wide hooks need of an audit log."""

    def flush(self) -> None: ...
    def _close_sinks(self) -> None: ...
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
    for log in list(_OPEN):
        try:
            log.flush()
        except Exception:
            _log.exception("audit events could not be stored at exit")
        log._close_sinks()
