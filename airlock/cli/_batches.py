"""``airlock approvals approve pb_...`` and ``show pb_...``: a batch of writes a program
proposed, approved with its one fingerprint, item by item reported."""

from __future__ import annotations

import time

import anyio
from rich.console import Console
from rich.table import Table
from rich.text import Text

from airlock.cli._literal import literal
from airlock.tools import (
    BatchItem,
    LedgerStore,
    Registry,
    WritePath,
    approve_batch,
    batch_items,
    spend_totals,
)

__all__ = ["approve_batch_command", "show_batch"]


def approve_batch_command(
    store: LedgerStore,
    batch_id: str,
    *,
    approver: str,
    fingerprint: str,
    reason: str,
    self_approval: bool,
    registry: Registry | None,
) -> None:
    """Approve every waiting item of the batch with its fingerprint, commit them when
    ``registry`` is given, and print where each item stands.

    Raises:
        ToolError: the batch is unknown (``not_found``), the fingerprint is not the batch's
            (``approval_mismatch``), or the approver asked for these writes and the policy
            does not allow self-approval (``denied``).
    """
    batch = store.batch(batch_id)
    # approve_batch refuses the requester (USER or USER@TENANT) unless self_approval is on.
    items = approve_batch(
        store,
        batch_id,
        approver=approver,
        now=time.time(),
        fingerprint=fingerprint,
        reason=reason,
        self_approval=self_approval,
    )
    approved = sum(1 for i in items if i.approved_now)
    Console().print(
        literal(
            f"approved batch {batch_id} (fingerprint {fingerprint[:16]}…) as {approver}: "
            f"{approved} of {len(items)} item(s) approved now"
        )
    )
    if registry is not None and batch is not None:
        writes = WritePath(registry, store)
        items = anyio.run(writes.commit_batch, batch_id, batch.principal)
    _print_items(items)


def show_batch(store: LedgerStore, batch_id: str) -> None:
    """Print a batch: who proposed it, its fingerprint, totals, and every item.

    Raises:
        ToolError: no such batch (``not_found``), or its items changed
            (``approval_mismatch``).
    """
    items = batch_items(store, batch_id, now=time.time())
    batch = store.batch(batch_id)
    assert batch is not None  # batch_items found it
    previews = [p for p in (store.preview(i) for i in batch.items) if p is not None]
    total = ", ".join(f"{n} {c} (minor units)" for c, n in spend_totals(previews).items())
    console = Console(width=200)
    lines = [
        f"batch        {batch.id}",
        f"principal    {batch.principal.user_id}@{batch.principal.tenant_id}  (run {batch.run_id})",
        f"items        {len(batch.items)}" + (f", total spend {total}" if total else ""),
        f"fingerprint  {batch.fingerprint}",
    ]
    console.print(Text("\n").join(map(literal, lines)))
    _print_items(items)


def _print_items(items: tuple[BatchItem, ...]) -> None:
    table = Table(title="items")
    for column in ("preview", "state", "summary", "receipt"):
        table.add_column(column)
    for item in items:
        receipt = str((item.receipt or {}).get("id", "")) if item.receipt else ""
        table.add_row(*map(literal, (item.preview_id, item.state, item.summary, receipt)))
    Console().print(table)
