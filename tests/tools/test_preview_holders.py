"""Who holds a preview in this process, and when a withdrawal may deny it: only once nobody
holds it, only one a program's proposal stored here, never one a direct call had."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from airlock.tools import _preview_holders as holders
from airlock.tools._preview_holders import note_received, note_stored, proposing_as, release

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
    before = dict(holders._held)
    holders._held.clear()
    yield
    holders._held.clear()
    holders._held.update(before)


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
    answers = [release("pv_1", holder, lambda: denials.append(True)) for holder in releases]
    assert answers == free
    assert len(denials) == free.count(True)  # denied exactly when it was let go for good


def test_a_hold_stays_when_the_ledger_could_not_deny() -> None:
    _as(A, note_stored)

    def locked() -> None:
        raise OSError("the ledger is locked")

    with pytest.raises(OSError, match="locked"):
        release("pv_1", A, locked)
    assert release("pv_1", A, lambda: None) is True  # tried again: still A's to let go


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
    assert release("pv_new", A, lambda: None) is True
