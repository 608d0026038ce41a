"""A run's wait for a container it starts, bounded by the run's deadline.

The engine's own waits are long (the client's HTTP timeout for the create and for the start,
then the runner's hello), and a slow or wedged engine may use all of them: a run waiting for
its container waits at most its profile's ``timeout_s``, then raises :class:`StartTimedOut`.
The start goes on off the run's path, and whatever container it makes is handed to
``discard`` (removed in the background; :meth:`DockerBackend.close` ends a start still in
progress). The start is not cancelled: a cancellation that came just as it finished would
lose the container it made, still running.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from airlock.sandbox._container import SandboxContainer
from airlock.sandbox._errors import SandboxError, StartTimedOut

__all__ = ["wait_for_start"]

_log = logging.getLogger(__name__)
_abandoned: set[asyncio.Task[SandboxContainer]] = set()
"""Starts no run waits for any more, held until they end (the loop keeps weak references)."""


async def wait_for_start(
    start: Coroutine[Any, Any, SandboxContainer],
    *,
    timeout_s: float,
    discard: Callable[[SandboxContainer], None],
) -> SandboxContainer:
    """The container ``start`` makes, if it makes it within ``timeout_s`` seconds.

    A caller cancelled meanwhile leaves the start to ``discard`` too.

    Raises:
        StartTimedOut: ``start`` had not finished within ``timeout_s``.
        SandboxError: ``start`` failed (as it raised).
    """
    task = asyncio.ensure_future(start)
    try:
        done, _ = await asyncio.wait({task}, timeout=timeout_s)
    except asyncio.CancelledError:
        _abandon(task, discard)
        raise
    if task not in done:
        _abandon(task, discard)
        raise StartTimedOut(timeout_s)
    return task.result()


def _abandon(
    task: asyncio.Task[SandboxContainer], discard: Callable[[SandboxContainer], None]
) -> None:
    def ended(task: asyncio.Task[SandboxContainer]) -> None:
        _abandoned.discard(task)
        if task.cancelled():
            return
        failure = task.exception()
        if failure is None:
            discard(task.result())
        elif not isinstance(failure, SandboxError):
            _log.warning("a sandbox start no run waited for failed: %r", failure)

    _abandoned.add(task)
    task.add_done_callback(ended)
