"""What one rendering of the approval page shows, read from the approver's ledger.

A row that does not read back (changed by hand, a bad restore: ``ledger_corrupt``) hides only
itself: the page lists the others and names what it left out, so one damaged preview cannot
keep a person from deciding on the rest. Any other ledger failure (locked, replaced) is the
caller's to report: the page cannot say what waits.

What a limit leaves out is said (:attr:`LedgerRead.left_out`), never dropped silently. The
batches shown are those with an item waiting, found by their items among the waiting
previews: an old open batch behind many decided ones is found too (the newest
``_BATCH_PAGES[-1]`` batches are looked through at most).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from airlock.cli._approval_html import BatchView
from airlock.cli._approver import Approver
from airlock.tools import (
    Batch,
    LedgerCorruptError,
    LedgerError,
    LedgerStore,
    Preview,
    Receipt,
    StepState,
    ToolError,
    batch_items,
    spend_totals,
)

__all__ = [
    "BatchesRead",
    "LedgerRead",
    "approved_now",
    "read_batches",
    "read_ledger",
    "undecided",
    "undecided_of_batch",
]

_PREVIEWS = 200
"""Previews listed at most, waiting alone and approved each."""
_PREPARED = 2_000
"""Previews in ``prepared`` read at most: expired ones stay ``prepared`` and are read too."""
_BATCHES = 50
"""Batches listed at most."""
_BATCH_PAGES = (100, 1_000, 10_000)
"""How many of the newest batches are read, in turn, until every waiting preview's batch is
found: each step is asked only when the one before did not find them all."""
_RECEIPTS = 50
_RELOAD = "decide on those, then reload"
"""What the page tells a person to do about what its limits left out."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LedgerRead:
    """What the page lists, and what it could not read back."""

    waiting: Sequence[Preview]
    approved: Sequence[Preview]
    receipts: Sequence[Receipt]
    batches: Sequence[BatchView]
    skipped: Sequence[str] = field(default_factory=tuple)
    """Ids of the previews and batches (or the listing) left out, as the page names them."""
    left_out: Sequence[str] = field(default_factory=tuple)
    """What the page's limits left out, one sentence each ("3 more batches ...")."""


def read_ledger(approver: Approver, *, now: float) -> LedgerRead:
    """The previews waiting (outside a batch), the batches with an item waiting, those
    approved and not yet committed, and the latest receipts.

    Raises:
        LedgerError: the ledger cannot be read (other than a row that does not read back).
    """
    store = approver.ledger
    skipped: list[str] = []
    left_out: list[str] = []
    prepared, cut = _previews(store, {"prepared"}, skipped, limit=_PREPARED)
    if cut:
        left_out.append(
            f"more than {_PREPARED} previews are in 'prepared' (waiting, or expired): the "
            f"{_PREPARED} newest were read, and older ones still waiting are not shown"
        )
    live = [p for p in prepared if not p.expired(now)]
    # _BATCHES read now, not bound as a default: a test lowers it.
    batches, unshown = _open_batches(
        store, now, {p.id for p in live}, skipped, left_out, limit=_BATCHES, then=_RELOAD
    )
    in_batches = {item.preview_id for b in batches for item, _ in b.items} | unshown
    alone = [p for p in live if p.id not in in_batches]
    if len(alone) > _PREVIEWS:
        left_out.append(
            f"{len(alone) - _PREVIEWS} more waiting preview(s) are not shown: the "
            f"{_PREVIEWS} newest are; {_RELOAD}"
        )
    approved, cut = _previews(store, {"approved", "sending", "unknown"}, skipped, limit=_PREVIEWS)
    if cut:
        left_out.append(
            f"more than {_PREVIEWS} previews are approved and not committed: the "
            f"{_PREVIEWS} newest are listed"
        )
    try:
        receipts = store.receipts(limit=_RECEIPTS)
    except LedgerCorruptError:
        receipts = []
        skipped.append("the receipts")
    return LedgerRead(
        waiting=alone[:_PREVIEWS],
        approved=approved[:_PREVIEWS],
        receipts=receipts,
        batches=batches,
        skipped=skipped,
        left_out=left_out,
    )


def _previews(
    store: LedgerStore, states: Collection[StepState], skipped: list[str], *, limit: int
) -> tuple[list[Preview], bool]:
    """The newest previews in ``states`` (up to ``limit``), without those that do not read
    back (their ids go to ``skipped``), and whether there are more than ``limit``."""
    try:
        found = store.previews(states=states, limit=limit + 1)
        return found[:limit], len(found) > limit
    except LedgerCorruptError:
        pass  # one row does not read back: read them one by one, and leave it out
    steps = store.steps(states=states, limit=limit + 1)
    found = []
    for step in steps[:limit]:
        try:
            preview = store.preview(step.id)
        except LedgerCorruptError:
            skipped.append(step.id)
            continue
        if preview is not None:
            found.append(preview)
    return found, len(steps) > limit


