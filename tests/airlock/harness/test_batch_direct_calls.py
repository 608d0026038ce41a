"""A change that waits as an item of a batch, then asked for directly by the model (the same
intent answers the same preview): it stays where it waits, in the batch, and is committed
and told once, never held twice nor committed outside its batch."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.airlock.harness.batch_world import PEEK, REFUND, BatchWorld, body

pytestmark = pytest.mark.anyio


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


def _taken(world: BatchWorld, item: str, *, to: str) -> None:
    """Another process claimed the approved ``item`` to send it; ``unknown``: that send
    got no definite answer."""
    now = time.time()
    world.ledger.transition(
        item,
        expect={"approved"},
        to="sending",
        at=now,
        actor="other",
        how="test",
        owner="other-proc",
        lease_until=now + 600,
    )
    if to == "unknown":
        world.ledger.transition(
            item, expect={"sending"}, to="unknown", at=now, actor="other", how="timeout"
        )


# the item's state when asked for directly -> (the refund rule's action, what a person or
# another process did to the batch since, the answer's code, its status or error, what its
# message says and what it must not say)
HELD = {
    "waiting for a person": (
        "ask",
        None,
        "needs_approval",
        "already_waiting",
        "once a person approves the batch",
        "approved",
    ),
    "approved by a policy rule": (
        "allow",
        None,
        None,
        "already_waiting",
        "approved by policy",
        "once a person approves",
    ),
    "approved by a person": (
        "ask",
        "approved",
        None,
        "already_waiting",
        "approved by a person",
        "by policy",
    ),
    "being sent": ("ask", "sending", None, "sending", "being sent", "once a person approves"),
    "outcome unknown": (
        "ask",
        "unknown",
        "ambiguous_write",
        "ambiguous_write",
        "may or may not have happened",
        "once a person approves",
    ),
}


@pytest.mark.parametrize("case", list(HELD), ids=list(HELD))
async def test_a_batch_item_is_answered_as_it_stands_in_its_batch(
    tmp_path: Path, case: str
) -> None:
    """(A policy-approved batch is committed by the settling each call begins with: a
    direct call finds its item so only while that settling cannot send.)"""
    action, since, code, status, says, never = HELD[case]
    world = BatchWorld(tmp_path, action=action)
    try:
        session = world.session()
        batch = await world.propose(session, ["inv_1"])
        item = batch.items[0]
        if since is not None:
            world.approve_batch(batch)
        if since in ("sending", "unknown"):
            _taken(world, item, to=since)
        preview = world.ledger.preview(item)
        assert preview is not None

        answer = session._batches.held_item(preview)

        assert answer is not None
        said = body(answer)
        assert (answer.code, answer.is_error) == (code, code == "ambiguous_write")
        assert (said.get("status") or said.get("error"), said["batch_id"]) == (status, batch.id)
        assert said["preview_id"] == item
        assert says in said["message"]
        assert never not in said["message"]
        if code == "ambiguous_write":
            assert said["outcome"] == "unknown"
        assert world.system.sends() == 0
    finally:
        world.close()


async def test_a_committed_batch_item_asked_for_directly_answers_its_receipt(
    world: BatchWorld,
) -> None:
    session = world.session()
    batch = await world.propose(session, ["inv_1"])
    world.approve_batch(batch)
    await session.call(*PEEK)  # settles the batch: its item is committed
    preview = world.ledger.preview(batch.items[0])
    assert preview is not None
    assert preview.state == "committed"
    assert session._batches.held_item(preview) is None  # the caller answers it, as any

    direct = await session.call(REFUND, {"invoice_id": "inv_1", "reason": "duplicate"})

    assert (direct.code, body(direct)["preview_id"]) == ("already_committed", preview.id)
    assert (world.system.sends(), world.system.effects()) == (1, 1)
