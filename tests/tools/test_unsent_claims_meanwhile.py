"""What happens to a claimed step while its send waits for a worker thread, once the send is
found never to have started and its claim is given back:

- a program's withdrawal that landed meanwhile (the preview was ``sending``: whether it is
  denied was not known yet) stays due, and denies the preview as it is approved again; the
  commit is told so, a later one is refused, nothing is sent; and while it waits for the send,
  it holds up no other due denial;
- a cancellation that ended the wait still propagates as a cancellation when the audit log
  fails as the claim is given back (closed at shutdown): the step is approved again all the
  same; and when the ledger fails then (closed, or locked), for a commit and an approved read.
"""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest

from airlock.tools import DeniedError, LedgerError
from airlock.tools._preview_holders import StillSending
from tests.tools.test_commit_threads import HangingRig
from tests.tools.test_proposals import ProposalWorld
from tests.tools.test_reach_forms import World, ctx
from tests.tools.test_unsent_claims import READ, _waiting_for_a_thread, approved_read
from tests.tools.test_write_world import ALICE

pytestmark = pytest.mark.anyio

TOOL = "billing_refund_create"
ARGS = {"invoice_id": "inv_1", "reason": "duplicate"}


async def test_a_withdrawal_that_landed_while_the_send_waited_denies_it_once_given_back(
    tmp_path: Path,
) -> None:
    world = ProposalWorld(tmp_path)
    holder = object()
    try:
        proposed = await world.writes.propose_held(TOOL, ARGS, world.code(), holder=holder)
        withdrawn_at = world.clock()
        world.clock.advance(1)  # a person approves it after the withdrawal: it goes with it
        world.writes.approve(proposed.id, approver="carol", fingerprint=proposed.fingerprint)
        told: list[Any] = []

        def withdrawn_meanwhile() -> None:
            stored = world.ledger.preview(proposed.id)
            assert stored is not None
            assert stored.state == "sending"
            try:
                world.writes.withdraw(proposed.id, holder=holder, withdrawn_at=withdrawn_at)
            except StillSending as exc:  # (due until the send ends)
                told.append(exc)

        raised = await _waiting_for_a_thread(
            lambda: world.writes.commit(proposed.id, proposed.fingerprint, ALICE),
            "bound",
            tool=TOOL,
            waiting=withdrawn_meanwhile,
        )

        assert [type(t) for t in told] == [StillSending]
        assert isinstance(raised, DeniedError), raised  # (not "still approved: commit again")
        assert "not sent" in raised.message
        stored = world.ledger.preview(proposed.id)
        assert stored is not None
        assert stored.state == "denied"
        assert world.writes.was_withdrawn(proposed.id)
        with pytest.raises(DeniedError):
            await world.writes.commit(proposed.id, proposed.fingerprint, ALICE)
        assert world.system.effects(proposed.key) == 0
    finally:
        world.ledger.close()
        world.system.close()


async def test_a_cancelled_wait_stays_a_cancellation_when_the_audit_log_fails(
    tmp_path: Path,
) -> None:
    rig = HangingRig(tmp_path, timeout=5.0)
    try:
        step = await rig.approved(1)

        raised = await _waiting_for_a_thread(
            lambda: rig.writes.commit(step.id, step.fingerprint, ALICE),
            "cancel",
            tool=rig.spec.name,
            waiting=rig.registry.audit.close,  # (shutdown closes the audit log)
        )

        assert isinstance(raised, anyio.get_cancelled_exc_class()), raised
        assert rig.state(step) == ("approved", 0)
        assert rig.system.sends(step.key) == 0
    finally:
        rig.close()


