"""What the model is told when it resumes a batch its program proposed: each item's state
decides the batch's status, and an item that may have been made is never called settled."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from airlock.harness._batches import PausedBatches
from airlock.harness._commit_authority import CommitAuthority
from airlock.harness._paused import UNKNOWN_TRIES
from airlock.tools import Batch, Preview
from tests.tools.test_write_world import ALICE, ALLOW, GRANT, World

pytestmark = pytest.mark.anyio


async def _held(world: World, invoices: list[str]) -> tuple[list[Preview], Batch, PausedBatches]:
    """Refunds of ``invoices``, approved by policy, as one batch a session holds."""
    previews = [await world.prepare(invoice, approvals=ALLOW) for invoice in invoices]
    batch = world.writes.store_batch(previews)
    authority = CommitAuthority(principal=ALICE, grant=GRANT, approvals=ALLOW)
    paused = PausedBatches(world.writes, ALICE, "run_1", authority=authority)
    paused.hold(batch, previews)
    return previews, batch, paused


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
    previews, batch, paused = await _held(world, ["inv_21", "inv_22"])
    for fault in faults:
        world.system.inject(fault)  # type: ignore[arg-type]

    result = await paused.finish(batch.id)

    body = json.loads(result.content)
    assert body["status"] == status
    # The items are committed concurrently: the fault meets whichever request comes first.
    assert sorted(world.ledger.preview(p.id).state for p in previews) == sorted(states)
    assert (batch.id in paused.waiting()) is (status == "undecided")
    world.close()


@pytest.mark.parametrize("how", ["finish", "settle"])
async def test_an_item_whose_key_answers_for_another_change_is_told_as_such(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """An item the system of record answered for another change (a receipt mismatch) is
    neither undecided nor "no definite answer": resuming cannot change it, and an operator
    must look. It was told "resume this batch later (it sends them again with the same
    key)", and after its tries as a send that got no definite answer."""
    world = World(tmp_path)
    previews, batch, paused = await _held(world, ["inv_23", "inv_24"])
    real = world.system.send

    def send(key: str, request: Mapping[str, Any]) -> Any:
        answer = dict(real(key, request))
        return answer | {"amount_minor": 99_999} if key == previews[0].key else answer

    monkeypatch.setattr(world.system, "send", send)

    for _ in range(UNKNOWN_TRIES + 1):  # (a settle tells it once, at once)
        if how == "finish":
            told = [await paused.finish(batch.id)]
        else:
            told = []
            await paused.settle(told)
        if told:
            break
    [result] = told

    body = json.loads(result.content)
    assert body["status"] == "unknown", body
    assert body["mismatched"] == [previews[0].id]
    assert body["preview_ids"]["committed"] == [previews[1].id]
    assert "answered for another change" in body["message"]
    assert "an operator must look" in body["message"]
    assert "resume this batch later" not in body["message"].lower()
    assert "got no definite answer" not in body["message"]
    assert batch.id not in paused.waiting()  # nothing a later settle or resume moves on
    assert world.system.sends(previews[0].key) == 1  # never resent
    world.close()
