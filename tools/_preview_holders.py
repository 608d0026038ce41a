"""Who holds which preview in this process: the proposals of programs that stored or
received it, and whether a direct call (the model's) did.

A program's withdrawn proposal lets go of its preview (:func:`release`); the preview may be
denied only once nobody holds it any more, and only if a program's proposal stored it here:
a direct call's paused write is never let go this way, and a preview stored elsewhere (another
process, before this one started) is someone else's. The proposals of one intent share one
preview (the ledger's one per key), so each proposal of it counts as one hold: a program that
proposed it twice, or two programs that both proposed it, free it with their last withdrawal.

Entries go once nobody holds them, or once their previews expire (checked now and then, the
more entries the less often). Forgetting one is always safe: a preview nobody here knows is
never denied by a withdrawal.
"""

from __future__ import annotations

import contextlib
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Final, NamedTuple

__all__ = [
    "denials_due",
    "denied_at_last",
    "deny_later",
    "note_received",
    "note_stored",
    "proposing_as",
    "release",
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


class _Holding:
    __slots__ = ("direct", "ours", "programs", "until")

    def __init__(self, until: float, *, ours: bool) -> None:
        self.until = until
        self.ours = ours
        """A program's proposal stored it, in this process."""
        self.direct = False
        """A direct call stored or received it: it is never let go."""
        self.programs: Counter[object] = Counter()
        """Proposals that hold it, by program."""


_held: dict[str, _Holding] = {}
_due: dict[str, tuple[object, str | None]] = {}
"""Denials a program that ended could not record (the ledger failed): preview id -> its
holder and how; tried again before any commit in this process."""
_lock = threading.RLock()  # (proposals may be prepared on worker threads)
_forget_at = _FORGET_FIRST_AT


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


def note_stored(preview_id: str, *, until: float, now: float) -> None:
    """This task stored the preview ``preview_id``, which expires at ``until``."""
    proposing = _proposing.get()
    with _lock:
        _forget_expired(now)
        holding = _held[preview_id] = _Holding(until, ours=proposing is not None)
        _hold(holding, preview_id, proposing)


def note_received(preview_id: str, *, until: float, now: float) -> None:
    """This task received the live preview ``preview_id`` of the same intent, stored before
    (here or elsewhere)."""
    with _lock:
        _forget_expired(now)
        holding = _held.get(preview_id)
        if holding is None:
            holding = _held[preview_id] = _Holding(until, ours=False)
        _hold(holding, preview_id, _proposing.get())


def release(preview_id: str, holder: object, deny: Callable[[], object]) -> bool:
    """A proposal of ``holder`` lets go of ``preview_id``; if nobody holds it then, a
    program's proposal stored it here and no direct call had it, ``deny()`` (the ledger's
    denial) first: when that raises, the hold stays, for a later try. Whether it was denied."""
    with _lock:
        holding = _held.get(preview_id)
        if holding is None or holding.programs[holder] <= 0:
            return False
        free = holding.ours and not holding.direct and +holding.programs == Counter({holder: 1})
        if free:
            deny()
        holding.programs[holder] -= 1
        if not +holding.programs:
            del _held[preview_id]
        return free


def _hold(holding: _Holding, preview_id: str, proposing: _Proposing | None) -> None:
    if proposing is None:
        holding.direct = True
    else:
        holding.programs[proposing.holder] += 1
        proposing.noted.append(preview_id)


def _forget_expired(now: float) -> None:
    global _forget_at
    if len(_held) < _forget_at:
        return
    for gone in [key for key, holding in _held.items() if holding.until < now]:
        del _held[gone]
    _forget_at = max(_FORGET_FIRST_AT, 2 * len(_held))


def deny_later(preview_id: str, holder: object, how: str | None) -> None:
    """``holder`` ended still holding ``preview_id``, whose denial the ledger did not record."""
    with _lock:
        _due[preview_id] = (holder, how)


def denials_due() -> list[tuple[str, object, str | None]]:
    """The denials :func:`deny_later` was given, still to record."""
    with _lock:
        return [(preview_id, *due) for preview_id, due in _due.items()]


def denied_at_last(preview_id: str) -> None:
    """The denial of ``preview_id`` is recorded (or no longer needed)."""
    with _lock:
        _due.pop(preview_id, None)
