"""An audit log that cannot store a call's records (its disk is full) withholds the call's
answer: the model gets a typed ``ledger_*`` error that names no host path, the operator's
log keeps the path, and once the disk has room the same call answers as it would have
(a write committed meanwhile is never sent twice)."""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import sqlite3
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from airlock import Budget, Harness, ModelResult, Session
from airlock.policies import load_policy
from airlock.sandbox.testing import ScriptedBackend, ok_result
from airlock.tools import (
    AuditEvent,
    SQLiteAuditStore,
    SQLiteLedgerStore,
    approve_preview,
)
from airlock.tools._sqlite_errors import store_error
from airlock.tools.testing import SystemOfRecord
from tests.airlock.conversation_registry import ALICE, build_registry

pytestmark = pytest.mark.anyio

POLICY = Path(__file__).parents[1] / "conversation_policy.toml"
UNAVAILABLE = "ledger_unavailable"
BOUND_S = 10.0
"""Longest a call may take here: a wedged audit log fails the test instead of hanging it."""
REFUND = "billing_refund_create"
READ = "billing_invoice_get"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class FillingStore(SQLiteAuditStore):
    """A SQLite audit store whose disk fills up when :attr:`full` is set: ``append`` raises
    what the store raises for SQLITE_FULL (its message names the file)."""

    full = False
    raises: BaseException | None = None
    """What ``append`` raises instead, as a store of another kind might (a driver's error)."""

    def append(self, events: Sequence[AuditEvent], programs: dict[str, str] | None = None) -> None:
        if self.raises is not None:
            raise self.raises
        if self.full:
            error = sqlite3.OperationalError("database or disk is full")
            raise store_error(error, path=str(self.path), store="the audit store")
        super().append(events, programs)


@dataclass
class World:
    harness: Harness
    store: FillingStore
    ledger: SQLiteLedgerStore
    system: SystemOfRecord
    root: Path

    def session(self, *, calls: int | None = None) -> Session:
        budget = Budget() if calls is None else Budget(calls=calls)
        return self.harness.session(ALICE, budget=budget)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    root = tmp_path / "operator-private-home"
    root.mkdir()
    system = SystemOfRecord(root / "system.db")
    ledger = SQLiteLedgerStore(root / "ledger.db")
    store = FillingStore(root / "audit.db")
    harness = Harness(
        build_registry(system),
        load_policy(POLICY),
        ScriptedBackend(lambda program, profile: ok_result("done")),
        ledger,
        audit=store,
        artifacts=root / "artifacts",
    )
    yield World(harness, store, ledger, system, root)
    store.full = False
    store.raises = None
    ledger.close()
    system.close()


async def _pause(world: World, session: Session) -> str:
    paused = await session.call(REFUND, {"invoice_id": "inv_007", "reason": "duplicate"})
    assert paused.code == "needs_approval", paused.content
    preview_id: str = json.loads(paused.content)["preview_id"]
    return preview_id


async def _approved(world: World, session: Session) -> str:
    preview_id = await _pause(world, session)
    approve_preview(world.ledger, preview_id, approver="bob", now=time.time())
    return preview_id


Step = Callable[[World, Session], Awaitable[Callable[[], Awaitable[ModelResult]]]]


async def _read(world: World, session: Session) -> Callable[[], Awaitable[ModelResult]]:
    return lambda: session.call(READ, {"invoice_id": "inv_001"})


async def _write(world: World, session: Session) -> Callable[[], Awaitable[ModelResult]]:
    return lambda: session.call(REFUND, {"invoice_id": "inv_007", "reason": "duplicate"})


async def _program(world: World, session: Session) -> Callable[[], Awaitable[ModelResult]]:
    return lambda: session.call("execute_code", {"code": "1"})


async def _unknown(world: World, session: Session) -> Callable[[], Awaitable[ModelResult]]:
    return lambda: session.call("no_such_tool", {})


async def _resume(world: World, session: Session) -> Callable[[], Awaitable[ModelResult]]:
    preview_id = await _approved(world, session)
    return lambda: session.resume(preview_id)


async def _write_status(world: World, session: Session) -> Callable[[], Awaitable[ModelResult]]:
    preview_id = await _approved(world, session)
    return lambda: session.write_status(preview_id)


async def _settling_call(world: World, session: Session) -> Callable[[], Awaitable[ModelResult]]:
    await _approved(world, session)  # the next call settles it first
    return lambda: session.call(READ, {"invoice_id": "inv_001"})


async def _over_budget(world: World, session: Session) -> Callable[[], Awaitable[ModelResult]]:
    await session.call(READ, {"invoice_id": "inv_001"})  # the budget's only call
    return lambda: session.call(READ, {"invoice_id": "inv_002"})


# (the call, the session's calls budget, what it answers once the disk has room again)
SITES: list[tuple[str, Step, int | None, str | None]] = [
    ("direct read", _read, None, None),
    ("direct write paused", _write, None, "needs_approval"),
    ("program", _program, None, None),
    ("unknown tool", _unknown, None, "unknown_tool"),
    ("resume commits", _resume, None, None),
    ("write_status commits", _write_status, None, None),
    ("call settling an approved write", _settling_call, None, None),
    ("refused for the budget", _over_budget, 1, "limit_exceeded"),
]


