"""A turn whose call raises ends with all its calls: the failure cancels the others and
waits for them, so no call of the turn runs on after :func:`handle_turn` returns or raises;
and over a session whose audit log cannot store the records, each call answers a typed error
that names no host path."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from airlock import Harness
from airlock.frontends import handle_turn
from airlock.harness import ModelResult, ModelTool
from airlock.policies import load_policy
from airlock.sandbox.testing import ScriptedBackend, ok_result
from airlock.tools import AuditEvent, SQLiteAuditStore, SQLiteLedgerStore
from airlock.tools._sqlite_errors import store_error
from airlock.tools.testing import SystemOfRecord
from tests.airlock.conversation_registry import ALICE, build_registry

pytestmark = pytest.mark.anyio

POLICY = Path(__file__).parents[1] / "conversation_policy.toml"


class Failure(Exception):
    """What the failing call raises."""


class FailingSurface:
    """``fails`` raises at once (after ``fail_after`` seconds); every other call sleeps a
    second; what each call went through is kept in :attr:`states`."""

    def __init__(self, *, fail_after: float = 0.0) -> None:
        self.fail_after = fail_after
        self.states: dict[str, str] = {}

    def tools(self) -> list[ModelTool]:
        return []

    async def call(self, name: str, arguments: dict[str, Any]) -> ModelResult:
        self.states[name] = "running"
        try:
            if name.startswith("fails"):
                await asyncio.sleep(self.fail_after)
                self.states[name] = "raised"
                raise Failure(name)
            await asyncio.sleep(1.0)
        except asyncio.CancelledError:
            self.states[name] = "cancelled"
            raise
        self.states[name] = "finished"
        return ModelResult(is_error=False, content="{}")


def use(name: str, call_id: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": {}}


# (the turn's calls, the failing call's delay) -> the calls cancelled
TURNS: list[tuple[str, list[str], float, set[str]]] = [
    ("fails first", ["fails", "slow_write"], 0.0, {"slow_write"}),
    ("fails last", ["slow_write", "slow_read", "fails"], 0.0, {"slow_write", "slow_read"}),
    ("fails while the others run", ["slow_write", "fails"], 0.1, {"slow_write"}),
    ("two fail", ["fails_a", "slow_write", "fails_b"], 0.0, {"slow_write"}),
]


@pytest.mark.parametrize(
    ("names", "delay", "cancelled"), [t[1:] for t in TURNS], ids=[t[0] for t in TURNS]
)
async def test_a_call_that_raises_ends_the_turn_with_no_call_left_running(
    names: list[str], delay: float, cancelled: set[str]
) -> None:
    surface = FailingSurface(fail_after=delay)
    blocks = [use(name, f"t{n}") for n, name in enumerate(names)]

    with pytest.raises(Failure):  # the call's own error, as it was raised
        await handle_turn(surface, blocks)

    # Settled when handle_turn raised: nothing of the turn is left to run, now or later.
    slow = {n for n, s in surface.states.items() if not n.startswith("fails")}
    assert {n for n in slow if surface.states[n] == "cancelled"} == cancelled == slow
    assert set(surface.states.values()) <= {"cancelled", "raised"}


async def test_a_turn_cancelled_from_outside_cancels_its_calls() -> None:
    surface = FailingSurface()
    blocks = [use("slow_write", "t1"), use("slow_read", "t2")]

    with pytest.raises(TimeoutError):
        await asyncio.wait_for(handle_turn(surface, blocks), 0.1)

    assert surface.states == {"slow_write": "cancelled", "slow_read": "cancelled"}


class FullStore(SQLiteAuditStore):
    """A SQLite audit store whose disk is full while :attr:`full` is set."""

    full = True

    def append(self, events: Sequence[AuditEvent], programs: dict[str, str] | None = None) -> None:
        if self.full:
            error = sqlite3.OperationalError("database or disk is full")
            raise store_error(error, path=str(self.path), store="the audit store")
        super().append(events, programs)


async def test_a_turn_over_an_audit_log_that_cannot_store_answers_typed_errors(
    tmp_path: Path,
) -> None:
    root = tmp_path / "operator-private-home"
    root.mkdir()
    system = SystemOfRecord(root / "system.db")
    ledger = SQLiteLedgerStore(root / "ledger.db")
    store = FullStore(root / "audit.db")
    harness = Harness(
        build_registry(system),
        load_policy(POLICY),
        ScriptedBackend(lambda program, profile: ok_result("done")),
        ledger,
        audit=store,
        artifacts=root / "artifacts",
    )
    session = harness.session(ALICE)
    blocks = [
        {**use("billing_invoice_get", "t1"), "input": {"invoice_id": "inv_001"}},
        {
            **use("billing_refund_create", "t2"),
            "input": {"invoice_id": "inv_007", "reason": "duplicate"},
        },
        {**use("execute_code", "t3"), "input": {"code": "1"}},
    ]
    try:
        answers = await handle_turn(session, blocks)
    finally:
        await session.close()
        store.full = False
        ledger.close()
        system.close()

    assert [a["tool_use_id"] for a in answers] == ["t1", "t2", "t3"]
    for answer in answers:
        assert answer["is_error"] is True
        assert json.loads(answer["content"])["error"] == "ledger_io"
        assert str(root) not in answer["content"]
