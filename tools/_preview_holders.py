"""Who holds which preview in this process: the proposals of programs that stored or
received it, and whether a direct call (the model's) did.

A program's withdrawn proposal lets go of its preview (:func:`release`); the preview may be
denied only once nobody holds it any more, and only if a program's proposal stored it here:
a direct call's paused write is never let go this way, and a preview stored elsewhere (another
process, before this one started) is someone else's. The proposals of one intent share one
preview (the ledger's one per key), so each proposal of it counts as one hold: a program that
proposed it twice, or two programs that both proposed it, free it with their last withdrawal.

A denial its ledger could not record is *due*: tried again before any approval or commit
through that ledger here (:func:`settle`), and before anyone is handed the preview again
(:func:`note_received`). A preview withdrawn is never held again while its denial is due, so
an approval a person gave since the withdrawal goes with it, whoever proposes the same intent
later: they meet ``conflict`` instead, and once the denial is recorded the same intent gets a
new preview. A due denial is forgotten once its preview expired: nobody approves or commits
it then. Denials are tried outside the lock that guards these tables, the first one too (a
ledger may take its busy timeout to fail: no other proposal here waits for that), each by one
thread at a time: while one tries it, the preview is as due to everyone else.

Entries go once nobody holds them (a direct call's hold is never let go) and no denial of
theirs is due, or once their previews expire (checked now and then, the more entries the less
often), by the clock of the write path that stored or received them: write paths here may
keep different clocks (one that raises judges nothing expired). Forgetting one is always safe:
a preview nobody here knows is never denied by a withdrawal. A forked child starts with none.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from typing import Final, NamedTuple

from airlock.tools._errors import ConflictError

__all__ = [
    "Denial",
    "StillSending",
    "note_received",
    "note_stored",
    "proposing_as",
    "release",
    "settle",
    "undecided",
    "withdrawing",
]


class _Proposing(NamedTuple):
    holder: object
    noted: list[str]
    """The previews this proposal stored or received, so far."""


_proposing: ContextVar[_Proposing | None] = ContextVar("airlock_proposing", default=None)
"""Who proposes in this task: a program's proposal (:func:`proposing_as`), or ``None``: a
direct call, anything else."""
_FORGET_FIRST_AT: Final = 4096
"""Entries at which the expired ones are first looked for; then at twice those left."""
Clock = Callable[[], float]
"""The wall clock of the write path a preview was stored or received through (its
``expires`` is by that clock)."""


class _Holding:
    __slots__ = ("clock", "direct", "last_withdrawn", "ours", "programs", "until")

    def __init__(self, until: float, clock: Clock, *, ours: bool) -> None:
        self.until = until
        self.clock = clock
        """What ``until`` is judged by."""
        self.ours = ours
        """A program's proposal stored it, in this process."""
        self.direct = False
        """A direct call stored or received it: it is never let go."""
        self.programs: Counter[object] = Counter()
        """Proposals that hold it, by program."""
        self.last_withdrawn = 0.0
        """When the latest proposal that let go of it was withdrawn."""


_held: dict[str, _Holding] = {}


_pending: Counter[tuple[str, object]] = Counter()
"""Withdrawals of a program's proposals of a preview, by preview id and program, that the
program has not let go of yet (it does once none of its proposals is being prepared)."""


Denial = Callable[[float], bool]
"""Records the denial of a withdrawn preview in its ledger, ``since`` the withdrawal that freed
it (a person's approval from since goes with it); whether the preview stands all the same (a
person approved it before, it was sent: it keeps its key). Raises when the ledger failed."""


class _Due(NamedTuple):
    ledger: object
    """The ledger it is to be recorded in: only its write paths try it again."""
    deny: Denial
    since: float
    until: float
    """When its preview expires (by ``clock``): nobody approves or commits it after."""
    clock: Clock


_due: dict[str, _Due] = {}
"""Denials the ledger could not record when the last hold of a preview went, by preview id:
tried again before any approval or commit through that ledger (:func:`settle`), and before
the preview is handed to anyone again (:func:`note_received`). Nobody holds a preview whose
denial is due."""
_trying: dict[str, object] = {}
"""The due denials some thread is trying right now (outside :data:`_lock`), by preview id, with
that try's claim: nobody else tries them meanwhile, nobody is handed their previews. A claim
goes with its due denial, or as its try ends, however (:func:`_let_go`)."""
_lock = threading.RLock()  # (proposals may be prepared on worker threads)
_forget_at = _FORGET_FIRST_AT


def _reset_in_child() -> None:
    # A thread of the parent may have held the lock when another forked: in the child that
    # thread is gone and the lock would stay held, so every proposal would block for ever.
    # The child is another process: the parent's holds and due denials are the parent's (a
    # child trying them too would audit them twice).
    global _lock
    _lock = threading.RLock()
    for table in (_held, _pending, _due, _trying):
        table.clear()


