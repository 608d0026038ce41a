"""A proposal its program withdrew (cancelled while the host prepared it) is neither offered
for approval nor committed by a session that loads the run's waiting writes from the ledger
(``resume_session`` → ``restore_pending``), even when a person approves its fingerprint."""

from __future__ import annotations

import math
import time

import pytest

from airlock import Session
from airlock.bridge import ToolSession
from airlock.tools import ConflictError, deny_preview
from airlock.tools import _preview_holders as holders
from tests.airlock.harness.batch_world import PEEK, REFUND, BatchWorld, body
from tests.airlock.session_world import ALICE
from tests.tools.test_proposals import PROPOSING

pytestmark = pytest.mark.anyio


def _program(world: BatchWorld, session: Session) -> ToolSession:
    """The tool session of a program run in ``session``, which may propose refunds."""
    return ToolSession(
        registry=world.proposals.registry,
        principal=ALICE,
        grant=PROPOSING,
        approvals=session.approvals,
        run_id=session.run_id,
        writes=world.writes,
        proposable=frozenset({REFUND}),
    )


async def test_a_withdrawn_proposal_is_not_restored_approved_or_committed(
    world: BatchWorld,
) -> None:
    session = world.session()
    program = _program(world, session)
    answers = []
    for order, invoice in ((1, "inv_1"), (2, "inv_2")):
        args: dict[str, object] = {"invoice_id": invoice, "reason": "duplicate"}
        ctx = program.context(f"m1:{order}", math.inf)
        answers.append(await program.propose(REFUND, args, ctx, order=order))
    program.withdraw(1)  # cancelled by the program while the host prepared it
    withdrawn, kept = (str(a["preview_id"]) for a in answers)
    assert [p.id for p in program.proposed_previews()] == [kept]

    again = world.harness.resume_session(ALICE, session.run_id, grant=PROPOSING)
    assert withdrawn not in [p.preview_id for p in again.pending()]
    with pytest.raises(ConflictError):  # a person who learnt its id cannot approve it
        world.approve(withdrawn)
    await again.call(*PEEK)  # settles what was approved meanwhile
    assert world.states([withdrawn]) == ["denied"]
    assert world.system.sends() == 0


# (case, whether the model's direct call came first, how far the wall clock moved between it
# and the proposal): either way the model's paused write and the program's proposal share
# one preview, and the program's withdrawal leaves it for the model.
ORDERS = [
    ("model_first_clock_ahead", True, 1.0),
    ("model_first_same_instant", True, 0.0),
    ("model_first_clock_stepped_back", True, -0.5),
    ("program_first", False, 0.0),
]


@pytest.mark.parametrize(("case", "model_first", "step"), ORDERS, ids=[c[0] for c in ORDERS])
async def test_a_withdrawn_proposal_leaves_the_models_paused_write_of_the_same_intent(
    world: BatchWorld, case: str, model_first: bool, step: float
) -> None:
    session = world.session()
    program = _program(world, session)
    args: dict[str, object] = {"invoice_id": "inv_1", "reason": "duplicate"}
    paused = await world.pause(session, "inv_1") if model_first else None
    world.proposals.clock.advance(step)
    answer = await program.propose(REFUND, args, program.context("m1:1", math.inf), order=1)
    if paused is None:
        paused = await world.pause(session, "inv_1")
    assert answer["preview_id"] == paused  # the same intent: one preview
    program.withdraw(1)
    assert world.states([paused]) == ["prepared"]

    again = world.harness.resume_session(ALICE, session.run_id, grant=PROPOSING)
    assert paused in [p.preview_id for p in again.pending()]
    world.approve(paused)
    await again.call(*PEEK)  # settles what was approved meanwhile
    assert world.states([paused]) == ["committed"]
    assert world.system.sends() == 1


async def test_a_withdrawal_leaves_the_preview_another_program_of_the_run_received(
    world: BatchWorld,
) -> None:
    session = world.session()
    first, second = _program(world, session), _program(world, session)
    args: dict[str, object] = {"invoice_id": "inv_1", "reason": "duplicate"}
    stored = await first.propose(REFUND, args, first.context("m1:1", math.inf), order=1)
    received = await second.propose(REFUND, args, second.context("m2:1", math.inf), order=1)
    assert received["preview_id"] == stored["preview_id"]
    first.withdraw(1)
    assert world.states([str(stored["preview_id"])]) == ["prepared"]
    assert [p.id for p in second.proposed_previews()] == [stored["preview_id"]]


