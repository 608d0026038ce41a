"""A program that proposes the same intent twice gets one preview back each time: a batch
holds it once, in the place it was first proposed, so committing the batch commits it once and
reports it once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .test_proposals import ProposalWorld
from .test_write_world import ALICE

pytestmark = pytest.mark.anyio


@pytest.fixture
def world(tmp_path: Path) -> Iterator[ProposalWorld]:
    w = ProposalWorld(tmp_path)
    w.system.latency = 0.2  # a send still in flight while the batch's other items settle
    yield w
    w.close()


# invoices proposed, in order -> the invoices the batch holds, in order
PROPOSED: list[tuple[list[str], list[str]]] = [
    (["inv_1", "inv_1", "inv_2"], ["inv_1", "inv_2"]),
    (["inv_1", "inv_2", "inv_1"], ["inv_1", "inv_2"]),
    (["inv_3", "inv_3"], ["inv_3"]),
    (["inv_4", "inv_5"], ["inv_4", "inv_5"]),
]


@pytest.mark.parametrize(("proposed", "held"), PROPOSED, ids=[",".join(p) for p, _ in PROPOSED])
async def test_a_batch_holds_each_proposed_preview_once(
    world: ProposalWorld, proposed: list[str], held: list[str]
) -> None:
    previews = await world.propose(*proposed)
    batch = world.writes.store_batch(previews)
    stored = world.ledger.batch(batch.id)
    assert stored is not None
    assert [world.ledger.preview(i).effect["invoice_id"] for i in stored.items] == held  # type: ignore[union-attr]

    world.writes.approve_batch(batch.id, approver="bob", fingerprint=batch.fingerprint)
    items = await world.writes.commit_batch(batch.id, ALICE)

    assert [i.state for i in items] == ["committed"] * len(held)
    assert [i.preview_id for i in items] == list(stored.items)
    assert (world.system.effects(), world.system.sends()) == (len(held), len(held))
