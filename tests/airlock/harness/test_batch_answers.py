"""What the model is told about a batch a session finishes: an item whose earlier send may
have acted is never called denied, nor promised a resend a session that may no longer make
it will not do; and a model's ``write_status`` starts no send once the session's time is up,
while the application's own ``resume`` (not counted against the budget) sends every item."""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest

from airlock import Budget, ModelResult, Session
from airlock.policies import Principal
from tests.airlock.harness.batch_world import BatchWorld, body

pytestmark = [
    pytest.mark.anyio,
    # A session that may no longer make the write reaches no tool at all, and is told so.
    pytest.mark.filterwarnings("ignore::airlock.harness.NoToolsWarning"),
]

READER = Principal(user_id="alice", tenant_id="acme", scopes=frozenset({"billing.read"}))


async def _told(how: str, again: Session, batch_id: str) -> ModelResult:
    if how == "resume":
        return await again.resume(batch_id)
    if how == "write_status":
        return await again.write_status(batch_id)
    told = [r for r in await again.settle_writes() if body(r).get("batch_id") == batch_id]
    [answer] = told
    return answer


# (case, items the batch holds, items approved before the reply is lost, counts told)
REFUSED = [
    ("its one item may have happened", 1, 1, {"unknown": 1}),
    ("one may have happened, one was never sent", 2, 1, {"unknown": 1, "denied": 1}),
]


@pytest.mark.parametrize("how", ["resume", "write_status", "settle"])
@pytest.mark.parametrize(
    ("case", "items", "approved", "counts"), REFUSED, ids=[row[0] for row in REFUSED]
)
async def test_an_item_that_may_have_happened_is_never_told_as_denied_or_resent(
    world: BatchWorld, how: str, case: str, items: int, approved: int, counts: dict[str, int]
) -> None:
    session = world.session()
    batch = await world.propose(session, [f"inv_{21 + n}" for n in range(items)])
    for preview_id in batch.items[:approved]:
        world.approve(preview_id)
    world.system.inject("lose_reply")  # the refund is made, its answer lost
    first = body(await session.resume(batch.id))
    assert first["counts"]["unknown"] == 1, first
    for preview_id in batch.items[approved:]:
        world.approve(preview_id)
    sent = world.system.sends()

    # Alice, her write scope taken away, in a session rebuilt from the ledger.
    again = world.harness.resume_session(READER, session.run_id)
    said = body(await _told(how, again, batch.id))

    assert world.system.sends() == sent  # nothing was sent (nor resent)
    assert world.system.effects() == 1  # the refund made before stands
    assert (said["status"], said["counts"]) == ("unknown", counts)
    message = said["message"]
    assert "may have happened" in message
    assert "reconcile" in message
    assert "sends them again" not in message
    assert "Resume this batch" not in message
    assert said["grant_refused_unknown"] == list(batch.items[:approved])
    # Settling denies an item as a paused write of the run first (restored with the batch),
    # and tells it so on its own; the batch's answer counts it.
    denied = counts.get("denied", 0) if how != "settle" else 0
    assert said.get("grant_refused", []) == list(batch.items[approved:])[:denied]
    if denied:
        assert f"{denied} item(s) were denied" in message
        assert "nothing was sent for them" in message
    else:
        assert "denied" not in message
        assert "nothing was sent" not in message
    assert again.pending_batches() == []  # nothing this session does will move it on


SECONDS = 2.0
"""The session's time budget."""
LATENCY = 1.2
"""How long the system of record takes over each send."""
SLACK = 0.5
"""Scheduling slack on a loaded machine, well under one send."""
ITEMS = 17
"""Three rounds of sends: a batch commits 8 items at a time."""

# (how the batch is finished, whether the session's time bounds it)
FINISHES = [("write_status", True), ("resume", False)]


@pytest.mark.parametrize(("how", "bounded"), FINISHES, ids=[row[0] for row in FINISHES])
async def test_write_status_starts_no_send_once_the_session_time_is_up(
    tmp_path: Path, how: str, bounded: bool
) -> None:
    world = BatchWorld(tmp_path, budget=Budget(seconds=SECONDS))
    try:
        started = time.monotonic()
        session = world.session()
        deadline = started + SECONDS  # (the session's own starts a little later)
        batch = await world.propose(session, [f"inv_{n}" for n in range(1, ITEMS + 1)])
        world.approve_batch(batch)
        world.system.latency = LATENCY
        await anyio.sleep(deadline - 0.5 - time.monotonic())

        answer = await _told(how, session, batch.id)

        answered = time.monotonic()
        said = body(answer)
        if not bounded:  # the application's own resume: every item, however long it takes
            assert (said["status"], world.system.effects()) == ("committed", ITEMS)
            return
        assert answered <= deadline + LATENCY + SLACK, f"{answered - deadline:.2f} s past"
        sent = world.system.sends()
        assert 0 < sent < ITEMS  # the rest were never started once the time was up
        assert said["status"] == "undecided"
        assert said["counts"] == {"committed": sent, "approved": ITEMS - sent}
        assert f"before {ITEMS - sent} item(s) could be sent" in said["message"]
        assert session.pending_batches() == [batch.id]  # resumed later, it sends the rest
        world.system.latency = 0.0
        assert body(await session.resume(batch.id))["status"] == "committed"
        assert (world.system.sends(), world.system.effects()) == (ITEMS, ITEMS)
    finally:
        world.close()
