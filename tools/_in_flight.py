"""Which claimed steps this process is sending right now.

A step claimed by this process is in flight here while a send of it runs: reconciliation in
the same process then leaves it alone whatever the clock says. Once the send ended, a step
still ``sending`` (its ending could not be recorded) is this process's no longer: its lease
lets reconcile in. Kept per process: the owner token of a forked child is another one, so what
the parent was sending is never taken for the child's.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["in_flight_here", "mark_mismatched", "mismatched_here", "sending_here"]

_LOCK = threading.Lock()
_SENDING: Counter[str] = Counter()
_MISMATCHED: set[str] = set()


@contextmanager
def in_flight_here(preview_id: str) -> Iterator[None]:
    """Count ``preview_id`` as being sent by this process while the block runs."""
    with _LOCK:
        _SENDING[preview_id] += 1
    try:
        yield
    finally:
        with _LOCK:
            _SENDING[preview_id] -= 1
            if _SENDING[preview_id] <= 0:
                del _SENDING[preview_id]


def sending_here(preview_id: str) -> bool:
    """Whether a send of ``preview_id`` runs in this process now."""
    with _LOCK:
        return _SENDING[preview_id] > 0


def mark_mismatched(preview_id: str) -> None:
    """Remember that a send of ``preview_id`` here got another change's answer under its key:
    should the ledger refuse to record it (the step then stays ``sending``, its history
    silent), this process still never resends it."""
    with _LOCK:
        _MISMATCHED.add(preview_id)


def mismatched_here(preview_id: str) -> bool:
    """Whether a send of ``preview_id`` in this process got another change's answer."""
    with _LOCK:
        return preview_id in _MISMATCHED
