"""A batch: the previews one program proposed, approved with one fingerprint.

A program may *propose* writes (``tools.propose.NAME(...)``); the host prepares each one as a
direct call would, and when the program ends the run's proposals become one :class:`Batch`,
stored in the ledger. Its fingerprint is a hash over the ordered fingerprints of its items,
so a person who approves the batch with it approves exactly those effects, in that order::

    approve_batch(ledger, "pb_...", fingerprint=F)   every waiting item approved, or none
                                                     (approval_mismatch: nothing approved)
    WritePath.commit_batch("pb_...", principal)      each approved item committed once, with
                                                     its own idempotency key and receipt

Items are still previews: each may also be approved, denied or committed on its own
(``approve_preview``, ``deny_preview``), and :func:`batch_items` reports where each one
stands (``approved``, ``committed``, ``denied``, ``expired``...).
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import secrets
from collections.abc import Sequence
from typing import Final

from airlock.policies import Effect
from airlock.tools._approvals import _check_approver as check_approver
from airlock.tools._approvals import approve_preview, is_requester
from airlock.tools._batch_records import Batch, BatchItem, BatchItemState
from airlock.tools._errors import ApprovalMismatchError, DeniedError, NotFoundError, ToolError
from airlock.tools._json import JSONObject
from airlock.tools._ledger import LedgerStore
from airlock.tools._preview import Preview, canonical_json

__all__ = [
    "BATCH_PREFIX",
    "approve_batch",
    "batch_fingerprint",
    "batch_items",
    "item_of",
    "load_batch",
    "new_batch",
    "spend_totals",
]

BATCH_PREFIX: Final = "pb_"
"""How a batch id begins (a preview id begins with ``pv_``)."""


def batch_fingerprint(fingerprints: Sequence[str]) -> str:
    """The fingerprint of a batch: SHA-256 over its items' fingerprints, in order."""
    return hashlib.sha256(canonical_json({"previews": list(fingerprints)})).hexdigest()


def new_batch(previews: Sequence[Preview], *, now: float) -> Batch:
    """A batch of ``previews`` (one run and principal, in the order given).

    Raises:
        ValueError: no previews, or previews of several runs or principals.
    """
    if not previews:
        raise ValueError("a batch needs at least one preview")
    first = previews[0]
    who = (first.principal.user_id, first.principal.tenant_id)
    for preview in previews:
        if preview.run_id != first.run_id or who != (
            preview.principal.user_id,
            preview.principal.tenant_id,
        ):
            raise ValueError(f"preview {preview.id!r} is of another run or principal")
    return Batch(
        id=BATCH_PREFIX + secrets.token_hex(12),
        run_id=first.run_id,
        principal=first.principal,
        items=tuple(p.id for p in previews),
        fingerprint=batch_fingerprint([p.fingerprint for p in previews]),
        created=now,
    )


def load_batch(ledger: LedgerStore, batch_id: str) -> tuple[Batch, list[Preview]]:
    """The batch with this id and its previews, in order.

    Raises:
        NotFoundError: no such batch.
        ApprovalMismatchError: an item is missing, or the items no longer hash to the
            batch's fingerprint (the ledger was changed behind the write path's back).
    """
    batch = ledger.batch(batch_id)
    if batch is None:
        raise NotFoundError(f"no batch {batch_id[:64]!r}; list them with `approvals list`")
    previews = []
    for preview_id in batch.items:
        preview = ledger.preview(preview_id)
        if preview is None:
            raise ApprovalMismatchError(
                f"batch {batch.id!r} no longer matches what was shown; do not approve it",
                detail=f"item {preview_id!r} is missing from the ledger",
            )
        previews.append(preview)
    intact = all(
        hmac.compare_digest(p.computed_fingerprint(), p.fingerprint) for p in previews
    ) and hmac.compare_digest(
        batch_fingerprint([p.fingerprint for p in previews]), batch.fingerprint
    )
    if not intact:
        raise ApprovalMismatchError(
            f"batch {batch.id!r} no longer matches what was shown; do not approve it",
            detail="the stored items do not hash to the batch's fingerprint",
        )
    return batch, previews


