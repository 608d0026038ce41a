"""A run's wait for a container it starts, bounded by the run's deadline.

The engine's own waits are long (the client's HTTP timeout for the create and for the start,
then the runner's hello), and a slow or wedged engine may use all of them: a run waiting for
its container waits at most its profile's ``timeout_s``, then raises :class:`StartTimedOut`.
The start goes on off the run's path, and whatever container it makes is handed to
``discard`` (removed in the background; :meth:`DockerBackend.close` ends a start still in
progress). The start is not cancelled: a cancellation that came just as it finished would
lose the container it made, still running.

Those starts are bounded: while :data:`MOST_ABANDONED` of them are still in progress on one
backend's engine, a run that needs a container of its own raises :class:`StartTimedOut` at
once rather than ask the engine for one more. Runs retried for minutes against a stalled
engine would otherwise queue a start each, and every one of them would make (and then remove)
a container once the engine came back.

The wait counts against the program's own deadline too (``SandboxContainer.run``'s
``began``): the program gets what is left of ``timeout_s``, so the whole run, start and
program, ends by the one deadline the caller gave it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any, Final

from airlock.sandbox._container import SandboxContainer
from airlock.sandbox._errors import SandboxError, StartTimedOut

__all__ = ["MOST_ABANDONED", "StartWaits"]

_log = logging.getLogger(__name__)
MOST_ABANDONED: Final = 8
"""Starts no run waits for any more that may be in progress on one backend's engine at once."""


class StartWaits:
    """Runs' waits for the containers they start, on one backend: the starts the runs gave up
    on are held until they end (the loop keeps weak references only), each container they
    make handed to ``discard``."""

    def __init__(self, discard: Callable[[SandboxContainer], None]) -> None:
        self._discard = discard
        self._abandoned: set[asyncio.Task[SandboxContainer]] = set()

    async def wait(
        self, start: Coroutine[Any, Any, SandboxContainer], *, timeout_s: float
    ) -> SandboxContainer:
        """The container ``start`` makes, if it makes it within ``timeout_s`` seconds.

        A caller cancelled meanwhile leaves the start to ``discard`` too.

        Raises:
            StartTimedOut: ``start`` had not finished within ``timeout_s``; or, without
                asking the engine, :data:`MOST_ABANDONED` starts no run waits for are still
                in progress (``start`` is closed unstarted).
            SandboxError: ``start`` failed (as it raised).
        """
        if len(self._abandoned) >= MOST_ABANDONED:
            start.close()
            raise StartTimedOut(timeout_s, behind=len(self._abandoned))
        task = asyncio.ensure_future(start)
        try:
            done, _ = await asyncio.wait({task}, timeout=timeout_s)
        except asyncio.CancelledError:
            self._abandon(task)
            raise
        if task not in done:
            self._abandon(task)
            raise StartTimedOut(timeout_s)
        return task.result()

    def _abandon(self, task: asyncio.Task[SandboxContainer]) -> None:
        def ended(task: asyncio.Task[SandboxContainer]) -> None:
            self._abandoned.discard(task)
            if task.cancelled():
                return
            failure = task.exception()
            if failure is None:
                self._discard(task.result())
            elif not isinstance(failure, SandboxError):
                _log.warning("a sandbox start no run waited for failed: %r", failure)

        self._abandoned.add(task)
        task.add_done_callback(ended)
