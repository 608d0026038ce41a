"""The ledger on PostgreSQL: the same invariants as SQLite, held by row locks across hosts.

Several harness processes (on one host or many) share one database:

* a transition reads the step with ``SELECT ... FOR UPDATE``: of two processes moving the same
  step, the second waits for the first to commit and then sees the state it left, so the
  compare-and-set on (state, attempts) cannot interleave and one claim wins;
* the partial unique index on live previews' keys (``INSERT ... ON CONFLICT DO NOTHING``)
  keeps one live preview per key, whoever inserts it;
* a receipt is inserted in the transaction that marks its step ``committed``; its key and its
  preview are unique, so a second receipt fails that transaction and changes nothing;
* an approval is consumed by ``UPDATE ... WHERE consumed_at IS NULL``, at most once.

A claimed step carries its owner (:class:`~airlock.tools.ProcessMark`) and a lease expiry in
wall-clock seconds. A process on another host cannot tell whether the owner still runs, so
there the lease's expiry is what lets reconciliation take the step over (hosts keep their
clocks in step with NTP; the lease's grace covers the skew).

The steps of a transition and the mapping between rows and records are those of the SQLite
store (:mod:`airlock.tools._ledger_sql`), so both stores hold the same data in the same form.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection
from typing import TypeVar

from psycopg import errors

from airlock.tools._batch_records import Batch
from airlock.tools._ledger import ClaimedFrom, StepRef, StepStateError
from airlock.tools._ledger_rows import preview_of, preview_row, readable_rows
from airlock.tools._ledger_sql import (
    BATCH_COLUMNS,
    PREVIEW_COLUMNS,
    apply,
    current_step,
    event,
    get_preview,
    move_step,
    previews_query,
    read_approval,
    read_batch,
    read_batches,
    read_history,
    read_receipt,
    read_receipts,
    read_steps,
    release_step,
)
from airlock.tools._postgres_audit import QmarkConnection
from airlock.tools._postgres_connection import PostgresDatabase, redact_url
from airlock.tools._preview import (
    LIVE_STATES,
    STEP_STATES,
    Approval,
    Preview,
    Receipt,
    StepEvent,
    StepState,
)

__all__ = ["PostgresLedgerStore"]

LABEL = "the ledger"

T = TypeVar("T")

_LIVE = ", ".join(f"'{s}'" for s in sorted(LIVE_STATES))


def _marks(columns: str) -> str:
    return ", ".join(["%s"] * len(columns.split(",")))


class PostgresLedgerStore:
    """A :class:`~airlock.tools.LedgerStore` in a PostgreSQL database, shared by processes.

    Args:
        database: a ``postgresql://`` URL (the store opens and closes its own pool), or a
            :class:`~airlock.tools.postgres.PostgresDatabase` shared with the audit store
            (its owner closes it).

    Raises:
        LedgerError: psycopg failed (ledger_unavailable: the server cannot be reached).
        MigrationError: the database was migrated by a newer airlock.
    """

    def __init__(self, database: str | PostgresDatabase) -> None:
        self._owned = isinstance(database, str)
        self._db = (
            PostgresDatabase(database, label=LABEL) if isinstance(database, str) else database
        )
        self.url = self._db.url

    # -- reads --------------------------------------------------------------------------

    def preview(self, preview_id: str) -> Preview | None:
        return self._read(lambda conn: get_preview(conn, preview_id))

    def previews(
        self,
        *,
        states: Collection[StepState] | None = None,
        limit: int = 100,
        run_id: str | None = None,
    ) -> list[Preview]:
        query = previews_query(states, limit, run_id)
        if query is None:
            return []
        return self._read(lambda conn: [preview_of(r) for r in conn.execute(*query).fetchall()])

    def steps(self, *, states: Collection[StepState], limit: int = 100) -> list[StepRef]:
        return self._read(lambda conn: read_steps(conn, states, limit))

    def approval(self, preview_id: str) -> Approval | None:
        return self._read(lambda conn: read_approval(conn, preview_id))

    def receipt(self, key: str) -> Receipt | None:
        return self._read(lambda conn: read_receipt(conn, key))

    def receipts(self, *, limit: int = 100) -> list[Receipt]:
        return self._read(lambda conn: read_receipts(conn, limit))

    def history(self, preview_id: str) -> list[StepEvent]:
        return self._read(lambda conn: read_history(conn, preview_id))

    def batch(self, batch_id: str) -> Batch | None:
        return self._read(lambda conn: read_batch(conn, batch_id))

    def batches(self, *, run_id: str | None = None, limit: int = 100) -> list[Batch]:
        return self._read(lambda conn: read_batches(conn, run_id, limit))

    def _read(self, fn: Callable[[QmarkConnection], T]) -> T:
        with readable_rows(redact_url(self.url)):
            return self._db.read(lambda conn: fn(QmarkConnection(conn)))

    # -- writes -------------------------------------------------------------------------

    def add_batch(self, batch: Batch) -> None:
        with self._db.transaction() as conn:
            found = conn.execute(
                "SELECT COUNT(*) FROM previews WHERE id = ANY(%s)", (list(batch.items),)
            ).fetchone()
            if found is None or found[0] != len(set(batch.items)):
                raise ValueError(f"batch {batch.id!r} names previews the ledger does not hold")
            inserted = conn.execute(
                f"INSERT INTO batches ({BATCH_COLUMNS}) VALUES ({_marks(BATCH_COLUMNS)}) "
                "ON CONFLICT (id) DO NOTHING RETURNING id".encode(),
                (
                    batch.id,
                    batch.run_id,
                    batch.principal.model_dump_json(),
                    json.dumps(list(batch.items)),
                    batch.fingerprint,
                    batch.created,
                ),
            ).fetchone()
            if inserted is None:
                raise ValueError(f"batch {batch.id!r} exists already")

    def add_preview(self, preview: Preview) -> Preview:
        if preview.state != "prepared":
            raise ValueError(f"a new preview must be 'prepared', not {preview.state!r}")
        insert = (
            f"INSERT INTO previews ({PREVIEW_COLUMNS}) VALUES ({_marks(PREVIEW_COLUMNS)}) "
            f"ON CONFLICT (key) WHERE state IN ({_LIVE}) DO NOTHING RETURNING id"
        ).encode()
        live = f"SELECT {PREVIEW_COLUMNS} FROM previews WHERE key = %s AND state IN ({_LIVE})"
        # The live preview that holds the key may leave the live states between the insert
        # that collided with it and the read of it; then the key is free: insert again.
        for _ in range(10):
            with readable_rows(redact_url(self.url)), self._db.transaction() as conn:
                if conn.execute(insert, preview_row(preview)).fetchone() is not None:
                    event(
                        QmarkConnection(conn),
                        preview.id,
                        preview.created,
                        None,
                        "prepared",
                        "ledger",
                        "prepared",
                    )
                    return preview
                row = conn.execute(live.encode(), (preview.key,)).fetchone()
                if row is not None:
                    return preview_of(row)
        prepared: tuple[StepState, ...] = ("prepared",)
        raise StepStateError(preview, prepared)

    def transition(
        self,
        preview_id: str,
        *,
        expect: Collection[StepState],
        to: StepState,
        at: float,
        actor: str,
        how: str,
        expect_attempts: int | None = None,
        approval: Approval | None = None,
        consume_approval: bool = False,
        receipt: Receipt | None = None,
        owner: str | None = None,
        lease_until: float | None = None,
        error: str | None = None,
    ) -> Preview:
        if to not in STEP_STATES:
            raise ValueError(f"unknown step state {to!r}; use one of {STEP_STATES}")
        current: Preview | None = None
        try:
            with readable_rows(redact_url(self.url)), self._db.transaction() as pg:
                conn = QmarkConnection(pg)
                current = current_step(
                    conn, preview_id, expect, expect_attempts, lock=" FOR UPDATE"
                )
                apply(conn, current, expect, approval, consume_approval, receipt, at)
                updated = move_step(
                    conn,
                    current,
                    to=to,
                    at=at,
                    actor=actor,
                    how=how,
                    owner=owner,
                    lease_until=lease_until,
                    error=error,
                )
        except errors.UniqueViolation:  # a second approval or receipt: someone was first
            assert current is not None  # the violation comes after the step was read
            raise StepStateError(current, expect) from None
        return updated

    def release_claim(
        self,
        preview_id: str,
        *,
        to: ClaimedFrom,
        expect_attempts: int,
        expect_owner: str,
        at: float,
        actor: str,
        how: str,
        error: str | None = None,
    ) -> Preview:
        with readable_rows(redact_url(self.url)), self._db.transaction() as pg:
            return release_step(
                QmarkConnection(pg),
                preview_id,
                to=to,
                expect_attempts=expect_attempts,
                expect_owner=expect_owner,
                at=at,
                actor=actor,
                how=how,
                error=error,
                lock=" FOR UPDATE",
            )

    def close(self) -> None:
        if self._owned:
            self._db.close()
