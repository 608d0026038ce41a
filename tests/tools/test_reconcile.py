"""Reconciliation: every undecided step is resolved by a query or a resend with the same key."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from airlock.tools import AmbiguousWriteError, Registry, SQLiteLedgerStore, WritePath
from airlock.tools.testing import SystemOfRecord
from tests.tools.stores import Backend

from .test_write_world import ALICE, World

pytestmark = pytest.mark.anyio


@pytest.fixture(params=[True, False], ids=["query", "resend"])
def world(tmp_path: Path, request: pytest.FixtureRequest, backend: Backend) -> Iterator[World]:
    w = World(tmp_path, with_lookup=request.param, database=backend.url)
    yield w
    w.close()


async def _unknown(world: World, invoice: str, fault: str) -> str:
    preview = await world.prepare(invoice)
    world.system.inject(fault)  # type: ignore[arg-type]
    with pytest.raises(AmbiguousWriteError):
        await world.writes.commit(preview.id, preview.fingerprint, ALICE)
    return preview.id


@pytest.mark.parametrize("fault", ["lose_reply", "fail_before"])
async def test_unknown_steps_are_resolved_without_a_second_effect(world: World, fault: str) -> None:
    preview_id = await _unknown(world, "inv_30", fault)

    [resolution] = await world.writes.reconcile()

    assert (resolution.preview_id, resolution.before) == (preview_id, "unknown")
    assert (resolution.outcome, resolution.after) == ("committed", "committed")
    assert resolution.receipt is not None
    assert world.system.effects() == 1
    assert len(world.ledger.receipts()) == 1
    history = world.ledger.history(preview_id)
    assert history[-2].how == "claimed by reconcile"
    assert history[-1].how in ("queried", "resent with the same key")
    if fault == "lose_reply" and world.writes.registry.get("billing_refund_create").write.lookup:  # type: ignore[union-attr]
        assert resolution.how.startswith("queried")
        assert world.system.sends() == 1  # a query, not a resend


async def test_a_step_stays_unknown_while_the_system_cannot_answer(world: World) -> None:
    preview_id = await _unknown(world, "inv_31", "fail_before")
    world.system.inject("fail_before", times=2)
    if world.writes.registry.get("billing_refund_create").write.lookup is None:  # type: ignore[union-attr]
        [resolution] = await world.writes.reconcile()
        assert (resolution.outcome, resolution.after) == ("unresolved", "unknown")
    world.system.clear_faults()

    [resolution] = await world.writes.reconcile()
    assert resolution.outcome == "committed"
    assert world.system.effects() == 1
    assert world.ledger.receipt(resolution.receipt.key) is not None  # type: ignore[union-attr]
    assert preview_id == resolution.preview_id


async def test_a_live_sender_is_left_alone_until_its_lease_runs_out(world: World) -> None:
    preview = await world.prepare("inv_32")
    spec = world.registry.get("billing_refund_create")
    assert spec is not None
    world.writes._sender.claim(spec, preview, how="another task is sending", now=world.clock())

    [waiting] = await world.writes.reconcile()
    assert (waiting.outcome, waiting.after) == ("in_flight", "sending")
    assert world.system.sends() == 0

    world.clock.advance(spec.timeout + world.writes.lease_grace + 1)
    [resolved] = await world.writes.reconcile()
    assert resolved.outcome == "committed"
    assert world.system.effects() == 1


async def test_reconcile_never_sends_what_was_not_claimed_for_sending(world: World) -> None:
    await world.prepare("inv_33")  # approved by policy, never committed
    assert await world.writes.reconcile() == []
    assert world.system.sends() == 0


async def test_a_tool_missing_from_this_process_leaves_the_step_unresolved(
    tmp_path: Path,
) -> None:
    world = World(tmp_path)
    preview_id = await _unknown(world, "inv_34", "fail_before")
    world.close()
    bare = WritePath(Registry(), SQLiteLedgerStore(tmp_path / "ledger.db"))
    [resolution] = await bare.reconcile()
    assert (resolution.preview_id, resolution.outcome) == (preview_id, "unresolved")
    assert SystemOfRecord(tmp_path / "system.db").effects() == 0


def test_reconcile_runs_from_sync_code(tmp_path: Path) -> None:
    world = World(tmp_path)
    assert anyio.run(world.writes.reconcile) == []
    world.close()
