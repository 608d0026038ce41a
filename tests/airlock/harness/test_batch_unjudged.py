"""A batch item whose recorded effects do not read back (another version wrote them): the
session's settling, which runs every second under ``serve``, tells its conflict once, naming
the batch and the item, and commits the items approved with it that it can judge."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from tests.airlock.harness.batch_world import BatchWorld, body

pytestmark = pytest.mark.anyio


def _unreadable(root: Path, preview_id: str) -> None:
    with sqlite3.connect(root / "ledger.db") as db:
        db.execute(
            "UPDATE previews SET effects = ? WHERE id = ?",
            (json.dumps(["write(billing:refund/{invoice_id})", "spend(1200 USD)"]), preview_id),
        )


async def test_an_unjudged_batch_item_is_told_once_and_the_rest_are_committed(
    world: BatchWorld, tmp_path: Path
) -> None:
    session = world.session()
    batch = await world.propose(session, ["inv_21", "inv_22", "inv_23"])
    world.approve_batch(batch)
    odd, *rest = batch.items
    _unreadable(tmp_path, odd)

    told = [await session.settle_writes() for _ in range(4)]

    [first], *later = told
    assert later == [[], [], []]
    said = body(first)
    assert (first.code, said["retryable"]) == ("conflict", False), first.content
    assert (said["batch_id"], said["preview_id"], said["unjudged"]) == (batch.id, odd, [odd])
    assert "cannot be committed now" in said["message"]
    assert world.system.sends() == len(rest)
    assert world.states(batch.items) == ["approved"] + ["committed"] * len(rest)
