"""What happens to a claimed step while its send waits for a worker thread, once the send is
found never to have started and its claim is given back:

- a program's withdrawal that landed meanwhile (the preview was ``sending``: whether it is
  denied was not known yet) stays due, and denies the preview as it is approved again; a later
  commit is refused, nothing is sent;
- a cancellation that ended the wait still propagates as a cancellation when the audit log
  fails as the claim is given back (closed at shutdown): the step is approved again all the
  same.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from airlock.tools import DeniedError
from airlock.tools._withdrawals import StillSending
from tests.tools.test_commit_threads import HangingRig
from tests.tools.test_proposals import ProposalWorld
from tests.tools.test_unsent_claims import _waiting_for_a_thread
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

        await _waiting_for_a_thread(
            lambda: world.writes.commit(proposed.id, proposed.fingerprint, ALICE),
            "bound",
            tool=TOOL,
            waiting=withdrawn_meanwhile,
        )

        assert [type(t) for t in told] == [StillSending]
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
        rig.gate.set()
        rig.ledger.close()
        rig.system.close()