os.register_at_fork(after_in_child=_reset_in_child)


@contextlib.contextmanager
def proposing_as(holder: object) -> Iterator[list[str]]:
    """The previews stored or received within it are held by ``holder`` (a program's
    proposal); yields their ids as they come."""
    proposing = _Proposing(holder, [])
    token = _proposing.set(proposing)
    try:
        yield proposing.noted
    finally:
        _proposing.reset(token)


def note_stored(preview_id: str, *, until: float, clock: Clock) -> None:
    """This task stored the preview ``preview_id``, which expires at ``until`` by ``clock``."""
    proposing = _proposing.get()
    with _lock:
        _forget_expired()
        holding = _held[preview_id] = _Holding(until, clock, ours=proposing is not None)
        _hold(holding, preview_id, proposing)


def note_received(preview_id: str, *, until: float, clock: Clock) -> None:
    """This task received the live preview ``preview_id`` of the same intent, stored before
    (here or elsewhere), which expires at ``until`` by ``clock``. One whose denial is due is
    denied first (:data:`Denial`): unless it stands all the same, nobody is handed it.

    Raises:
        ConflictError: its denial was due: the ledger could not record it now either (or
            another thread is trying it right now), or did (the key is free: the same
            intent, asked again, gets a new preview).
    """
    claim = object()
    try:
        with _lock:
            _forget_expired()
            due = _due.get(preview_id)
            if due is None:
                _hold_received(preview_id, until, clock)
                return
            if preview_id in _trying:
                raise _still_due(preview_id, "being recorded by another proposal")
            _trying[preview_id] = claim  # (ours to try: as due to everyone else meanwhile)
        _deny_first(preview_id, due, until, clock)
    finally:
        _let_go([preview_id], claim)


def withdrawing(preview_id: str, holder: object) -> None:
    """A proposal of ``holder`` of ``preview_id`` was withdrawn; it lets go soon
    (:func:`release` with ``pending``)."""
    with _lock:
        _pending[(preview_id, holder)] += 1


def release(
    preview_id: str,
    holder: object,
    deny: Denial,
    *,
    ledger: object,
    at: float,
    pending: bool = False,
) -> bool:
    """A proposal of ``holder`` lets go of ``preview_id`` (``pending``: one
    :func:`withdrawing` announced) as withdrawn at ``at``; if nobody holds it then, a
    program's proposal stored it here and no direct call had it, ``deny(since)`` (in
    ``ledger``; ``since``: when the latest of its proposals was withdrawn, which freed it),
    outside the lock: the denial is due while it is tried. When that raises, it stays due
    (:func:`settle`), and the error propagates. Whether it was denied, or due."""
    claim = object()
    try:
        with _lock:
            if pending:
                _pending[(preview_id, holder)] -= 1
                if _pending[(preview_id, holder)] <= 0:
                    del _pending[(preview_id, holder)]
            holding = _held.get(preview_id)
            if holding is None or holding.programs[holder] <= 0:
                return False
            holding.programs[holder] -= 1
            holding.last_withdrawn = since = max(holding.last_withdrawn, at)
            if not holding.ours or holding.direct or +holding.programs:
                if not (+holding.programs or holding.direct or preview_id in _due):
                    del _held[preview_id]
                return False
            due = _due[preview_id] = _Due(ledger, deny, since, holding.until, holding.clock)
            _trying[preview_id] = claim  # (the entry stays while it is due)
        deny(since)
        with _lock:
            if _due.get(preview_id) is due:
                _forget(preview_id)
        return True
    finally:
        _let_go([preview_id], claim)


def settle(ledger: object) -> None:
    """Try the denials due in ``ledger`` again, but those another thread is trying; forget
    any due denial whose preview expired (by its own write path's clock): nobody approves or
    commits it then.

    They are tried outside the lock, in turn, until one raises: the ledger fails still (each
    try may take its busy timeout), so the others would too; they stay due, tried at the
    next call, which starts with another (one that failed goes last: one that keeps failing
    keeps none from being tried); one whose preview is being sent (:class:`StillSending`)
    stops nothing. One recorded is forgotten unless it was forgotten meanwhile.
    """
    claim = object()
    mine: list[tuple[str, _Due]] = []
    try:
        with _lock:
            now = _reader()
            for preview_id in [key for key, due in _due.items() if due.until <= now(due.clock)]:
                _forget(preview_id)
            mine = [(k, d) for k, d in _due.items() if d.ledger is ledger and k not in _trying]
            _trying.update((preview_id, claim) for preview_id, _ in mine)
        for preview_id, due in mine:
            try:
                due.deny(due.since)
            except Exception as exc:
                with _lock:
                    if _due.get(preview_id) is due:
                        _due[preview_id] = _due.pop(preview_id)  # (due still: goes last)
                if isinstance(exc, StillSending):
                    continue  # (its send decides it, not the ledger: the others may go on)
                break
            with _lock:
                if _due.get(preview_id) is due:
                    _forget(preview_id)
    finally:
        _let_go([preview_id for preview_id, _ in mine], claim)


