"""A run's wait for its container is bounded by the run's deadline, whatever the engine does.

On an engine that holds every container create (:mod:`tests.sandbox.slow_engine`: a wedged
or overloaded daemon), a run that must start a container (a fresh one, a principal's reused
one, a kept sandbox's) ends by its deadline plus a small margin with a typed, retryable
``sandbox_start_timeout``, and the container the engine starts late is removed off the run's
path: nothing is left on the engine.
"""

from __future__ import annotations

import asyncio
import time
from typing import Final

import pytest

import airlock.sandbox._container as container_module
from airlock.bridge import ToolSession
from airlock.bridge._codec import encode_frame
from airlock.policies import Grant, SandboxProfile
from airlock.sandbox import DockerBackend, RunResult, SandboxError, SandboxFailure
from airlock.sandbox._container import LEAST_LEFT_S
from airlock.sandbox._start_wait import MOST_ABANDONED, StartWaits
from airlock.tools import Registry
from tests.bridge.records import ALICE
from tests.conftest import IMAGE, require_docker
from tests.sandbox.slow_engine import left_containers, slow_creates

_HELD_S: Final = 12.0
"""How long the engine holds each create: far past the runs' deadline."""
_MARGIN_S: Final = 2.0
"""Past a run's deadline, on a small shared machine."""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _tools() -> ToolSession:
    return ToolSession(registry=Registry(), principal=ALICE, grant=Grant())


_FOREVER: Final = "while True:\n    pass\n"


async def _fresh(
    backend: DockerBackend, profile: SandboxProfile | None, program: str = "1"
) -> RunResult:
    return await backend.run(program, profile=profile)


async def _reused(
    backend: DockerBackend, profile: SandboxProfile | None, program: str = "1"
) -> RunResult:
    return await backend.run(program, profile=profile, tools=_tools())


async def _kept(
    backend: DockerBackend, profile: SandboxProfile | None, program: str = "1"
) -> RunResult:
    return await backend.keep(ALICE).run(program, profile=profile)


_DEADLINE_S: Final = 2.0
# (case, the run, the backend's profile's timeout_s when the run gives its own profile with
# timeout_s=_DEADLINE_S, as the harness does with what its session has left; a kept or
# reused container is the kept sandbox's, of the backend's profile, and still waited for by
# the run's deadline)
PATHS = [
    ("fresh", _fresh, None),
    ("reused", _reused, None),
    ("kept", _kept, None),
    ("reused_run_profile", _reused, 8.0),
    ("kept_run_profile", _kept, 8.0),
]


@pytest.mark.docker
@pytest.mark.anyio
@pytest.mark.parametrize(("path", "backend_s"), [p[1:] for p in PATHS], ids=[p[0] for p in PATHS])
async def test_a_run_waits_for_its_container_no_longer_than_its_deadline(
    path: object, backend_s: float | None
) -> None:
    require_docker()
    with slow_creates(_HELD_S) as client:
        profile = SandboxProfile(timeout_s=_DEADLINE_S)
        backend = DockerBackend(
            image=IMAGE,
            profile=profile if backend_s is None else SandboxProfile(timeout_s=backend_s),
            reuse=True,
            client=client,
        )
        await backend.start()
        try:
            began = time.monotonic()
            with pytest.raises(SandboxError) as caught:
                await path(backend, None if backend_s is None else profile)  # type: ignore[operator]
            took = time.monotonic() - began
            assert (caught.value.code, caught.value.retryable) == ("sandbox_start_timeout", True)
            assert "2 s" in str(caught.value), str(caught.value)
            assert took < profile.timeout_s + _MARGIN_S, f"returned after {took:.1f} s"
            # The container the engine creates late goes, with nobody's run waiting for it.
            assert await left_containers(backend._owner, within=_HELD_S + 20) == []
        finally:
            await backend.close()


