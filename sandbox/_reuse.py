"""One container per principal for its runs, each run in a fresh process (``reuse=True``).

A warm pool saves a run the wait for ``docker run``, but every run still costs the engine a
container start and a removal: with many runs, that is the limit. Reusing a container across
the runs of one principal (never two: it belongs to one, and a run of another principal is
refused) saves both, and gives up nothing of what a run starts from but counters the
container keeps: each run is a kept sandbox's program in ``clean`` mode, a fresh process with
an empty ``/tmp`` and no names kept, once every process of the previous run is gone. The
container's pid counter, ``/tmp``'s inode numbers and its runner's accounting of the
processes it reaped (``/proc/1/stat``) go on from one run to the next (nothing
unprivileged resets them), so a run can read a few numbers an earlier run of the same
principal set: where that matters, do not reuse. A principal's runs take turns in its
container; one that would have to wait for another runs in a fresh container instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

from airlock.bridge import ToolSession
from airlock.policies import Principal, SandboxProfile
from airlock.sandbox._kept import KeptSandbox
from airlock.sandbox._result import RunResult

__all__ = ["PrincipalContainers"]


class PrincipalContainers:
    """A clean kept sandbox per principal (by user and tenant), made on first use. At most
    ``limit`` are held once their runs end: a new principal, and the end of every run, send
    the least recently used idle ones away (in the background). While every held one runs
    a program, a new principal is given one more for a while."""

    def __init__(self, make: Callable[[Principal], KeptSandbox], *, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"reuse_max must be at least 1, not {limit!r}")
        self._make = make
        self._limit = limit
        self._held: dict[tuple[str, str], KeptSandbox] = {}
        self._closing: set[asyncio.Task[None]] = set()

    def __len__(self) -> int:
        return len(self._held)

    async def run(
        self,
        program: str,
        *,
        profile: SandboxProfile,
        tools: ToolSession,
        artifacts: Path | None,
        fresh: Callable[[], Awaitable[RunResult]],
    ) -> RunResult:
        """Run ``program`` in the container of ``tools``' principal, or by ``fresh()`` (in
        a container of its own) when that one is running another of its programs."""
        owner = tools.principal
        key = (owner.user_id, owner.tenant_id)
        try:
            held = self._held.get(key)
            if held is not None and held.busy:
                return await fresh()
            if held is None:
                self._trim(self._limit - 1)
                held = self._held[key] = self._make(owner)
            return await held.run(program, profile=profile, tools=tools, artifacts=artifacts)
        finally:
            # The extra ones a burst was given go once it is over, not at the next new
            # principal's: returning principals would keep every one of them.
            self._trim(self._limit)

    def _trim(self, keep: int) -> None:
        """Send idle ones away, least recently used first, until ``keep`` are held."""
        idle = sorted((held.last_used, key) for key, held in self._held.items() if not held.busy)
        for _, key in idle[: max(len(self._held) - keep, 0)]:
            task = asyncio.create_task(self._held.pop(key).close())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        """Remove every principal's container (and wait for evictions in progress)."""
        held, self._held = list(self._held.values()), {}
        await asyncio.gather(*(h.close() for h in held), *self._closing, return_exceptions=True)
