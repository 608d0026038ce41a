"""A change that waits as an item of a batch, then asked for directly by the model (the same
intent answers the same preview): it stays where it waits, in the batch, and is committed
and told once, never held twice nor committed outside its batch."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.airlock.harness.batch_world import PEEK, REFUND, BatchWorld, body

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def world(tmp_path: Path) -> Iterator[BatchWorld]:
    w = BatchWorld(tmp_path)
    yield w
    w.close()


@pytest.mark.parametrize("calls", [1, 2], ids=["asked once", "asked twice"])
async def test_a_batch_item_asked_for_directly_waits_in_its_batch_and_is_told_once(
    world: BatchWorld, calls: int
) -> None:
    session = world.session()
    batch = await world.propose(session, ["inv_1", "inv_2"])
    item = batch.items[0]

    for _ in range(calls):
        direct = await session.call(REFUND, {"invoice_id": "inv_1", "reason": "duplicate"})
        said = body(direct)
        assert (direct.code, direct.is_error) == ("needs_approval", False)
        assert (said["status"], said["batch_id"], said["preview_id"]) == (
            "already_waiting",
            batch.id,
            item,
        )
        assert "already waits" in said["message"]
    assert session.pending() == []  # not held a second time, as a paused write
    assert session.pending_batches() == [batch.id]

    world.approve_batch(batch)
    told = [
        t
        for _ in range(3)
        for t in body(await session.call(*PEEK)).get("settled_writes") or []
        if t.get("preview_id") == item
        or any(item in ids for ids in t.get("preview_ids", {}).values())
    ]
    assert len(told) == 1, told
    assert told[0]["batch_id"] == batch.id
    assert world.states(batch.items) == ["committed", "committed"]
    assert (world.system.sends(), world.system.effects()) == (2, 2)


# the item's state when asked for directly -> (the answer's code, what its message says)
HELD = {
    "waiting for a person": ("prepared", "needs_approval", "once a person approves the batch"),
    "approved by a policy rule": ("approved", None, "approved by policy"),
}


@pytest.mark.parametrize("case", list(HELD), ids=list(HELD))
async def test_a_batch_item_is_answered_as_it_stands_in_its_batch(
    world: BatchWorld, case: str
) -> None:
    """(A policy-approved batch is committed by the settling each call begins with: a
    direct call finds its item so only while that settling cannot send.)"""
    session = world.session()
    batch = await world.propose(session, ["inv_1"])
    preview = world.ledger.preview(batch.items[0])
    assert preview is not None
    state, code, says = HELD[case]

    answer = session._batches.held_item(dataclasses.replace(preview, state=state))

    assert answer is not None
    assert (answer.code, body(answer)["batch_id"]) == (code, batch.id)
    assert says in body(answer)["message"]
    assert world.system.sends() == 0
