"""Who holds a preview in this process, and when a withdrawal may deny it: only once nobody
holds it, only one a program's proposal stored here, never one a direct call had. A denial
the ledger could not record is due: the preview is undecided until it is recorded, or until
someone holds it again (a later proposal or a direct call received it)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from airlock.tools import _preview_holders as holders
from airlock.tools._preview_holders import (
    note_received,
    note_stored,
    proposing_as,
    release,
    settle,
    undecided,
    withdrawing,
)

A, B = object(), object()
DIRECT = None

# (case, who stored it (None: not here), who received it after, the releases in order, what
# each release answers: whether the preview may be denied then)
CASES = [
    ("stored_by_a_program", A, [], [A], [True]),
    ("kept_by_its_second_proposal", A, [A], [A, A], [False, True]),
    ("received_by_another_program", A, [B], [A, B], [False, True]),
    ("the_receiver_lets_go_first", A, [B], [B, A], [False, True]),
    ("received_by_a_direct_call", A, [DIRECT], [A], [False]),
    ("stored_by_a_direct_call", DIRECT, [A], [A], [False]),
    ("stored_elsewhere", "elsewhere", [A], [A], [False]),
    ("let_go_by_one_who_never_held_it", A, [], [B, A], [False, True]),
    ("let_go_twice", A, [], [A, A], [True, False]),
]


@pytest.fixture(autouse=True)
def _empty() -> Iterator[None]:
    kept = [(table, dict(table)) for table in (holders._held, holders._pending, holders._due)]
    for table, _ in kept:
        table.clear()
    yield
    for table, before in kept:
        table.clear()
        table.update(before)  # type: ignore[arg-type]


def _release(holder: object, deny: object = lambda _since: None, *, pending: bool = False) -> bool:
    return release("pv_1", holder, deny, how=None, at=1.0, pending=pending)  # type: ignore[arg-type]


def _as(holder: object, note: object) -> None:
    if holder is None:
        note("pv_1", until=100.0, now=0.0)  # type: ignore[operator]
        return
    with proposing_as(holder):
        note("pv_1", until=100.0, now=0.0)  # type: ignore[operator]


@pytest.mark.parametrize(
    ("case", "storer", "receivers", "releases", "free"), CASES, ids=[c[0] for c in CASES]
)
def test_a_preview_is_free_to_deny_once_its_last_holder_let_go(
    case: str, storer: object, receivers: list[object], releases: list[object], free: list[bool]
) -> None:
    if storer != "elsewhere":
        _as(storer, note_stored)
    for receiver in receivers:
        _as(receiver, note_received)
    denials: list[bool] = []
    answers = [_release(holder, lambda _since: denials.append(True)) for holder in releases]
    assert answers == free
    assert len(denials) == free.count(True)  # denied exactly when it was let go for good


def _locked(_since: float = 0.0) -> None:
    raise OSError("the ledger is locked")


# (case, who receives the preview after the denial failed, whether the denial is still to
# record at the next try)
AFTER_A_FAILED_DENIAL = [
    ("nobody", [], True),
    ("its_program_again", [A], False),
    ("another_program", [B], False),
    ("a_direct_call", [DIRECT], False),
    ("a_direct_call_then_a_program_that_lets_go", [DIRECT, B], False),
]


@pytest.mark.parametrize(
    ("case", "receivers", "denied_then"),
    AFTER_A_FAILED_DENIAL,
    ids=[c[0] for c in AFTER_A_FAILED_DENIAL],
)
def test_a_denial_the_ledger_could_not_record_is_due_until_recorded_or_held_again(
    case: str, receivers: list[object], denied_then: bool
) -> None:
    _as(A, note_stored)
    with pytest.raises(OSError, match="locked"):
        _release(A, _locked)
    assert (undecided(["pv_1"]), undecided(["pv_2"])) == (True, False)
    assert holders.denials_due() == [("pv_1", None, 1.0)]
    with pytest.raises(OSError, match="locked"):
        settle("pv_1", _locked)  # still locked: still due
    assert undecided(["pv_1"])
    for receiver in receivers:
        _as(receiver, note_received)  # (the same intent proposed again, say)
    if receivers == [DIRECT, B]:
        assert _release(B) is False  # (its proposal failed, say): the direct call holds it
    denials: list[bool] = []
    settle("pv_1", lambda: denials.append(True))
    assert (denials, undecided(["pv_1"]), holders.denials_due()) == (
        [True] if denied_then else [],
        False,
        [],
    )
    if receivers == [A]:
        assert _release(A) is True  # its program holds it again: its next withdrawal denies it


def test_a_preview_the_pending_withdrawals_would_free_is_undecided() -> None:
    _as(A, note_stored)
    _as(B, note_received)
    withdrawing("pv_1", A)
    assert not undecided(["pv_1"])  # B holds it still
    withdrawing("pv_1", B)
    assert undecided(["pv_1"])
    assert _release(A, pending=True) is False
    assert undecided(["pv_1"])
    assert _release(B, pending=True) is True
    assert (undecided(["pv_1"]), dict(holders._pending), holders._held) == (False, {}, {})


def test_a_proposal_yields_what_it_stored_or_received() -> None:
    with proposing_as(A) as noted:
        note_stored("pv_1", until=100.0, now=0.0)
        note_received("pv_2", until=100.0, now=0.0)
    assert noted == ["pv_1", "pv_2"]


def test_entries_of_expired_previews_are_forgotten() -> None:
    with proposing_as(A):
        for n in range(holders._FORGET_FIRST_AT):
            note_stored(f"pv_old_{n}", until=10.0, now=0.0)
        note_stored("pv_new", until=1000.0, now=500.0)  # the old ones expired at 10
    assert list(holders._held) == ["pv_new"]
    assert release("pv_new", A, lambda _since: None, how=None, at=1.0) is True
