"""Two endings of a write the session must tell as they are: a ledger closed by this process
(an application shutting down) after the system of record acted is ``ambiguous_write`` with
the write's key, never a bare ``RuntimeError`` nor "nothing was written"; and a key that
answers for another change (a receipt mismatch) is final for the session: told once as the
conflict an operator must look at, and never sent again by a resume or a settle."""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from airlock import ModelResult, Session
from airlock.sandbox.testing import ScriptedBackend
from airlock.tools import SQLiteLedgerStore, approve_preview
from tests.airlock.session_world import ALICE, World

pytestmark = pytest.mark.anyio

REFUND = "billing_refund_create"
ARGS = {"invoice_id": "inv_3", "reason": "duplicate"}


def _body(result: ModelResult) -> Any:
    return json.loads(result.content)


async def _paused_and_approved(world: World, session: Session) -> str:
    paused = await session.call(REFUND, ARGS)
    assert paused.code == "needs_approval", paused.content
    preview_id = str(_body(paused)["preview_id"])
    approve_preview(world.ledger, preview_id, approver="bob", now=time.time())
    return preview_id


# -- a ledger closed while the commit is in flight ------------------------------------------


async def _by_call(world: World, session: Session) -> ModelResult:
    return await session.call(REFUND, ARGS)  # the policy allows it: committed in the call


async def _by_resume(world: World, session: Session) -> ModelResult:
    preview_id = await _paused_and_approved(world, session)
    return await session.resume(preview_id)


CLOSED_PATHS: dict[str, tuple[str, Callable[[World, Session], Awaitable[ModelResult]]]] = {
    "call": ("allow", _by_call),
    "resume": ("ask", _by_resume),
}


@pytest.mark.parametrize("path", list(CLOSED_PATHS))
async def test_a_ledger_closed_after_the_system_acted_answers_ambiguous_write(
    tmp_path: Path, path: str
) -> None:
    action, commit = CLOSED_PATHS[path]
    world = World(tmp_path, ScriptedBackend([]), action=action)
    world.system.after_commit = lambda key: world.ledger.close()
    try:
        answer = await commit(world, world.session())
    finally:
        world.system.close()

    told = _body(answer)
    assert (answer.is_error, answer.code) == (True, "ambiguous_write"), answer.content
    assert (told["retryable"], told["outcome"]) == (True, "unknown")
    reopened = SQLiteLedgerStore(tmp_path / "ledger.db")
    try:
        [step] = reopened.previews()
        assert told["idempotency_key"] == step.key
        assert step.state == "sending"  # nothing more could be recorded: reconcile's to settle
    finally:
        reopened.close()


# -- an answer for another change under the key ---------------------------------------------


def _answering_for_another_change(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    real = world.system.send

    def send(key: str, request: Mapping[str, Any]) -> Any:
        return dict(real(key, request)) | {"amount_minor": 99_999}

    monkeypatch.setattr(world.system, "send", send)


def _the_conflict(answer: ModelResult, preview_id: str) -> None:
    told = _body(answer)
    assert (answer.is_error, answer.code) == (True, "conflict"), answer.content
    assert (told["retryable"], told["outcome"]) == (False, "unknown")
    assert "an operator must look at it" in told["message"]
    assert told.get("preview_id", preview_id) == preview_id


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path, ScriptedBackend([]))
    yield w
    w.close()


async def test_after_a_receipt_mismatch_resume_and_settle_send_nothing_more(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = world.session()
    preview_id = await _paused_and_approved(world, session)
    with monkeypatch.context() as patched:
        _answering_for_another_change(world, patched)
        _the_conflict(await session.resume(preview_id), preview_id)
        assert session.pending() == []  # final: nothing waits on it any more
        _the_conflict(await session.resume(preview_id), preview_id)
    # Even a system that would now answer for this change is not asked again.
    _the_conflict(await session.resume(preview_id), preview_id)
    for _ in range(3):
        assert await session.settle_writes() == []

    assert world.system.sends() == 1
    step = world.ledger.preview(preview_id)
    assert step is not None
    assert (step.state, step.attempts) == ("unknown", 1)
    assert world.ledger.receipt(step.key) is None


async def test_a_settle_that_meets_a_receipt_mismatch_tells_it_once(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = world.session()
    preview_id = await _paused_and_approved(world, session)
    _answering_for_another_change(world, monkeypatch)

    [answer] = await session.settle_writes()

    _the_conflict(answer, preview_id)
    assert _body(answer)["preview_id"] == preview_id
    assert session.pending() == []
    assert await session.settle_writes() == []
    assert world.system.sends() == 1


async def test_a_restored_session_settles_a_receipt_mismatch_without_sending(
    tmp_path: Path, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = world.session()
    preview_id = await _paused_and_approved(world, session)
    with monkeypatch.context() as patched:
        _answering_for_another_change(world, patched)
        _the_conflict(await session.resume(preview_id), preview_id)
    other = World(tmp_path, ScriptedBackend([]))  # another process, on the same ledger
    try:
        restored = other.harness.resume_session(ALICE, session.run_id)
        assert [p.preview_id for p in restored.pending()] == [preview_id]

        [answer] = await restored.settle_writes()

        _the_conflict(answer, preview_id)
        assert restored.pending() == []
        assert await restored.settle_writes() == []
        assert (world.system.sends(), other.system.sends()) == (1, 1)
    finally:
        other.close()
