"""What one rendering of the approval page shows, read from the approver's ledger.

A row that does not read back (changed by hand, a bad restore: ``ledger_corrupt``) hides only
itself: the page lists the others and names what it left out, so one damaged preview cannot
keep a person from deciding on the rest. Any other ledger failure (locked, replaced) is the
caller's to report: the page cannot say what waits.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from airlock.cli._approval_html import BatchView
from airlock.cli._approver import Approver
from airlock.tools import (
    LedgerCorruptError,
    LedgerStore,
    Preview,
    Receipt,
    StepState,
    ToolError,
    batch_items,
    spend_totals,
)

__all__ = ["LedgerRead", "read_ledger"]

_PREVIEWS = 200
_BATCHES = 50
_RECEIPTS = 50


@dataclass(frozen=True, slots=True, kw_only=True)
class LedgerRead:
    """What the page lists, and what it could not read back."""

    waiting: Sequence[Preview]
    approved: Sequence[Preview]
    receipts: Sequence[Receipt]
    batches: Sequence[BatchView]
    skipped: Sequence[str] = field(default_factory=tuple)
    """Ids of the previews and batches (or the listing) left out, as the page names them."""


def read_ledger(approver: Approver, *, now: float) -> LedgerRead:
    """The previews waiting (outside a batch), the batches with an item waiting, those
    approved and not yet committed, and the latest receipts.

    Raises:
        LedgerError: the ledger cannot be read (other than a row that does not read back).
    """
    store = approver.ledger
    skipped: list[str] = []
    batches = _open_batches(approver, now, skipped)
    in_batches = {item.preview_id for b in batches for item, _ in b.items}
    waiting = [
        p
        for p in _previews(store, {"prepared"}, skipped)
        if not p.expired(now) and p.id not in in_batches
    ]
    approved = _previews(store, {"approved", "sending", "unknown"}, skipped)
    try:
        receipts = store.receipts(limit=_RECEIPTS)
    except LedgerCorruptError:
        receipts = []
        skipped.append("the receipts")
    return LedgerRead(
        waiting=waiting, approved=approved, receipts=receipts, batches=batches, skipped=skipped
    )


def _previews(
    store: LedgerStore, states: Collection[StepState], skipped: list[str]
) -> list[Preview]:
    """The previews in ``states``, newest first, without those that do not read back (their
    ids go to ``skipped``)."""
    try:
        return store.previews(states=states, limit=_PREVIEWS)
    except LedgerCorruptError:
        pass  # one row does not read back: read them one by one, and leave it out
    found = []
    for step in store.steps(states=states, limit=_PREVIEWS):
        try:
            preview = store.preview(step.id)
        except LedgerCorruptError:
            skipped.append(step.id)
            continue
        if preview is not None:
            found.append(preview)
    return found


def _open_batches(approver: Approver, now: float, skipped: list[str]) -> list[BatchView]:
    """Batches with an item still waiting, newest first, each item with its preview."""
    store = approver.ledger
    try:
        batches = store.batches(limit=_BATCHES)
    except LedgerCorruptError:
        skipped.append("the list of batches")
        return []
    found = []
    for batch in batches:
        try:
            items = batch_items(store, batch.id, now=now)
            if not any(item.state == "waiting" for item in items):
                continue
            shown = [(item, store.preview(item.preview_id)) for item in items]
        except (ToolError, LedgerCorruptError):
            # An item does not read back, or it changed behind the write path's back:
            # `approvals show` says which; its items that read back are listed alone.
            skipped.append(batch.id)
            continue
        waiting = [p for item, p in shown if p is not None and item.state == "waiting"]
        found.append(BatchView(batch=batch, items=shown, waiting_spend=spend_totals(waiting)))
    return found