def approve_batch(
    ledger: LedgerStore,
    batch_id: str,
    *,
    approver: str,
    now: float,
    fingerprint: str,
    reason: str = "",
    self_approval: bool = False,
) -> tuple[BatchItem, ...]:
    """Record that ``approver`` (a person) approved every waiting item of the batch, with the
    batch's fingerprint; where each item stands afterwards, the items this call approved
    marked :attr:`~airlock.tools.BatchItem.approved_now`. ``self_approval`` (the policy's
    setting) lets the principal who proposed them approve them.

    ``fingerprint`` is the one the person was shown; it must be the batch's, or nothing is
    approved. Items past their expiry are reported ``expired``; items decided before (approved,
    denied, committed) are reported as they stand, unchanged.

    Raises:
        NotFoundError: no such batch.
        DeniedError: ``approver`` proposed the batch (``USER`` or ``USER@TENANT``) and
            ``self_approval`` is off; nothing is approved.
        ApprovalMismatchError: ``fingerprint`` is not the batch's, or its items changed.
        InvalidInputError: the approver id is malformed or reserved.
    """
    check_approver(approver)
    batch, previews = load_batch(ledger, batch_id)
    if not self_approval and is_requester(approver, batch):
        raise DeniedError(
            f"{approver!r} proposed batch {batch.id!r} and cannot approve it; ask another "
            "person, or set self_approval = true in the policy"
        )
    if not hmac.compare_digest(
        fingerprint.encode("utf-8", "surrogatepass"), batch.fingerprint.encode()
    ):
        raise ApprovalMismatchError(
            f"fingerprint {fingerprint[:16]!r}… is not batch {batch.id!r}'s; approve only "
            "the fingerprint `approvals show` shows for it",
            detail="the given fingerprint differs from the batch's",
        )
    note = f"batch {batch.id}" + (f": {reason}" if reason else "")
    approved: set[str] = set()
    for preview in previews:
        if preview.state != "prepared" or preview.expired(now):
            continue
        try:
            approve_preview(
                ledger,
                preview.id,
                approver=approver,
                now=now,
                fingerprint=preview.fingerprint,
                reason=note,
                self_approval=self_approval,
            )
        except ToolError:
            continue  # decided meanwhile, or expired: reported as it stands below
        approved.add(preview.id)
    return tuple(
        dataclasses.replace(item, approved_now=True) if item.preview_id in approved else item
        for item in batch_items(ledger, batch_id, now=now)
    )


def batch_items(ledger: LedgerStore, batch_id: str, *, now: float) -> tuple[BatchItem, ...]:
    """Where each item of the batch stands, in the batch's order.

    Raises:
        NotFoundError: no such batch.
        ApprovalMismatchError: its items changed behind the write path's back.
    """
    _, previews = load_batch(ledger, batch_id)
    return tuple(item_of(ledger, preview, now=now) for preview in previews)


def item_of(ledger: LedgerStore, preview: Preview, *, now: float) -> BatchItem:
    """Where ``preview`` stands, as an item of a batch."""
    state: BatchItemState
    code: str | None = None
    receipt: JSONObject | None = None
    if preview.state == "committed":
        state = "committed"
        stored = ledger.receipt(preview.key)
        receipt = None if stored is None else stored.data
    elif preview.state in ("prepared", "approved") and preview.expired(now):
        state, code = "expired", "preview_expired"
    elif preview.state == "prepared":
        state, code = "waiting", "needs_approval"
    elif preview.state == "failed":
        state = "expired" if (preview.error or "").startswith("preview_expired") else "failed"
        code = (preview.error or "failed").split(":")[0][:40]
    elif preview.state == "denied":
        state, code = "denied", "denied"
    else:
        state = preview.state
    return BatchItem(
        preview_id=preview.id,
        tool=preview.tool,
        summary=preview.summary,
        state=state,
        code=code,
        receipt=receipt,
    )


def spend_totals(previews: Sequence[Preview]) -> dict[str, int]:
    """The total of the previews' ``spend`` effects per currency, in minor units."""
    totals: dict[str, int] = {}
    for preview in previews:
        for text in preview.effects:
            try:
                effect = Effect.parse(text)
            except ValueError:
                continue
            if effect.kind == "spend" and isinstance(effect.amount, int):
                totals[effect.target] = totals.get(effect.target, 0) + effect.amount
    return dict(sorted(totals.items()))