async def test_a_denial_waiting_for_a_send_holds_up_no_other_due_denial(tmp_path: Path) -> None:
    world = ProposalWorld(tmp_path)
    entered, gate = threading.Event(), threading.Event()
    real_send = world.system.send

    def send(key: str, body: dict[str, Any]) -> Any:  # inv_1's send waits for the gate
        if body["invoice_id"] == "inv_1":
            entered.set()
            gate.wait(10)
        return real_send(key, body)

    world.system.send = send  # type: ignore[method-assign]
    sending, other = object(), object()
    try:
        s = await world.writes.propose_held(TOOL, ARGS, world.code(), holder=sending)
        d_args = {"invoice_id": "inv_2", "reason": "duplicate"}
        d = await world.writes.propose_held(TOOL, d_args, world.code(), holder=other)
        world.clock.advance(1)
        for preview in (s, d):  # a person approves both before any withdrawal: they stand
            world.writes.approve(preview.id, approver="carol", fingerprint=preview.fingerprint)
        world.clock.advance(1)
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(world.writes.commit, s.id, s.fingerprint, ALICE)
            with anyio.fail_after(10):
                while not entered.is_set():
                    await anyio.sleep(0.01)
            with pytest.raises(StillSending):
                world.writes.withdraw(s.id, holder=sending)
            # d's withdrawal meets a ledger failing once: its denial is due too, after s's
            real_preview, failed = world.ledger.preview, []

            def flaky(preview_id: str) -> Any:
                if preview_id == d.id and not failed:
                    failed.append(preview_id)
                    raise LedgerError("database is locked", path="ledger.db")
                return real_preview(preview_id)

            world.ledger.preview = flaky  # type: ignore[method-assign]
            with pytest.raises(LedgerError):
                world.writes.withdraw(d.id, holder=other)
            world.ledger.preview = real_preview  # type: ignore[method-assign]

            receipt = await world.writes.commit(d.id, d.fingerprint, ALICE)  # at the first try

            assert receipt.preview_id == d.id
            gate.set()
        assert world.system.effects(s.key) == 1  # (its send went on: approved before)
    finally:
        gate.set()
        world.ledger.close()
        world.system.close()


def _failing(ledger: Any) -> None:
    """Make ``ledger`` fail every read and change from now on, as a locked database does."""

    def locked(*_args: Any, **_kwargs: Any) -> Any:
        raise LedgerError("database is locked", path="ledger.db")

    for name in ("preview", "release_claim", "transition", "approval"):
        setattr(ledger, name, locked)


# (what waits for a thread, how the ledger fails as its claim is given back)
LEDGER_FAILURES = [
    ("commit", "closed"),
    ("commit", "locked"),
    ("approved_read", "closed"),
    ("approved_read", "locked"),
]


@pytest.mark.parametrize(("what", "failure"), LEDGER_FAILURES)
async def test_a_cancelled_wait_stays_a_cancellation_when_the_ledger_fails(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, what: str, failure: str
) -> None:
    if what == "commit":
        rig = HangingRig(tmp_path, timeout=5.0)
        ledger, step = rig.ledger, await rig.approved(1)
        call = lambda: rig.writes.commit(step.id, step.fingerprint, ALICE)  # noqa: E731
        tool, close = rig.spec.name, rig.close
        sent = lambda: rig.system.sends(step.key)  # noqa: E731
    else:
        world = World(tmp_path)
        ledger, tool = world.ledger, READ
        asked = await approved_read(world)
        call = lambda: world.writes.run_read(asked.id, asked.fingerprint, ctx())  # noqa: E731
        close = world.ledger.close
        sent = lambda: len(world.fetched.urls)  # noqa: E731
    try:
        raised = await _waiting_for_a_thread(
            call,
            "cancel",
            tool=tool,
            waiting=ledger.close if failure == "closed" else lambda: _failing(ledger),
        )

        assert isinstance(raised, anyio.get_cancelled_exc_class()), raised
        assert sent() == 0
        # Its sealed values are kept (the ledger cannot say the step settled), and said so.
        assert "could not let go of the sealed values" in caplog.text
    finally:
        with contextlib.suppress(Exception):
            close()