@pytest.mark.docker
@pytest.mark.anyio
async def test_close_cuts_off_a_run_waiting_for_its_container_at_once() -> None:
    require_docker()
    with slow_creates(_HELD_S) as client:
        backend = DockerBackend(image=IMAGE, profile=SandboxProfile(timeout_s=30), client=client)
        await backend.start()
        run = asyncio.ensure_future(backend.run("1"))
        await asyncio.sleep(0.5)  # its create is held by the engine
        began = time.monotonic()
        closing = asyncio.ensure_future(backend.close())
        with pytest.raises(SandboxError) as caught:
            await run
        took = time.monotonic() - began
        await closing
        assert caught.value.code == "sandbox_closed"
        assert took < 1.0, f"the run returned {took:.1f} s after close() began"
        assert await left_containers(backend._owner, within=_HELD_S + 20) == []


_SLOW_START_S: Final = 2.0
"""How long the engine holds the create in the next test: well within the run's deadline."""


@pytest.mark.docker
@pytest.mark.anyio
@pytest.mark.parametrize("path", [p[1] for p in PATHS[:3]], ids=[p[0] for p in PATHS[:3]])
async def test_a_slow_start_counts_against_the_programs_deadline(path: object) -> None:
    # The start took 2 of the run's 3.5 s: the program gets what is left, so the run still
    # ends by its one deadline (not by the start's time plus a whole deadline, 5.5 s or more).
    require_docker()
    with slow_creates(_SLOW_START_S) as client:
        profile = SandboxProfile(timeout_s=3.5)
        backend = DockerBackend(image=IMAGE, profile=profile, reuse=True, client=client)
        await backend.start()
        try:
            began = time.monotonic()
            result = await path(backend, None, _FOREVER)  # type: ignore[operator]
            took = time.monotonic() - began
        finally:
            await backend.close()
    assert (result.status, result.limit) == ("limit_exceeded", "timeout"), result
    assert result.error is not None
    assert "deadline of 3.5 s" in result.error.message  # the run's, the start's time in it
    assert took < profile.timeout_s + 1.5, f"returned after {took:.1f} s"


