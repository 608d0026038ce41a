"""A lock that a fork waits for, and that a forked child gets free.

A thread that holds an ordinary lock when another thread calls ``os.fork`` leaves it held in
the child, where no thread will ever release it. :class:`ForkLock` is for locks that guard
something a child must find settled, such as an SQLite transaction: SQLite's in-process
state, copied into the child, would show the transaction's locks held by a connection of the
child's own, so every write of the child would wait out its busy timeout, again and again.
A fork first waits until no thread holds any open :class:`ForkLock` (a few milliseconds for a
transaction; at most :data:`FORK_WAIT_S` each, since the forking thread may hold one
itself), and the child's copies start free.
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from types import TracebackType

__all__ = ["FORK_WAIT_S", "ForkLock"]

_log = logging.getLogger("airlock.ledger")
FORK_WAIT_S = 5.0
"""How long a fork waits for one lock before it goes ahead without it."""


class ForkLock:
    """A non-reentrant lock (``with lock: ...``) that a fork waits for; ``label`` names
    what it guards in the warning logged when a fork stops waiting."""

    __slots__ = ("__weakref__", "_lock", "label")

    def __init__(self, label: str) -> None:
        self._lock = threading.Lock()
        self.label = label
        _OPEN.add(self)

    def __enter__(self) -> None:
        self._lock.acquire()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._lock.release()


_OPEN: weakref.WeakSet[ForkLock] = weakref.WeakSet()
_HELD: list[ForkLock] = []


def _before_fork() -> None:
    for lock in list(_OPEN):
        if lock._lock.acquire(timeout=FORK_WAIT_S):
            _HELD.append(lock)
        else:
            _log.warning("%s was still busy after %.0f s at a fork", lock.label, FORK_WAIT_S)


def _after_fork_in_parent() -> None:
    while _HELD:
        _HELD.pop()._lock.release()


def _after_fork_in_child() -> None:
    _HELD.clear()
    for lock in list(_OPEN):  # (one the parent still held when the wait ran out is free too)
        lock._lock = threading.Lock()


os.register_at_fork(
    before=_before_fork,
    after_in_parent=_after_fork_in_parent,
    after_in_child=_after_fork_in_child,
)
