"""The ledger's storage protocol: previews, approvals, receipts and their history.

The write path keeps its rules (check order, who may approve, when a step is stale) and the
store keeps its invariants in single transactions, so a server database can replace SQLite
by implementing this protocol:

* at most one *live* preview per idempotency key (see :data:`~airlock.tools._preview.LIVE_STATES`);
* at most one receipt per key, stored in the same transaction that marks the step
  ``committed``;
* an approval is consumed at most once, and made usable again only by undoing the claim
  that consumed it, whose send never started (:meth:`LedgerStore.release_claim`);
* :meth:`LedgerStore.transition` is a compare-and-set on (state, attempts): of two processes
  claiming the same step, exactly one wins and the other gets :class:`StepStateError`;
* a claim keeps its owner and lease expiry as given, so another process (on another host too)
  can take the step over once the owner is gone or the lease ran out (the write path's rule);
* free text (a summary, a reason, an error, how a step moved) is stored with credentials
  redacted as the audit log redacts them, and with its C0 control characters other than tab
  and newline escaped, so both stores hold the same text (PostgreSQL refuses NUL in text);
* a row that does not read back as its record raises ``ledger_corrupt`` naming it, and only
  the reads that meet it fail.

Two stores implement it: :class:`~airlock.tools.SQLiteLedgerStore` (a file) and
:class:`~airlock.tools.postgres.PostgresLedgerStore` (one database for processes on several
hosts); the ledger suites run every invariant on both (``tests/tools/stores.py``).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Literal, Protocol

from airlock.tools._batch_records import Batch
from airlock.tools._errors import ConflictError
from airlock.tools._preview import Approval, Preview, Receipt, StepEvent, StepState

__all__ = ["ClaimedFrom", "LedgerStore", "StepRef", "StepStateError", "own_receipt"]

ClaimedFrom = Literal["approved", "unknown"]
"""The states a send is claimed from (a ``sending`` step taken over is undecided: ``unknown``)."""


class StepStateError(ConflictError):
    """A transition found the step in another state (or attempt) than it expected.

    The write path turns this into a replayed receipt, a retry or a clearer ``conflict``,
    depending on what :attr:`preview` shows; should one escape, it is still a ``conflict``.
    """

    def __init__(self, preview: Preview, expected: Collection[StepState]) -> None:
        super().__init__(
            "this change moved on meanwhile; look at it again before retrying",
            detail=(
                f"preview {preview.id!r} is {preview.state!r} (attempt {preview.attempts}), "
                f"not one of {sorted(expected)}"
            ),
        )
        self.preview = preview
        self.expected = tuple(expected)


@dataclass(frozen=True, slots=True)
class StepRef:
    """A step as a listing names it: plain columns, which read back even when the rest of a
    damaged row does not (so one damaged row cannot hide the others from reconcile)."""

    id: str
    tool: str
    state: StepState


class LedgerStore(Protocol):
    """Durable storage of the write path. Every method is one transaction."""

    def add_preview(self, preview: Preview) -> Preview:
        """Store a new ``prepared`` preview, or return the live one that holds its key."""

    def preview(self, preview_id: str) -> Preview | None:
        """The preview with this id, if any.

        Every read raises :class:`~airlock.tools.LedgerCorruptError` naming the row when a
        row it meets does not read back as its record (changed by hand, a bad restore).
        """

    def previews(
        self,
        *,
        states: Collection[StepState] | None = None,
        limit: int = 100,
        run_id: str | None = None,
    ) -> list[Preview]:
        """Previews in the given states (all when ``None``), of one run when ``run_id`` is
        given, newest first."""

    def steps(self, *, states: Collection[StepState], limit: int = 100) -> list[StepRef]:
        """The id, tool and state of each preview in ``states``, newest first; read each
        with :meth:`preview`, which raises ``ledger_corrupt`` for a damaged one alone."""

    def approval(self, preview_id: str) -> Approval | None:
        """The approval of a preview, if it has one."""

    def receipt(self, key: str) -> Receipt | None:
        """The receipt stored under an idempotency key, if any."""

    def receipts(self, *, limit: int = 100) -> list[Receipt]:
        """Stored receipts, newest first."""

    def history(self, preview_id: str) -> list[StepEvent]:
        """Every transition of a preview, oldest first."""

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
        """Move a step from one of ``expect`` to ``to`` atomically, and return it.

        In the same transaction: store ``approval``; mark the approval consumed
        (``consume_approval``); store ``receipt`` under its key; set ``owner``,
        ``lease_until`` and ``error``; count an attempt when ``to`` is ``sending``; append a
        :class:`StepEvent`.

        Raises:
            KeyError: no preview has this id.
            StepStateError: the step is not in ``expect``, its attempts differ from
                ``expect_attempts``, or the approval was already consumed.
        """

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
        """Undo the claim of a send that certainly never started (its code did not run, nor
        will), and return the step: from ``sending`` with ``expect_attempts`` attempts and
        ``expect_owner`` as its owner (as that claim left it) back to ``to``, the state it was
        claimed from, with the attempt the claim counted taken back and its lease cleared.

        In the same transaction: back to ``approved`` (the first claim: one attempt), the
        approval that claim consumed (at its time, the step's ``updated``) is usable again,
        that one only, and the step has no owner, as before it was claimed; back to
        ``unknown``, it keeps its owner (the last claim's) and takes ``error``. Append a
        :class:`StepEvent` whose ``how`` says why nothing was sent.

        Raises:
            KeyError: no preview has this id.
            StepStateError: the step is not ``sending`` with these attempts and owner (it was
                settled or taken over meanwhile), or, back to ``approved``, it was sent before
                or its approval was not consumed by this claim. Nothing is changed.
        """

    def add_batch(self, batch: Batch) -> None:
        """Store a new batch: the ordered preview ids one program proposed and their
        fingerprint (:mod:`airlock.tools._batches`). Batches are written once, never changed;
        their items' states live on the previews.

        Raises:
            ValueError: a batch with this id exists, or an item is no stored preview.
        """

    def batch(self, batch_id: str) -> Batch | None:
        """The batch with this id, if any."""

    def batches(self, *, run_id: str | None = None, limit: int = 100) -> list[Batch]:
        """Stored batches, of one run when ``run_id`` is given, newest first."""

    def close(self) -> None:
        """Release resources; the store is unusable afterwards."""


def own_receipt(ledger: LedgerStore, preview: Preview) -> Receipt | None:
    """The receipt stored under ``preview``'s key, if it is this preview's: a denied or failed
    preview frees its key, and a later preview of the same intent may hold it now."""
    stored = ledger.receipt(preview.key)
    return stored if stored is not None and stored.preview_id == preview.id else None
