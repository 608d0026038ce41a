"""Due denials (:mod:`airlock.tools._preview_holders`) are tried outside the lock of the
holders' tables: a ledger that failed may take its busy timeout (30 s) to fail again, and no
proposal of another ledger waits for that, nor one of the same intent, which meets
``conflict`` at once (nobody is handed a preview whose denial is due); a pass over the due
denials stops at the first that fails; and a child forked while another thread held that lock
can propose."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from airlock.tools import CallContext, ConflictError
from airlock.tools import _preview_holders as holders
from airlock.tools._errors import LedgerLockedError
from tests.bridge.test_withdrawn_proposals import REFUND, propose, run_of, stored, world
from tests.tools.holder_tables import empty_holder_tables
from tests.tools.test_proposals import PROPOSING, ProposalWorld
from tests.tools.test_write_world import ALICE, ASK

__all__ = ["world"]  # (the fixture, shared)

PROMPTLY_S = 2.0
"""A proposal that waits for nobody's denial is answered well within this (milliseconds)."""


@pytest.fixture(autouse=True)
def _empty() -> Iterator[None]:
    with empty_holder_tables():
        yield


@pytest.fixture
def other_world(tmp_path: Path) -> Iterator[ProposalWorld]:
    (tmp_path / "other").mkdir()
    w = ProposalWorld(tmp_path / "other")
    yield w
    w.close()


class _Denials:
    """The ledger's denials fail (a locked database); once :attr:`tries` is reset, the try
    numbered ``block_at`` (from 1) waits until :attr:`go` first, as SQLite waits out its busy
    timeout."""

    def __init__(self, world: ProposalWorld, monkeypatch: pytest.MonkeyPatch, block_at: int):
        self.tries = -1000
        self.waiting, self.go = threading.Event(), threading.Event()
        real = world.ledger.transition

        def transition(*args: Any, **kwargs: Any) -> Any:
            if kwargs.get("to") != "denied":
                return real(*args, **kwargs)
            self.tries += 1
            if self.tries == block_at:
                self.waiting.set()
                self.go.wait(30)
            raise LedgerLockedError("database is locked", path="ledger.db")

        monkeypatch.setattr(world.ledger, "transition", transition)


def _direct(world: ProposalWorld, invoice: str) -> Callable[[], object]:
    """A direct call's proposal of the refund of ``invoice``."""
    ctx = CallContext(
        principal=ALICE, grant=PROPOSING, run_id="run_p", caller="direct", approvals=ASK
    )
    args = {"invoice_id": invoice, "reason": "duplicate"}
    return lambda: asyncio.run(world.writes.preview_call(REFUND, args, ctx))


class _Call(threading.Thread):
    def __init__(self, call: Callable[[], object]) -> None:
        super().__init__(daemon=True)
        self.call = call
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.call()
        except BaseException as exc:  # (reported to the test)
            self.error = exc


def _withdrawn_and_due(world: ProposalWorld, invoice: str, prefix: str) -> str:
    run = run_of(world, call_prefix=prefix)
    preview_id = str(asyncio.run(propose(run, 1, invoice))["preview_id"])
    run.withdraw(1)
    run.end()
    assert preview_id in holders._due
    return preview_id


# (case, the try of the due denial that waits out the ledger's busy timeout: as the proposal
# of the same intent settles the due denials first (1), or as it is handed the preview (2))
WAITING = [("as_a_proposal_settles", 1), ("as_its_preview_is_handed_out_again", 2)]


@pytest.mark.parametrize(("case", "block_at"), WAITING, ids=[c[0] for c in WAITING])
def test_nobody_waits_for_a_due_denial_another_proposal_is_trying(
    world: ProposalWorld,
    other_world: ProposalWorld,
    monkeypatch: pytest.MonkeyPatch,
    case: str,
    block_at: int,
) -> None:
    denials = _Denials(world, monkeypatch, block_at)
    preview_id = _withdrawn_and_due(world, "inv_1", "A")
    denials.tries = 0
    trying = _Call(_direct(world, "inv_1"))  # the same intent again: its denial is tried
    trying.start()
    try:
        assert denials.waiting.wait(10)
        others = [_Call(_direct(other_world, "inv_1")), _Call(_direct(world, "inv_1"))]
        for other in others:
            other.start()
        for other in others:
            other.join(PROMPTLY_S)
        assert [other.is_alive() for other in others] == [False, False]
        assert others[0].error is None  # another ledger's proposal: as if nothing were due
        assert isinstance(others[1].error, ConflictError)  # (never handed the preview)
        assert "ask again shortly" in others[1].error.message
    finally:
        denials.go.set()
        trying.join(10)
    assert isinstance(trying.error, ConflictError)  # (the ledger failed: it is due still)
    assert (preview_id in holders._due, denials.tries) == (True, 2)  # (by it alone)
    assert not holders._trying
    assert stored(world, preview_id).state == "prepared"


def test_a_pass_over_the_due_denials_stops_at_the_first_that_fails(
    world: ProposalWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    denials = _Denials(world, monkeypatch, block_at=-1)
    due = [_withdrawn_and_due(world, f"inv_{n}", f"A{n}") for n in (1, 2, 3)]
    denials.tries = 0
    world.writes.settle_denials()  # (each try may wait out the ledger's busy timeout)
    assert denials.tries == 1
    assert set(holders._due) == set(due)
    assert not holders._trying


def test_a_child_forked_while_another_thread_held_the_holders_lock_can_propose() -> None:
    held, done = threading.Event(), threading.Event()

    def hold() -> None:
        with holders._lock:
            held.set()
            done.wait(10)

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    assert held.wait(5)
    try:
        pid = os.fork()
        if pid == 0:  # the child: report by exit status, never return into pytest
            try:
                holders.withdrawing("pv_in_the_child", object())
                os._exit(0 if not holders.undecided(["pv_in_the_child"]) else 1)
            finally:
                os._exit(2)
    finally:
        done.set()
        holder.join(10)
    deadline = time.monotonic() + 10
    while (waited := os.waitpid(pid, os.WNOHANG)) == (0, 0) and time.monotonic() < deadline:
        time.sleep(0.01)
    if waited == (0, 0):
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        pytest.fail("the forked child blocked on the holders' lock it inherited held")
    assert os.waitstatus_to_exitcode(waited[1]) == 0