def undecided(preview_ids: Iterable[str]) -> bool:
    """Whether one of ``preview_ids`` is to be denied and is not yet: its denial is due, or
    the withdrawals its holders have not let go of yet free it."""
    with _lock:
        for preview_id in preview_ids:
            if preview_id in _due:
                return True
            holding = _held.get(preview_id)
            if holding is None or not holding.ours or holding.direct:
                continue
            holders = +holding.programs
            if holders and all(_pending[(preview_id, h)] >= n for h, n in holders.items()):
                return True
        return False


def _deny_first(preview_id: str, due: _Due, until: float, clock: Clock) -> None:
    """Record the due denial of ``preview_id`` (claimed by the caller: in :data:`_trying`)
    before it is handed to this task, outside the lock.

    No one is handed it meanwhile: while it is claimed, every other receiver meets
    ``conflict`` and no other thread tries it (two tries at once could both audit it), and
    nobody can let go of it (nobody holds it: it is due). Once recorded, this task holds it
    (when it stands) under the lock at once.

    Raises:
        ConflictError: unless the preview stands all the same.
    """
    try:
        stands = due.deny(due.since)
    except StillSending as exc:
        raise ConflictError(
            "an earlier proposal of the same change was withdrawn as it was being sent; ask "
            "again once that send ends (it is denied unless it happens)",
            detail=f"the denial of {preview_id} waits for its send",
        ) from exc
    except Exception as exc:
        raise _still_due(preview_id, type(exc).__name__) from exc
    with _lock:
        if stands:  # (a person approved it before the withdrawal: theirs to keep)
            if _due.get(preview_id) is due:
                del _due[preview_id]
            _hold_received(preview_id, until, clock)
            return
        if _due.get(preview_id) is due:
            _forget(preview_id)
    raise ConflictError(
        "an earlier proposal of the same change was withdrawn just now; ask again for a new "
        "preview (nothing was sent)",
        detail=f"{preview_id} was denied as its withdrawal was recorded late",
    )


class StillSending(ConflictError):
    """A withdrawn preview is being sent: its denial stays due until the send ends
    (:func:`~airlock.tools._withdrawals.withdraw_proposal`), and is tried again then; a
    denial that meets it is no sign of a failing ledger (retryable: nothing to do but wait)."""

    retryable = True


def _let_go(preview_ids: Iterable[str], claim: object) -> None:
    """End the claims ``claim`` still has on ``preview_ids``: their tries ended, however."""
    with _lock:
        for preview_id in preview_ids:
            if _trying.get(preview_id) is claim:
                del _trying[preview_id]


def _still_due(preview_id: str, why: str) -> ConflictError:
    return ConflictError(
        "an earlier proposal of the same change was withdrawn, and the ledger could not "
        "record that yet; ask again shortly (nothing was sent, nothing is lost)",
        detail=f"the denial of {preview_id} is due: {why}",
    )


def _hold_received(preview_id: str, until: float, clock: Clock) -> None:
    holding = _held.get(preview_id)
    if holding is None:
        holding = _held[preview_id] = _Holding(until, clock, ours=False)
    _hold(holding, preview_id, _proposing.get())


def _hold(holding: _Holding, preview_id: str, proposing: _Proposing | None) -> None:
    if proposing is None:
        holding.direct = True
    else:
        holding.programs[proposing.holder] += 1
        proposing.noted.append(preview_id)


def _forget(preview_id: str) -> None:
    """Drop the due denial of ``preview_id``, its entry (nobody holds it) and its claim."""
    del _due[preview_id]
    _held.pop(preview_id, None)
    _trying.pop(preview_id, None)


def _forget_expired() -> None:
    global _forget_at
    if len(_held) < _forget_at:
        return
    now = _reader()
    for gone in [key for key, holding in _held.items() if holding.until <= now(holding.clock)]:
        del _held[gone]
        _due.pop(gone, None)
        _trying.pop(gone, None)
    _forget_at = max(_FORGET_FIRST_AT, 2 * len(_held))


def _reader() -> Callable[[Clock], float]:
    """Reads each clock once (one look at the tables judges each entry by one time); one
    that raises judges its entries not expired (its write path's error is not the caller's)."""
    read: dict[int, float] = {}

    def now(clock: Clock) -> float:
        if (key := id(clock)) not in read:
            try:
                read[key] = clock()
            except Exception:
                read[key] = -math.inf
        return read[key]

    return now
