"""A batch's items share the event loop's turns: however many workers run them, together they
hold the loop ``TURN_S`` at most in one turn (one item at least), as single calls do.

Items of a tool that never waits ran back to back in one worker's step, whatever the time:
nine batch frames of a thousand reads held the loop 60 to 112 ms, against 17 to 30 ms for the
same reads as single frames. ``TURN_S`` is set to nothing (a turn per item) or to all the time
needed (no turn given away), so the tests count turns, not milliseconds.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from airlock.bridge import BridgeLimits, ToolSession, _runner, encode_frame, serve_run
from airlock.bridge._runner import SharedTurns
from tests.bridge.records import ALICE, GRANT, build_registry
from tests.bridge.test_fuzz import CollectingWriter, _results, serving

pytestmark = pytest.mark.anyio
ITEMS = 40


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Turns:
    """Counts the event loop's turns while it runs (another run's work on the same loop)."""

    def __init__(self) -> None:
        self.count = 0
        self._task = asyncio.get_running_loop().create_task(self._count())

    async def _count(self) -> None:
        while True:
            self.count += 1
            await asyncio.sleep(0)

    def stop(self) -> int:
        self._task.cancel()
        return self.count


@pytest.mark.parametrize(("turn_s", "batches"), [(0.0, 1), (0.0, 3), (60.0, 1), (60.0, 3)])
async def test_the_items_of_a_batch_give_the_loop_away_after_their_turn(
    monkeypatch: pytest.MonkeyPatch, turn_s: float, batches: int
) -> None:
    monkeypatch.setattr(_runner, "TURN_S", turn_s)
    session = ToolSession(
        registry=build_registry(slow_s=0.0),
        principal=ALICE,
        grant=GRANT,
        limits=BridgeLimits(max_concurrency=4),
    )
    reader = asyncio.StreamReader()
    served, writer = serving(reader, session, max_done_bytes=1 << 20)
    items = [{"record_id": f"rec_{n}"} for n in range(1, ITEMS + 1)]
    turns = Turns()
    for n in range(1, batches + 1):  # (a read brings them at once: one turn handles them)
        reader.feed_data(
            encode_frame({"type": "batch", "id": n, "tool": "records_item_get", "items": items})
        )
    async with asyncio.timeout(10):
        while len(_results(writer)) < batches:
            await asyncio.sleep(0)
    counted = turns.stop()
    reader.feed_data(encode_frame({"type": "done", "result": {}}))
    reader.feed_eof()
    assert await served == {"type": "done", "result": {}}
    answers = _results(writer)
    assert all(a["ok"] and all(o["ok"] for o in a["value"]) for a in answers)
    # No time: a turn of the loop per item, however many workers and batches; all the
    # time needed: a few turns for the whole (the workers' start, the answers).
    if turn_s == 0.0:
        assert counted >= batches * ITEMS
    else:
        assert counted < 12


@pytest.mark.parametrize("turn_s", [0.0, 60.0])
async def test_tasks_sharing_turns_run_one_item_at_least_per_turn(
    monkeypatch: pytest.MonkeyPatch, turn_s: float
) -> None:
    monkeypatch.setattr(_runner, "TURN_S", turn_s)
    shared = SharedTurns()
    turns = Turns()
    ran: list[int] = []  # the loop's turn each item ran in

    async def worker() -> None:
        for _ in range(10):
            await shared.take()
            ran.append(turns.count)

    async with asyncio.timeout(10):
        await asyncio.gather(*(worker() for _ in range(4)))
    turns.stop()
    assert len(ran) == 40
    if turn_s == 0.0:  # one item a turn, all workers together: never two in one turn
        assert len(set(ran)) == 40
    else:  # one turn for all (the first waits for it to begin)
        assert len(set(ran)) == 1


class Tasks:
    """The most tasks alive on the loop at the start of any of its turns."""

    def __init__(self) -> None:
        self.most = 0
        self._task = asyncio.get_running_loop().create_task(self._count())

    async def _count(self) -> None:
        while True:
            self.most = max(self.most, len(asyncio.all_tasks()))
            await asyncio.sleep(0)

    def stop(self) -> int:
        self._task.cancel()
        return self.most


async def _serve_batches(tool: str, batches: int, items: int, *, slow_s: float) -> float:
    """Serve ``batches`` batch frames of ``items`` reads (of ``max_concurrency`` 8); how long
    until all were answered."""
    session = ToolSession(
        registry=build_registry(slow_s=slow_s),
        principal=ALICE,
        grant=GRANT,
        limits=BridgeLimits(max_concurrency=8),
    )
    reader = asyncio.StreamReader()
    served, writer = serving(reader, session, max_done_bytes=1 << 20)
    frames = [
        {"type": "batch", "id": n, "tool": tool,
         "items": [{"record_id": f"rec_{k}"} for k in range(1, items + 1)]}
        for n in range(1, batches + 1)
    ]  # fmt: skip
    began = time.monotonic()
    reader.feed_data(b"".join(encode_frame(f) for f in frames))
    async with asyncio.timeout(10):
        while len(_results(writer)) < batches:
            await asyncio.sleep(0)
    took = time.monotonic() - began
    reader.feed_data(encode_frame({"type": "done", "result": {}}))
    reader.feed_eof()
    assert await served == {"type": "done", "result": {}}
    answers = _results(writer)
    assert all(a["ok"] and all(o["ok"] for o in a["value"]) for a in answers)
    return took


async def test_a_batch_whose_items_never_wait_keeps_one_worker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A turn per item: workers that waited for the turn each woke at every turn of the
    # loop, to find it spent (10 batches of 1,000: one wasted step an item, ~10% of the time).
    monkeypatch.setattr(_runner, "TURN_S", 0.0)
    tasks = Tasks()
    await _serve_batches("records_item_get", 3, ITEMS, slow_s=0.0)
    # This test's, the run's, the counter's and an idle runner's, and one a batch (its only
    # worker; not eight).
    assert tasks.stop() <= 4 + 3


async def test_a_batch_whose_items_wait_runs_them_concurrently() -> None:
    # 16 items of 0.2 s, 8 at a time: 0.4 s, not 3.2 (the first one's wait starts the rest).
    took = await _serve_batches("records_slow_get", 1, 16, slow_s=0.2)
    assert took < 1.5


async def test_the_workers_of_a_batch_end_with_its_run() -> None:
    # The first item's wait started the other workers: the run's end cancels them all.
    session = ToolSession(
        registry=build_registry(slow_s=5.0),
        principal=ALICE,
        grant=GRANT,
        limits=BridgeLimits(max_concurrency=8),
    )
    reader = asyncio.StreamReader()
    items = [{"record_id": f"rec_{k}"} for k in range(1, 17)]
    reader.feed_data(
        encode_frame({"type": "batch", "id": 1, "tool": "records_slow_get", "items": items})
    )
    before = asyncio.all_tasks()
    began = time.monotonic()
    outcome = await serve_run(
        reader,
        CollectingWriter(),  # type: ignore[arg-type]
        session=session,
        deadline=time.monotonic() + 0.3,
        max_done_bytes=1 << 20,
    )
    assert getattr(outcome, "code", None) == "timeout"
    assert time.monotonic() - began < 2
    await asyncio.sleep(0)
    assert asyncio.all_tasks() <= before
