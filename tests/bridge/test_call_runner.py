"""Calls run one after another in one task until one has to wait: a call that waits keeps
its task (its deadline and its cancellation act on it alone) and the others go on without it;
no call sees another's context variables; a run's end stops them all."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
import types
from collections.abc import Generator

import pytest

from airlock.bridge import BridgeLimits, RunEnd, ToolSession, _runner, encode_frame, serve_run
from airlock.bridge._runner import CallRunner
from airlock.policies import read
from airlock.tools import AuditLog, MemoryAuditStore, Registry
from tests.bridge.records import ALICE, GRANT, Record, RecordId, build_registry
from tests.bridge.test_fuzz import CollectingWriter, _results, serving

pytestmark = pytest.mark.anyio

_seen: contextvars.ContextVar[str] = contextvars.ContextVar("_seen", default="")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Log:
    def __init__(self) -> None:
        self.ended: list[str] = []
        self.done = 0

    def count(self) -> None:
        self.done += 1


async def test_calls_that_do_not_wait_run_in_order_in_one_task() -> None:
    log = Log()
    runner = CallRunner(on_done=log.count)
    tasks: list[asyncio.Task[object] | None] = []

    async def call(n: int) -> None:
        tasks.append(asyncio.current_task())
        log.ended.append(f"fast {n}")

    for n in range(100):
        runner.submit(call(n))
    async with asyncio.timeout(5):
        while log.done < 100:
            await asyncio.sleep(0)
    assert log.ended == [f"fast {n}" for n in range(100)]
    assert len(set(tasks)) == 1
    assert None not in tasks


@pytest.mark.parametrize("turn_s", [0.0, 60.0])
async def test_a_turn_runs_one_call_at_least_and_then_its_time(
    monkeypatch: pytest.MonkeyPatch, turn_s: float
) -> None:
    monkeypatch.setattr(_runner, "TURN_S", turn_s)
    log = Log()
    runner = CallRunner(on_done=log.count)
    turns = 0

    async def call(n: int) -> None:
        log.ended.append(f"call {n}")

    async def other() -> None:  # another run's work on the same loop
        nonlocal turns
        while log.done < 10:
            turns += 1
            await asyncio.sleep(0)

    beside = asyncio.create_task(other())
    for n in range(10):
        runner.submit(call(n))
    async with asyncio.timeout(5):
        await beside
    assert log.ended == [f"call {n}" for n in range(10)]
    # No time: a turn of the loop between calls; all the time needed: none.
    assert (turns >= 10) is (turn_s == 0.0)


async def test_a_call_that_waits_keeps_its_task_and_the_others_go_on() -> None:
    log = Log()
    runner = CallRunner(on_done=log.count)
    release = asyncio.Event()

    async def slow() -> None:
        await release.wait()
        log.ended.append("slow")

    async def fast(n: int) -> None:
        log.ended.append(f"fast {n}")

    runner.submit(slow())
    for n in range(3):
        runner.submit(fast(n))
    async with asyncio.timeout(5):
        while log.done < 3:
            await asyncio.sleep(0)
    assert log.ended == ["fast 0", "fast 1", "fast 2"]  # not behind the one that waits
    assert len(runner.tasks) == 2  # the waiting call's own, and the runner of the rest
    release.set()
    async with asyncio.timeout(5):
        while log.done < 4:
            await asyncio.sleep(0)
    assert log.ended[-1] == "slow"


async def test_a_deadline_inside_a_waiting_call_stops_that_call_alone() -> None:
    log = Log()
    runner = CallRunner(on_done=log.count)

    async def bounded() -> None:
        try:
            async with asyncio.timeout(0.05):
                await asyncio.sleep(10)
        except TimeoutError:
            log.ended.append("timed out")

    async def fast() -> None:
        log.ended.append("fast")

    runner.submit(bounded())
    runner.submit(fast())
    async with asyncio.timeout(5):
        while log.done < 2:
            await asyncio.sleep(0.01)
    assert log.ended == ["fast", "timed out"]
    this = asyncio.current_task()
    assert this is not None
    assert not this.cancelling()  # the deadline cancelled the call's task, not this one


async def test_no_call_sees_what_another_set_in_its_context() -> None:
    log = Log()
    runner = CallRunner(on_done=log.count)

    async def call(n: int) -> None:
        log.ended.append(_seen.get())
        _seen.set(f"call {n}")  # left set on purpose

    for n in range(3):
        runner.submit(call(n))
    async with asyncio.timeout(5):
        while log.done < 3:
            await asyncio.sleep(0)
    assert log.ended == ["", "", ""]


async def test_a_call_that_waits_keeps_its_context_across_its_steps() -> None:
    log = Log()
    runner = CallRunner(on_done=log.count)

    async def call() -> None:
        token = _seen.set("mine")
        await asyncio.sleep(0.01)
        log.ended.append(_seen.get())
        _seen.reset(token)  # a token is only valid in the context that made it

    runner.submit(call())
    async with asyncio.timeout(5):
        while log.done < 1:
            await asyncio.sleep(0.01)
    assert log.ended == ["mine"]


async def test_cancel_drops_queued_calls_and_cancels_the_running_ones() -> None:
    log = Log()
    runner = CallRunner(on_done=log.count)
    started = asyncio.Event()

    async def slow() -> None:
        started.set()
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            log.ended.append("cancelled")
            raise

    async def never() -> None:
        log.ended.append("ran")

    runner.submit(slow())
    await started.wait()
    runner.cancel()
    runner.submit(never())
    runner.cancel()  # queued, never started: dropped
    async with asyncio.timeout(5):
        while runner.tasks:
            await asyncio.sleep(0.01)
    assert log.ended == ["cancelled"]


async def test_a_call_that_fails_is_logged_and_the_others_go_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = Log()
    runner = CallRunner(on_done=log.count)

    async def broken() -> None:
        raise RuntimeError("a bug")

    async def fine() -> None:
        log.ended.append("fine")

    with caplog.at_level(logging.ERROR):
        runner.submit(broken())
        runner.submit(fine())
        async with asyncio.timeout(5):
            while log.done < 2:
                await asyncio.sleep(0)
    assert log.ended == ["fine"]
    assert "a bridge call failed" in caplog.text


async def test_a_slow_call_past_the_runs_deadline_ends_the_run_on_time() -> None:
    session = ToolSession(
        registry=build_registry(slow_s=5.0),
        principal=ALICE,
        grant=GRANT,
        limits=BridgeLimits(max_in_flight=100),
    )
    reader = asyncio.StreamReader()
    reader.feed_data(
        encode_frame(
            {"type": "call", "id": 1, "tool": "records_slow_get", "args": {"record_id": "rec_1"}}
        )
        + encode_frame(
            {"type": "call", "id": 2, "tool": "records_item_get", "args": {"record_id": "rec_2"}}
        )
    )
    writer = CollectingWriter()
    began = time.monotonic()
    outcome = await serve_run(
        reader,
        writer,  # type: ignore[arg-type]
        session=session,
        deadline=time.monotonic() + 0.3,
        max_done_bytes=1 << 20,
    )
    assert isinstance(outcome, RunEnd)
    assert outcome.code == "timeout"
    assert time.monotonic() - began < 3
    answered = [r for r in _results(writer) if r["type"] == "result"]
    assert answered[0]["id"] == 2  # the fast call was answered while the slow one waited
    assert answered[0]["ok"]
    # The slow call's own deadline is the run's: it ends unanswered, or as a timeout.
    assert all(r["error"]["code"] == "timeout" for r in answered[1:])


async def _idle_runner(runner: CallRunner, log: Log) -> None:
    """Start ``runner``'s task and let it run out of calls."""

    async def first() -> None:
        log.ended.append("first")

    runner.submit(first())
    async with asyncio.timeout(5):
        while log.done < 1 or not runner._idle:
            await asyncio.sleep(0)


