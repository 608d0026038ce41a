"""Settling approved writes before a call stays within the session's time budget, and a
batch item whose send got no definite answer is resent by the session's own settling, a
bounded number of times, as a direct write is."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from airlock import Budget, ModelResult
from airlock.harness._paused import UNKNOWN_TRIES
from tests.airlock.harness.batch_world import PEEK, BatchWorld, body

pytestmark = pytest.mark.anyio

SECONDS = 4.0
"""The session's time budget."""
LATENCY = 1.2
"""How long the system of record takes over each send."""
SLACK = 0.5
"""Scheduling slack on a loaded machine, well under one send."""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def world(tmp_path: Path) -> Iterator[BatchWorld]:
    w = BatchWorld(tmp_path, budget=Budget(seconds=SECONDS))
    yield w
    w.close()


# A batch commits 8 items at a time: 17 items are three rounds of sends.
OVERRUNS = [("direct writes", 3), ("one batch", 17)]


@pytest.mark.parametrize(("shape", "count"), OVERRUNS, ids=[row[0] for row in OVERRUNS])
async def test_a_call_near_the_end_of_the_budget_answers_within_it_plus_one_send(
    world: BatchWorld, shape: str, count: int
) -> None:
    started = time.monotonic()
    session = world.session()
    deadline = started + SECONDS  # (the session's own starts a little later)
    invoices = [f"inv_{n}" for n in range(1, count + 1)]
    if shape == "direct writes":
        for preview_id in [await world.pause(session, invoice) for invoice in invoices]:
            world.approve(preview_id)
    else:
        world.approve_batch(await world.propose(session, invoices))
    world.system.latency = LATENCY
    await anyio.sleep(deadline - 0.5 - time.monotonic())

    answer = await session.call(*PEEK)

    answered = time.monotonic()
    assert answer.code != "limit_exceeded", answer.content  # admitted, with time left
    assert answered <= deadline + LATENCY + SLACK, f"{answered - deadline:.2f} s past"
    sent = world.system.sends()
    assert sent < count  # the rest wait: never started once the time was up
    # Nothing was lost or sent twice: a later settle (the watcher's) commits the rest once.
    world.system.latency = 0.0
    await session.settle_writes()
    assert (world.system.sends(), world.system.effects()) == (count, count)
    assert session.pending() == []
    assert session.pending_batches() == []


# (fault, how many sends it spoils, what the model is told, effects in the system)
UNKNOWN_ITEMS = [
    ("a reply lost once", "lose_reply", 1, "committed", 2),
    ("a request lost once", "fail_before", 1, "committed", 2),
    ("every send lost", "fail_before", 99, "unknown", 0),
]


@pytest.mark.parametrize(
    ("case", "fault", "times", "status", "effects"),
    UNKNOWN_ITEMS,
    ids=[row[0] for row in UNKNOWN_ITEMS],
)
async def test_a_batch_item_left_unknown_is_resent_by_settling_then_told_once(
    world: BatchWorld, case: str, fault: str, times: int, status: str, effects: int
) -> None:
    session = world.session()
    batch = await world.propose(session, ["inv_21", "inv_22"])
    world.approve_batch(batch)
    world.system.inject(fault, times=times)  # type: ignore[arg-type]

    told: list[ModelResult] = []
    for _ in range(UNKNOWN_TRIES + 2):  # a loop that waits for the pending writes
        told += await session.settle_writes()
    world.system.clear_faults()

    [outcome] = told  # told once, with the final outcome
    said = body(outcome)
    assert (said["batch_id"], said["status"]) == (batch.id, status)
    assert session.pending_batches() == []  # nothing waits on it any more
    assert world.system.effects() == effects
    if status == "committed":
        assert world.states(batch.items) == ["committed", "committed"]
        assert world.system.sends() == 3  # two sends, one resend with the same key
    else:
        assert world.states(batch.items) == ["unknown", "unknown"]  # reconcile settles them
        assert world.system.sends() == 2 * UNKNOWN_TRIES  # resent a bounded number of times
        assert "may or may not have happened" in said["message"]
        assert sorted(said["preview_ids"]["unknown"]) == sorted(batch.items)
    assert session.take_settled() == told
