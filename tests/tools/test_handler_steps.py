"""An async handler's deadline holds however the handler waits: one that answers without
waiting runs under no cancel scope at all, one that waits goes on under its deadline from its
first wait on, and what the event loop throws into it (a timeout, a cancellation) reaches
its own code, as if it had been awaited from the start."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Annotated

import anyio
import pytest
from pydantic import BaseModel, Field

from airlock.policies import Grant, Principal, read
from airlock.tools import (
    AuditLog,
    MemoryAuditStore,
    NotFoundError,
    Registry,
    RunAuthority,
    ToolError,
)

ALICE = Principal(user_id="alice", tenant_id="acme", scopes=frozenset({"steps.read"}))
GRANT = Grant(scopes=frozenset({"steps.read"}), effects=(read("steps:**"),))
Name = Annotated[str, Field(pattern=r"^[a-z_]{1,60}$", max_length=60)]
CLEANED: list[str] = []


class Answer(BaseModel):
    value: int


async def at_once() -> int:
    return 1


async def after_one_wait() -> int:
    await asyncio.sleep(0.001)
    return 2


async def after_many_waits() -> int:
    for _ in range(5):
        await asyncio.sleep(0)
    await asyncio.sleep(0.001)
    return 3


async def past_its_deadline() -> int:
    try:
        await asyncio.sleep(5)
    finally:
        CLEANED.append("past_its_deadline")
    return 4


async def waits_in_a_scope_of_its_own() -> int:
    # A cancel scope of the handler's own, entered before its first wait (as httpx's are).
    with anyio.move_on_after(10):
        await asyncio.sleep(0.001)
    return 5


async def past_its_deadline_in_a_scope_of_its_own() -> int:
    try:
        with anyio.fail_after(10):
            await asyncio.sleep(5)
    finally:
        CLEANED.append("past_its_deadline_in_a_scope_of_its_own")
    return 6


async def fails_after_waiting() -> int:
    await asyncio.sleep(0.001)
    raise NotFoundError(detail="nothing there")


async def fails_at_once() -> int:
    raise NotFoundError(detail="nothing there")


BEHAVIOURS: dict[str, Callable[[], Awaitable[int]]] = {
    f.__name__: f
    for f in (
        at_once,
        after_one_wait,
        after_many_waits,
        past_its_deadline,
        waits_in_a_scope_of_its_own,
        past_its_deadline_in_a_scope_of_its_own,
        fails_after_waiting,
        fails_at_once,
    )
}
# behaviour -> (answer value or error code, whether its cleanup must have run, audited outcome)
EXPECTED: dict[str, tuple[int | str, bool, str]] = {
    "at_once": (1, False, "ok"),
    "after_one_wait": (2, False, "ok"),
    "after_many_waits": (3, False, "ok"),
    "past_its_deadline": ("timeout", True, "unknown"),  # it ran: it may have acted
    "waits_in_a_scope_of_its_own": (5, False, "ok"),
    "past_its_deadline_in_a_scope_of_its_own": ("timeout", True, "unknown"),
    "fails_after_waiting": ("not_found", False, "error"),
    "fails_at_once": ("not_found", False, "error"),
}


def build_registry() -> Registry:
    registry = Registry(audit=AuditLog(MemoryAuditStore()))

    @registry.tool(effects=[read("steps:step/{name}")], scope="steps.read",
                   callers={"direct", "code"}, timeout=0.05)  # fmt: skip
    async def steps_step_run(name: Name) -> Answer:
        """Run one step of the test. Use it to test deadlines.
        It does nothing else."""
        return Answer(value=await BEHAVIOURS[name]())

    return registry


def test_the_table_covers_every_behaviour() -> None:
    assert set(EXPECTED) == set(BEHAVIOURS)


@pytest.mark.anyio
@pytest.mark.parametrize("name", sorted(BEHAVIOURS))
async def test_each_behaviour_answers_under_its_deadline(name: str) -> None:
    CLEANED.clear()
    registry = build_registry()
    ctx = RunAuthority(principal=ALICE, grant=GRANT, run_id="r").context("code", "c")
    expected, cleaned, outcome = EXPECTED[name]
    started = time.monotonic()
    try:
        answer: int | str = (await registry.call("steps_step_run", {"name": name}, ctx))["value"]
    except ToolError as exc:
        answer = exc.code
    assert answer == expected
    assert time.monotonic() - started < 1.0
    assert ([name] if cleaned else []) == CLEANED
    (event,) = registry.audit.events(run_id="r")
    assert event.outcome == outcome


@pytest.mark.anyio
async def test_a_cancelled_caller_cancels_a_waiting_handler() -> None:
    CLEANED.clear()
    registry = build_registry()
    ctx = RunAuthority(principal=ALICE, grant=GRANT, run_id="r").context("code", "c")
    call = asyncio.ensure_future(
        registry.call("steps_step_run", {"name": "past_its_deadline"}, ctx)
    )
    await asyncio.sleep(0.01)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert CLEANED == ["past_its_deadline"]
    (event,) = registry.audit.events(run_id="r")
    assert event.outcome == "unknown"
