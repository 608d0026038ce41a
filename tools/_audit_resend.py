"""Appends whose outcome is unknown, so that sending their events again stores them once.

When the connection drops after the server committed a batch but before its answer arrived
(a failover, a network cut), the store raises as if nothing was written, and the audit
writer sends the same events again. Stored again under new numbers, with a valid chain,
they would be duplicates nobody could tell from repeated calls: ``verify`` passes, and
``runs()`` and exports count each call twice. (SQLite has a narrower window: a COMMIT whose
sync fails leaves a commit frame in the write-ahead log that a later recovery may keep.)

So a store remembers, for each event an append sent, its encoded bytes and the number and
chain it was to be stored with. The next append, under the write lock, drops the leading
events that are the same bytes and that the database holds under exactly that number and
chain: a chain vouches for every record before it, so those records are that batch.

Every batch in doubt is remembered, not only the last one: appends through the same store
object (two logs or writers sharing it) may come between a lost answer and its resend. A
batch is forgotten once the log shows it was not written (nothing of it can be dropped
then), once an append that began with it returns, or when :data:`KEPT_BATCHES` newer ones
push it out. The memory is the store object's: a store reopened, by a new process for one,
resends nothing, since the writer whose queue held the batch went with the old process.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from airlock.tools._audit_sql import Encoded
from airlock.tools._fork_lock import ForkLock
from airlock.tools._sql_rows import SQLConnection

__all__ = ["KEPT_BATCHES", "Sent", "UnconfirmedAppends", "sent_entries"]

Sent = list[tuple[bytes, int, bytes]]
"""Events an append sent, in order: each one's encoded bytes, number and chain."""


KEPT_BATCHES: Final = 64
"""Batches in doubt remembered at most; a writer resends within seconds, long before."""


class UnconfirmedAppends:
    """What the appends in doubt had sent: those that raised, and those not yet returned."""

    def __init__(self) -> None:
        self._lock = ForkLock("the audit store's unconfirmed appends")
        self._batches: list[Sent] = []

    def stored_already(self, conn: SQLConnection, prepared: Encoded) -> tuple[Encoded, Sent]:
        """``prepared`` without its leading events that an append which raised had stored
        after all, and those events' entries. Called under the write lock."""
        with self._lock:
            batches = list(self._batches)
        if not batches:
            return prepared, []
        written = _written(conn, batches)
        self._forget([b for b in batches if not any(b is w for w in written)])
        rows, tails, effects = prepared
        stored: Sent = []
        for batch in written:
            count = _stored_prefix(conn, batch, tails)
            if count > len(stored):
                stored = batch[:count]
        count = len(stored)
        return (rows[count:], tails[count:], effects[count:]), stored

    def sending(self, sent: Sent) -> None:
        """Remember ``sent`` (what an append is about to commit) until :meth:`returned`."""
        if not sent:
            return
        with self._lock:
            self._batches = [*self._batches, sent][-KEPT_BATCHES:]

    def returned(self, sent: Sent) -> None:
        """The append that sent ``sent`` returned: nothing of it is in doubt any more, nor of
        a batch it began with (it was that batch sent again)."""
        with self._lock:
            self._batches = [b for b in self._batches if b is not sent and b != sent[: len(b)]]

    def _forget(self, batches: list[Sent]) -> None:
        if batches:
            with self._lock:
                self._batches = [b for b in self._batches if not any(b is f for f in batches)]


def _written(conn: SQLConnection, batches: list[Sent]) -> list[Sent]:
    """The batches whose last event the log holds under its number and chain, so all of
    them (a chain vouches for every record before it). Of the others, the append's own
    events were not written; what it began with is a batch remembered on its own."""
    lasts = [batch[-1][1] for batch in batches]
    held = {
        int(row[0]): bytes(row[1])
        for row in conn.execute(
            f"SELECT id, chain FROM audit_events WHERE id IN ({', '.join('?' * len(lasts))})",
            tuple(lasts),
        ).fetchall()
    }
    return [batch for batch in batches if held.get(batch[-1][1]) == batch[-1][2]]


def _stored_prefix(conn: SQLConnection, sent: Sent, tails: Sequence[bytes]) -> int:
    """How many of the leading ``tails`` are ``sent``'s events, stored as it sent them."""
    alike = 0
    while alike < min(len(sent), len(tails)) and sent[alike][0] == tails[alike]:
        alike += 1
    if not alike:
        return 0
    numbers = [number for _, number, _ in sent[:alike]]
    held = {
        int(row[0]): bytes(row[1])
        for row in conn.execute(
            "SELECT id, chain FROM audit_events WHERE id BETWEEN ? AND ?",
            (min(numbers), max(numbers)),
        ).fetchall()
    }
    count = 0
    while count < alike and held.get(sent[count][1]) == sent[count][2]:
        count += 1
    return count


def sent_entries(stored: Sent, tails: Sequence[bytes], chained: Sequence[tuple[Any, ...]]) -> Sent:
    """``stored``, then each chained row's bytes, number and chain: what an append sends."""
    return [
        *stored,
        *((tail, int(row[0]), bytes(row[-1])) for tail, row in zip(tails, chained, strict=True)),
    ]
