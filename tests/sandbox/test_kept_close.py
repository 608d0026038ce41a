"""Closing a kept sandbox leaves no container behind, whatever is in progress.

``close()`` removes the container it finds and waits a few seconds for the program in flight.
A container still starting then (a start may take up to 30 s on a loaded machine) is not
there to remove: its run removes it once the start ends and raises :class:`SandboxClosed`
instead of running the program. A
container that outlives close's wait (a program that has not ended, a removal that failed) is
removed when its run ends, and no idle timer keeps it.

The first tests stand in for the container (no Docker: the order of events is the point); the
last starts a real one, slowly.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, cast

import docker
import pytest

from airlock.policies import SandboxProfile
from airlock.sandbox import DockerBackend, RunResult, SandboxClosed, SandboxFailure
from airlock.sandbox import _kept as kept_module
from airlock.sandbox._container import SandboxContainer
from airlock.sandbox._hardening import container_settings
from airlock.sandbox._kept import KeptSandbox
from airlock.sandbox._owner import labelled_containers
from airlock.sandbox.testing import ok_result
from tests.bridge.records import ALICE
from tests.conftest import IMAGE, require_docker


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class _Container:
    """A kept container whose programs end once ``ends`` is set (at once without one); its
    first ``failing_removals`` removals fail as the engine's would."""

    id = "stand-in"

    def __init__(self, *, ends: asyncio.Event | None = None, failing_removals: int = 0) -> None:
        self.alive = True
        self.programs = 0
        self.removals = 0
        self._ends = ends
        self._failing = failing_removals

    async def run(self, program: str, **_: Any) -> RunResult:
        self.programs += 1
        if self._ends is not None:
            await self._ends.wait()
        return ok_result("ran")

    async def destroy(self) -> None:
        self.removals += 1
        if self.removals <= self._failing:
            raise SandboxFailure("the Docker engine refused: device busy")
        self.alive = False


def _kept(
    container: object,
    *,
    started: asyncio.Event | None = None,
    backend_closed: Callable[[], bool] = lambda: False,
) -> KeptSandbox:
    """A kept sandbox whose container (a stand-in) starts once ``started`` is set (at once
    without one), of a backend that ``backend_closed()`` says is closed."""

    async def start(profile: SandboxProfile) -> SandboxContainer:
        if started is not None:
            await started.wait()
        return cast(SandboxContainer, container)

    return KeptSandbox(
        start,
        owner=ALICE,
        profile=SandboxProfile(timeout_s=10),
        idle_timeout=300,
        max_program_bytes=1024,
        container_settings=container_settings,
        backend_closed=backend_closed,
    )


@pytest.mark.anyio
async def test_close_during_the_start_removes_the_container_and_runs_nothing() -> None:
    container, started = _Container(), asyncio.Event()
    kept = _kept(container, started=started)
    run = asyncio.create_task(kept.run("'after close'"))
    await asyncio.sleep(0.05)  # starting now, until the test lets the start end
    closing = asyncio.create_task(kept.close())
    await asyncio.sleep(0.05)  # close() waits for the run in progress
    started.set()
    await closing
    # The run began before the close, which cut it off: not a caller's mistake.
    with pytest.raises(SandboxClosed, match="kept sandbox was closed while its container"):
        await run
    assert container.programs == 0
    assert (container.removals, container.alive) == (1, False)
    assert (kept._container, kept._timer, kept.alive) == (None, None, False)


@pytest.mark.anyio
async def test_a_container_that_outlives_close_goes_when_its_run_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # close() gives up on the program in flight (its wait is short here) and its removal
    # fails: the run, ending later, must remove the container and arm no idle timer.
    monkeypatch.setattr(kept_module, "_CLOSE_WAIT_S", 0.2)
    ends = asyncio.Event()
    container = _Container(ends=ends, failing_removals=1)
    kept = _kept(container)
    run = asyncio.create_task(kept.run("'in flight'"))
    await asyncio.sleep(0.05)
    await kept.close()
    assert not run.done()
    ends.set()
    result = await run
    assert result.status == "ok"  # it ran before close; its result stands
    assert (container.removals, container.alive) == (2, False)
    assert (kept._container, kept._timer) == (None, None)


@pytest.mark.docker
@pytest.mark.anyio
async def test_close_during_a_slow_start_leaves_no_container_running(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    require_docker()
    monkeypatch.setattr(kept_module, "_CLOSE_WAIT_S", 0.5)  # close gives up before the start ends
    backend = DockerBackend(image=IMAGE, profile=SandboxProfile(language_mode="full"))
    await backend.start()
    start = backend._start_container

    async def slow_start(*args: Any, **kwargs: Any) -> SandboxContainer:
        await asyncio.sleep(2.0)  # an engine on a loaded machine
        return await start(*args, **kwargs)

    monkeypatch.setattr(backend, "_start_container", slow_start)
    client = docker.from_env()
    try:
        kept = backend.keep(ALICE)
        run = asyncio.create_task(kept.run("'ran after close'"))
        await asyncio.sleep(0.2)
        began = time.monotonic()
        await kept.close()
        assert time.monotonic() - began < 2.0
        with pytest.raises(SandboxClosed, match="closed"):
            await run
        # Removed off the run's path (the run does not wait for the engine): soon, not at once.
        until = time.monotonic() + 5.0
        while True:
            running = [
                entry["Id"][:12]
                for entry in await asyncio.to_thread(
                    labelled_containers, client, owner=backend._owner
                )
                if entry["State"] == "running"
            ]
            if not running or time.monotonic() >= until:
                break
            await asyncio.sleep(0.2)
        assert running == [], "the container started for a closed kept sandbox was removed"
        assert kept._timer is None
    finally:
        await backend.close()
