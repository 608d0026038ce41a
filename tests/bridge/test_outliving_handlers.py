"""A sync handler (or a proposal's ``prepare``) that runs past its timeout is answered
``timeout``, but its thread runs on (a thread cannot be stopped): the call keeps its place
among the run's ``max_concurrency`` until the thread has ended, and the calls after it wait
for their turn.

Before, the place went to the next call at the timeout: a program calling a hanging sync
tool with many ``.aio`` calls made the host run 1,500 handler threads at once under a
``max_concurrency`` of 32, all still running after the run returned.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from airlock.bridge import BridgeLimits, ToolSession, encode_frame, serve_run
from airlock.bridge._turns import Turns
from airlock.policies import Grant, Principal, read, write
from airlock.tools import (
    DeniedError,
    SQLiteLedgerStore,
    ToolTimeoutError,
    UpstreamError,
    WritePath,
)
from tests.bridge.frames import decode_frames
from tests.bridge.test_fuzz import CollectingWriter
from tests.bridge.test_guest_calls import Host
from tests.sandbox.guest_image import load_guest
from tests.tools.test_worker_threads import Blocked, blocked, build_registry

guest = load_guest("airlock_bridge")
errors = load_guest("airlock_errors")

READ, WRITE = "jobs_job_get", "jobs_job_cancel"
__all__ = ["blocked"]  # (the fixture, shared)
ALICE = Principal(user_id="alice", tenant_id="acme", scopes=frozenset({"jobs.read", "jobs.write"}))
GRANT = Grant(
    scopes=frozenset({"jobs.read", "jobs.write"}),
    effects=(read("jobs:job/*"), write("jobs:job/*")),
    propose=frozenset({WRITE}),
)
CONCURRENCY = 2


def session_of(blocked: Blocked, tmp_path: Path, *, in_flight: int = 64) -> ToolSession:
    registry = build_registry(blocked, proposable=True)
    ledger = SQLiteLedgerStore(tmp_path / "ledger.db")
    return ToolSession(
        registry=registry,
        principal=ALICE,
        grant=GRANT,
        limits=BridgeLimits(max_concurrency=CONCURRENCY, max_in_flight=in_flight),
        writes=WritePath(registry, ledger),
        proposable=frozenset({WRITE}),
    )


def test_handlers_past_their_timeout_keep_their_places(blocked: Blocked, tmp_path: Path) -> None:
    session = session_of(blocked, tmp_path)
    host = Host(tmp_path / "bridge.sock", session)
    connection = guest.Connection(str(host.path))
    tools = guest.Tools(connection, [s.to_wire() for s in session.stubs()])

    async def one(n: int) -> str:
        try:
            await tools.jobs_job_get.aio(job_id=f"j{n}")
        except errors.ToolError as exc:
            return str(exc.code)
        return "ok"

    async def program() -> tuple[tuple[int, int], list[str]]:
        calls = [asyncio.ensure_future(one(n)) for n in range(12)]
        await asyncio.sleep(0.6)  # six timeouts long
        seen = blocked.started, blocked.now
        blocked.release.set()
        return seen, await asyncio.gather(*calls)

    try:
        seen, answers = asyncio.run(program())
    finally:
        blocked.release.set()
    connection.send({"type": "done", "result": None})
    host.join()
    assert host.outcome == {"type": "done", "result": None}
    # Only the first two ran while blocked; the others waited for their turn.
    assert seen == (CONCURRENCY, CONCURRENCY)
    assert blocked.peak == CONCURRENCY
    assert Counter(answers) == Counter({"timeout": CONCURRENCY, "ok": 12 - CONCURRENCY})
    blocked.wait_idle()


def test_many_calls_of_a_hanging_tool_start_few_threads(blocked: Blocked, tmp_path: Path) -> None:
    session = session_of(blocked, tmp_path, in_flight=256)
    base = threading.active_count()
    host = Host(tmp_path / "bridge.sock", session)
    connection = guest.Connection(str(host.path))
    tools = guest.Tools(connection, [s.to_wire() for s in session.stubs()])
    threads: list[int] = []

    async def program() -> None:
        calls = [asyncio.ensure_future(tools.jobs_job_get.aio(job_id=f"j{n}")) for n in range(200)]
        for _ in range(40):  # 0.4 s: four timeouts long
            threads.append(threading.active_count() - base)
            await asyncio.sleep(0.01)
        blocked.release.set()
        await asyncio.gather(*calls, return_exceptions=True)

    try:
        asyncio.run(program())
    finally:
        blocked.release.set()
    connection.send({"type": "done", "result": None})
    host.join()
    assert blocked.peak == CONCURRENCY
    # The host's loop, its handlers and a thread or two of its own; not one per call.
    assert max(threads) <= CONCURRENCY + 3
    blocked.wait_idle()


PROPOSALS = [
    {"type": "propose", "id": n, "tool": WRITE, "args": {"job_id": f"j{n}"}} for n in range(1, 7)
]
BATCH = [{"type": "batch", "id": 1, "tool": READ, "items": [{"job_id": f"j{n}"} for n in range(6)]}]


def outcomes(sent: list[dict[str, Any]]) -> Counter[str]:
    """The code of each call's (or batch item's) answer, ``ok`` for a value."""
    answers = [f for f in sent if f["type"] == "result"]
    if len(answers) == 1 and isinstance(answers[0].get("value"), list):  # a batch's
        answers = answers[0]["value"]
    return Counter("ok" if a["ok"] else a["error"]["code"] for a in answers)


# case -> the frames: six proposals whose prepare hangs; a batch of six such reads
@pytest.mark.parametrize("frames", [PROPOSALS, BATCH], ids=["proposals", "batch"])
def test_proposals_and_batch_items_past_their_timeout_keep_their_places(
    frames: list[dict[str, Any]], blocked: Blocked, tmp_path: Path
) -> None:
    session = session_of(blocked, tmp_path)

    async def serve() -> tuple[Any, list[dict[str, Any]], tuple[int, int]]:
        reader = asyncio.StreamReader()
        reader.feed_data(b"".join(encode_frame(f) for f in frames))
        writer = CollectingWriter()
        seen: list[tuple[int, int]] = []

        async def program() -> None:
            await asyncio.sleep(0.5)  # five timeouts long
            seen.append((blocked.started, blocked.now))
            blocked.release.set()
            await asyncio.sleep(0.3)
            reader.feed_data(encode_frame({"type": "done", "result": None}))
            reader.feed_eof()

        feeding = asyncio.create_task(program())
        loop = asyncio.get_running_loop()
        outcome = await serve_run(
            reader, writer, session=session, deadline=loop.time() + 10, max_done_bytes=1 << 20
        )
        await feeding
        return outcome, decode_frames(bytes(writer.data)), seen[0]

    try:
        outcome, sent, seen = asyncio.run(serve())
    finally:
        blocked.release.set()
    assert outcome == {"type": "done", "result": None}
    assert seen == (CONCURRENCY, CONCURRENCY)
    assert blocked.peak == CONCURRENCY
    assert outcomes(sent) == Counter({"timeout": CONCURRENCY, "ok": 6 - CONCURRENCY})
    blocked.wait_idle()


def _denied_running_on(running: asyncio.Future[None]) -> DeniedError:
    """A handler refused what it reached, then ran past its timeout: ``denied``, caused by
    the timeout (as tools/_execute.py raises it)."""
    try:
        raise DeniedError(reason="effect") from ToolTimeoutError(
            seconds=0.1, handler_running=running
        )
    except DeniedError as exc:
        return exc


async def turns_of_the_loop() -> None:
    """Let a future's end reach the turns (through the future the error gives each reader)."""
    for _ in range(3):
        await asyncio.sleep(0)