async def test_the_model_is_told_a_preview_withdrawn_elsewhere_was_not_denied_by_a_person(
    world: BatchWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Who received a preview is known in one process only: a program in another process
    # (as if this one's record were empty) denies the preview the model's call received. The
    # model may ask again, and no person said no.
    session = world.session()
    program = _program(world, session)
    args: dict[str, object] = {"invoice_id": "inv_1", "reason": "duplicate"}
    await program.propose(REFUND, args, program.context("m1:1", math.inf), order=1)
    paused = await world.pause(session, "inv_1")
    monkeypatch.setattr(holders._held[paused], "direct", False)  # (the call made elsewhere)
    program.withdraw(1)
    assert world.states([paused]) == ["denied"]

    again = await session.call(REFUND, dict(args))
    assert again.code == "needs_approval"  # asked again: proposed anew
    assert body(again)["preview_id"] != paused
    (settled,) = body(again)["settled_writes"]
    assert (settled["preview_id"], settled["error"], settled["retryable"]) == (
        paused,
        "denied",
        True,
    )
    assert "withdrew" in settled["message"]
    assert "person" not in settled["message"]


# (case, the proposals of the same intent as (program, order), the withdrawals, the state of
# their one preview after them)
HOLDERS = [
    ("one_program_twice_both_withdrawn", ["a1", "a2"], ["a1", "a2"], "denied"),
    ("one_program_twice_one_withdrawn", ["a1", "a2"], ["a2"], "prepared"),
    ("two_programs_storer_withdraws_first", ["a1", "b1"], ["a1", "b1"], "denied"),
    ("two_programs_receiver_withdraws_first", ["a1", "b1"], ["b1", "a1"], "denied"),
    ("two_programs_storer_withdraws", ["a1", "b1"], ["a1"], "prepared"),
    ("two_programs_receiver_withdraws", ["a1", "b1"], ["b1"], "prepared"),
]


@pytest.mark.parametrize(
    ("case", "proposals", "withdrawals", "state"), HOLDERS, ids=[c[0] for c in HOLDERS]
)
async def test_a_preview_is_denied_once_its_last_holder_withdrew(
    world: BatchWorld, case: str, proposals: list[str], withdrawals: list[str], state: str
) -> None:
    session = world.session()
    programs = {name: _program(world, session) for name in ("a", "b")}
    args: dict[str, object] = {"invoice_id": "inv_1", "reason": "duplicate"}
    ids = set()
    for name, order in proposals:
        program = programs[name]
        ctx = program.context(f"m{name}:{order}", math.inf)
        ids.add(str((await program.propose(REFUND, args, ctx, order=int(order)))["preview_id"]))
    (preview,) = ids  # the same intent: one preview
    for name, order in withdrawals:
        programs[name].withdraw(int(order))
    assert world.states([preview]) == [state]
    again = world.harness.resume_session(ALICE, session.run_id, grant=PROPOSING)
    assert (preview in [p.preview_id for p in again.pending()]) == (state == "prepared")
    if state == "denied":  # nobody may approve and commit it
        with pytest.raises(ConflictError):
            world.approve(preview)
        await again.call(*PEEK)
        assert world.system.sends() == 0


# (case, a person's reason for denying the model's paused write, what the model is told)
PERSON_DENIALS = [
    ("a_reason", "not a duplicate, refund refused", "a person denied this change"),
    # A person's reason that reads like a withdrawal is still a person's "no": never retryable.
    ("withdrawal_words", "withdrawn by the program", "a person denied this change"),
]


@pytest.mark.parametrize(
    ("case", "reason", "told"), PERSON_DENIALS, ids=[c[0] for c in PERSON_DENIALS]
)
async def test_a_person_s_denial_is_told_as_one_whatever_its_reason_says(
    world: BatchWorld, case: str, reason: str, told: str
) -> None:
    session = world.session()
    paused = await world.pause(session, "inv_1")
    deny_preview(world.ledger, paused, approver="bob", reason=reason, now=time.time())
    again = await session.call(REFUND, {"invoice_id": "inv_1", "reason": "duplicate"})
    (settled,) = body(again)["settled_writes"]
    assert (settled["preview_id"], settled["error"], settled["retryable"]) == (
        paused,
        "denied",
        False,
    )
    assert settled["message"].startswith(told)
