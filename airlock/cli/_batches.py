"""``airlock approvals approve pb_...`` and ``show pb_...``: a batch of writes a program
proposed, approved with its one fingerprint, item by item reported; and the batches
``approvals list`` shows."""

from __future__ import annotations

import time

import anyio
import typer
from rich.console import Console
from rich.text import Text

from airlock.cli._approval_view import BatchesRead
from airlock.cli._approver import Approver
from airlock.cli._literal import json_text, literal, table
from airlock.policies import Policy
from airlock.tools import (
    BatchItem,
    LedgerStore,
    Registry,
    approve_batch,
    batch_items,
    spend_totals,
)

__all__ = ["COMMIT_HERE", "age", "approve_batch_command", "print_batches", "show_batch"]

COMMIT_HERE = (
    "the session that asked commits {it} when it resumes or settles; if it has ended, "
    "`--commit --registry MODULE:OBJECT --policy FILE` commits {it} here"
)
"""Said after an approval this command does not commit: a chat or a server that has ended
never will (``{it}``: "it" or "them")."""


def age(seconds: float) -> str:
    """A span of time in short: ``42s``, ``17m``, ``3.5h`` (a negative one as ``0s``)."""
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def approve_batch_command(
    store: LedgerStore,
    batch_id: str,
    *,
    approver: str,
    fingerprint: str,
    reason: str,
    self_approval: bool,
    registry: Registry | None,
    policy: Policy | None = None,
) -> None:
    """Approve every waiting item of the batch with its fingerprint, commit them when
    ``registry`` is given and this process can send them (an item holding ``Secret()``
    values is left, with the rest, to the session that asked), each judged by ``policy``
    first (required with ``registry``), and print where each item stands.

    Raises:
        ToolError: the batch is unknown (``not_found``), the fingerprint is not the batch's
            (``approval_mismatch``), or the approver asked for these writes and the policy
            does not allow self-approval (``denied``).
    """
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
    if registry is None:
        if any(item.state == "approved" for item in items):
            Console().print(COMMIT_HERE.format(it="them"), highlight=False)
    else:
        person = Approver.of_registry(
            approver, store, self_approval=self_approval, registry=registry, policy=policy
        )
        committed = anyio.run(person.commit_batch, batch_id)
        if committed is None:  # as for one preview (approvals approve): said, and exit 1
            _print_items(items)
            Console(stderr=True).print(
                "not committed here: an item holds a Secret() value only the session that "
                "asked has (it commits them all); if that session has ended, nothing will",
                highlight=False,
            )
            raise typer.Exit(code=1)
        items = committed
    _print_items(items)


def show_batch(store: LedgerStore, batch_id: str) -> None:
    """Print a batch: who proposed it, its fingerprint, what the items still waiting would
    spend, every item, and each item's full effect as code computed it (what an approval
    of the batch lets the session send; a summary leaves fields out).

    Raises:
        ToolError: no such batch (``not_found``), or its items changed
            (``approval_mismatch``).
    """
    items = batch_items(store, batch_id, now=time.time())
    batch = store.batch(batch_id)
    assert batch is not None  # batch_items found it
    previews = {p.id: p for p in map(store.preview, batch.items) if p is not None}
    # What approving the batch now would approve: the items still waiting, not those already
    # committed, denied or expired.
    waiting = [previews[i.preview_id] for i in items if i.state == "waiting"]
    total = ", ".join(f"{n} {c}" for c, n in spend_totals(waiting).items())
    counts = f"{len(batch.items)}, {len(waiting)} waiting"
    console = Console(width=200)
    lines = [
        f"batch        {batch.id}",
        f"principal    {batch.principal.user_id}@{batch.principal.tenant_id}  (run {batch.run_id})",
        f"items        {counts}"
        + (f"; spend waiting for approval: {total} (minor units)" if total else ""),
        f"fingerprint  {batch.fingerprint}",
    ]
    console.print(Text("\n").join(map(literal, lines)))
    _print_items(items)
    for item in items:
        preview = previews.get(item.preview_id)
        if preview is None:
            continue
        console.print(literal(f"{item.preview_id}  {item.tool}  [{item.state}]"))
        console.print(literal(f"effects      {', '.join(preview.effects)}"))
        console.print("effect (computed by the tool's prepare):")
        console.print(json_text(preview.effect), soft_wrap=True)


def _print_items(items: tuple[BatchItem, ...]) -> None:
    shown = table("preview", "state", "summary", "receipt", title="items")
    for item in items:
        receipt = str((item.receipt or {}).get("id", "")) if item.receipt else ""
        shown.add_row(*map(literal, (item.preview_id, item.state, item.summary, receipt)))
    Console().print(shown)


def print_batches(read: BatchesRead, *, every: bool, now: float) -> None:
    """The batches of ``read`` as a table (``every``: all of them, else those with an item
    waiting), and on stderr what could not be read or was left out."""
    title = "batches" if every else "batches waiting for approval"
    shown = table("id", "principal", "waiting", "fingerprint", "age", title=title)
    for view in read.batches:
        batch = view.batch
        waiting = sum(1 for item, _ in view.items if item.state == "waiting")
        principal = f"{batch.principal.user_id}@{batch.principal.tenant_id}"
        shown.add_row(
            *map(literal, (batch.id, principal, f"{waiting} of {len(view.items)}")),
            batch.fingerprint,
            age(now - batch.created),
        )
    if read.batches:
        Console(width=220).print(shown)
    errors = Console(stderr=True, soft_wrap=True)
    if read.skipped:
        errors.print(literal(f"left out (does not read back): {', '.join(read.skipped)}"))
    for sentence in read.left_out:
        errors.print(literal(sentence))
