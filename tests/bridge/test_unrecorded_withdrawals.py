"""A withdrawal not recorded yet is pending (its program lets go once no proposal of it is
being prepared) or due (the ledger could not record the denial), in this process: until it
is recorded, the preview is neither approved (one by one or in a batch) nor committed here,
while its program still runs as after it ended; a commit on another ledger of the process
leaves it due for its own. A person's approval recorded since the withdrawal (through the
ledger, where no queue is seen) is denied with it; one from before stands, and nobody who
proposes the same intent again is handed the preview while its denial is due: they get a new
one once it is recorded, ``conflict`` until then. A proposal that comes back after its
program ended is listed in no batch, so it is withdrawn as it comes back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from airlock.tools import (
    CallContext,
    ConflictError,
    DeniedError,
    Preview,
    ToolError,
    approve_preview,
)
from tests.bridge.test_withdrawn_proposals import (
    ALLOW,
    REFUND,
    _fails_once,
    assert_withdrawn,
    propose,
    run_of,
    stored,
    world,
)
from tests.tools.test_proposals import PROPOSING, ProposalWorld
from tests.tools.test_write_world import ALICE, ASK

pytestmark = pytest.mark.anyio

__all__ = ["world"]  # (the fixture, shared)


def _approve(world: ProposalWorld, preview: Preview) -> None:
    world.writes.approve(preview.id, approver="bob", fingerprint=preview.fingerprint)


def _approve_batch(world: ProposalWorld, preview: Preview) -> None:
    batch = world.writes.store_batch([preview])
    items = world.writes.approve_batch(batch.id, approver="bob", fingerprint=batch.fingerprint)
    assert not any(item.approved_now for item in items)


async def _commit(world: ProposalWorld, preview: Preview) -> None:
    await world.writes.commit(preview.id, preview.fingerprint, ALICE)


def _held_up(
    world: ProposalWorld, monkeypatch: pytest.MonkeyPatch
) -> tuple[asyncio.Event, asyncio.Event]:
    """From now on, a proposal is prepared once ``go_on`` is set (``started``: one waits):
    a slow prepare, or one that outlived the bridge's grace."""
    prepare = world.writes.propose_from_code
    started, go_on = asyncio.Event(), asyncio.Event()

    async def held_up(*args: Any, **kwargs: Any) -> Preview:
        started.set()
        await go_on.wait()
        return await prepare(*args, **kwargs)

    monkeypatch.setattr(world.writes, "propose_from_code", held_up)
    return started, go_on


async def _done(outcome: Awaitable[None] | None) -> None:
    if outcome is not None:
        await outcome


Step = Callable[[ProposalWorld, Preview], Awaitable[None] | None]
# (case, the policy, what follows a withdrawal the ledger failed to record while the program
# still runs, how many more times the ledger fails, what that step meets)
AFTER_A_FAILED_WITHDRAWAL = [
    ("a_person_approves_it_the_ledger_back", ASK, _approve, 0, ConflictError),
    ("a_person_approves_it_the_ledger_still_failing", ASK, _approve, 1, ConflictError),
    ("a_person_approves_its_batch", ASK, _approve_batch, 0, None),
    ("a_rule_approved_it_and_a_commit_comes", ALLOW, _commit, 0, DeniedError),
    ("a_rule_approved_it_the_ledger_still_failing", ALLOW, _commit, 1, ConflictError),
]


@pytest.mark.parametrize(
    ("case", "approvals", "step", "more_failures", "meets"),
    AFTER_A_FAILED_WITHDRAWAL,
    ids=[c[0] for c in AFTER_A_FAILED_WITHDRAWAL],
)
async def test_a_withdrawal_not_recorded_yet_is_neither_approved_nor_committed(
    world: ProposalWorld,
    monkeypatch: pytest.MonkeyPatch,
    case: str,
    approvals: Any,
    step: Step,
    more_failures: int,
    meets: type[ToolError] | None,
) -> None:
    run = run_of(world, approvals)
    answer = await propose(run, 1, "inv_1")
    _fails_once(world, "transition", monkeypatch, times=1 + more_failures)
    run.withdraw(1)  # the ledger was locked; the program goes on
    preview = stored(world, str(answer["preview_id"]))
    assert preview.state in ("prepared", "approved")
    if meets is None:
        await _done(step(world, preview))
    else:
        with pytest.raises(meets):
            await _done(step(world, preview))
    run.end()
    with pytest.raises(DeniedError):  # recorded at the latest now: no one commits it
        await _commit(world, stored(world, preview.id))
    assert_withdrawn(world, preview.id)
    assert world.system.sends() == 0


@pytest.fixture
def other_world(tmp_path: Path) -> Iterator[ProposalWorld]:
    (tmp_path / "other").mkdir()
    w = ProposalWorld(tmp_path / "other")
    yield w
    w.close()