@pytest.mark.docker
@pytest.mark.anyio
@pytest.mark.parametrize("waited_s", [1.99, 2.5], ids=["nearly_all", "more_than_all"])
async def test_a_program_is_given_the_least_left_however_long_its_run_waited(
    waited_s: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A start (or a kept sandbox's previous program) that used up the run's deadline still
    # leaves its program LEAST_LEFT_S: never nothing, nor a deadline already past.
    require_docker()
    given: list[float] = []

    def spy(message: dict[str, object]) -> bytes:
        if message.get("type") == "run":
            given.append(float(message["deadline_s"]) - container_module._GUEST_MARGIN_S)  # type: ignore[arg-type]
        return encode_frame(message)

    monkeypatch.setattr(container_module, "encode_frame", spy)
    profile = SandboxProfile(timeout_s=2.0)
    backend = DockerBackend(image=IMAGE, profile=profile, pool_size=1)
    await backend.start()
    try:
        await backend.pool.wait_ready(1)
        container = backend._fit.take(profile, ())
        assert container is not None
        began = time.perf_counter() - waited_s
        await container.run("1", profile=profile, pooled=True, began=began)
        await container.destroy()
    finally:
        await backend.close()
    assert len(given) == 1
    assert LEAST_LEFT_S <= given[0] < LEAST_LEFT_S + 0.5, given


class _Started:
    """Stands in for a started container."""


async def _start(delay: float, *, fails: bool = False) -> object:
    await asyncio.sleep(delay)
    if fails:
        raise SandboxFailure("the engine refused")
    return _Started()


# (case, how long the start takes, whether it fails, what the run gets, whether the container
# made after the run gave up is discarded)
STARTS = [
    ("in_time", 0.0, False, "container", False),
    ("fails_in_time", 0.0, True, "sandbox_failure", False),
    ("late", 0.5, False, "sandbox_start_timeout", True),
    ("late_and_fails", 0.5, True, "sandbox_start_timeout", False),
]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("case", "delay", "fails", "gets", "discarded"), STARTS, ids=[c[0] for c in STARTS]
)
async def test_a_start_is_waited_for_by_the_deadline_and_a_late_container_discarded(
    case: str, delay: float, fails: bool, gets: str, discarded: bool
) -> None:
    thrown: list[object] = []
    start = StartWaits(discard=thrown.append).wait(
        _start(delay, fails=fails),  # type: ignore[arg-type]
        timeout_s=0.1,
    )
    if gets == "container":
        assert isinstance(await start, _Started)
    else:
        with pytest.raises(SandboxError) as caught:
            await start
        assert (caught.value.code, caught.value.retryable) == (gets, True)
    await asyncio.sleep(delay + 0.1)
    assert [type(t) for t in thrown] == ([_Started] if discarded else [])


async def _given_up(waits: StartWaits, count: int) -> asyncio.Event:
    """``count`` starts that runs gave up on, which the engine finishes once the event is
    set."""
    engine_answers = asyncio.Event()

    async def held() -> _Started:
        await engine_answers.wait()
        return _Started()

    for _ in range(count):
        with pytest.raises(SandboxError):
            await waits.wait(held(), timeout_s=0.06)  # type: ignore[arg-type]
    return engine_answers


# (case, starts given up on before, the run's deadline, when the engine answers them (s after
# the run began), what the run gets, starts it asked for)
BACKLOG = [
    ("room_left", MOST_ABANDONED - 1, 0.3, 1.0, "container", 1),
    ("no_room_by_its_deadline", MOST_ABANDONED, 0.2, 0.5, "sandbox_start_timeout", 0),
    ("room_made_within_its_deadline", MOST_ABANDONED, 5.0, 0.3, "container", 1),
    # Room comes with less than LEAST_LEFT_S of the run's deadline left: a start asked for
    # then would be given up at once, and add to what it waits behind.
    ("room_made_too_late", MOST_ABANDONED, 0.5, 0.47, "sandbox_start_timeout", 0),
]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("case", "given_up", "deadline_s", "answers_at", "gets", "asked"),
    BACKLOG,
    ids=[c[0] for c in BACKLOG],
)
async def test_a_run_asks_for_a_start_only_while_few_given_up_on_are_in_progress(
    case: str, given_up: int, deadline_s: float, answers_at: float, gets: str, asked: int
) -> None:
    # On a stalled engine, runs retried one after another must not queue a start each: every
    # one would make (and remove) a container once the engine came back.
    thrown: list[object] = []
    waits = StartWaits(discard=thrown.append)
    engine_answers = await _given_up(waits, given_up)
    starts: list[str] = []

    async def start() -> _Started:
        starts.append("start")
        return _Started()

    began = time.monotonic()
    asyncio.get_running_loop().call_later(answers_at, engine_answers.set)
    if gets == "container":
        assert isinstance(await waits.wait(start(), timeout_s=deadline_s), _Started)  # type: ignore[arg-type]
    else:
        with pytest.raises(SandboxError) as caught:
            await waits.wait(start(), timeout_s=deadline_s)  # type: ignore[arg-type]
        assert (caught.value.code, caught.value.retryable) == (gets, True)
        assert caught.value.held_back  # type: ignore[attr-defined]
        assert "left no room for another" in str(caught.value)
    assert time.monotonic() - began < deadline_s + 0.2
    assert len(starts) == asked
    await asyncio.sleep(max(answers_at - (time.monotonic() - began), 0) + 0.1)
    assert len(thrown) == given_up  # what the engine made for nobody goes


# (case, what the run waits for when the backend closes)
CLOSING = [("waiting_for_room", MOST_ABANDONED), ("waiting_for_its_start", 0)]


