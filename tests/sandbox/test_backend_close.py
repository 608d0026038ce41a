"""DockerBackend.close() ends everything in a bounded time, whatever is in progress.

Against the real engine: runs still starting a cold container when close() comes, a start
cancelled twice, a kept sandbox's limit hit on an engine slow to remove containers, and
close() itself with removals that the engine holds for longer than close may wait. The slow
engine is a proxy holding every ``DELETE`` (:mod:`tests.sandbox.slow_engine`). Bounds are
generous: the machine running the tests is small and shared.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from airlock.policies import SandboxProfile
from airlock.sandbox import DockerBackend, SandboxClosed
from tests.bridge.records import ALICE
from tests.conftest import DATA_IMAGE, IMAGE, require_docker
from tests.sandbox.slow_engine import left_containers, slow_removals

pytestmark = [pytest.mark.docker, pytest.mark.anyio]

_CLOSE_BOUND_S = 10.0
"""close()'s documented worst case (two waits of five seconds), a stalled engine included."""
_MARGIN_S = 3.0
_GRACE_S = 5.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def _launching(backend: DockerBackend, before: set[str]) -> None:
    """Until the run's start has made its socket directory: the engine creates it now."""
    root = backend._socket_root
    assert root is not None
    async with asyncio.timeout(20):
        while not {entry.name for entry in root.iterdir()} - before:
            await asyncio.sleep(0.002)


@pytest.mark.parametrize(
    "image", [pytest.param("base", id="launching"), pytest.param("data", id="checking-the-image")]
)
async def test_close_ends_a_run_still_starting_its_container(image: str) -> None:
    require_docker()
    require_docker(DATA_IMAGE)
    backend = DockerBackend(image=IMAGE, data_image=DATA_IMAGE, profile=SandboxProfile(timeout_s=5))
    await backend.start()
    await backend.run("1")  # the socket root exists: a start under a deleted one must not fail
    assert backend._socket_root is not None
    before = {entry.name for entry in backend._socket_root.iterdir()}
    run = asyncio.create_task(backend.run("1", profile=SandboxProfile(timeout_s=5, image=image)))
    if image == "base":
        await _launching(backend, before)
    else:
        await asyncio.sleep(0)  # the run asks the engine for the data image now
    began = time.monotonic()
    await backend.close()
    closed = time.monotonic() - began
    with pytest.raises(SandboxClosed):
        await asyncio.wait_for(run, 30)
    returned = time.monotonic() - began
    assert closed < _CLOSE_BOUND_S + _MARGIN_S
    assert returned < _CLOSE_BOUND_S + _MARGIN_S, f"the run returned {returned:.1f} s after close"
    assert await left_containers(backend._owner, within=10) == []


async def test_a_start_cancelled_twice_leaves_no_container() -> None:
    # Nested timeouts, or a task group tearing down, cancel a run twice in a row: the second
    # cancellation must not lose the container the engine is creating.
    require_docker()
    async with DockerBackend(image=IMAGE, profile=SandboxProfile(timeout_s=10)) as backend:
        for delay in (0.005, 0.01, 0.02, 0.04):
            run = asyncio.create_task(backend.run("1"))
            await asyncio.sleep(delay)
            run.cancel()
            await asyncio.sleep(0.001)
            run.cancel()
            with pytest.raises(asyncio.CancelledError):
                await run
            left = await left_containers(backend._owner, within=15)
            assert left == [], f"cancelled twice after {delay} s: {left} left while open"


async def test_a_kept_limit_does_not_wait_for_a_slow_removal() -> None:
    require_docker()
    with slow_removals(12.0) as client:
        profile = SandboxProfile(timeout_s=2)
        backend = DockerBackend(image=IMAGE, profile=profile, client=client)
        await backend.start()
        try:
            kept = backend.keep(ALICE)
            assert (await kept.run("1")).status == "ok"
            began = time.monotonic()
            result = await kept.run("x = 0\nwhile True:\n    x += 1")
            took = time.monotonic() - began
            assert (result.status, result.limit) == ("limit_exceeded", "timeout")
            assert took < profile.timeout_s + _GRACE_S + _MARGIN_S, f"returned after {took:.1f} s"
            assert not kept.alive
        finally:
            began = time.monotonic()
            await backend.close()
            closed = time.monotonic() - began
        assert closed < _CLOSE_BOUND_S + _MARGIN_S, f"close() took {closed:.1f} s"
        assert await left_containers(backend._owner, within=30) == []


async def test_close_is_bounded_when_the_engine_stalls_removals() -> None:
    require_docker()
    with slow_removals(20.0) as client:
        backend = DockerBackend(
            image=IMAGE, profile=SandboxProfile(timeout_s=2), pool_size=1, client=client
        )
        await backend.start()
        await backend.pool.wait_ready(1)
        began = time.monotonic()
        await backend.close()
        closed = time.monotonic() - began
        assert closed < _CLOSE_BOUND_S + _MARGIN_S, f"close() took {closed:.1f} s"
        # The removals close() gave up waiting for still go through.
        assert await left_containers(backend._owner, within=30) == []
