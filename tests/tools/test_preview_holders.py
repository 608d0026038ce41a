"""Who holds a preview in this process, and when a withdrawal may deny it: only once nobody
holds it, only one a program's proposal stored here, never one a direct call had. A denial
the ledger could not record is due: the preview is undecided, and handed to nobody, until it
is recorded (by its own ledger's write path) or its preview expired (by the clock of the write
path that stored or received it)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Literal

import pytest

from airlock.tools import ConflictError
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
from tests.tools.holder_tables import InterruptingLock, empty_holder_tables

A, B = object(), object()
DIRECT = None


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


clock = _Clock()

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
def _empty(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(holders, "_forget_at", holders._FORGET_FIRST_AT)
    monkeypatch.setattr(clock, "now", 0.0)
    with empty_holder_tables():
        yield


LEDGER, OTHER_LEDGER = object(), object()


def _release(
    holder: object, deny: Callable[[float], bool] = lambda _since: False, *, pending: bool = False
) -> bool:
    return release("pv_1", holder, deny, ledger=LEDGER, at=1.0, pending=pending)


def _as(holder: object, note: object) -> None:
    if holder is None:
        note("pv_1", until=100.0, clock=clock)  # type: ignore[operator]
        return
    with proposing_as(holder):
        note("pv_1", until=100.0, clock=clock)  # type: ignore[operator]


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
    answers = [
        _release(holder, lambda _since: denials.append(True) or False) for holder in releases
    ]
    assert answers == free
    assert len(denials) == free.count(True)  # denied exactly when it was let go for good


def _tries(*answers: bool | None) -> Callable[[float], bool]:
    """A denial that answers its tries in turn: ``None`` raises (the ledger is locked), else
    whether the preview stands all the same (a person approved it before the withdrawal)."""
    left = list(answers)

    def deny(_since: float) -> bool:
        answer = left.pop(0)
        if answer is None:
            raise OSError("the ledger is locked")
        return answer

    return deny


# (case, who is handed the preview while its denial is due, what the ledger answers as it
# is recorded then (None: it fails still; else whether the preview stands), whether they
# hold it then, whether the denial is still due)
HANDED_OUT_WHILE_DUE = [
    ("to_its_program_the_ledger_failing", A, None, False, True),
    ("to_another_program_the_ledger_failing", B, None, False, True),
    ("to_a_direct_call_the_ledger_failing", DIRECT, None, False, True),
    ("to_its_program_denied_then", A, False, False, False),
    ("to_another_program_denied_then", B, False, False, False),
    ("to_a_direct_call_denied_then", DIRECT, False, False, False),
    ("to_another_program_it_stands_for", B, True, True, False),
]


@pytest.mark.parametrize(
    ("case", "receiver", "answer", "holds", "due"),
    HANDED_OUT_WHILE_DUE,
    ids=[c[0] for c in HANDED_OUT_WHILE_DUE],
)
def test_a_preview_whose_denial_is_due_is_denied_before_anyone_holds_it_again(
    case: str, receiver: object, answer: bool | None, holds: bool, due: bool
) -> None:
    _as(A, note_stored)
    with pytest.raises(OSError, match="locked"):
        _release(A, _tries(None, answer))
    assert (undecided(["pv_1"]), undecided(["pv_2"])) == (True, False)
    assert [(key, d.since) for key, d in holders._due.items()] == [("pv_1", 1.0)]
    if holds:
        _as(receiver, note_received)
    else:
        with pytest.raises(ConflictError) as refused:
            _as(receiver, note_received)  # (the same intent proposed again, say)
        assert "withdrawn" in refused.value.message
    assert (undecided(["pv_1"]), "pv_1" in holders._due) == (due, due)
    holding = holders._held.get("pv_1")
    held = holding is not None and bool(holding.direct or +holding.programs)
    assert held == holds
    assert ("pv_1" in holders._held) == (holds or due)  # (nothing left of one denied)


# (case, the ledger whose write path settles, when (the preview expires at 100), whether the
# denial is tried, whether it is due after)
SETTLED = [
    ("by_its_ledger", LEDGER, 5.0, True, False),
    ("by_another_ledger", OTHER_LEDGER, 5.0, False, True),
    ("by_another_ledger_once_expired", OTHER_LEDGER, 100.0, False, False),
    ("by_its_ledger_once_expired", LEDGER, 100.0, False, False),
]


@pytest.mark.parametrize(
    ("case", "ledger", "now", "tried", "due"), SETTLED, ids=[c[0] for c in SETTLED]
)
def test_a_due_denial_is_tried_by_its_ledger_and_forgotten_once_its_preview_expired(
    case: str, ledger: object, now: float, tried: bool, due: bool
) -> None:
    _as(A, note_stored)
    tries: list[float] = []

    def deny(since: float) -> bool:
        tries.append(since)
        if len(tries) == 1:
            raise OSError("the ledger is locked")
        return False

    with pytest.raises(OSError, match="locked"):
        _release(A, deny)
    clock.now = now
    settle(ledger)
    assert tries == ([1.0, 1.0] if tried else [1.0])  # (since: when it was withdrawn)
    assert ("pv_1" in holders._due, "pv_1" in holders._held) == (due, due)


def test_a_due_denial_that_fails_again_stays_due() -> None:
    _as(A, note_stored)
    with pytest.raises(OSError, match="locked"):
        _release(A, _tries(None, None))
    clock.now = 5.0
    settle(LEDGER)
    assert undecided(["pv_1"])


def test_a_due_denial_that_keeps_failing_keeps_no_other_from_being_tried() -> None:
    for preview_id in ("pv_1", "pv_2"):
        with proposing_as(A):
            note_stored(preview_id, until=100.0, clock=clock)
    with pytest.raises(OSError, match="locked"):
        release("pv_1", A, _tries(None, None, None), ledger=LEDGER, at=1.0)
    with pytest.raises(OSError, match="locked"):
        release("pv_2", A, _tries(None, False), ledger=LEDGER, at=1.0)
    settle(LEDGER)  # (pv_1 fails: the pass stops there, pv_1 goes last)
    assert list(holders._due) == ["pv_2", "pv_1"]
    settle(LEDGER)
    assert (list(holders._due), bool(holders._trying)) == (["pv_1"], False)


# (case, who tries the due denial as an interrupt lands (a write path settling, a proposal
# handed its preview, the withdrawal that freed it), and when: as it claims the try, or as it
# takes the lock again once the try succeeded (to forget it))
INTERRUPTED = [
    ("settling_as_it_claims", "settle", "claimed"),
    ("settling_once_tried", "settle", "tried"),
    ("handing_it_out_as_it_claims", "receive", "claimed"),
    ("handing_it_out_once_tried", "receive", "tried"),
    ("withdrawing_as_it_claims", "release", "claimed"),
    ("withdrawing_once_tried", "release", "tried"),
]


@pytest.mark.parametrize(("case", "who", "at"), INTERRUPTED, ids=[c[0] for c in INTERRUPTED])
def test_an_interrupted_try_leaves_its_denial_due_and_free_to_try_again(
    monkeypatch: pytest.MonkeyPatch, case: str, who: str, at: Literal["claimed", "tried"]
) -> None:
    lock = InterruptingLock(at)
    tries: list[float] = []

    def deny(since: float) -> bool:
        tries.append(since)
        if len(tries) == 1 and who != "release":
            raise OSError("the ledger is locked")
        lock.arm()  # (recorded: the interrupt lands as the lock is taken next)
        return False

    _as(A, note_stored)
    if who != "release":
        with pytest.raises(OSError, match="locked"):
            _release(A, deny)
    tries_it: dict[str, Callable[[], object]] = {
        "settle": lambda: settle(LEDGER),
        "receive": lambda: _as(B, note_received),
        "release": lambda: _release(A, deny),
    }
    monkeypatch.setattr(holders, "_lock", lock)
    with pytest.raises(KeyboardInterrupt):
        tries_it[who]()
    assert (lock.landed, undecided(["pv_1"]), bool(holders._trying)) == (True, True, False)
    settle(LEDGER)  # (tried again: no claim left behind keeps it from that)
    assert (holders._due, holders._held, bool(holders._trying)) == ({}, {}, False)


class _Broken:
    def __call__(self) -> float:
        raise RuntimeError("the write path's clock is closed")


# (case, what this write path's clock, which raises, is read for: a settle of another ledger
# (its denial is due), or a look for expired entries as another preview is stored (its hold))
BROKEN_CLOCK = [("settling_another_ledger", "due"), ("looking_for_expired_entries", "held")]


@pytest.mark.parametrize(("case", "has"), BROKEN_CLOCK, ids=[c[0] for c in BROKEN_CLOCK])
def test_a_clock_that_raises_fails_no_other_write_path_and_forgets_nothing(
    monkeypatch: pytest.MonkeyPatch, case: str, has: str
) -> None:
    with proposing_as(A):
        note_stored("pv_1", until=100.0, clock=_Broken())
    if has == "due":
        with pytest.raises(OSError, match="locked"):
            _release(A, _tries(None))
        settle(OTHER_LEDGER)
    else:
        monkeypatch.setattr(holders, "_forget_at", 0)  # (the next note looks for expired ones)
        clock.now = 500.0
        with proposing_as(B):
            note_stored("pv_2", until=1000.0, clock=clock)
    assert ("pv_1" in holders._held, "pv_1" in holders._due) == (True, has == "due")


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
        note_stored("pv_1", until=100.0, clock=clock)
        note_received("pv_2", until=100.0, clock=clock)
    assert noted == ["pv_1", "pv_2"]


def test_entries_of_expired_previews_are_forgotten_with_their_due_denials() -> None:
    behind = _Clock()  # (another write path's clock: its entries expire by it)
    with proposing_as(A):
        note_stored("pv_due", until=10.0, clock=clock)
        note_stored("pv_behind", until=10.0, clock=behind)
    with pytest.raises(OSError, match="locked"):
        release("pv_due", A, _tries(None), ledger=LEDGER, at=1.0)
    with proposing_as(A):
        for n in range(holders._FORGET_FIRST_AT - 2):  # (as many as first looked at, in all)
            note_stored(f"pv_old_{n}", until=10.0, clock=clock)
        clock.now = 500.0
        note_stored("pv_new", until=1000.0, clock=clock)  # the old ones expired at 10
    assert (list(holders._held), holders._due) == (["pv_behind", "pv_new"], {})
    assert release("pv_new", A, lambda _since: False, ledger=LEDGER, at=1.0) is True
