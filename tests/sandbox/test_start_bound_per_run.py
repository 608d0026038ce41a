"""A run's wait for its container start is bounded by that run's own deadline, what is left of it.

The harness shortens a run's ``timeout_s`` to what is left of the session (a per-run profile);
a kept or reused container is started by the kept sandbox, whose own profile is the
backend's. The start must still be waited for by the run's deadline, less what the run
already spent waiting for the conversation's previous program, not by the kept profile's.
No engine: the backend's container start is replaced by one that never ends in time.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Final

import pytest

from airlock.bridge import ToolSession
from airlock.policies import Grant, SandboxProfile
from airlock.sandbox import DockerBackend, RunResult, SandboxError
from airlock.sandbox.testing import ok_result
from airlock.tools import Registry
from tests.bridge.records import ALICE

_BACKEND_S: Final = 4.0
"""The backend's (and so a kept sandbox's own) profile's timeout_s."""
_RUN_S: Final = 1.0
"""The per-run profile's timeout_s: what the session has left."""
_BEFORE_S: Final = 0.6
"""How long the conversation's previous program runs (the next one waits for it)."""
_MARGIN_S: Final = 0.5


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class _Container:
    """A started container whose program runs :data:`_BEFORE_S` and then dies with it."""

    def __init__(self) -> None:
        self.id = f"stand-in-{id(self)}"
        self.alive = True
        self.removals = 0

    async def run(self, program: str, **_: Any) -> RunResult:
        await asyncio.sleep(_BEFORE_S)
        self.alive = False  # the next program needs a new container
        return ok_result(program)

    async def destroy(self) -> None:
        self.removals += 1
        self.alive = False


class _Engine:
    """Starts the first container at once (or in ``first_s``) when ``first_fast``, every
    other one only once :attr:`release` is set (far past any run's deadline)."""

    def __init__(self, *, first_fast: bool, first_s: float = 0.0) -> None:
        self.release = asyncio.Event()
        self.made: list[_Container] = []
        self._fast = 1 if first_fast else 0
        self._first_s = first_s

    async def start(self, profile: object = None, inputs: object = None) -> _Container:
        if self._fast:
            self._fast -= 1
            await asyncio.sleep(self._first_s)
        else:
            await self.release.wait()
        self.made.append(_Container())
        return self.made[-1]


def _run_profile() -> SandboxProfile:
    return SandboxProfile(timeout_s=_RUN_S)


def _tools() -> ToolSession:
    return ToolSession(registry=Registry(), principal=ALICE, grant=Grant())


async def _fresh(backend: DockerBackend) -> object:
    return await backend.run("1", profile=_run_profile())


async def _reused(backend: DockerBackend) -> object:
    return await backend.run("1", profile=_run_profile(), tools=_tools())


async def _kept(backend: DockerBackend) -> object:
    return await backend.keep(ALICE).run("1", profile=_run_profile())


async def _kept_after_another(backend: DockerBackend) -> object:
    """The second of two programs sent at once: it waits :data:`_BEFORE_S` for the first,
    whose container then dies, and starts a new one with what is left of its deadline."""
    kept = backend.keep(ALICE)
    first = asyncio.create_task(kept.run("'first'", profile=_run_profile()))
    await asyncio.sleep(0)  # the first takes the sandbox
    try:
        return await kept.run("'second'", profile=_run_profile())
    finally:
        assert (await first).status == "ok"


# (case, the run, whether the engine starts a first container at once, the most the run may
# take: its deadline, counted from when it was called)
PATHS = [
    ("fresh", _fresh, False, _RUN_S),
    ("reused", _reused, False, _RUN_S),
    ("kept", _kept, False, _RUN_S),
    ("kept_after_another", _kept_after_another, True, _RUN_S),
]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("path", "first_fast", "bound_s"), [p[1:] for p in PATHS], ids=[p[0] for p in PATHS]
)
async def test_a_start_is_waited_for_by_what_is_left_of_the_runs_own_deadline(
    monkeypatch: pytest.MonkeyPatch, path: Any, first_fast: bool, bound_s: float
) -> None:
    engine = _Engine(first_fast=first_fast)
    backend = DockerBackend(profile=SandboxProfile(timeout_s=_BACKEND_S), reuse=True)
    monkeypatch.setattr(backend, "_start_container", engine.start)
    backend._started = True  # no engine to check
    try:
        began = time.monotonic()
        with pytest.raises(SandboxError) as caught:
            await path(backend)
        took = time.monotonic() - began
        assert (caught.value.code, caught.value.retryable) == ("sandbox_start_timeout", True)
        assert took < bound_s + _MARGIN_S, f"returned after {took:.1f} s"
        # The container started late goes, nobody's run waiting for it.
        engine.release.set()
        for _ in range(20):
            await asyncio.sleep(0)
        assert [c.removals for c in engine.made] == [1] * len(engine.made)
    finally:
        engine.release.set()
        await backend.close()


# (case, the per-run deadline): too short for any container to start
TOO_SHORT = [("none_left", 0.001), ("under_the_least", 0.02)]


@pytest.mark.anyio
@pytest.mark.parametrize("deadline_s", [c[1] for c in TOO_SHORT], ids=[c[0] for c in TOO_SHORT])
async def test_a_kept_run_with_no_time_left_for_a_start_times_out_without_one(
    monkeypatch: pytest.MonkeyPatch, deadline_s: float
) -> None:
    engine = _Engine(first_fast=True)
    backend = DockerBackend(profile=SandboxProfile(timeout_s=_BACKEND_S))
    monkeypatch.setattr(backend, "_start_container", engine.start)
    backend._started = True
    try:
        result = await backend.keep(ALICE).run("1", profile=SandboxProfile(timeout_s=deadline_s))
    finally:
        await backend.close()
    assert (result.status, result.limit) == ("limit_exceeded", "timeout"), result
    assert engine.made == []


@pytest.mark.anyio
async def test_a_kept_run_left_too_little_by_the_one_before_times_out_without_a_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The first program's container took 0.4 s to start, and its program 0.6 s: the second,
    # sent with it, has about 0.2 s of its 1.2 s left, fewer than that start took. Its
    # deadline went on waiting for the first, not on a slow engine: its own timeout, and no
    # start asked for it.
    engine = _Engine(first_fast=True, first_s=0.4)
    backend = DockerBackend(profile=SandboxProfile(timeout_s=_BACKEND_S), reuse=True)
    monkeypatch.setattr(backend, "_start_container", engine.start)
    backend._started = True
    try:
        began = time.monotonic()
        kept = backend.keep(ALICE)
        first = asyncio.create_task(kept.run("'first'", profile=SandboxProfile(timeout_s=2.0)))
        await asyncio.sleep(0)  # the first takes the sandbox
        result = await kept.run("'second'", profile=SandboxProfile(timeout_s=1.2))
        took = time.monotonic() - began
        assert (await first).status == "ok"
    finally:
        await backend.close()
    assert (result.status, result.limit) == ("limit_exceeded", "timeout"), result
    assert result.error is not None
    assert "for the conversation's previous program" in result.error.message
    assert "did not run" in result.error.message
    assert len(engine.made) == 1  # the first's only
    assert took < 1.2 + _MARGIN_S, f"returned after {took:.1f} s"
