"""A denial the ledger could not record is due (:mod:`airlock.tools._preview_holders`): tried
again by its own ledger's write path only, forgotten once its preview expired or its ledger
holds it no more (nobody approves or commits it then), and audited once however late the
ledger recorded it (its answer may be lost after the denial was stored)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airlock.tools import NotFoundError, PreviewExpiredError, ToolError, approve_preview
from airlock.tools import _preview_holders as holders
from airlock.tools._errors import LedgerLockedError
from tests.bridge.test_withdrawn_proposals import (
    ALLOW,
    _fails_once,
    assert_withdrawn,
    propose,
    run_of,
    stored,
    world,
)
from tests.tools.holder_tables import InterruptingLock, empty_holder_tables
from tests.tools.test_proposals import ProposalWorld
from tests.tools.test_write_world import ALICE

pytestmark = pytest.mark.anyio

__all__ = ["world"]  # (the fixture, shared)

FOREVER = 10**9


@pytest.fixture(autouse=True)
def _empty() -> Iterator[None]:
    with empty_holder_tables():
        yield


def _gone(world: ProposalWorld, preview_id: str, monkeypatch: pytest.MonkeyPatch) -> None:
    real = world.ledger.preview
    monkeypatch.setattr(world.ledger, "preview", lambda p: None if p == preview_id else real(p))


# (case, what became of the preview whose denial is due, the ledger failing still; what a
# commit of it meets: no longer ``conflict`` (undecided), but what the ledger says of it)
FORGOTTEN = [
    ("its_preview_expired", "expired", PreviewExpiredError),
    ("its_ledger_holds_it_no_more", "gone", NotFoundError),
]


@pytest.mark.parametrize(("case", "became", "meets"), FORGOTTEN, ids=[c[0] for c in FORGOTTEN])
async def test_a_due_denial_is_forgotten_once_nobody_can_approve_or_commit_its_preview(
    world: ProposalWorld,
    monkeypatch: pytest.MonkeyPatch,
    case: str,
    became: str,
    meets: type[ToolError],
) -> None:
    run = run_of(world, ALLOW)
    preview = stored(world, str((await propose(run, 1, "inv_1"))["preview_id"]))
    _fails_once(world, "transition", monkeypatch, times=FOREVER)
    run.withdraw(1)
    run.end()
    assert preview.id in holders._due
    if became == "expired":
        world.clock.advance(world.writes.ttl)
    else:
        _gone(world, preview.id, monkeypatch)
    with pytest.raises(meets):
        await world.writes.commit(preview.id, preview.fingerprint, ALICE)
    assert preview.id not in holders._due
    assert preview.id not in holders._held
    assert world.system.sends() == 0


async def test_a_preview_a_person_approved_before_the_withdrawal_is_handed_out_again(
    world: ProposalWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = run_of(world, call_prefix="A"), run_of(world, call_prefix="B")
    preview = stored(world, str((await propose(a, 1, "inv_1"))["preview_id"]))
    approve_preview(world.ledger, preview.id, approver="bob", now=world.clock())
    world.clock.advance(1)
    _fails_once(world, "approval", monkeypatch, times=2)  # (the withdrawal, B's first look)
    a.withdraw(1)
    assert preview.id in holders._due
    again = await propose(b, 1, "inv_1")  # recorded as B met it: the approval stands
    assert (again["preview_id"], again["state"], holders._due) == (preview.id, "approved", {})
    a.end()
    b.end()
    await world.writes.commit(preview.id, preview.fingerprint, ALICE)
    assert (stored(world, preview.id).state, world.system.sends()) == ("committed", 1)


@pytest.fixture
def other_world(tmp_path: Path) -> Iterator[ProposalWorld]:
    (tmp_path / "other").mkdir()
    w = ProposalWorld(tmp_path / "other")
    yield w
    w.close()


async def test_a_closed_ledgers_due_denial_costs_the_others_nothing_and_goes_at_expiry(
    world: ProposalWorld, other_world: ProposalWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = run_of(world, ALLOW)
    withdrawn = str((await propose(run, 1, "inv_1"))["preview_id"])
    _fails_once(world, "transition", monkeypatch, times=FOREVER)
    run.withdraw(1)
    run.end()
    world.close()  # (a tenant's write path, gone with its ledger)
    asked: list[str] = []
    real = other_world.ledger.preview

    def preview(preview_id: str) -> Any:
        asked.append(preview_id)
        return real(preview_id)

    monkeypatch.setattr(other_world.ledger, "preview", preview)
    for n in range(3):
        other = run_of(other_world, ALLOW, call_prefix=f"B{n}")
        kept = stored(other_world, str((await propose(other, 1, f"inv_{n + 1}"))["preview_id"]))
        other.end()
        await other_world.writes.commit(kept.id, kept.fingerprint, ALICE)
    assert withdrawn not in asked  # the other write path never tried it on its own ledger
    assert withdrawn in holders._due
    other_world.clock.advance(other_world.writes.ttl)  # (not the clock it expires by)
    other_world.writes.settle_denials()
    assert withdrawn in holders._due
    world.clock.advance(world.writes.ttl)  # (its own write path's clock, as time goes by)
    other_world.writes.settle_denials()
    assert (withdrawn in holders._due, withdrawn in holders._held) == (False, False)


# (case, how the ledger failed as it denied the withdrawn preview the first time; or how the
# try that recorded it was lost: an interrupt as it took the holders' lock to forget it)
FAILED_DENIAL = [
    ("before_it_stored_the_denial", "before"),
    ("its_answer_lost_once_stored", "after"),
    ("recorded_then_interrupted", "interrupted"),
]


@pytest.mark.parametrize(("case", "when"), FAILED_DENIAL, ids=[c[0] for c in FAILED_DENIAL])
async def test_a_denial_recorded_late_is_audited_once(
    world: ProposalWorld, monkeypatch: pytest.MonkeyPatch, case: str, when: str
) -> None:
    run = run_of(world, ALLOW)
    preview = stored(world, str((await propose(run, 1, "inv_1"))["preview_id"]))
    real = world.ledger.transition
    failed: list[bool] = []
    lock = InterruptingLock("tried")

    def transition(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("to") != "denied":
            return real(*args, **kwargs)
        if failed:
            lock.arm()  # (recorded: audited next, then the lock is taken to forget it)
            return real(*args, **kwargs)
        failed.append(True)
        if when == "after":
            real(*args, **kwargs)  # (committed; the connection dropped before the answer)
        raise LedgerLockedError("database is locked", path="ledger.db")

    monkeypatch.setattr(world.ledger, "transition", transition)
    run.withdraw(1)
    if when == "interrupted":
        monkeypatch.setattr(holders, "_lock", lock)
        with pytest.raises(KeyboardInterrupt):
            run.end()  # (its due denials are tried first)
        assert preview.id in holders._due  # (tried again: it finds its own try's denial)
    else:
        run.end()
    world.writes.settle_denials()
    assert_withdrawn(world, preview.id)
    assert preview.id not in holders._due
    denials = [
        (e.stage, e.decision, e.detail)
        for e in world.registry.audit.events(run_id="run_p")
        if e.call_id == preview.id and e.decision == "deny"
    ]
    assert denials == [("authorize", "deny", "withdrawn by the program")]


# (case, what this write path's program has of its preview as another write path, whose clock
# is 1000 s ahead, proposes and settles: its hold, or its denial due (the ledger failing))
OTHER_CLOCK = [("its_hold", "held"), ("its_due_denial", "due")]


@pytest.mark.parametrize(("case", "has"), OTHER_CLOCK, ids=[c[0] for c in OTHER_CLOCK])
async def test_another_write_paths_clock_forgets_nothing_of_this_ones(
    world: ProposalWorld,
    other_world: ProposalWorld,
    monkeypatch: pytest.MonkeyPatch,
    case: str,
    has: str,
) -> None:
    other_world.clock.now = world.clock.now + 1000  # (a harness's clock=, say)
    run = run_of(world, call_prefix="A")
    preview = stored(world, str((await propose(run, 1, "inv_1"))["preview_id"]))
    real = world.ledger.transition
    failing = [has == "due"]

    def transition(*args: Any, **kwargs: Any) -> Any:
        if failing[0] and kwargs.get("to") == "denied":
            raise LedgerLockedError("database is locked", path="ledger.db")
        return real(*args, **kwargs)

    monkeypatch.setattr(world.ledger, "transition", transition)
    if has == "due":
        run.withdraw(1)
        run.end()
        assert preview.id in holders._due
    monkeypatch.setattr(holders, "_forget_at", 0)  # (the next note looks for expired ones)
    await propose(run_of(other_world, call_prefix="B"), 1, "inv_1")
    other_world.writes.settle_denials()
    if has == "held":
        run.withdraw(1)
        run.end()
    with contextlib.suppress(ToolError):  # (a person, since the withdrawal)
        approve_preview(world.ledger, preview.id, approver="bob", now=world.clock())
    failing[0] = False
    with pytest.raises(ToolError):
        await world.writes.commit(preview.id, preview.fingerprint, ALICE)
    assert_withdrawn(world, preview.id)
    assert world.system.sends() == 0
