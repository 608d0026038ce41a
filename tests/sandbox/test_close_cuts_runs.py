"""A run cut off by ``close()`` returns by its own deadline and tells the truth about why.

``close()`` removes the container under a program in flight; the run then returns at once,
never waiting for the engine to answer that removal (nor a second one: each container is
removed once), and what it raises is :class:`SandboxClosed`, never an error that a retry
could mend. The first test stands in for the container (the order of events is the point);
the others run real ones, on an engine that holds every removal (:mod:`tests.sandbox.
slow_engine`) or at the moments close() most often cuts a run.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, cast

import pytest

from airlock.bridge import ToolSession
from airlock.policies import Grant, SandboxProfile
from airlock.sandbox import DockerBackend, RunResult, SandboxClosed
from airlock.sandbox import _kept as kept_module
from airlock.sandbox._container import SandboxContainer
from airlock.sandbox._hardening import container_settings
from airlock.sandbox._kept import KeptSandbox
from airlock.sandbox.testing import ok_result
from airlock.tools import Registry
from tests.bridge.records import ALICE
from tests.conftest import IMAGE, require_docker
from tests.sandbox.slow_engine import left_containers, slow_removals

_MARGIN_S = 2.0
"""Past a run's deadline, on a small shared machine."""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class _Container:
    """A kept container on an engine that never answers a removal: the removal ends the
    program at once (its links close), then waits forever."""

    id = "stand-in"

    def __init__(self) -> None:
        self.alive = True
        self.removals = 0
        self._links_closed = asyncio.Event()

    async def run(self, program: str, **_: Any) -> RunResult:
        await self._links_closed.wait()
        return ok_result("cut off")

    async def destroy(self) -> None:
        self.removals += 1
        self._links_closed.set()
        await asyncio.Event().wait()


@pytest.mark.anyio
async def test_a_kept_run_cut_off_by_close_does_not_wait_for_the_removal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(kept_module, "_CLOSE_WAIT_S", 0.2)
    container = _Container()

    async def start(profile: SandboxProfile) -> SandboxContainer:
        return cast(SandboxContainer, container)

    kept = KeptSandbox(
        start,
        owner=ALICE,
        profile=SandboxProfile(timeout_s=10),
        idle_timeout=300,
        max_program_bytes=1024,
        container_settings=container_settings,
    )
    run = asyncio.create_task(kept.run("'in flight'"))
    await asyncio.sleep(0.05)
    await kept.close()
    await kept.close()  # a reused container is closed by its owner and by the backend
    result = await asyncio.wait_for(run, 1.0)
    assert result.status == "ok"
    assert container.removals == 1
    assert (kept._container, kept._timer) == (None, None)


def _tools() -> ToolSession:
    return ToolSession(registry=Registry(), principal=ALICE, grant=Grant())


PATHS = ["fresh", "reused"]


@pytest.mark.docker
@pytest.mark.anyio
@pytest.mark.parametrize("path", PATHS)
async def test_a_run_cut_off_by_close_returns_by_its_deadline_when_removals_stall(
    path: str,
) -> None:
    require_docker()
    with slow_removals(15.0) as client:
        profile = SandboxProfile(language_mode="full", timeout_s=3)
        backend = DockerBackend(
            image=IMAGE, profile=profile, pool_size=1, reuse=True, client=client
        )
        await backend.start()
        await backend.pool.wait_ready(1)
        tools = _tools() if path == "reused" else None
        began = time.monotonic()
        run = asyncio.create_task(backend.run("import time\ntime.sleep(30)", tools=tools))
        ended: list[float] = []
        run.add_done_callback(lambda _: ended.append(time.monotonic() - began))
        await asyncio.sleep(1.0)  # the program sleeps in the warm container now
        await backend.close()
        with pytest.raises(SandboxClosed):  # (cut off mid-program: no verdict on it)
            await run
        assert ended[0] < profile.timeout_s + _MARGIN_S, f"returned after {ended[0]:.1f} s"
        # The removals close() gave up waiting for still go through.
        assert await left_containers(backend._owner, within=40) == []


@pytest.mark.docker
@pytest.mark.anyio
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("delay", [0.0, 0.005, 0.02])
async def test_a_run_cut_off_by_close_never_asks_for_a_retry(delay: float, path: str) -> None:
    require_docker()
    tools = _tools() if path == "reused" else None
    outcomes: list[str] = []
    for _ in range(4):  # where close() cuts the run varies from one try to the next
        backend = DockerBackend(
            image=IMAGE, profile=SandboxProfile(timeout_s=5), pool_size=1, reuse=True
        )
        await backend.start()
        await backend.pool.wait_ready(1)
        run = asyncio.create_task(backend.run("1", tools=tools))
        await asyncio.sleep(delay)
        await backend.close()
        [outcome] = await asyncio.gather(run, return_exceptions=True)
        if isinstance(outcome, BaseException):
            assert isinstance(outcome, SandboxClosed), repr(outcome)
            assert not outcome.retryable
            outcomes.append(outcome.code)
        else:
            outcomes.append(outcome.status)
        assert await left_containers(backend._owner, within=10) == []
    # (never "error": a runner that close() killed is not said to have died)
    assert set(outcomes) <= {"ok", "sandbox_closed"}, outcomes


_SLEEPS = "import asyncio\nawait asyncio.sleep(5)\nprint('not cut')"
# (what runs the program, what closes, what SandboxClosed's message names)
MID_PROGRAM = [
    ("pooled", "backend", "backend is closed"),
    ("kept", "backend", "backend is closed"),
    ("kept_own", "kept", "kept sandbox was closed"),
]


@pytest.mark.docker
@pytest.mark.anyio
@pytest.mark.parametrize(("path", "closing", "names"), MID_PROGRAM, ids=[c[0] for c in MID_PROGRAM])
async def test_a_program_cut_off_by_close_is_told_of_the_close_not_of_a_runner_death(
    path: str, closing: str, names: str
) -> None:
    # close() kills the runner under a program in flight: the run is not a RunnerDied
    # result (nor any other verdict on the program), every time, but SandboxClosed.
    require_docker()
    for _ in range(3):
        backend = DockerBackend(
            image=IMAGE, profile=SandboxProfile(timeout_s=10), pool_size=int(path == "pooled")
        )
        await backend.start()
        try:
            if path == "pooled":
                await backend.pool.wait_ready(1)
                run = asyncio.create_task(backend.run(_SLEEPS))
            else:
                kept = backend.keep(ALICE)
                assert (await kept.run("x = 1")).status == "ok"  # its container is up
                run = asyncio.create_task(kept.run(_SLEEPS))
            await asyncio.sleep(0.8)  # the program sleeps now
            await (kept.close() if closing == "kept" else backend.close())
            with pytest.raises(SandboxClosed) as raised:
                await asyncio.wait_for(run, 5.0)
            assert names in str(raised.value)
            assert not raised.value.retryable
        finally:
            await backend.close()
        assert await left_containers(backend._owner, within=10) == []
