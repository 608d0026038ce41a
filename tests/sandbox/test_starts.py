"""A start that finished as its caller was cancelled (a pool's refill cut off by close(), a
run cancelled): what it made is handed to ``discard``, never dropped with its sockets open
for the garbage collector to find. Python 3.11's ``wait_for`` can swallow the cancel of a
start that just finished: the start returns its container, and its caller, cancelled before
it resumes, never sees it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from airlock.sandbox import SandboxClosed
from airlock.sandbox._closing import Starts


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def _finished_as_cancelled(
    starts: Starts, discarded: list[str], *, discard: Callable[[str], object] | None = None
) -> asyncio.Task[str]:
    """A caller of ``starts.run`` cancelled once its start returned, before it resumed
    (``discard``: ``discarded.append`` unless given)."""
    gate = asyncio.Event()

    async def start() -> str:
        await gate.wait()
        return "launched"

    caller = asyncio.create_task(starts.run(start(), discard=discard or discarded.append))
    await asyncio.sleep(0)  # the caller waits for the start's task
    [task] = list(starts._tasks)
    gate.set()
    await asyncio.sleep(0)  # the start's task returns; its caller's wake-up is queued
    assert task.done()
    assert not task.cancelled()
    caller.cancel()
    return caller


# (case, who cancels the caller once its start returned)
CANCELS = ["caller_cancelled", "closed_then_caller_cancelled"]


@pytest.mark.anyio
@pytest.mark.parametrize("case", CANCELS)
async def test_a_start_that_finished_as_its_caller_was_cancelled_is_discarded(case: str) -> None:
    starts, discarded = Starts(), []
    caller = await _finished_as_cancelled(starts, discarded)
    if case == "closed_then_caller_cancelled":
        starts.cancel()  # (its start is done: nothing of it is cancelled)

    with pytest.raises(asyncio.CancelledError):
        await caller

    assert discarded == ["launched"]


@pytest.mark.anyio
async def test_a_start_cancelled_by_close_raises_sandbox_closed_and_discards_nothing() -> None:
    starts, discarded = Starts(), []

    async def start() -> str:
        await asyncio.sleep(30)
        return "launched"

    caller = asyncio.create_task(starts.run(start(), discard=discarded.append))
    await asyncio.sleep(0)
    starts.cancel()

    with pytest.raises(SandboxClosed):
        await caller

    assert discarded == []


@pytest.mark.anyio
async def test_a_discard_that_fails_leaves_the_cancellation_as_it_is(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def failing(_launched: str) -> None:
        raise RuntimeError("the engine is gone")

    starts = Starts()
    caller = await _finished_as_cancelled(starts, [], discard=failing)

    with pytest.raises(asyncio.CancelledError):
        await caller

    assert "could not discard" in caplog.text
