"""A proposal the program cancelled while the host prepared it is withdrawn
(:meth:`ToolSession.withdraw`): its preview, once it exists, is ``denied`` in the ledger
("withdrawn by the program"), so nothing that loads the run's waiting previews finds it and
no approval or commit of its fingerprint goes through. The same intent also proposed by a
proposal the program kept stays ``prepared`` and listed for it.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airlock.bridge import ToolSession
from airlock.policies import ApprovalPolicy, ApprovalRule
from airlock.tools import (
    CallContext,
    ConflictError,
    DeniedError,
    Preview,
    ToolError,
    approve_preview,
)
from airlock.tools._errors import LedgerLockedError
from tests.tools.test_proposals import PROPOSING, ProposalWorld
from tests.tools.test_write_world import ALICE, ASK

pytestmark = pytest.mark.anyio

REFUND = "billing_refund_create"
ALLOW = ApprovalPolicy((ApprovalRule(id="refunds-allow", action="allow", tools=("billing_*",)),))


@pytest.fixture
def world(tmp_path: Path) -> Iterator[ProposalWorld]:
    w = ProposalWorld(tmp_path)
    yield w
    w.close()


def run_of(
    world: ProposalWorld, approvals: ApprovalPolicy = ASK, *, call_prefix: str | None = None
) -> ToolSession:
    return ToolSession(
        registry=world.registry,
        principal=ALICE,
        grant=PROPOSING,
        approvals=approvals,
        run_id="run_p",
        writes=world.writes,
        proposable=frozenset({REFUND}),
        call_prefix=call_prefix,
    )


async def propose(session: ToolSession, order: int, invoice: str) -> dict[str, Any]:
    args: dict[str, object] = {"invoice_id": invoice, "reason": "duplicate"}
    return dict(
        await session.propose(REFUND, args, session.context(f"c{order}", math.inf), order=order)
    )


def stored(world: ProposalWorld, preview_id: str) -> Preview:
    preview = world.ledger.preview(preview_id)
    assert preview is not None
    return preview


def assert_withdrawn(world: ProposalWorld, preview_id: str) -> None:
    preview = stored(world, preview_id)
    assert preview.state == "denied"
    last = world.ledger.history(preview_id)[-1]
    assert (last.from_state in ("prepared", "approved"), last.to_state) == (True, "denied")
    assert last.how == "withdrawn by the program"
    waiting = world.ledger.previews(states={"prepared", "approved"}, run_id="run_p")
    assert preview_id not in [p.id for p in waiting]


# (case, approvals, the preview's state as the program was answered)
AFTER = [("asked", ASK, "prepared"), ("approved_by_policy", ALLOW, "approved")]


@pytest.mark.parametrize(("case", "approvals", "answered"), AFTER, ids=[c[0] for c in AFTER])
async def test_a_proposal_withdrawn_once_prepared_is_denied_in_the_ledger(
    world: ProposalWorld, case: str, approvals: ApprovalPolicy, answered: str
) -> None:
    session = run_of(world, approvals)
    proposal = await propose(session, 1, "inv_1")
    assert proposal["state"] == answered
    session.withdraw(1)
    assert session.proposed_previews() == []
    assert_withdrawn(world, proposal["preview_id"])
    preview = stored(world, proposal["preview_id"])
    with pytest.raises(ConflictError) as approving:  # a person cannot approve it
        approve_preview(world.ledger, preview.id, approver="bob", now=world.clock())
    assert approving.value.code == "conflict"
    with pytest.raises(DeniedError) as committing:  # nor can anyone commit it
        await world.writes.commit(preview.id, preview.fingerprint, ALICE)
    assert committing.value.code == "denied"
    assert world.system.sends() == 0
    withdrawals = [
        e for e in world.registry.audit.events(run_id="run_p") if e.call_id == preview.id
    ]
    assert [(e.stage, e.decision, e.detail) for e in withdrawals][-1] == (
        "authorize",
        "deny",
        "withdrawn by the program",
    )


async def test_a_proposal_withdrawn_while_it_was_prepared_is_denied_once_it_exists(
    world: ProposalWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    prepare = world.writes.propose_from_code
    started = asyncio.Event()

    async def slowly(*args: Any, **kwargs: Any) -> Preview:
        started.set()
        await asyncio.sleep(0.05)
        return await prepare(*args, **kwargs)

    monkeypatch.setattr(world.writes, "propose_from_code", slowly)
    session = run_of(world)
    running = asyncio.ensure_future(propose(session, 1, "inv_1"))
    await started.wait()
    session.withdraw(1)  # the bridge withdraws it "now or as it ends"
    proposal = await running
    assert session.proposed_previews() == []
    assert_withdrawn(world, proposal["preview_id"])


# (case, the orders proposing inv_1 in turn, the withdrawn one, whether they overlap)
SHARED = [
    ("kept_first", [1, 2], 2, False),
    ("kept_after", [1, 2], 1, False),
    ("both_preparing", [1, 2], 1, True),
]


@pytest.mark.parametrize(
    ("case", "orders", "withdrawn", "overlap"), SHARED, ids=[c[0] for c in SHARED]
)
async def test_the_same_intent_kept_by_another_proposal_stays_prepared_and_listed(
    world: ProposalWorld,
    monkeypatch: pytest.MonkeyPatch,
    case: str,
    orders: list[int],
    withdrawn: int,
    overlap: bool,
) -> None:
    session = run_of(world)
    if overlap:
        prepare = world.writes.propose_from_code

        async def slowly(*args: Any, **kwargs: Any) -> Preview:
            await asyncio.sleep(0.05)
            return await prepare(*args, **kwargs)

        monkeypatch.setattr(world.writes, "propose_from_code", slowly)
        first, second = await asyncio.gather(*(propose(session, n, "inv_1") for n in orders))
        session.withdraw(withdrawn)
    else:
        first = await propose(session, orders[0], "inv_1")
        if withdrawn == orders[0]:
            session.withdraw(withdrawn)
        second = await propose(session, orders[1], "inv_1")
        if withdrawn == orders[1]:
            session.withdraw(withdrawn)
    kept = second if withdrawn == orders[0] else first
    (listed,) = session.proposed_previews()
    assert listed.id == kept["preview_id"]
    assert stored(world, listed.id).state == "prepared"
    if first["preview_id"] != second["preview_id"]:  # withdrawn before the intent came again
        assert_withdrawn(world, (first if withdrawn == orders[0] else second)["preview_id"])


# (case, how far the wall clock moved between the direct call and the proposal)
EARLIER = [("clock_ahead", 1.0), ("same_instant", 0.0), ("clock_stepped_back", -0.5)]


@pytest.mark.parametrize(("case", "step"), EARLIER, ids=[c[0] for c in EARLIER])
async def test_a_preview_that_existed_before_the_withdrawn_proposal_stays_prepared(
    world: ProposalWorld, case: str, step: float
) -> None:
    # The model's direct call of the same intent in the run, paused for a person. The
    # proposal received it, so it is not the proposal's, whatever the wall clock said.
    direct = CallContext(
        principal=ALICE, grant=PROPOSING, run_id="run_p", caller="direct", approvals=ASK
    )
    paused = await world.writes.preview_call(
        REFUND, {"invoice_id": "inv_1", "reason": "duplicate"}, direct
    )
    world.clock.advance(step)
    session = run_of(world)
    proposal = await propose(session, 1, "inv_1")
    assert proposal["preview_id"] == paused.id
    session.withdraw(1)
    assert session.proposed_previews() == []
    assert stored(world, paused.id).state == "prepared"


# (case, the program whose proposal stores the preview, whether a person approves it before
# program A withdraws its proposal; B keeps its own proposal of the same intent)
OTHER_PROGRAM = [
    ("kept_first_then_approved", "B", True),
    ("kept_first_waiting", "B", False),
    ("withdrawn_first_then_approved", "A", True),
]


@pytest.mark.parametrize(
    ("case", "first", "approved"), OTHER_PROGRAM, ids=[c[0] for c in OTHER_PROGRAM]
)
async def test_a_withdrawal_never_denies_another_programs_or_a_persons_approved_preview(
    world: ProposalWorld,
    monkeypatch: pytest.MonkeyPatch,
    case: str,
    first: str,
    approved: bool,
) -> None:
    # Two programs of one run (a harness runs several at once) propose the same intent.
    prepare = world.writes.propose_from_code
    turn = {"A": asyncio.Event(), "B": asyncio.Event()}

    async def in_turn(tool: str, args: dict[str, object], ctx: CallContext) -> Preview:
        await turn[ctx.call_id[0]].wait()
        return await prepare(tool, args, ctx)

    monkeypatch.setattr(world.writes, "propose_from_code", in_turn)
    a, b = (run_of(world, call_prefix=name) for name in "AB")
    args: dict[str, object] = {"invoice_id": "inv_1", "reason": "duplicate"}
    by_a = asyncio.ensure_future(a.propose(REFUND, dict(args), a.context("A1", math.inf), order=1))
    by_b = asyncio.ensure_future(b.propose(REFUND, dict(args), b.context("B1", math.inf), order=1))
    turn[first].set()
    await (by_a if first == "A" else by_b)
    turn["A"].set()
    turn["B"].set()
    answers = await asyncio.gather(by_a, by_b)
    assert answers[0]["preview_id"] == answers[1]["preview_id"]
    (shared,) = b.proposed_previews()
    if approved:
        approve_preview(world.ledger, shared.id, approver="bob", now=world.clock())
    a.withdraw(1)
    assert a.proposed_previews() == []
    assert stored(world, shared.id).state == ("approved" if approved else "prepared")
    if approved:
        await world.writes.commit(shared.id, shared.fingerprint, ALICE)
        assert world.system.sends() == 1


async def test_withdrawing_a_refused_or_unknown_proposal_changes_nothing(
    world: ProposalWorld,
) -> None:
    session = run_of(world)
    with pytest.raises(ToolError):  # refused: no such invoice
        await propose(session, 1, "inv_404")
    session.withdraw(1)
    session.withdraw(7)  # never proposed
    assert session.proposed_previews() == []
    assert world.ledger.previews(run_id="run_p") == []


def _fails_once(
    world: ProposalWorld, method: str, monkeypatch: pytest.MonkeyPatch, *, times: int = 1
) -> None:
    """The ledger's ``method`` raises ``times`` times (a locked database), then works."""
    real = getattr(world.ledger, method)
    failed: list[bool] = []

    def flaky(*args: Any, **kwargs: Any) -> Any:
        if len(failed) < times:
            failed.append(True)
            raise LedgerLockedError("database is locked", path="ledger.db")
        return real(*args, **kwargs)

    monkeypatch.setattr(world.ledger, method, flaky)


