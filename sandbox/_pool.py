"""A pool of warm containers, so a run does not wait for ``docker run``.

A container leaves the pool for exactly one run and is destroyed after it. The pool refills
in the background, starting at most :data:`_PARALLEL_STARTS` containers at a time so that
refilling does not starve the runs in progress on a small machine. A start that fails
retryably is tried again after :data:`_RETRY_DELAY_S`; one that fails for good (the error is
not ``retryable``: the backend is closed, the socket path is too long, the image is gone)
stops the pool, because every later start would fail the same way: runs then start their own
containers and report the error themselves. Closing does not wait for starts in progress: it
cancels them (a start removes what it created when cancelled).

A container the pool starts warms up before it is ready, unless runs have found the pool empty
within :data:`DEMAND_S`: its container is then taken as soon as it is ready, and a warm-up
(about 37 ms of CPU, in the base image) would only compete with the runs in flight for a
processor (``bench/throughput.py``: with it, a new principal per run was slower with a pool
of 2 than with none). Such a container warms up once it has waited idle for a second
(``airlock_warm_up``), so the runs after the burst find it warm.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable
from typing import Final, Protocol

from airlock.sandbox._container import SandboxContainer
from airlock.sandbox._errors import SandboxClosed, SandboxError
from airlock.sandbox._inputs import InputRefused

__all__ = ["WarmPool"]

_log = logging.getLogger(__name__)
_PARALLEL_STARTS: Final = 2
_RETRY_DELAY_S: Final = 1.0
_CLOSE_WAIT_S: Final = 5.0
"""How long :meth:`WarmPool.close` waits for its removals and cancelled starts."""
DEMAND_S: Final = 2.0
"""How long after a run found the pool empty its starts do not warm up."""


class StartContainer(Protocol):
    """Starts a container for the pool: ``warm``, warmed up before it is ready; else once it
    has waited idle (see the module)."""

    def __call__(self, *, warm: bool) -> Awaitable[SandboxContainer]: ...


class WarmPool:
    """Keeps ``size`` containers started, connected and, unless runs find it empty (see the
    module), warm."""

    def __init__(self, start: StartContainer, *, size: int) -> None:
        self._start = start
        self.size = size
        self._found_empty_at = float("-inf")
        """When a run last found no container ready (monotonic)."""
        self._ready: deque[SandboxContainer] = deque()
        self._starting = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._changed = asyncio.Condition()
        self._closed = False
        self.stopped_by: SandboxError | None = None
        """The failure that stopped the pool for good, if one did (see the module)."""

    @property
    def ready(self) -> int:
        """Containers waiting for a run now."""
        return len(self._ready)

    def fill(self) -> None:
        """Start containers in the background until the pool is, or will be, full."""
        while (
            not self._closed
            and self.stopped_by is None
            and self._starting < _PARALLEL_STARTS
            and len(self._ready) + self._starting < self.size
        ):
            self._starting += 1
            task = asyncio.create_task(self._add_one())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _add_one(self) -> None:
        try:
            container = await self._start(warm=time.monotonic() - self._found_empty_at >= DEMAND_S)
        except InputRefused as exc:
            # An input the pool's containers mount changed on the host (made unreadable, a
            # file system mounted inside it): runs are refused the same until it is mended.
            container = None
            _log.warning("warm pool could not start a container: %s", exc)
            await asyncio.sleep(_RETRY_DELAY_S)
        except SandboxError as exc:
            container = None
            if exc.retryable:
                _log.warning("warm pool could not start a container: %s", exc)
                await asyncio.sleep(_RETRY_DELAY_S)
            else:
                if self.stopped_by is None and not isinstance(exc, SandboxClosed):
                    _log.error("warm pool stopped; runs start their own containers: %s", exc)
                self.stopped_by = exc
        finally:
            self._starting -= 1
        async with self._changed:
            if container is not None:
                if self._closed:
                    await container.destroy()
                else:
                    self._ready.append(container)
            self._changed.notify_all()
        self.fill()

    def take(self) -> SandboxContainer | None:
        """A warm container for one run, or ``None`` when none is ready; refills either way."""
        container = None
        while self._ready and container is None:
            candidate = self._ready.popleft()
            if candidate.alive:
                container = candidate
            else:
                self._discard(candidate)
        if container is None:
            self._found_empty_at = time.monotonic()
        self.fill()
        return container

    def _discard(self, container: SandboxContainer) -> None:
        task = asyncio.create_task(container.destroy())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def wait_ready(self, count: int, *, timeout: float = 60.0) -> None:
        """Wait until at least ``count`` containers are ready (for benchmarks and tests).

        Raises:
            TimeoutError: when the pool did not reach ``count`` in time.
            SandboxError: the failure that stopped the pool (:attr:`stopped_by`).
        """
        count = min(count, self.size)
        self.fill()
        async with asyncio.timeout(timeout), self._changed:
            await self._changed.wait_for(
                lambda: len(self._ready) >= count or self.stopped_by is not None
            )
        if len(self._ready) < count and self.stopped_by is not None:
            raise self.stopped_by

    async def close(self) -> None:
        """Stop refilling, cancel the starts in progress and destroy every pooled container,
        all at once and for at most :data:`_CLOSE_WAIT_S`: a removal the engine has not
        answered by then goes on in the background.

        Raises:
            SandboxError: the engine did not remove a pooled container.
        """
        self._closed = True
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        ready = list(self._ready)
        self._ready.clear()
        removals = [asyncio.ensure_future(container.destroy()) for container in ready]
        for removal in removals:  # held until they end, should close give up on them
            self._tasks.add(removal)
            removal.add_done_callback(self._tasks.discard)
        if tasks or removals:
            _, stuck = await asyncio.wait([*tasks, *removals], timeout=_CLOSE_WAIT_S)
            if stuck:
                _log.warning("%d warm pool starts and removals did not end in time", len(stuck))
        for removal in removals:
            failure = removal.exception() if removal.done() and not removal.cancelled() else None
            if failure is not None:
                raise failure