FROM_A_CALLBACK = [
    # at_once; what was seen in order: "task" (the call ran, in the runner's task), and what
    # had run when the callback that submitted it returned
    (
        True,
        ["task", ["first", "call"]],
    ),  # a frame's call: a step of the idle runner, then and there
    (False, [["first"], "task"]),  # a burst's after its first: in the runner's task, next turn
]


@pytest.mark.parametrize(("at_once", "order"), FROM_A_CALLBACK, ids=["at_once", "next_turn"])
async def test_a_call_from_a_callback_runs_in_the_runners_task(
    at_once: bool, order: list[object]
) -> None:
    log = Log()
    runner = CallRunner(on_done=log.count)
    await _idle_runner(runner, log)
    (runner_task,) = runner.tasks
    seen: list[object] = []

    async def call() -> None:
        seen.append("task" if asyncio.current_task() is runner_task else "another task")
        log.ended.append("call")

    def callback() -> None:  # as the frame's callback submits it
        runner.submit(call(), at_once=at_once)
        seen.append(list(log.ended))

    asyncio.get_running_loop().call_soon(callback)
    async with asyncio.timeout(5):
        while len(seen) < 2:
            await asyncio.sleep(0)
    assert seen == order
    assert log.ended == ["first", "call"]


async def test_a_call_from_a_callback_that_waits_is_carried_on_by_the_runner() -> None:
    log = Log()
    runner = CallRunner(on_done=log.count)
    await _idle_runner(runner, log)

    async def bounded() -> None:
        token = _seen.set("mine")
        try:
            async with asyncio.timeout(0.05):
                await asyncio.sleep(10)
        except TimeoutError:
            log.ended.append(f"timed out, {_seen.get()}")
        _seen.reset(token)

    async def fast(n: int) -> None:
        log.ended.append(f"fast {n}, {_seen.get()!r}")

    def callback() -> None:
        runner.submit(bounded())
        runner.submit(fast(1))
        runner.submit(fast(2))

    asyncio.get_running_loop().call_soon(callback)
    async with asyncio.timeout(5):
        while log.done < 4:
            await asyncio.sleep(0.01)
    assert log.ended == ["first", "fast 1, ''", "fast 2, ''", "timed out, mine"]
    this = asyncio.current_task()
    assert this is not None
    assert not this.cancelling()