async def test_a_commit_on_another_ledger_leaves_the_denial_due_for_its_own(
    world: ProposalWorld, other_world: ProposalWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = run_of(world, ALLOW)
    answer = await propose(run, 1, "inv_1")
    _fails_once(world, "transition", monkeypatch, times=2)
    run.withdraw(1)
    run.end()  # tried again, and the ledger failed again; then it is back
    withdrawn = stored(world, str(answer["preview_id"]))
    other = run_of(other_world, ALLOW)
    kept = stored(other_world, str((await propose(other, 1, "inv_2"))["preview_id"]))
    await _commit(other_world, kept)  # settles what it can: not the other ledger's preview
    assert (other_world.system.sends(), stored(world, withdrawn.id).state) == (1, "approved")
    with pytest.raises(DeniedError):
        await _commit(world, withdrawn)
    assert_withdrawn(world, withdrawn.id)
    assert world.system.sends() == 0


async def test_a_proposal_that_comes_back_after_its_program_ended_is_withdrawn(
    world: ProposalWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    started, go_on = _held_up(world, monkeypatch)  # (proposals prepare till go_on)
    run = run_of(world, ALLOW)
    running = asyncio.ensure_future(propose(run, 1, "inv_1"))
    await started.wait()
    run.end()
    assert run.proposed_previews() == []  # what a harness batches as the program ends
    go_on.set()
    proposal = await running
    assert run.proposed_previews() == []
    assert_withdrawn(world, str(proposal["preview_id"]))
    with pytest.raises(DeniedError):
        await _commit(world, stored(world, str(proposal["preview_id"])))
    assert world.system.sends() == 0


# (case, when the person approves: before the program withdrew it, or while its denial was
# due; where the preview stands after a commit; what the commit sent)
APPROVED_BY_A_PERSON = [
    ("before_the_withdrawal", "before", "committed", 1),
    ("while_its_denial_was_due", "after", "denied", 0),
]


@pytest.mark.parametrize(
    ("case", "when", "state", "sends"),
    APPROVED_BY_A_PERSON,
    ids=[c[0] for c in APPROVED_BY_A_PERSON],
)
async def test_a_persons_approval_stands_only_if_it_came_before_the_withdrawal(
    world: ProposalWorld,
    monkeypatch: pytest.MonkeyPatch,
    case: str,
    when: str,
    state: str,
    sends: int,
) -> None:
    run = run_of(world, ASK)
    preview = stored(world, str((await propose(run, 1, "inv_1"))["preview_id"]))
    if when == "before":
        approve_preview(world.ledger, preview.id, approver="bob", now=world.clock())
        world.clock.advance(1)
        run.withdraw(1)
    else:
        _fails_once(world, "transition", monkeypatch, times=2)
        run.withdraw(1)
        run.end()  # tried again: the ledger failed again
        world.clock.advance(1)
        # (the public function, as an approver in another process would: it sees no queue)
        approve_preview(world.ledger, preview.id, approver="bob", now=world.clock())
    run.end()
    with contextlib.suppress(DeniedError):
        await _commit(world, preview)
    assert (stored(world, preview.id).state, world.system.sends()) == (state, sends)


async def test_an_approval_while_another_proposal_of_the_program_is_prepared_meets_conflict(
    world: ProposalWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = run_of(world, ASK)
    preview = stored(world, str((await propose(run, 1, "inv_1"))["preview_id"]))
    started, go_on = _held_up(world, monkeypatch)  # (proposals prepare till go_on)
    other = asyncio.ensure_future(propose(run, 2, "inv_2"))  # another intent
    await started.wait()
    run.withdraw(1)  # let go of once proposal 2 is prepared
    with pytest.raises(ConflictError):
        _approve(world, preview)
    go_on.set()
    await other
    run.end()
    with pytest.raises(DeniedError):
        await _commit(world, stored(world, preview.id))
    assert_withdrawn(world, preview.id)
    assert world.system.sends() == 0


async def test_a_proposal_that_comes_back_withdrawn_is_judged_by_when_it_was_withdrawn(
    world: ProposalWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Orders 1 and 2 propose one intent (one preview); order 2 is slow. Both are withdrawn,
    # then a person approves through the ledger (another process, which sees no queue), and
    # only then does order 2 come back: the approval came after the withdrawal.
    run = run_of(world, ASK)
    preview = stored(world, str((await propose(run, 1, "inv_1"))["preview_id"]))
    started, go_on = _held_up(world, monkeypatch)  # (proposals prepare till go_on)
    second = asyncio.ensure_future(propose(run, 2, "inv_1"))
    await started.wait()
    world.clock.advance(1)
    run.withdraw(1)
    world.clock.advance(1)
    run.withdraw(2)
    world.clock.advance(1)
    approve_preview(world.ledger, preview.id, approver="bob", now=world.clock())
    world.clock.advance(2)
    go_on.set()
    assert (await second)["preview_id"] == preview.id
    run.end()
    with pytest.raises(DeniedError):
        await _commit(world, stored(world, preview.id))
    assert_withdrawn(world, preview.id)
    assert world.system.sends() == 0


async def test_an_approval_while_another_program_held_the_preview_stands(
    world: ProposalWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A and B hold one preview. A withdraws first but lets go late (another of its proposals
    # is being prepared); a person approves while B holds it; then B withdraws. The approval
    # came before the withdrawal that freed the preview: it stands.
    a, b = run_of(world, ASK, call_prefix="A"), run_of(world, ASK, call_prefix="B")
    preview = stored(world, str((await propose(a, 1, "inv_1"))["preview_id"]))
    assert (await propose(b, 1, "inv_1"))["preview_id"] == preview.id
    started, go_on = _held_up(world, monkeypatch)  # (proposals prepare till go_on)
    slow = asyncio.ensure_future(propose(a, 2, "inv_2"))
    await started.wait()
    world.clock.advance(1)
    a.withdraw(1)
    world.clock.advance(1)
    _approve(world, preview)
    world.clock.advance(1)
    b.withdraw(1)
    go_on.set()
    await slow
    await _commit(world, stored(world, preview.id))
    assert (stored(world, preview.id).state, world.system.sends()) == ("committed", 1)


def _direct() -> CallContext:
    return CallContext(
        principal=ALICE, grant=PROPOSING, run_id="run_p", caller="direct", approvals=ASK
    )


# (case, who proposes the same intent again while the denial is due, after a person approved
# the preview through the ledger; how many more times the ledger fails; how many tries are
# refused (``conflict``, nothing lost) before one gets a new preview: every proposal records
# the due denials first)
PROPOSED_AGAIN = [
    ("by_its_program_the_ledger_back", "A", 0, 0),
    ("by_another_program_the_ledger_back", "B", 0, 0),
    ("by_its_program_the_ledger_still_failing", "A", 2, 1),
    ("by_another_program_the_ledger_still_failing", "B", 2, 1),
    ("by_the_model_the_ledger_back", "direct", 0, 0),
    ("by_the_model_the_ledger_still_failing", "direct", 2, 1),
]


@pytest.mark.parametrize(
    ("case", "who", "more_failures", "refused"), PROPOSED_AGAIN, ids=[c[0] for c in PROPOSED_AGAIN]
)
async def test_a_preview_whose_denial_is_due_is_not_handed_out_again(
    world: ProposalWorld,
    monkeypatch: pytest.MonkeyPatch,
    case: str,
    who: str,
    more_failures: int,
    refused: int,
) -> None:
    a, b = run_of(world, ASK, call_prefix="A"), run_of(world, ASK, call_prefix="B")
    withdrawn = stored(world, str((await propose(a, 1, "inv_1"))["preview_id"]))
    world.clock.advance(10)
    _fails_once(world, "transition", monkeypatch)
    a.withdraw(1)  # the ledger was locked: the denial is due
    world.clock.advance(2)
    approve_preview(world.ledger, withdrawn.id, approver="bob", now=world.clock())
    world.clock.advance(3)
    _fails_once(world, "transition", monkeypatch, times=more_failures)
    args: dict[str, object] = {"invoice_id": "inv_1", "reason": "duplicate"}

    async def again(order: int) -> str:
        if who == "direct":
            return (await world.writes.preview_call(REFUND, dict(args), _direct())).id
        return str((await propose(a if who == "A" else b, order, "inv_1"))["preview_id"])

    for order in range(2, 2 + refused):
        with pytest.raises(ConflictError):
            await again(order)
    fresh = await again(2 + refused)
    assert fresh != withdrawn.id  # a new preview, for a person to approve anew
    assert stored(world, fresh).state == "prepared"
    assert_withdrawn(world, withdrawn.id)  # the approval given since went with it
    a.end()
    b.end()
    with pytest.raises(DeniedError):
        await _commit(world, stored(world, withdrawn.id))
    assert world.system.sends() == 0


async def test_a_withdrawal_while_its_preview_is_sent_is_logged_as_no_ledger_failure(
    world: ProposalWorld, caplog: pytest.LogCaptureFixture
) -> None:
    # The send decides it (denied only if it never starts): nothing is wrong with the ledger.
    entered, gate = threading.Event(), threading.Event()
    real_send = world.system.send

    def send(key: str, body: dict[str, Any]) -> Any:
        entered.set()
        gate.wait(10)
        return real_send(key, body)

    world.system.send = send  # type: ignore[method-assign]
    session = run_of(world)
    preview = stored(world, (await propose(session, 1, "inv_1"))["preview_id"])
    _approve(world, preview)
    try:
        commit = asyncio.ensure_future(_commit(world, preview))
        while not entered.is_set():
            await asyncio.sleep(0.01)
        with caplog.at_level(logging.INFO, logger="airlock.bridge"):
            session.withdraw(1)
            session.end()
        gate.set()
        await asyncio.wait_for(commit, 10)
    finally:
        gate.set()
    assert stored(world, preview.id).state == "committed"
    said = [r for r in caplog.records if preview.id in r.getMessage()]
    assert said, caplog.text
    assert all(r.levelno == logging.INFO for r in said), [r.getMessage() for r in said]
