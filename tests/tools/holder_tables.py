"""The process-wide tables of who holds which preview (:mod:`airlock.tools._preview_holders`),
emptied for one test and given back as they were after it; and a lock for those tables that an
interrupt (``KeyboardInterrupt``) lands on once."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Literal

from airlock.tools import _preview_holders as holders

__all__ = ["InterruptingLock", "empty_holder_tables"]


@contextlib.contextmanager
def empty_holder_tables() -> Iterator[None]:
    tables = (holders._held, holders._pending, holders._due, holders._trying)
    kept = [(table, table.copy()) for table in tables]
    for table, _ in kept:
        table.clear()
    try:
        yield
    finally:
        for table, before in kept:
            table.clear()
            table.update(before)  # type: ignore[attr-defined]


class InterruptingLock:
    """The holders' lock, on which ``KeyboardInterrupt`` lands once: as it is let go while a
    due denial is claimed (``at="claimed"``: before its try), or as it is next taken once
    :meth:`arm` was called (``at="tried"``: by a try that succeeded)."""

    def __init__(self, at: Literal["claimed", "tried"]) -> None:
        self._lock = threading.RLock()
        self.at = at
        self.armed = at == "claimed"
        self.landed = False

    def arm(self) -> None:
        if self.at == "tried" and not self.landed:
            self.armed = True

    def __enter__(self) -> None:
        if self.armed and self.at == "tried":
            self._land()  # (as it waits for the lock)
        self._lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self._lock.release()
        if self.armed and self.at == "claimed" and holders._trying and not any(exc):
            self._land()

    def _land(self) -> None:
        self.armed, self.landed = False, True
        raise KeyboardInterrupt