# case -> whether the call's place is free as the call ends (else once its thread ends)
LEAVES_AT_ONCE = {
    "ok": True,
    "failed": True,
    "timeout_of_an_async_handler": True,
    "timeout_of_a_thread_that_ended": True,
    "timeout_of_a_thread_running_on": False,
    "denied_as_its_thread_ran_on": False,
}


@pytest.mark.parametrize("case", sorted(LEAVES_AT_ONCE))
def test_a_call_leaves_its_turn_when_its_handler_has_ended(case: str) -> None:
    async def main() -> tuple[int, int]:
        running = asyncio.get_running_loop().create_future()
        ended = asyncio.get_running_loop().create_future()
        ended.set_result(None)
        failure: BaseException | None = {
            "ok": None,
            "failed": UpstreamError(),
            "timeout_of_an_async_handler": ToolTimeoutError(seconds=0.1),
            "timeout_of_a_thread_that_ended": ToolTimeoutError(seconds=0.1, handler_running=ended),
            "timeout_of_a_thread_running_on": ToolTimeoutError(
                seconds=0.1, handler_running=running
            ),
            "denied_as_its_thread_ran_on": _denied_running_on(running),
        }[case]
        turns = Turns(1)
        turns.running += 1
        turns.leave_after(failure)
        at_end = turns.running
        running.set_result(None)
        await turns_of_the_loop()
        return at_end, turns.running

    at_end, after_thread = asyncio.run(main())
    assert (at_end, after_thread) == (0 if LEAVES_AT_ONCE[case] else 1, 0)


async def _waits_with_a_timeout(error: ToolTimeoutError) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(error.handler_running, 0.01)  # type: ignore[arg-type]


async def _cancels(error: ToolTimeoutError) -> None:
    running = error.handler_running
    assert running is not None
    running.cancel()


async def _awaits_in_a_task_cancelled(error: ToolTimeoutError) -> None:
    async def wait() -> None:
        await error.handler_running  # type: ignore[misc]

    task = asyncio.ensure_future(wait())
    await asyncio.sleep(0)
    task.cancel()


# case -> how host code waits for a thread that runs on past its call, and stops waiting
OBSERVERS = {
    "waits_with_a_timeout": _waits_with_a_timeout,
    "cancels_it": _cancels,
    "awaits_it_in_a_task_cancelled": _awaits_in_a_task_cancelled,
}


@pytest.mark.parametrize("case", sorted(OBSERVERS))
def test_one_who_stops_waiting_for_a_thread_gives_no_place_away(case: str) -> None:
    async def main() -> tuple[int, bool, int]:
        running = asyncio.get_running_loop().create_future()
        error = ToolTimeoutError(seconds=0.1, handler_running=running)
        turns = Turns(1)
        turns.running += 1
        turns.leave_after(error)
        await OBSERVERS[case](error)
        await asyncio.sleep(0.02)
        held, cancelled = turns.running, running.cancelled()
        if not running.done():
            running.set_result(None)  # the thread ends
        await turns_of_the_loop()
        return held, cancelled, turns.running

    # The place is held while the thread runs, whatever the observer did, and freed at its end.
    assert asyncio.run(main()) == (1, False, 0)
