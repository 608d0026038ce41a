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
from tests.bridge.test_fuzz import CollectingWriter, _results

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
    writer = CollectingWriter()
    served = asyncio.create_task(
        serve_run(
            reader,
            writer,  # type: ignore[arg-type]
            session=session,
            deadline=time.monotonic() + 30,
            max_done_bytes=1 << 20,
        )
    )
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
