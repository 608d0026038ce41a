"""Ledger records for the store tests: a refund preview, its approval and its receipt."""

from __future__ import annotations

from airlock.policies import Principal
from airlock.tools import Approval, Preview, Receipt
from airlock.tools._preview import fingerprint, idempotency_key

ALICE = Principal(user_id="alice", tenant_id="acme", scopes=frozenset({"billing.write"}))


def make_preview(n: int = 1, *, key: str | None = None) -> Preview:
    """Refund preview ``pv_N`` of run ``run_1``, ``prepared``, for ``100 * n`` minor units."""
    key = key or idempotency_key("run_1", "billing_refund_create", {"invoice_id": f"inv_{n}"})
    effect = {"invoice_id": f"inv_{n}", "amount_minor": 100 * n}
    return Preview(
        id=f"pv_{n}",
        run_id="run_1",
        tool="billing_refund_create",
        principal=ALICE,
        effect=effect,  # type: ignore[arg-type]
        effects=(f"spend({100 * n} USD)",),
        summary="refund",
        key=key,
        fingerprint=fingerprint("billing_refund_create", effect, ALICE, key),  # type: ignore[arg-type]
        rule="r",
        created=1.0 + n,
        expires=1000.0,
        state="prepared",
        updated=1.0 + n,
    )


def make_approval(preview: Preview) -> Approval:
    """A person's (``bob``'s) approval of exactly ``preview``."""
    return Approval(
        preview_id=preview.id,
        fingerprint=preview.fingerprint,
        kind="person",
        approver="bob",
        rule="r",
        at=2.0,
    )


def make_receipt(preview: Preview, preview_id: str | None = None) -> Receipt:
    """The receipt of ``preview``'s send (for ``preview_id``, default the preview's own)."""
    return Receipt(
        key=preview.key,
        preview_id=preview_id or preview.id,
        tool=preview.tool,
        data={"id": "re_1"},
        stored_at=3.0,
        resolved_by="send",
    )