@pytest.mark.parametrize(("site", "step", "calls", "later"), SITES, ids=[s[0] for s in SITES])
async def test_an_audit_log_that_cannot_store_the_call_withholds_its_answer(
    world: World,
    caplog: pytest.LogCaptureFixture,
    site: str,
    step: Step,
    calls: int | None,
    later: str | None,
) -> None:
    session = world.session(calls=calls)
    call = await step(world, session)
    world.store.full = True
    caplog.set_level(logging.ERROR, logger="airlock.harness")

    answer = await call()

    assert (answer.is_error, answer.code) == (True, "ledger_io"), answer.content
    body = json.loads(answer.content)
    assert body["retryable"] is True
    assert str(world.root) not in answer.content
    assert "audit.db" not in answer.content
    assert "settled_writes" not in body  # kept for an answer whose records are stored
    logged = [r.getMessage() for r in caplog.records if r.name == "airlock.harness"]
    assert any(str(world.root / "audit.db") in m for m in logged), logged

    world.store.full = False
    again = await call()
    assert again.code == later, again.content
    assert world.system.sends() <= 1  # a commit whose answer was withheld is not resent
    await session.close()


async def test_outcomes_settled_while_the_disk_is_full_are_told_once_it_has_room(
    world: World,
) -> None:
    session = world.session()
    preview_id = await _approved(world, session)
    world.store.full = True

    withheld = await session.call(READ, {"invoice_id": "inv_001"})

    assert withheld.code == "ledger_io"
    world.store.full = False
    told = json.loads((await session.call(READ, {"invoice_id": "inv_002"})).content)
    [settled] = told["settled_writes"]
    assert (settled["preview_id"], settled["status"]) == (preview_id, "committed")
    assert world.system.sends() == 1
    await session.close()


class Interrupted(BaseException):
    """Not an ``Exception``: what an ``except Exception`` lets through."""


# What an audit store of another kind raises from append (not a LedgerError), and the code
# the model is given: every one typed and retryable, none escaping the call raw.
FOREIGN: list[tuple[str, Callable[[], BaseException], str]] = [
    ("a full disk", lambda: OSError(errno.ENOSPC, "No space left on device"), "ledger_io"),
    ("an I/O error", lambda: OSError(errno.EIO, "Input/output error"), "ledger_io"),
    ("a driver's own error", lambda: RuntimeError("server closed the connection"), UNAVAILABLE),
    ("a bug in the store", lambda: KeyError("chain"), UNAVAILABLE),
    ("a BaseException", lambda: Interrupted("stopped"), UNAVAILABLE),
]
CALLS = [("direct read", _read), ("program", _program)]


@pytest.mark.parametrize(("site", "step"), CALLS, ids=[c[0] for c in CALLS])
@pytest.mark.parametrize(("case", "make", "code"), FOREIGN, ids=[f[0] for f in FOREIGN])
async def test_a_store_raising_what_is_not_a_ledger_error_gives_a_typed_answer(
    world: World, site: str, step: Step, case: str, make: Callable[[], BaseException], code: str
) -> None:
    session = world.session()
    call = await step(world, session)
    world.store.raises = make()

    answer = await asyncio.wait_for(call(), BOUND_S)

    assert (answer.is_error, answer.code) == (True, code), (case, answer.content)
    assert json.loads(answer.content)["retryable"] is True
    assert str(world.root) not in answer.content
    world.store.raises = None
    again = await asyncio.wait_for(call(), BOUND_S)
    assert (again.is_error, again.code) == (False, None), (case, again.content)
    await session.close()


async def test_a_harness_whose_audit_writer_cannot_start_answers_and_recovers(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The process is at its limit of threads (pthread_create: EAGAIN) while the first call
    # runs: its answer is withheld, typed; once threads can start, the next call answers and
    # every record of both is stored.
    start = threading.Thread.start
    short = [True]

    def limited(thread: threading.Thread) -> None:
        if short[0] and thread.name == "airlock-audit-writer":
            raise RuntimeError("can't start new thread")
        start(thread)

    monkeypatch.setattr(threading.Thread, "start", limited)
    session = world.session()

    answer = await asyncio.wait_for(session.call(READ, {"invoice_id": "inv_001"}), BOUND_S)

    assert (answer.is_error, answer.code) == (True, UNAVAILABLE), answer.content
    assert json.loads(answer.content)["retryable"] is True
    short[0] = False
    again = await asyncio.wait_for(session.call(READ, {"invoice_id": "inv_002"}), BOUND_S)
    assert (again.is_error, again.code) == (False, None), again.content
    assert world.harness.audit.pending == 0
    stored = [e.call_id for e in world.store.query() if e.tool == READ and e.final]
    assert len(stored) == len(set(stored)) == 2, stored
    await session.close()