async def test_a_call_handed_over_when_the_run_ends_is_cancelled() -> None:
    log = Log()
    runner = CallRunner(on_done=log.count)
    await _idle_runner(runner, log)

    async def waits() -> None:
        try:
            await asyncio.sleep(10)
        finally:
            log.ended.append("closed")

    def callback() -> None:
        runner.submit(waits())
        runner.cancel()  # before the runner took it over

    asyncio.get_running_loop().call_soon(callback)
    async with asyncio.timeout(5):
        while runner.tasks or log.done < 2:
            await asyncio.sleep(0.01)
    assert log.ended == ["first", "closed"]


@pytest.mark.parametrize("limit", [1, 3, 8])
async def test_no_more_calls_run_at_once_than_the_limit(limit: int) -> None:
    running: list[int] = [0, 0]  # now, most at once
    registry = Registry(audit=AuditLog(MemoryAuditStore()))

    @registry.tool(effects=[read("records:record/{record_id}")], scope="records.read",
                   callers={"direct", "code"})  # fmt: skip
    async def records_item_get(record_id: RecordId) -> Record:
        """Fetch one record slowly. Use it to count calls running at once.
        It does nothing else."""
        running[0] += 1
        running[1] = max(running)
        await asyncio.sleep(0.01)
        running[0] -= 1
        return Record(record_id=record_id, total=1)

    session = ToolSession(
        registry=registry,
        principal=ALICE,
        grant=GRANT,
        limits=BridgeLimits(max_in_flight=100, max_concurrency=limit),
    )
    reader = asyncio.StreamReader()
    for n in range(1, 21):
        reader.feed_data(
            encode_frame(
                {
                    "type": "call",
                    "id": n,
                    "tool": "records_item_get",
                    "args": {"record_id": "rec_1"},
                }
            )
        )
    served, writer = serving(reader, session, max_done_bytes=1 << 20)
    async with asyncio.timeout(10):
        while len(_results(writer)) < 20:
            await asyncio.sleep(0.01)
    reader.feed_data(encode_frame({"type": "done", "result": {}}))
    reader.feed_eof()
    assert await served == {"type": "done", "result": {}}
    assert sorted(r["id"] for r in _results(writer) if r["ok"]) == list(range(1, 21))
    assert running[1] == limit


async def test_a_deadline_that_passes_before_the_handed_over_call_goes_on_is_its_own() -> None:
    """A call run at once in the callback that received it, which sets a deadline already
    passed in its first step: the cancellation reaches the call (as its TimeoutError), not a
    silent end with no result."""
    log = Log()
    runner = CallRunner(on_done=log.count)

    async def warm_up() -> None:
        return None

    async def call() -> None:
        try:
            async with asyncio.timeout(0):
                await asyncio.sleep(1)
            log.ended.append("no deadline")
        except TimeoutError:
            log.ended.append("deadline")

    runner.submit(warm_up())  # the runner now waits for calls: the next one runs at once
    async with asyncio.timeout(5):
        while log.done < 1:
            await asyncio.sleep(0)
        asyncio.get_running_loop().call_soon(runner.submit, call())
        while log.done < 2:
            await asyncio.sleep(0.01)
    assert log.ended == ["deadline"]


@pytest.mark.parametrize("waits", [False, True], ids=["returns", "waits"])
async def test_a_call_submitted_once_the_run_ended_never_starts(waits: bool) -> None:
    # As a frame left in the buffer would be, by a callback between the runner's
    # cancellation and the runner's task taking it: the call must not run as a step of it.
    log = Log()
    runner = CallRunner(on_done=log.count)
    await _idle_runner(runner, log)
    failed: list[BaseException] = []

    async def late() -> None:
        log.ended.append("started")
        if waits:
            await asyncio.sleep(10)

    def callback() -> None:
        runner.cancel()
        try:
            runner.submit(late())
        except BaseException as exc:
            failed.append(exc)

    asyncio.get_running_loop().call_soon(callback)
    async with asyncio.timeout(5):
        while runner.tasks:
            await asyncio.sleep(0.01)
    assert log.ended == ["first"]
    assert failed == []


async def test_a_waiting_call_closed_where_it_waits_ends_in_its_own_context() -> None:
    # A waiting call whose task is closed (dropped, and closed as it is collected) cleans up
    # in its own context: a context variable it set is still there, and its reset works.
    ended: list[str] = []

    @types.coroutine
    def wait() -> Generator[str, None, None]:
        yield "waiting"

    async def call() -> None:
        token = _seen.set("mine")
        try:
            await wait()
        finally:
            ended.append(_seen.get())
            _seen.reset(token)

    context = contextvars.copy_context()
    waiting = call()
    resumed = _runner._resume(context, waiting, context.run(waiting.send, None), None)
    assert resumed.send(None) == "waiting"
    resumed.close()
    assert ended == ["mine"]
