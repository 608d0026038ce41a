"""Every approved write completes: a session commits the paused writes a person approved
meanwhile, without the model asking again, and tells the model once, on its next answer."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from airlock import ModelResult, Session
from airlock.sandbox.testing import ScriptedBackend
from airlock.tools import approve_preview, deny_preview
from tests.airlock.session_world import ALICE, World

pytestmark = pytest.mark.anyio

REFUND = "billing_refund_create"
READ = ("notes_note_get", {"note_id": "note_1"})


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path, ScriptedBackend([]))
    yield w
    w.close()


def body(result: ModelResult) -> Any:
    return json.loads(result.content)


async def pause(session: Session, invoice: str = "inv_3") -> str:
    result = await session.call(REFUND, {"invoice_id": invoice, "reason": "duplicate"})
    assert result.code == "needs_approval", result.content
    return str(body(result)["preview_id"])


def approve(world: World, preview_id: str) -> None:
    approve_preview(world.ledger, preview_id, approver="bob", now=time.time())


def deny(world: World, preview_id: str) -> None:
    deny_preview(world.ledger, preview_id, approver="bob", reason="not ours", now=time.time())


@pytest.mark.parametrize(
    ("decide", "status", "sends"),
    [
        (approve, "committed", 1),
        (deny, "denied", 0),
    ],
)
async def test_the_next_answer_carries_the_outcome_once(
    world: World, decide: Any, status: str, sends: int
) -> None:
    session = world.session()
    preview_id = await pause(session)
    decide(world, preview_id)

    answer = await session.call(*READ)
    assert not answer.is_error, answer.content
    [settled] = body(answer)["settled_writes"]
    assert settled["preview_id"] == preview_id
    assert settled.get("status", settled.get("error")) == status
    assert world.system.sends() == sends
    assert session.pending() == []
    later = await session.call(*READ)
    assert "settled_writes" not in body(later)  # told once
    assert world.system.sends() == sends


async def test_an_approved_write_commits_once_and_a_resume_gets_the_same_receipt(
    world: World,
) -> None:
    session = world.session()
    preview_id = await pause(session)
    approve(world, preview_id)
    answer = await session.call(*READ)
    [settled] = body(answer)["settled_writes"]
    assert settled["receipt"]["amount_minor"] == 1003
    resumed = await session.resume(preview_id)
    assert body(resumed)["receipt"] == settled["receipt"]
    assert world.system.sends() == 1


async def test_a_write_still_waiting_stays_paused(world: World) -> None:
    session = world.session()
    preview_id = await pause(session)
    answer = await session.call(*READ)
    assert "settled_writes" not in body(answer)
    assert [p.preview_id for p in session.pending()] == [preview_id]
    assert await session.settle_writes() == []


async def test_an_expired_write_is_reported_as_expired(world: World, tmp_path: Path) -> None:
    session = world.session()
    preview_id = await pause(session)
    with sqlite3.connect(tmp_path / "ledger.db") as conn:
        conn.execute("UPDATE previews SET expires = 1 WHERE id = ?", (preview_id,))
    [settled] = await session.settle_writes()
    assert body(settled)["error"] == "preview_expired"
    assert body(settled)["preview_id"] == preview_id
    assert session.pending() == []
    assert world.system.sends() == 0


@pytest.mark.parametrize(
    ("fault", "system_has_it"),
    [
        ("fail_before", False),  # the request never arrived
        ("lose_reply", True),  # it arrived and acted; its answer was lost
    ],
)
async def test_a_write_whose_sends_stay_ambiguous_is_told_unknown_and_waited_on_no_more(
    world: World, fault: Any, system_has_it: bool
) -> None:
    from airlock.harness._paused import UNKNOWN_TRIES

    session = world.session()
    preview_id = await pause(session)
    world.system.inject(fault, times=UNKNOWN_TRIES + 5)
    approve(world, preview_id)
    told: list[ModelResult] = []
    for _ in range(UNKNOWN_TRIES + 2):  # a loop that waits for the pending writes
        told += await session.settle_writes()
    [outcome] = told
    said = body(outcome)
    assert (outcome.code, said["outcome"], said["preview_id"]) == (
        "ambiguous_write",
        "unknown",
        preview_id,
    )
    assert not outcome.retryable
    assert "may or may not have happened" in said["message"]
    assert "Do not call the tool again" in said["message"]
    assert session.pending() == []  # nothing waits on it any more
    assert world.system.sends() == UNKNOWN_TRIES  # resent with its key a bounded number
    preview = world.ledger.preview(preview_id)
    assert preview is not None
    assert preview.state == "unknown"  # reconcile settles it
    assert [json.loads(r.content) for r in session.take_settled()] == [said]


async def test_a_write_committed_by_another_process_is_reported_with_its_receipt(
    world: World, tmp_path: Path
) -> None:
    session = world.session()
    preview_id = await pause(session)
    other = World(tmp_path, ScriptedBackend([]))  # `approvals approve --commit`, say
    try:
        preview = other.ledger.preview(preview_id)
        assert preview is not None
        other.harness.writes.approve(preview_id, approver="bob")  # type: ignore[union-attr]
        await other.harness.writes.commit(preview_id, preview.fingerprint, ALICE)  # type: ignore[union-attr]
    finally:
        other.close()
    [settled] = body(await session.call(*READ))["settled_writes"]
    assert settled["status"] == "committed"
    assert world.system.sends() == 1


async def test_the_watcher_commits_without_any_call(world: World) -> None:
    session = world.session()
    preview_id = await pause(session)
    async with anyio.create_task_group() as group:
        group.start_soon(lambda: session.watch_writes(interval=0.01))
        approve(world, preview_id)
        with anyio.fail_after(10):
            while session.pending():
                await anyio.sleep(0.01)
        group.cancel_scope.cancel()
    assert session.pending() == []
    [settled] = body(await session.call(*READ))["settled_writes"]
    assert settled["status"] == "committed"
    assert world.system.sends() == 1


async def test_concurrent_calls_of_one_turn_report_a_write_once(world: World) -> None:
    session = world.session()
    for preview_id in [await pause(session, f"inv_{n}") for n in (3, 4)]:
        approve(world, preview_id)
    answers: list[ModelResult] = []

    async def one() -> None:
        answers.append(await session.call(*READ))

    async with anyio.create_task_group() as group:
        for _ in range(4):
            group.start_soon(one)
    reported = [s["preview_id"] for a in answers for s in body(a).get("settled_writes", [])]
    assert len(reported) == len(set(reported)) == 2
    assert world.system.sends() == 2


async def test_outcomes_that_would_overflow_an_answer_wait_for_a_later_one(
    tmp_path: Path,
) -> None:
    from airlock import Budget

    world = World(tmp_path, ScriptedBackend([]), budget=Budget(result_bytes=450))
    try:
        session = world.session()
        preview_id = await pause(session)
        approve(world, preview_id)
        small = await session.call(*READ)  # the read fits; with the receipt it would not
        assert not small.is_error, small.content
        assert "settled_writes" not in body(small)
        assert world.system.sends() == 1  # committed all the same
        [kept] = session.take_settled()
        assert body(kept)["status"] == "committed"
    finally:
        world.close()
