"""What a later commit of the same write does with a step an earlier send left undecided: one
this live process left ``sending`` (its ledger refused both the receipt and the ``unknown``
mark) is resent with its key once its lease has run out, not answered "in flight" for ever;
one whose key answers for another change (a receipt mismatch) is never resent by a commit."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from airlock.tools import AmbiguousWriteError, LedgerLockedError, Preview, ReceiptMismatchError
from airlock.tools._errors import CommitInFlightError
from airlock.tools._step_owner import owner_token

from .test_write_settling import Answer, Rig, _other_amount
from .test_write_world import ALICE

pytestmark = pytest.mark.anyio

LEASE_AND_GRACE_PAST = 800.0
"""Past the lease (the tool's 5 s timeout and 30 s of grace) and a live sender's grace (at
least 300 s more); within the preview's 900 s."""


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    r = Rig(tmp_path, with_lookup=False)
    yield r
    r.close()


@contextmanager
def _ledger_refusing_the_outcome(rig: Rig, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The ledger refuses to record how a send ended (its receipt, or ``unknown``), as it does
    while another connection holds ``BEGIN EXCLUSIVE``; a claim still goes through."""
    real = rig.ledger.transition

    def transition(preview_id: str, **kwargs: Any) -> Preview:
        if kwargs["to"] in ("committed", "unknown"):
            raise LedgerLockedError("another connection holds the lock", path="ledger.db")
        return real(preview_id, **kwargs)

    with monkeypatch.context() as patched:
        patched.setattr(rig.ledger, "transition", transition)
        yield


async def _left_sending(rig: Rig, monkeypatch: pytest.MonkeyPatch) -> Preview:
    """A step whose send acted and that this live process could not settle: ``sending``."""
    preview = await rig.prepare("inv_12")
    with (
        _ledger_refusing_the_outcome(rig, monkeypatch),
        pytest.raises(AmbiguousWriteError) as raised,
    ):
        await rig.writes.commit(preview.id, preview.fingerprint, ALICE)
    assert raised.value.idempotency_key == preview.key
    left = rig.ledger.preview(preview.id)
    assert left is not None
    assert (left.state, left.owner, left.attempts) == ("sending", owner_token(), 1)
    assert (rig.system.sends(), rig.system.effects()) == (1, 1)
    return preview


async def test_a_step_this_process_left_sending_is_resent_once_its_lease_is_past(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    preview = await _left_sending(rig, monkeypatch)
    rig.clock.advance(LEASE_AND_GRACE_PAST)

    receipt = await rig.writes.commit(preview.id, preview.fingerprint, ALICE)

    assert (receipt.key, receipt.resolved_by, receipt.replayed) == (preview.key, "resend", False)
    assert rig.system.sends(preview.key) == 2  # resent once, with the same key
    assert rig.system.effects() == 1  # and it acted once
    stored = rig.ledger.preview(preview.id)
    assert stored is not None
    assert (stored.state, stored.attempts) == ("committed", 2)
    claims = [e for e in rig.ledger.history(preview.id) if e.to_state == "sending"]
    assert [e.from_state for e in claims] == ["approved", "sending"]
    assert claims[-1].how.startswith("claimed to resend by commit retry: ")
    again = await rig.writes.commit(preview.id, preview.fingerprint, ALICE)
    assert again.replayed
    assert rig.system.sends() == 2


@pytest.mark.parametrize("later", [0.0, 20.0], ids=["at once", "inside its lease"])
async def test_a_step_left_sending_inside_its_lease_is_still_in_flight(
    rig: Rig, monkeypatch: pytest.MonkeyPatch, later: float
) -> None:
    preview = await _left_sending(rig, monkeypatch)
    rig.clock.advance(later)

    with pytest.raises(CommitInFlightError) as raised:
        await rig.writes.commit(preview.id, preview.fingerprint, ALICE)

    assert (raised.value.retryable, raised.value.outcome) == (True, "unknown")
    assert rig.system.sends() == 1
    stored = rig.ledger.preview(preview.id)
    assert stored is not None
    assert (stored.state, stored.attempts) == ("sending", 1)


async def test_a_send_still_running_here_is_not_resent_past_its_lease(rig: Rig) -> None:
    preview = await rig.prepare("inv_13")
    sending: list[str] = []

    async def slow(real: Answer, effect: Any, key: str) -> Any:
        sending.append(key)
        # Its clock jumps past the lease while it waits; a second commit comes in meanwhile.
        rig.clock.advance(LEASE_AND_GRACE_PAST)
        with pytest.raises(CommitInFlightError):
            await rig.writes.commit(preview.id, preview.fingerprint, ALICE)
        return real(effect, key)

    rig.commit_instead = slow
    receipt = await rig.writes.commit(preview.id, preview.fingerprint, ALICE)

    assert (receipt.resolved_by, sending) == ("send", [preview.key])
    assert (rig.system.sends(), rig.system.effects()) == (1, 1)


async def test_a_commit_never_resends_a_step_whose_key_answers_for_another_change(
    rig: Rig,
) -> None:
    preview = await rig.prepare("inv_14")
    rig.commit_instead = _other_amount
    with pytest.raises(ReceiptMismatchError) as first:
        await rig.writes.commit(preview.id, preview.fingerprint, ALICE)
    rig.commit_instead = None  # even a system that would now answer for this change

    for _ in range(2):
        with pytest.raises(ReceiptMismatchError) as again:
            await rig.writes.commit(preview.id, preview.fingerprint, ALICE)
        wire = again.value.to_wire()
        assert wire == first.value.to_wire()
        assert (wire["code"], wire["retryable"], wire["outcome"]) == ("conflict", False, "unknown")
        assert "an operator must look at it" in again.value.message

    assert rig.system.sends() == 1
    stored = rig.ledger.preview(preview.id)
    assert stored is not None
    assert (stored.state, stored.attempts) == ("unknown", 1)
    assert stored.error is not None
    assert stored.error.startswith("receipt_mismatch: ")
    assert rig.ledger.receipt(preview.key) is None


def _claim_as(rig: Rig, preview: Preview, owner: str, expect: str) -> None:
    """The step claimed for a send by ``owner`` (a process's mark), with the usual lease."""
    rig.ledger.transition(
        preview.id,
        expect={expect},
        to="sending",
        at=rig.clock(),
        actor=owner,
        how="claimed by reconcile",
        owner=owner,
        lease_until=rig.clock() + 35,
    )


async def _another_hosts_send(rig: Rig) -> Preview:
    preview = await rig.prepare("inv_15")
    _claim_as(rig, preview, "elsewhere@1.000@:4242", "approved")
    return preview


async def _mismatched_then_claimed_here(rig: Rig) -> Preview:
    preview = await rig.prepare("inv_16")
    rig.commit_instead = _other_amount
    with pytest.raises(ReceiptMismatchError):
        await rig.writes.commit(preview.id, preview.fingerprint, ALICE)
    rig.commit_instead = None
    _claim_as(rig, preview, owner_token(), "unknown")  # a reconcile here that never ended
    claimed = rig.ledger.preview(preview.id)
    assert claimed is not None
    assert claimed.error is None  # a claim clears it: the history keeps the mismatch
    return preview


async def _mismatch_the_ledger_did_not_record(rig: Rig, monkeypatch: pytest.MonkeyPatch) -> Preview:
    preview = await rig.prepare("inv_17")
    rig.commit_instead = _other_amount
    with _ledger_refusing_the_outcome(rig, monkeypatch), pytest.raises(ReceiptMismatchError):
        await rig.writes.commit(preview.id, preview.fingerprint, ALICE)
    rig.commit_instead = None
    left = rig.ledger.preview(preview.id)
    assert left is not None
    assert (left.state, left.owner, left.error) == ("sending", owner_token(), None)
    return preview


async def _another_hosts(rig: Rig, monkeypatch: pytest.MonkeyPatch) -> Preview:
    return await _another_hosts_send(rig)


async def _claimed_again_here(rig: Rig, monkeypatch: pytest.MonkeyPatch) -> Preview:
    return await _mismatched_then_claimed_here(rig)


# (case, a step left 'sending' that only reconcile may take over)
LEFT_TO_RECONCILE = [
    # Its sender may still wait for the answer, by another clock: "in flight", as before.
    ("another_hosts_send", _another_hosts),
    ("a_mismatch_claimed_again_here", _claimed_again_here),
    # Its history says nothing of the mismatch: this process remembers it.
    ("a_mismatch_the_ledger_did_not_record", _mismatch_the_ledger_did_not_record),
]


@pytest.mark.parametrize(
    ("case", "left"), LEFT_TO_RECONCILE, ids=[row[0] for row in LEFT_TO_RECONCILE]
)
async def test_a_commit_leaves_these_steps_sending_to_reconcile(
    rig: Rig, monkeypatch: pytest.MonkeyPatch, case: str, left: Any
) -> None:
    preview = await left(rig, monkeypatch)
    sent = rig.system.sends()
    rig.clock.advance(LEASE_AND_GRACE_PAST)

    with pytest.raises(CommitInFlightError):
        await rig.writes.commit(preview.id, preview.fingerprint, ALICE)

    assert rig.system.sends() == sent
    stored = rig.ledger.preview(preview.id)
    assert stored is not None
    assert stored.state == "sending"
