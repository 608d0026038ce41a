"""Whose turn it is to settle a session's paused writes: one settle at a time (two at once
would report a write twice), and a caller with a deadline waits for its turn until then at
most (a settle may hold the turn for as long as its sends take, and a call must answer
within its budget)."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import AsyncIterator

import anyio

__all__ = ["SettleTurn"]


class SettleTurn:
    """The settling lock of one session."""

    def __init__(self) -> None:
        self._lock = anyio.Lock()

    @contextlib.asynccontextmanager
    async def within(self, until: float | None) -> AsyncIterator[bool]:
        """Hold the turn for the block, waiting for it until ``until`` (on the
        :func:`time.monotonic` clock; ``None``: as long as it takes); whether it is held."""
        held = False
        try:
            self._lock.acquire_nowait()  # free: taken even when the time is up already
            held = True
        except anyio.WouldBlock:
            with anyio.move_on_after(math.inf if until is None else until - time.monotonic()):
                await self._lock.acquire()
                held = True
        try:
            yield held
        finally:
            if held:
                self._lock.release()
