"""Due denials (:mod:`airlock.tools._preview_holders`) are tried outside the lock of the
holders' tables: a ledger that failed may take its busy timeout (30 s) to fail again, and no
proposal of another ledger waits for that, nor one of the same intent, which meets
``conflict`` at once (nobody is handed a preview whose denial is due); a pass over the due
denials stops at the first that fails; and a child forked while another thread held that lock
can propose, knowing none of its parent's holds or due denials (they are the parent's)."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from airlock.tools import CallContext, ConflictError
from airlock.tools import _preview_holders as holders
from airlock.tools._errors import LedgerLockedError
from tests.bridge.test_withdrawn_proposals import REFUND, propose, run_of, stored, world
from tests.tools.forked_child import child_exit_code
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


# (case, who tries the denial as it waits out the ledger's busy timeout (the withdrawal that
# freed the preview, or a proposal of the same intent as it settles the due denials first (try
# 1) or as it is handed the preview (try 2)), which try that is, the tries in all, and what
# the one who tries meets (the withdrawal goes on: the bridge logs it))
WAITING = [
    ("as_its_program_withdraws_it", "withdrawal", 1, 1, None),
    ("as_a_proposal_settles", "proposal", 1, 2, ConflictError),
    ("as_its_preview_is_handed_out_again", "proposal", 2, 2, ConflictError),
]


@pytest.mark.parametrize(
    ("case", "by", "block_at", "tries", "meets"), WAITING, ids=[c[0] for c in WAITING]
)
def test_nobody_waits_for_a_denial_another_thread_is_trying(
    world: ProposalWorld,
    other_world: ProposalWorld,
    monkeypatch: pytest.MonkeyPatch,
    case: str,
    by: str,
    block_at: int,
    tries: int,
    meets: type[Exception] | None,
) -> None:
    denials = _Denials(world, monkeypatch, block_at)
    if by == "withdrawal":
        run = run_of(world, call_prefix="A")
        preview_id = str(asyncio.run(propose(run, 1, "inv_1"))["preview_id"])
        trying = _Call(lambda: run.withdraw(1))
    else:
        preview_id = _withdrawn_and_due(world, "inv_1", "A")
        trying = _Call(_direct(world, "inv_1"))  # the same intent again: its denial is tried
    denials.tries = 0
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
        assert holders.undecided([preview_id])
    finally:
        denials.go.set()
        trying.join(10)
    assert type(trying.error) is meets if meets else trying.error is None
    assert (preview_id in holders._due, denials.tries) == (True, tries)  # (by it alone)
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


def test_a_forked_child_starts_afresh_though_another_thread_held_the_holders_lock(
    world: ProposalWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    _Denials(world, monkeypatch, block_at=-1)
    _withdrawn_and_due(world, "inv_1", "A")  # (the parent's: the child knows nothing of it)
    kept = str(asyncio.run(propose(run_of(world, call_prefix="B"), 1, "inv_2"))["preview_id"])
    holders.withdrawing(kept, object())  # (held, and a withdrawal pending: the parent's too)
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
                tables = (holders._held, holders._due, holders._pending, holders._trying)
                empty = not any(tables)  # (another process: the parent's holds are its own)
                holders.withdrawing("pv_in_the_child", object())
                os._exit(0 if empty and not holders.undecided(["pv_in_the_child"]) else 1)
            finally:
                os._exit(2)
    finally:
        done.set()
        holder.join(10)
    hung = "the forked child blocked on the holders' lock it inherited held"
    assert child_exit_code(pid, hung=hung) == 0
