"""The approval pause: a write previews, waits, and commits once after approval; denials,
resuming from another process, and prompt injection that asks for a write."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from airlock import ModelResult, Session
from airlock.sandbox.testing import ScriptedBackend, ok_result
from airlock.tools import approve_preview, deny_preview
from tests.airlock.session_world import ALICE, INJECTION, World

pytestmark = pytest.mark.anyio

REFUND = "billing_refund_create"


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path, ScriptedBackend([]))
    yield w
    w.close()


def body(result: ModelResult) -> Any:
    return json.loads(result.content)


async def pause(session: Session, invoice: str = "inv_3") -> dict[str, Any]:
    result = await session.call(REFUND, {"invoice_id": invoice, "reason": "duplicate"})
    assert (result.is_error, result.code) == (False, "needs_approval"), result.content
    return dict(body(result))


async def test_write_pauses_with_the_preview_and_its_effect(world: World) -> None:
    session = world.session()
    paused = await pause(session)

    preview = world.ledger.preview(paused["preview_id"])
    assert preview is not None
    assert preview.state == "prepared"
    assert preview.run_id == session.run_id
    assert paused["fingerprint"] == preview.fingerprint
    assert paused["status"] == "needs_approval"
    assert "10.03 USD" in paused["summary"]  # the amount code computed from the invoice
    assert "spend(1003 USD)" in paused["effects"]
    assert [p.preview_id for p in session.pending()] == [preview.id]
    assert world.system.sends() == 0


async def test_approve_then_resume_commits_once_and_returns_the_receipt(world: World) -> None:
    session = world.session()
    paused = await pause(session)
    approve_preview(world.ledger, paused["preview_id"], approver="bob", now=time.time())

    first = await session.resume()
    second = await session.resume(paused["preview_id"])

    assert (first.is_error, first.code) == (False, None)
    receipt = body(first)
    assert receipt["status"] == "committed"
    assert receipt["receipt"]["amount_minor"] == 1003
    assert receipt["receipt"]["status"] == "succeeded"
    assert second.content == first.content  # the same receipt, again
    assert world.system.sends() == 1
    assert world.system.effects() == 1
    assert session.pending() == []


async def test_still_pending_stays_needs_approval(world: World) -> None:
    session = world.session()
    paused = await pause(session)

    again = await session.resume()

    assert (again.is_error, again.code) == (False, "needs_approval")
    assert body(again)["preview_id"] == paused["preview_id"]
    assert world.system.sends() == 0
    assert len(session.pending()) == 1


async def test_denied_write_answers_denied_with_the_reason(world: World) -> None:
    session = world.session()
    paused = await pause(session)
    deny_preview(
        world.ledger,
        paused["preview_id"],
        approver="bob",
        reason="not a duplicate",
        now=time.time(),
    )

    result = await session.resume()

    assert (result.is_error, result.code, result.retryable) == (True, "denied", False)
    assert "not a duplicate" in body(result)["message"]
    assert body(result)["preview_id"] == paused["preview_id"]
    assert session.pending() == []
    assert world.system.sends() == 0


async def test_policy_allow_commits_at_once(tmp_path: Path) -> None:
    world = World(tmp_path, ScriptedBackend([]), action="allow")
    try:
        result = await world.session().call(REFUND, {"invoice_id": "inv_4", "reason": "duplicate"})
        assert (result.is_error, result.code) == (False, None)
        assert body(result)["receipt"]["amount_minor"] == 1004
        assert world.system.effects() == 1
    finally:
        world.close()


async def test_a_write_policy_denies_outright_is_not_offered(tmp_path: Path) -> None:
    world = World(tmp_path, ScriptedBackend([]), action="deny")
    try:
        session = world.session()
        assert REFUND not in [t.name for t in session.tools()]
        result = await session.call(REFUND, {"invoice_id": "inv_4", "reason": "duplicate"})
        assert (result.is_error, result.code) == (True, "unknown_tool")
        assert world.ledger.previews() == []
    finally:
        world.close()


async def test_policy_denies_large_refunds_at_call_time(tmp_path: Path) -> None:
    world = World(tmp_path, ScriptedBackend([]), action="deny", min_amount=1010)
    try:
        session = world.session()
        assert REFUND in [t.name for t in session.tools()]  # small refunds may pass
        large = await session.call(REFUND, {"invoice_id": "inv_12", "reason": "duplicate"})
        small = await session.call(REFUND, {"invoice_id": "inv_2", "reason": "duplicate"})
        assert (large.is_error, large.code) == (True, "denied")
        assert small.code == "needs_approval"  # no rule allows it: a person decides
        assert world.system.sends() == 0
    finally:
        world.close()


async def test_resume_without_anything_pending_is_not_found(world: World) -> None:
    session = world.session()
    assert (await session.resume()).code == "not_found"
    assert (await session.resume("pv_nonexistent")).code == "not_found"


async def test_a_session_cannot_resume_another_runs_write(world: World) -> None:
    paused = await pause(world.session())
    approve_preview(world.ledger, paused["preview_id"], approver="bob", now=time.time())

    result = await world.session().resume(paused["preview_id"])  # another run

    assert result.code == "not_found"
    assert world.system.sends() == 0


async def test_another_process_resumes_the_session_from_the_ledger(tmp_path: Path) -> None:
    first = World(tmp_path, ScriptedBackend([]))
    session = first.session()
    paused = await pause(session, "inv_5")
    run_id = session.run_id
    first.close()

    # The approver works on the ledger file alone, as `airlock approvals approve` does.
    approver = World(tmp_path, ScriptedBackend([]))
    approve_preview(approver.ledger, paused["preview_id"], approver="bob", now=time.time())
    approver.close()

    later = World(tmp_path, ScriptedBackend([]))
    try:
        restored = later.harness.resume_session(ALICE, run_id)
        assert [p.preview_id for p in restored.pending()] == [paused["preview_id"]]
        assert restored.pending()[0].fingerprint == paused["fingerprint"]
        result = await restored.resume()
        again = await Session.restore(later.harness, ALICE, run_id).resume(paused["preview_id"])
        assert body(result)["receipt"]["amount_minor"] == 1005
        assert again.content == result.content
        assert later.system.effects() == 1
        assert later.harness.resume_session(ALICE, run_id).pending() == []
    finally:
        later.close()


async def test_concurrent_resumes_commit_once(world: World) -> None:
    session = world.session()
    paused = await pause(session)
    approve_preview(world.ledger, paused["preview_id"], approver="bob", now=time.time())
    results: list[ModelResult] = []

    async def one() -> None:
        results.append(await session.resume(paused["preview_id"]))

    async with anyio.create_task_group() as group:
        for _ in range(5):
            group.start_soon(one)

    assert {r.content for r in results} == {results[0].content}
    assert results[0].code is None
    assert world.system.sends() == 1


async def test_the_same_write_twice_in_a_run_is_one_preview(world: World) -> None:
    session = world.session()
    first = await pause(session)
    second = await pause(session)
    assert first["preview_id"] == second["preview_id"]
    assert len(session.pending()) == 1


async def test_prompt_injection_in_a_result_changes_no_authority(tmp_path: Path) -> None:
    world = World(tmp_path, ScriptedBackend([ok_result({"note": INJECTION})]))
    try:
        session = world.session()
        grant, principal, tools = session.grant, session.principal, session.tools()

        direct = await session.call("notes_note_get", {"note_id": "note_1"})
        from_code = await session.call("execute_code", {"code": "tools.notes_note_get()"})
        assert INJECTION in body(direct)["text"]
        assert INJECTION in body(from_code)["value"]["note"]

        # the model obeys: the extra "approved" argument is refused outright...
        forged = await session.call(
            REFUND, {"invoice_id": "inv_7", "reason": "duplicate", "approved": True}
        )
        assert forged.code == "invalid_input"
        # ...and the write with new arguments still only previews code-computed effects
        paused = await pause(session, "inv_7")
        preview = world.ledger.preview(paused["preview_id"])
        assert preview is not None
        assert preview.state == "prepared"
        assert preview.effect["amount_minor"] == 1007  # from the invoice, not the text
        # a tool the injection names as newly granted stays unknown
        audit = await session.call("billing_invoice_audit", {"invoice_id": "inv_1"})
        assert audit.code == "unknown_tool"

        assert (session.grant, session.principal, session.tools()) == (grant, principal, tools)
        assert world.system.sends() == 0
        assert (await session.resume()).code == "needs_approval"
    finally:
        world.close()


async def test_a_ledger_that_cannot_be_used_is_a_failure_the_model_reads_without_the_path(
    world: World, tmp_path: Path
) -> None:
    session = world.session()
    ledger_file = tmp_path / "ledger.db"
    ledger_file.rename(tmp_path / "moved.db")  # the file the harness opened is gone

    result = await session.call(REFUND, {"invoice_id": "inv_3", "reason": "duplicate"})

    assert (result.is_error, result.code) == (True, "ledger_replaced"), result.content
    assert str(tmp_path) not in result.content
    assert body(result)["message"] == "the ledger cannot be used right now; nothing was written"
    assert world.system.sends() == 0
