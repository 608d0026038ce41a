"""A run's wait for a container it starts, bounded by the run's deadline.

The engine's own waits are long (the client's HTTP timeout for the create and for the start,
then the runner's hello), and a slow or wedged engine may use all of them: a run waiting for
its container waits at most its profile's ``timeout_s``, then raises :class:`StartTimedOut`.
The start goes on off the run's path, and whatever container it makes is handed to
``discard`` (removed in the background; :meth:`DockerBackend.close` ends a start still in
progress). The start is not cancelled: a cancellation that came just as it finished would
lose the container it made, still running.

Once the engine has kept a run waiting that long, it is asked for fewer starts: while any
start a run gave up on is still in progress, a run asks for one more only while fewer than
:data:`MOST_ABANDONED` starts are given up on or waited for, on one backend. Otherwise it waits
(within its deadline) for one of them to end, and raises :class:`StartTimedOut` if none does
in time to leave a start :data:`LEAST_LEFT_S`, having asked the engine for nothing. Runs
retried for minutes against a stalled engine would otherwise queue a start each, and every
one of them would make (and then remove) a container once the engine came back. A burst of
runs that all began waiting before the first gave up may leave more than that in progress,
once. :meth:`StartWaits.close` (the backend's ``close``) ends every wait at once with
:class:`SandboxClosed`.

The wait counts against the program's own deadline too (``SandboxContainer.run``'s
``began``): the program gets what is left of ``timeout_s``, so the whole run, start and
program, ends by the one deadline the caller gave it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from typing import Any, Final

from airlock.sandbox._container import LEAST_LEFT_S, SandboxContainer
from airlock.sandbox._errors import SandboxClosed, SandboxError, StartTimedOut

__all__ = ["MOST_ABANDONED", "StartWaits"]

_log = logging.getLogger(__name__)
MOST_ABANDONED: Final = 8
"""Starts given up on or waited for, at most, before another is asked of an engine that has
not finished a start a run gave up on."""


class StartWaits:
    """Runs' waits for the containers they start, on one backend: the starts the runs gave up
    on are held until they end (the loop keeps weak references only), each container they
    make handed to ``discard``."""

    def __init__(self, discard: Callable[[SandboxContainer], None]) -> None:
        self._discard = discard
        self._abandoned: set[asyncio.Task[SandboxContainer]] = set()
        self._waited = 0
        """Starts a run waits for now."""
        self._woken: list[asyncio.Future[None]] = []
        """Runs waiting for room (see the module) or for their start: woken whenever a start
        ends, and by :meth:`close`."""
        self._closed = False

    def close(self) -> None:
        """End every wait now, and refuse later ones (:class:`SandboxClosed`); a start in
        progress goes on, its container handed to ``discard``."""
        self._closed = True
        self._wake()

    async def wait(
        self, start: Coroutine[Any, Any, SandboxContainer], *, timeout_s: float
    ) -> SandboxContainer:
        """The container ``start`` makes, if it makes it within ``timeout_s`` seconds.

        A caller cancelled meanwhile leaves the start to ``discard`` too.

        Raises:
            StartTimedOut: ``start`` had not finished within ``timeout_s``; or, without
                asking the engine, no room was made for it in time (see the module;
                ``start`` is closed unstarted).
            SandboxClosed: :meth:`close` came first.
            SandboxError: ``start`` failed (as it raised).
        """
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout_s
        try:
            await self._room(end, timeout_s)
        except BaseException:
            start.close()  # (never begun: the engine was asked for nothing)
            raise
        self._waited += 1
        try:
            task = asyncio.ensure_future(start)
            try:
                while not task.done() and not self._closed and loop.time() < end:
                    await self._woken_or(end, task)
            except asyncio.CancelledError:
                self._abandon(task)
                raise
        finally:
            self._waited -= 1
            self._wake()
        if not task.done() or (self._closed and not task.cancelled() and not task.exception()):
            # (a container made as close() came is nobody's: close() did not see it)
            self._abandon(task)
            raise SandboxClosed() if self._closed else StartTimedOut(timeout_s)
        return task.result()

    async def _room(self, end: float, timeout_s: float) -> None:
        """Return once another start may be asked of the engine with :data:`LEAST_LEFT_S` of
        the run's time left, by ``end`` (loop time)."""
        loop = asyncio.get_running_loop()
        held_back = False
        while self._abandoned and len(self._abandoned) + self._waited >= MOST_ABANDONED:
            if self._closed or end - loop.time() < LEAST_LEFT_S:
                break
            held_back = True
            await self._woken_or(end)
        if self._closed:
            raise SandboxClosed()
        full = self._abandoned and len(self._abandoned) + self._waited >= MOST_ABANDONED
        if full or (held_back and end - loop.time() < LEAST_LEFT_S):
            behind, waited = len(self._abandoned), self._waited
            raise StartTimedOut(timeout_s, held_back=True, behind=behind, waited=waited)

    async def _woken_or(self, end: float, task: asyncio.Future[Any] | None = None) -> None:
        """Wait until a start ends, :meth:`close`, ``task`` is done, or ``end`` (loop time)."""
        loop = asyncio.get_running_loop()
        woken = loop.create_future()
        self._woken.append(woken)
        try:
            await asyncio.wait(
                {woken} if task is None else {woken, task},
                timeout=max(end - loop.time(), 0.0),
                return_when=asyncio.FIRST_COMPLETED,
            )
        finally:
            with contextlib.suppress(ValueError):
                self._woken.remove(woken)

    def _wake(self) -> None:
        woken, self._woken = self._woken, []
        for future in woken:
            if not future.done():
                future.set_result(None)

    def _abandon(self, task: asyncio.Task[SandboxContainer]) -> None:
        def ended(task: asyncio.Task[SandboxContainer]) -> None:
            self._abandoned.discard(task)
            self._wake()
            if task.cancelled():
                return
            failure = task.exception()
            if failure is None:
                self._discard(task.result())
            elif not isinstance(failure, SandboxError):
                _log.warning("a sandbox start no run waited for failed: %r", failure)

        self._abandoned.add(task)
        task.add_done_callback(ended)
