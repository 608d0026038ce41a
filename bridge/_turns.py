"""The places of one run's calls among those the host executes at once (``max_concurrency``):
a call takes one before its handler runs and gives it back when the handler has ended, never
sooner, whatever the program cancels; the others wait for their turn, in order of arrival.
A sync handler's thread that its call gave up on at its deadline (a thread cannot be stopped)
keeps the call's place until it ends (:meth:`Turns.leave_after`)."""

from __future__ import annotations

import asyncio
from collections import deque

from airlock.tools import ToolError, ToolTimeoutError

__all__ = ["Turns"]


class Turns:
    """At most ``limit`` calls run at once. A call checks ``running < limit`` (else awaits
    :meth:`wait`), adds one to ``running``, and calls :meth:`leave` once its handler ended;
    written out so, a call that runs at once costs no coroutine."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.running = 0
        """Calls executing (at most ``limit``)."""
        self._waiting: deque[asyncio.Future[None]] = deque()

    async def wait(self) -> None:
        """Wait until fewer than ``limit`` calls run (in order of arrival)."""
        while self.running >= self.limit:
            turn = asyncio.get_running_loop().create_future()
            self._waiting.append(turn)
            try:
                await turn
            except asyncio.CancelledError:
                if turn.done() and not turn.cancelled():
                    self.pass_on()  # pass the turn it was given on
                raise

    def leave(self) -> None:
        """A call's handler ended: its place goes to the next call waiting."""
        self.running -= 1
        self.pass_on()

    def leave_when(self, running: asyncio.Future[None] | None) -> None:
        """A call ended: :meth:`leave` once its handler has too, that is at once, or when
        ``running`` (a sync handler's thread the call gave up on) is done."""
        if running is None or running.done():
            self.leave()
        else:
            running.add_done_callback(lambda _: self.leave())

    def leave_after(self, failure: BaseException | None) -> None:
        """A call ended, with ``failure`` if it failed: :meth:`leave_when` its handler has.
        (Each read of ``handler_running`` is a future of the reader's own: one that another
        reader cancels, waiting on it with a timeout, gives no place away.)"""
        if isinstance(failure, ToolTimeoutError):
            self.leave_when(failure.handler_running)
        elif isinstance(failure, ToolError) and isinstance(failure.__cause__, ToolTimeoutError):
            self.leave_when(failure.__cause__.handler_running)  # denied as it ran on
        else:
            self.leave()

    def pass_on(self) -> None:
        """Give the next call waiting its turn (a call given one that will not run passes
        it on so)."""
        while self._waiting:
            turn = self._waiting.popleft()
            if not turn.done():
                turn.set_result(None)
                return
