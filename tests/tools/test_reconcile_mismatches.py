"""Reconcile and a step whose key answered for another change: it may query the step again,
never resend it. However the mismatch was left (its step ``unknown`` with the error, claimed
again since, or only remembered by this process), a reconcile whose system would now take a
resend sends nothing, gives its claim back, and leaves the step for a person: a later commit
still refuses it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from airlock.tools import Preview, ReceiptMismatchError

from .test_commit_resends import (
    LEASE_AND_GRACE_PAST,
    _mismatch_the_ledger_did_not_record,
    _mismatched_then_claimed_here,
)
from .test_write_settling import Rig, _mismatch_by_send
from .test_write_world import ALICE

pytestmark = pytest.mark.anyio


def _finds_nothing(real: Any, effect: Any, key: str) -> None:
    return None  # as a system that has forgotten the key answers


def _fails(real: Any, effect: Any, key: str) -> None:
    raise RuntimeError("the system of record is down")


async def _by_send(rig: Rig, monkeypatch: pytest.MonkeyPatch) -> Preview:
    preview, _ = await _mismatch_by_send(rig)
    return preview


async def _claimed_again(rig: Rig, monkeypatch: pytest.MonkeyPatch) -> Preview:
    preview = await _mismatched_then_claimed_here(rig)  # (its error cleared by the claim)
    rig.clock.advance(LEASE_AND_GRACE_PAST)
    return preview


async def _not_recorded(rig: Rig, monkeypatch: pytest.MonkeyPatch) -> Preview:
    preview = await _mismatch_the_ledger_did_not_record(rig, monkeypatch)
    rig.clock.advance(LEASE_AND_GRACE_PAST)
    return preview


async def _then_a_failed_query(rig: Rig, monkeypatch: pytest.MonkeyPatch) -> Preview:
    preview, _ = await _mismatch_by_send(rig)
    rig.lookup_instead = _fails
    [resolution] = await rig.writes.reconcile()
    assert resolution.how == "query failed: RuntimeError"
    return preview


Left = Callable[[Rig, pytest.MonkeyPatch], Awaitable[Preview]]

# (case, whether the tool has a lookup, how the mismatched step was left)
MISMATCHED: list[tuple[str, bool, Left]] = [
    ("unknown_no_lookup", False, _by_send),
    ("unknown_lookup_finds_nothing", True, _by_send),
    ("claimed_again_here_since", False, _claimed_again),
    ("the_ledger_refused_the_mark", False, _not_recorded),
    ("a_query_failed_since", True, _then_a_failed_query),
]


@pytest.mark.parametrize(
    ("case", "with_lookup", "left"), MISMATCHED, ids=[row[0] for row in MISMATCHED]
)
async def test_reconcile_never_resends_a_step_whose_key_answered_for_another_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str, with_lookup: bool, left: Left
) -> None:
    rig = Rig(tmp_path, with_lookup=with_lookup)
    try:
        preview = await left(rig, monkeypatch)
        before = rig.ledger.preview(preview.id)
        assert before is not None
        sent = rig.system.sends()
        rig.commit_instead = None  # a system that would take a resend now
        rig.lookup_instead = _finds_nothing

        [resolution] = await rig.writes.reconcile()

        assert rig.system.sends() == sent
        assert (resolution.outcome, resolution.after) == ("unresolved", "unknown")
        assert resolution.how.startswith("not resent: its key answered for another change")
        stored = rig.ledger.preview(preview.id)
        assert stored is not None
        assert (stored.state, stored.attempts) == ("unknown", before.attempts)  # given back
        assert stored.error is not None
        assert stored.error.startswith("receipt_mismatch: ")
        assert rig.ledger.receipt(preview.key) is None
        with pytest.raises(ReceiptMismatchError):
            await rig.writes.commit(preview.id, preview.fingerprint, ALICE)
        assert rig.system.sends() == sent
    finally:
        rig.close()


async def test_a_mismatched_step_whose_query_now_finds_its_own_receipt_is_committed(
    tmp_path: Path,
) -> None:
    # The first send acted, under its key, and its answer came back altered (another
    # change's); queried again, the system holds this change's receipt under the key.
    rig = Rig(tmp_path, with_lookup=True)
    try:
        preview, _ = await _mismatch_by_send(rig)
        rig.commit_instead = None

        [resolution] = await rig.writes.reconcile()

        assert (resolution.outcome, resolution.how) == (
            "committed",
            "queried: the system of record holds the key",
        )
        assert rig.system.sends() == 1
        receipt = await rig.writes.commit(preview.id, preview.fingerprint, ALICE)
        assert receipt.replayed
    finally:
        rig.close()