def _open_batches(
    store: LedgerStore,
    now: float,
    live: set[str],
    skipped: list[str],
    left_out: list[str],
    *,
    limit: int,
    then: str,
) -> tuple[list[BatchView], set[str]]:
    """The newest ``limit`` batches with an item waiting (of ``live``, the waiting previews'
    ids), each item with its preview; and the waiting items of those the limit leaves out,
    which are not to be listed alone either (``left_out`` says how many there are, and
    ``then`` what to do about them)."""
    unplaced = set(live)  # waiting previews whose batch, if any, is not found yet
    found: list[BatchView] = []
    unshown: set[str] = set()
    more = 0
    for page in _BATCH_PAGES:
        try:
            batches = store.batches(limit=page)
        except LedgerCorruptError:
            skipped.append("the list of batches")
            return found, unshown
        for batch in batches:
            waiting = unplaced.intersection(batch.items)
            if not waiting:
                continue  # nothing of it waits, or it was found on an earlier step
            unplaced -= waiting
            if len(found) >= limit:
                more += 1
                unshown |= waiting
                continue
            view = _batch_view(store, batch, now, skipped)
            if view is not None:
                found.append(view)
        if len(batches) < page or not unplaced:
            break  # every batch was read, or every waiting preview's batch was found
    else:
        left_out.append(
            f"only the newest {_BATCH_PAGES[-1]} batches were read: a waiting preview listed "
            "alone may be an item of an older one (`airlock approvals show ID` says)"
        )
    if more:
        left_out.append(
            f"{more} more batch(es) with {len(unshown)} item(s) waiting are not shown: the "
            f"{limit} newest are; {then}"
        )
    return found, unshown


def _batch_view(
    store: LedgerStore, batch: Batch, now: float, skipped: list[str], *, open_only: bool = True
) -> BatchView | None:
    """``batch`` as the page shows it; ``None`` (its id in ``skipped``) when it does not read
    back, or (``open_only``) when nothing of it waits any more."""
    try:
        items = batch_items(store, batch.id, now=now)
        if open_only and not any(item.state == "waiting" for item in items):
            return None  # decided or expired since the waiting previews were read
        shown = [(item, store.preview(item.preview_id)) for item in items]
    except (ToolError, LedgerCorruptError):
        # An item does not read back, or it changed behind the write path's back:
        # `approvals show` says which; its items that read back are listed alone.
        skipped.append(batch.id)
        return None
    waiting = [p for item, p in shown if p is not None and item.state == "waiting"]
    return BatchView(batch=batch, items=shown, waiting_spend=spend_totals(waiting))


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchesRead:
    """The batches ``airlock approvals list`` shows, and what it could not read or show."""

    batches: Sequence[BatchView]
    skipped: Sequence[str] = field(default_factory=tuple)
    """Ids of the batches (or the listing) that do not read back."""
    left_out: Sequence[str] = field(default_factory=tuple)
    """What ``limit`` left out, one sentence each."""


def read_batches(store: LedgerStore, *, now: float, limit: int, every: bool) -> BatchesRead:
    """The newest ``limit`` batches with an item waiting, found as the page finds them (by
    their items among the waiting previews); with ``every``, the newest ``limit`` batches
    whatever their items' states.

    Raises:
        LedgerError: the ledger cannot be read (other than a row that does not read back).
    """
    skipped: list[str] = []
    left_out: list[str] = []
    if every:
        try:
            batches = store.batches(limit=limit)
        except LedgerCorruptError:
            return BatchesRead(batches=(), skipped=("the list of batches",))
        views = [_batch_view(store, b, now, skipped, open_only=False) for b in batches]
        return BatchesRead(batches=[v for v in views if v is not None], skipped=skipped)
    prepared, cut = _previews(store, {"prepared"}, skipped, limit=_PREPARED)
    if cut:
        left_out.append(
            f"more than {_PREPARED} previews are in 'prepared' (waiting, or expired): the "
            f"{_PREPARED} newest were read, and a batch of older ones is not shown"
        )
    live = {p.id for p in prepared if not p.expired(now)}
    found, _ = _open_batches(
        store, now, live, skipped, left_out, limit=limit, then="pass a larger --limit"
    )
    return BatchesRead(batches=found, skipped=skipped, left_out=left_out)


# -- what an approval that failed left behind ------------------------------------------------


def undecided(store: LedgerStore, preview_ids: Sequence[str]) -> list[str]:
    """Those of ``preview_ids`` without an approval yet, read before approving them."""
    return [pid for pid in preview_ids if store.approval(pid) is None]


def undecided_of_batch(store: LedgerStore, batch_id: str) -> list[str]:
    """The items of the batch without an approval yet (none when there is no such batch)."""
    batch = store.batch(batch_id)
    return undecided(store, batch.items if batch is not None else [])


def approved_now(approver: Approver, preview_ids: Sequence[str]) -> list[str] | None:
    """Those of ``preview_ids`` (undecided before a post) that ``approver``'s approval stands
    on now (approved, committed, or its commit in flight or undecided): what the post did,
    whatever failed after; ``None`` when the ledger cannot say."""
    store = approver.ledger
    found = []
    try:
        for pid in preview_ids:
            approval, preview = store.approval(pid), store.preview(pid)
            if (
                approval is not None
                and approval.approver == approver.name
                and preview is not None
                and preview.state in ("approved", "sending", "unknown", "committed")
            ):
                found.append(pid)
    except LedgerError:
        return None
    return found
