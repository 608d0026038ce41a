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
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Final

__all__ = ["note_received", "note_stored", "proposing_as", "release"]

_holder: ContextVar[object | None] = ContextVar("airlock_preview_holder", default=None)
"""Who proposes in this task: a program (its token, :func:`proposing_as`), or ``None``: a
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
_lock = threading.Lock()  # (proposals may be prepared on worker threads)
_forget_at = _FORGET_FIRST_AT


@contextlib.contextmanager
def proposing_as(holder: object) -> Iterator[None]:
    """The previews stored or received within it are held by ``holder`` (a program)."""
    token = _holder.set(holder)
    try:
        yield
    finally:
        _holder.reset(token)


def note_stored(preview_id: str, *, until: float, now: float) -> None:
    """This task stored the preview ``preview_id``, which expires at ``until``."""
    holder = _holder.get()
    with _lock:
        _forget_expired(now)
        holding = _held[preview_id] = _Holding(until, ours=holder is not None)
        _hold(holding, holder)


def note_received(preview_id: str, *, until: float, now: float) -> None:
    """This task received the live preview ``preview_id`` of the same intent, stored before
    (here or elsewhere)."""
    holder = _holder.get()
    with _lock:
        _forget_expired(now)
        holding = _held.get(preview_id)
        if holding is None:
            holding = _held[preview_id] = _Holding(until, ours=False)
        _hold(holding, holder)


def release(preview_id: str, holder: object) -> bool:
    """A withdrawn proposal of ``holder`` lets go of ``preview_id``: whether nobody holds it
    now, a program's proposal stored it here and no direct call had it (it may be denied)."""
    with _lock:
        holding = _held.get(preview_id)
        if holding is None or holding.programs[holder] <= 0:
            return False
        holding.programs[holder] -= 1
        if +holding.programs:
            return False
        del _held[preview_id]
        return holding.ours and not holding.direct


def _hold(holding: _Holding, holder: object | None) -> None:
    if holder is None:
        holding.direct = True
    else:
        holding.programs[holder] += 1


def _forget_expired(now: float) -> None:
    global _forget_at
    if len(_held) < _forget_at:
        return
    for gone in [key for key, holding in _held.items() if holding.until < now]:
        del _held[gone]
    _forget_at = max(_FORGET_FIRST_AT, 2 * len(_held))