@pytest.mark.parametrize("approvals", [ASK, ALLOW], ids=["asks", "allowed_by_a_rule"])
async def test_a_preview_whose_proposal_failed_once_stored_is_held_by_nobody(
    world: ProposalWorld, approvals: ApprovalPolicy, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The proposal raised after its preview was stored: the program was told of none. Its
    # later proposal of the same intent, withdrawn, leaves nobody holding one: none waits.
    run = run_of(world, approvals)
    _fails_once(world, "approval", monkeypatch)
    with pytest.raises(LedgerLockedError):
        await propose(run, 1, "inv_1")
    (failed,) = world.ledger.previews(states={"denied"}, run_id="run_p")
    assert world.ledger.history(failed.id)[-1].how == "its proposal failed"
    again = await propose(run, 2, "inv_1")
    run.withdraw(2)
    assert world.ledger.preview(str(again["preview_id"])).state == "denied"
    assert world.ledger.previews(states={"prepared", "approved"}, run_id="run_p") == []


async def test_a_withdrawal_the_ledger_failed_to_record_is_tried_again(
    world: ProposalWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = run_of(world, ALLOW)
    answer = await propose(run, 1, "inv_1")
    _fails_once(world, "transition", monkeypatch)
    run.withdraw(1)  # the ledger was locked: the hold stays
    preview_id = str(answer["preview_id"])
    assert world.ledger.preview(preview_id).state == "approved"
    await propose(run, 2, "inv_2")  # the program's next proposal ends: tried again
    assert world.ledger.preview(preview_id).state == "denied"
    with pytest.raises(DeniedError):
        await world.writes.commit(preview_id, stored(world, preview_id).fingerprint, ALICE)
    assert world.system.sends() == 0


async def test_a_failed_proposal_whose_denial_failed_too_is_denied_later(
    world: ProposalWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = run_of(world)
    _fails_once(world, "approval", monkeypatch)  # the proposal raises once its preview exists
    _fails_once(world, "transition", monkeypatch, times=2)  # and its denial, tried twice
    with pytest.raises(LedgerLockedError):
        await propose(run, 1, "inv_1")
    (held,) = world.ledger.previews(states={"prepared"}, run_id="run_p")
    await propose(run, 2, "inv_2")  # the program's next proposal ends: tried again
    assert stored(world, held.id).state == "denied"
    assert world.ledger.history(held.id)[-1].how == "its proposal failed"
    assert world.writes.was_withdrawn(held.id)  # (a holder elsewhere is told so, not "a person")


async def test_a_failed_proposal_that_received_a_kept_preview_leaves_it_held(
    world: ProposalWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Order 1 keeps the preview; order 2 of the same intent receives it and fails. Letting go
    # of order 2's hold must leave order 1's.
    run = run_of(world)
    kept = await propose(run, 1, "inv_1")
    _fails_once(world, "approval", monkeypatch)
    with pytest.raises(LedgerLockedError):
        await propose(run, 2, "inv_1")
    await propose(run, 3, "inv_2")  # (a retry, were anything queued)
    preview_id = str(kept["preview_id"])
    assert stored(world, preview_id).state == "prepared"
    assert preview_id in [p.id for p in run.proposed_previews()]
    run.withdraw(1)  # its last hold: denied now
    assert stored(world, preview_id).state == "denied"


# (case, how many times the ledger fails to record the denial after the proposal failed, what
# a commit of the preview meets once the program ended)
UNRECORDED = [
    ("recorded_before_the_commit", 3, DeniedError),
    ("still_not_recorded_at_the_commit", 4, ConflictError),
]


@pytest.mark.parametrize(
    ("case", "failures", "commit_meets"), UNRECORDED, ids=[c[0] for c in UNRECORDED]
)
async def test_a_denial_still_unrecorded_when_the_program_ends_comes_before_any_commit(
    world: ProposalWorld,
    monkeypatch: pytest.MonkeyPatch,
    case: str,
    failures: int,
    commit_meets: type[Exception],
) -> None:
    run = run_of(world)
    _fails_once(world, "approval", monkeypatch)  # the proposal raises once its preview exists
    _fails_once(world, "transition", monkeypatch, times=failures)  # and so does its denial
    with pytest.raises(LedgerLockedError):
        await propose(run, 1, "inv_1")
    run.end()  # the program ended: no later proposal of it will try again
    (held,) = world.ledger.previews(states={"prepared"}, run_id="run_p")
    with pytest.raises(commit_meets):
        await world.writes.commit(held.id, held.fingerprint, ALICE)
    with pytest.raises(DeniedError):  # and at the latest the next time
        await world.writes.commit(held.id, held.fingerprint, ALICE)
    assert stored(world, held.id).state == "denied"
    assert world.system.sends() == 0
