"""What the model is told when it resumes a batch its program proposed: each item's state
decides the batch's status, and an item that may have been made is never called settled."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from airlock.harness._batches import PausedBatches
from airlock.harness._commit_authority import CommitAuthority
from tests.tools.test_write_world import ALICE, ALLOW, GRANT, World

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ("faults", "status", "states"),
    [
        ((), "committed", ["committed", "committed"]),
        (("lose_reply",), "undecided", ["unknown", "committed"]),
        (("fail_before",), "undecided", ["unknown", "committed"]),
    ],
    ids=["all sent", "a reply lost", "a request lost"],
)
async def test_a_resumed_batch_says_where_its_items_stand(
    tmp_path: Path, faults: tuple[str, ...], status: str, states: list[str]
) -> None:
    world = World(tmp_path)
    previews = [await world.prepare(f"inv_{n}", approvals=ALLOW) for n in (21, 22)]
    batch = world.writes.store_batch(previews)
    authority = CommitAuthority(principal=ALICE, grant=GRANT, approvals=ALLOW)
    paused = PausedBatches(world.writes, ALICE, "run_1", authority=authority)
    paused.hold(batch, previews)
    for fault in faults:
        world.system.inject(fault)  # type: ignore[arg-type]

    result = await paused.finish(batch.id)

    body = json.loads(result.content)
    assert body["status"] == status
    # The items are committed concurrently: the fault meets whichever request comes first.
    assert sorted(world.ledger.preview(p.id).state for p in previews) == sorted(states)
    assert (batch.id in paused.waiting()) is (status == "undecided")
    world.close()
