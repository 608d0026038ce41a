"""A session's budgets at their edges: a read a person approves after the session's time is
up still runs (under its own timeout), a result that what is left of the byte budget cannot
hold is ``limit_exceeded`` (bytes) and a write's answer keeps its preview id whatever its
size, refusals once the bytes are used up cost nothing, and a program the session's time
cut short says so."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from airlock import Budget, Harness, ModelResult, Session
from airlock.harness._budget import BudgetMeter
from airlock.policies import SandboxProfile, parse_policy
from airlock.sandbox import DockerBackend, RunResult
from airlock.sandbox.testing import ScriptedBackend
from airlock.tools import MemoryAuditStore, SQLiteLedgerStore, approve_preview
from tests.airlock.harness.test_session_reach import ALICE as WEB_ALICE
from tests.airlock.harness.test_session_reach import EVIL, WEB_POLICY
from tests.airlock.session_world import World
from tests.conftest import IMAGE, require_docker
from tests.tools.test_reach_forms import Fetched, web_registry

pytestmark = pytest.mark.anyio

REFUND = ("billing_refund_create", {"invoice_id": "inv_3", "reason": "duplicate"})


def body(result: ModelResult) -> Any:
    return json.loads(result.content)


def size(result: ModelResult) -> int:
    return len(result.content.encode())


async def spend(session: Session, amount: int) -> int:
    """Read exports until about ``amount`` bytes of results came back; the bytes spent."""
    spent = 0
    while amount - spent > 40:
        chunk = min(900, amount - spent - 11)  # {"data":"..."} adds 11 bytes
        result = await session.call("billing_export_make", {"size": chunk})
        assert result.code is None, result.content
        spent += size(result)
    return spent


async def exhaust(session: Session) -> None:
    """Read until the session refuses a call for its byte budget."""
    for _ in range(100):
        result = await session.call("billing_export_make", {"size": 300})
        if result.code == "limit_exceeded" and session._meter.exhausted() == "bytes":
            return
    raise AssertionError("the byte budget was never used up")


def approve(world: World, preview_id: str) -> None:
    fingerprint = world.ledger.preview(preview_id).fingerprint  # type: ignore[union-attr]
    approve_preview(
        world.ledger, preview_id, approver="bob", now=time.time(), fingerprint=fingerprint
    )


# -- a read approved after the session's time ------------------------------------------


@pytest.mark.parametrize("how", ["settle_writes", "resume"])
async def test_a_read_approved_after_the_session_time_runs_once_under_its_own_timeout(
    tmp_path: Path, how: str
) -> None:
    fetched = Fetched()
    ledger = SQLiteLedgerStore(tmp_path / "ledger.db")
    harness = Harness(
        web_registry(fetched),
        parse_policy(WEB_POLICY, source="web"),
        ScriptedBackend([]),
        ledger,
        audit=MemoryAuditStore(),
        budget=Budget(seconds=0.5),
    )
    try:
        session = harness.session(WEB_ALICE)
        paused = await session.call("web_page_fetch", {"url": EVIL})
        preview_id = body(paused)["preview_id"]
        await anyio.sleep(0.6)  # the person decides after the session's time is up
        fingerprint = ledger.preview(preview_id).fingerprint  # type: ignore[union-attr]
        approve_preview(
            ledger, preview_id, approver="bob", now=time.time(), fingerprint=fingerprint
        )
        if how == "settle_writes":
            [answer] = await session.settle_writes()
        else:
            answer = await session.resume(preview_id)
        again = await session.resume(preview_id)
        state = ledger.preview(preview_id).state  # type: ignore[union-attr]
    finally:
        ledger.close()

    assert (answer.code, body(answer)["status"]) == (None, "done"), answer.content
    assert body(answer)["result"]["text"] == f"text of {EVIL}"
    assert body(again)["result"] == body(answer)["result"]  # the same result, not run again
    assert fetched.urls == [EVIL]
    assert state == "committed"


# -- a result that what is left of the byte budget cannot hold --------------------------

BYTE_CASES = [
    # (what, Budget(bytes, result_bytes), bytes spent first, the call, code, fields it has)
    (
        "a read over what is left",
        (2048, 1024),
        1500,
        ("billing_export_make", {"size": 700}),
        "limit_exceeded",
        {"limit": "bytes", "size_bytes": 711},
    ),
    (
        "a read over the per-result cap",
        (100_000, 512),
        0,
        ("billing_export_make", {"size": 600}),
        "result_too_large",
        {"limit_bytes": 512, "size_bytes": 611},
    ),
    (
        "a write's pause over what is left",
        (1024, 1024),
        714,
        REFUND,
        "limit_exceeded",
        {"limit": "bytes", "status": "needs_approval"},
    ),
    (
        "a write's pause over the per-result cap",
        (100_000, 256),
        0,
        REFUND,
        "result_too_large",
        {"limit_bytes": 256, "status": "needs_approval"},
    ),
]


@pytest.mark.parametrize(
    ("limits", "spent", "call", "code", "fields"),
    [case[1:] for case in BYTE_CASES],
    ids=[case[0] for case in BYTE_CASES],
)
async def test_a_result_is_refused_by_the_limit_that_blocks_it(
    tmp_path: Path,
    limits: tuple[int, int],
    spent: int,
    call: tuple[str, dict[str, Any]],
    code: str,
    fields: dict[str, object],
) -> None:
    total, per_result = limits
    world = World(
        tmp_path, ScriptedBackend([]), budget=Budget(bytes=total, result_bytes=per_result)
    )
    try:
        session = world.session()
        await spend(session, spent)
        answer = await session.call(*call)
        pending = [p.preview_id for p in session.pending()]
    finally:
        world.close()

    found = body(answer)
    assert (answer.code, answer.retryable) == (code, False), answer.content
    assert {k: found.get(k) for k in fields} == fields
    if code == "limit_exceeded":
        assert "session's budget" in found["message"]
    if call is REFUND:  # the preview waits: its answer names it, whatever its size
        assert pending == [found["preview_id"]]


async def test_a_committed_write_resumed_past_the_byte_budget_keeps_its_receipt_short(
    tmp_path: Path,
) -> None:
    world = World(tmp_path, ScriptedBackend([]), budget=Budget(bytes=1024, result_bytes=1024))
    try:
        session = world.session()
        paused = await session.call(*REFUND)
        preview_id = body(paused)["preview_id"]
        approve(world, preview_id)
        committed = await session.resume(preview_id)  # fits: the whole receipt
        await exhaust(session)
        used = session._meter.bytes
        again = [await session.resume(preview_id) for _ in range(3)]
        after = session._meter.bytes
    finally:
        world.close()

    receipt = body(committed)["receipt"]
    for answer in again:
        found = body(answer)
        assert (answer.code, found["limit"]) == ("limit_exceeded", "bytes"), answer.content
        assert (found["status"], found["preview_id"]) == ("committed", preview_id)
        assert found["receipt"] == {"id": receipt["id"], "invoice_id": "inv_3"}
        assert answer.content == again[0].content  # a fixed answer
    assert after == used  # a refusal once the bytes are used up costs nothing


@pytest.mark.parametrize(
    ("how", "code"),
    [("resume", "limit_exceeded"), ("call", "limit_exceeded")],
)
async def test_once_the_bytes_are_used_up_usage_stops_growing(
    tmp_path: Path, how: str, code: str
) -> None:
    world = World(tmp_path, ScriptedBackend([]), budget=Budget(bytes=1024, result_bytes=1024))
    try:
        session = world.session()
        preview_id = body(await session.call(*REFUND))["preview_id"]
        await exhaust(session)
        used = session._meter.bytes
        for _ in range(5):
            if how == "resume":
                answer = await session.resume(preview_id)
            else:
                answer = await session.call("billing_export_make", {"size": 10})
            assert answer.code == code, answer.content
        after = session._meter.bytes
    finally:
        world.close()
    assert used <= 1024 + 400  # at most one refusal past the budget
    assert after == used


# -- a program the session's time cut short --------------------------------------------

TIMED_OUT = RunResult.model_validate(
    {
        "status": "limit_exceeded",
        "exit_status": 137,
        "has_value": False,
        "duration_s": 1.0,
        "limit": "timeout",
    }
)


@pytest.mark.parametrize(
    ("seconds", "timeout_s", "limit", "says"),
    [
        (600.0, 20.0, "timeout", "do less per program"),  # its own deadline
        (5.0, 20.0, "time", "session's time budget"),  # the session's, shorter
    ],
)
async def test_a_program_cut_short_by_the_session_time_says_the_session_limit(
    tmp_path: Path, seconds: float, timeout_s: float, limit: str, says: str
) -> None:
    profile = SandboxProfile(timeout_s=timeout_s)
    backend = ScriptedBackend([TIMED_OUT], profile=profile)
    world = World(tmp_path, backend, budget=Budget(seconds=seconds), profile=profile)
    try:
        answer = await world.session().call("execute_code", {"code": "while True: pass"})
    finally:
        world.close()
    found = body(answer)
    assert (answer.code, found["limit"]) == ("limit_exceeded", limit), answer.content
    assert says in found["message"]


@pytest.fixture
def docker_world(tmp_path: Path) -> Iterator[tuple[World, DockerBackend]]:
    require_docker()
    profile = SandboxProfile(language_mode="full", timeout_s=20)
    backend = DockerBackend(image=IMAGE, profile=profile, pool_size=0)
    world = World(tmp_path, backend, budget=Budget(seconds=4), profile=profile)
    yield world, backend
    world.close()


@pytest.mark.docker
async def test_a_real_program_stopped_at_the_session_time_answers_limit_time(
    docker_world: tuple[World, DockerBackend],
) -> None:
    world, backend = docker_world
    await backend.start()
    try:
        spin = "import time\nwhile True: time.sleep(0.05)\n"
        answer = await world.session().call("execute_code", {"code": spin})
    finally:
        await backend.close()
    found = body(answer)
    assert (answer.code, found["limit"]) == ("limit_exceeded", "time"), answer.content


def test_a_used_up_time_budget_says_the_time_that_passed_as_it_says_the_budget() -> None:
    """A budget under a second used to say "0 s have passed" of a budget of 0.3 s."""
    meter = BudgetMeter(Budget(seconds=0.3), started=time.monotonic() - 0.5)
    said = meter.used_up_message("time")
    assert re.search(r"time budget of 0\.3 s is used up \(0\.[5-9] s have passed\)", said), said