@pytest.mark.anyio
@pytest.mark.parametrize(("case", "given_up"), CLOSING, ids=[c[0] for c in CLOSING])
async def test_close_ends_a_run_waiting_for_a_container_at_once(case: str, given_up: int) -> None:
    thrown: list[object] = []
    waits = StartWaits(discard=thrown.append)
    engine_answers = await _given_up(waits, given_up)
    asyncio.get_running_loop().call_later(1.0, engine_answers.set)
    run = asyncio.ensure_future(waits.wait(_start(1.0), timeout_s=30.0))  # type: ignore[arg-type]
    await asyncio.sleep(0.1)
    began = time.monotonic()
    waits.close()
    with pytest.raises(SandboxError) as caught:
        await run
    assert time.monotonic() - began < 0.1
    assert (caught.value.code, caught.value.retryable) == ("sandbox_closed", False)
    with pytest.raises(SandboxError) as later:  # later runs are refused, asking for nothing
        await waits.wait(_start(0.0), timeout_s=1.0)  # type: ignore[arg-type]
    assert later.value.code == "sandbox_closed"
    await asyncio.sleep(1.1)  # what the engine makes meanwhile goes
    assert len(thrown) == given_up + (case == "waiting_for_its_start")


@pytest.mark.anyio
async def test_a_container_made_as_close_came_is_discarded_not_run() -> None:
    # close() took its list of containers to remove before this one was made: handed to the
    # run, its program would start on a closed backend, and nobody would remove it.
    thrown: list[object] = []
    waits = StartWaits(discard=thrown.append)

    async def start() -> _Started:
        waits.close()  # comes as the engine answers, before the run's wait resumes
        return _Started()

    with pytest.raises(SandboxError) as caught:
        await waits.wait(start(), timeout_s=5.0)  # type: ignore[arg-type]
    assert caught.value.code == "sandbox_closed"
    await asyncio.sleep(0)
    assert [type(t) for t in thrown] == [_Started]


@pytest.mark.anyio
async def test_runs_waiting_at_once_ask_for_no_more_than_the_bound() -> None:
    # Once one start was given up on, a burst of runs asks for at most the bound's worth,
    # counting the starts still waited for: the rest wait for room, then give up unasked.
    thrown: list[object] = []
    waits = StartWaits(discard=thrown.append)
    engine_answers = await _given_up(waits, 1)
    asyncio.get_running_loop().call_later(1.0, engine_answers.set)
    starts: list[str] = []

    async def start() -> _Started:
        starts.append("start")
        await asyncio.sleep(1.0)  # (the engine is still slow)
        return _Started()

    runs = [waits.wait(start(), timeout_s=0.3) for _ in range(20)]  # type: ignore[arg-type]
    outcomes = await asyncio.gather(*runs, return_exceptions=True)
    assert {getattr(o, "code", o) for o in outcomes} == {"sandbox_start_timeout"}
    assert len(starts) == MOST_ABANDONED - 1
    await asyncio.sleep(1.1)
    assert len(thrown) == MOST_ABANDONED


@pytest.mark.docker
@pytest.mark.anyio
async def test_starts_the_engine_holds_leave_the_processs_worker_threads_free() -> None:
    # More held creates than the default executor has workers (a few per core): what else
    # the process hands to a thread (a large frame's decoding, a final value's measuring)
    # must not queue behind them, or runs in containers already started would stall too.
    require_docker()
    with slow_creates(_HELD_S) as client:
        profile = SandboxProfile(timeout_s=1.0)
        backend = DockerBackend(image=IMAGE, profile=profile, client=client)
        await backend.start()
        try:
            runs = [backend.run("1") for _ in range(12)]
            outcomes = await asyncio.gather(*runs, return_exceptions=True)
            assert {getattr(o, "code", o) for o in outcomes} == {"sandbox_start_timeout"}
            began = time.monotonic()
            await asyncio.wait_for(asyncio.to_thread(lambda: None), timeout=_HELD_S)
            took = time.monotonic() - began
            assert took < _MARGIN_S, f"a worker thread was free after {took:.1f} s"
            assert await left_containers(backend._owner, within=_HELD_S + 20) == []
        finally:
            await backend.close()
