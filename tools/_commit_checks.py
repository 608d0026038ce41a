"""The checks before a step is claimed, in the design's order, for a commit and for an
approved read: exists (``not_found``) → same principal (``denied``) → fingerprint
(``approval_mismatch``) → receipt stored (return it, replayed) → expiry (``preview_expired``);
and, for a step with sealed values, whether this process holds them."""

from __future__ import annotations

import contextlib
import dataclasses
import hmac

from airlock.policies import Principal
from airlock.tools._approvals import load_preview
from airlock.tools._errors import (
    ApprovalMismatchError,
    CommitInFlightError,
    ConflictError,
    DeniedError,
    NeedsApprovalError,
    PreviewExpiredError,
    ReceiptMismatchError,
)
from airlock.tools._ledger import LedgerStore, StepStateError, own_receipt
from airlock.tools._preview import Approval, Preview, Receipt
from airlock.tools._receipt_check import mismatch_of
from airlock.tools._reconcile import needs_resolving
from airlock.tools._sealed import SecretVault, sealed_fields
from airlock.tools._sender import Sender
from airlock.tools._spec import ToolSpec
from airlock.tools._step_owner import owner_token
from airlock.tools._worker_threads import refusal

__all__ = ["checked_for_commit", "claim_for_commit", "fingerprint_holds", "refuse_lost_secret"]


def checked_for_commit(
    ledger: LedgerStore,
    vault: SecretVault,
    preview_id: str,
    approved_fingerprint: str,
    session: Principal,
    *,
    now: float,
) -> tuple[Preview, Approval | None] | Receipt:
    """The preview and its approval once the checks pass; the stored receipt, replayed,
    when there is one.

    Raises:
        ToolError: ``not_found``, ``denied``, ``approval_mismatch`` or ``preview_expired``.
    """
    preview = load_preview(ledger, preview_id)
    principal = preview.principal
    if (principal.user_id, principal.tenant_id) != (session.user_id, session.tenant_id):
        raise DeniedError(
            "this change belongs to another principal's run; you cannot commit it",
            reason="policy",
            detail=f"preview of {principal.user_id}@{principal.tenant_id}",
        )
    approval = ledger.approval(preview.id)
    if not fingerprint_holds(preview, approved_fingerprint, approval):
        raise ApprovalMismatchError(
            f"the approval does not match preview {preview.id!r}; request a new approval",
            detail="given, stored, recomputed or approved fingerprints differ",
        )
    # Another preview's receipt is no answer to committing this one (its state is:
    # ``denied``, or ``conflict`` for a failed one, from the claim below).
    stored = own_receipt(ledger, preview)
    if stored is not None:
        vault.release(preview.id)
        return dataclasses.replace(stored, replayed=True)
    if preview.expired(now):
        maybe_sent = preview.state in ("sending", "unknown")
        raise PreviewExpiredError(
            f"preview {preview.id!r} expired; prepare the change again"
            + ("; an earlier send may have acted, reconcile resolves it" if maybe_sent else ""),
            outcome="unknown" if maybe_sent else "error",
        )
    return preview, approval


def refuse_lost_secret(
    ledger: LedgerStore, vault: SecretVault, spec: ToolSpec, preview: Preview, *, now: float
) -> None:
    """Refuse, before anything is claimed or sent, a step whose sealed values this process
    does not hold; one never sent is failed, so the same intent can be asked again (it gets
    a new preview).

    Raises:
        PreviewExpiredError: the values are not held here (outcome ``unknown`` when an
            earlier send may have acted).
    """
    fields = sealed_fields(spec)
    if not fields or vault.unseal(preview.id, preview.effect, fields) is not None:
        return
    never_sent = preview.state in ("prepared", "approved")
    if never_sent:
        with contextlib.suppress(StepStateError):
            ledger.transition(
                preview.id,
                expect={preview.state},
                expect_attempts=preview.attempts,
                to="failed",
                at=now,
                actor="ledger",
                how="its secret is not held by the process committing it",
                error="secret_unavailable",
            )
    raise PreviewExpiredError(
        "this change holds a secret that only the process that prepared it had; call the "
        "tool again"
        + ("" if never_sent else "; an earlier send may have acted, reconcile resolves it"),
        outcome="error" if never_sent else "unknown",
        detail=f"preview {preview.id} ({preview.state}): sealed values not held here",
    )


def fingerprint_holds(preview: Preview, given: str, approval: Approval | None) -> bool:
    """Given == stored == recomputed from the stored fields == the approval's (if any)."""
    # As bytes: compare_digest refuses a str with non-ASCII characters (TypeError).
    given_bytes = given.encode("utf-8", "surrogatepass")
    same = hmac.compare_digest(given_bytes, preview.fingerprint.encode()) and hmac.compare_digest(
        preview.computed_fingerprint(), preview.fingerprint
    )
    if approval is not None:
        same = same and hmac.compare_digest(approval.fingerprint, preview.fingerprint)
    return same


def _stuck_here(ledger: LedgerStore, spec: ToolSpec, preview: Preview, now: float) -> bool:
    """Whether a ``sending`` write is this process's own send that ended without recording
    how (its ledger refused both the receipt and the ``unknown`` mark), past its lease: it
    would answer "in flight" forever, and this process alone knows its send is over. Another
    process's send, which may still wait for its answer (on another host, by another clock),
    and an approved read (reconcile ends an interrupted one ``failed``) are left to
    reconcile, as is a step whose key answered for another change (never resent)."""
    if spec.write is None or preview.owner != owner_token():
        return False
    return needs_resolving(preview, now) and mismatch_of(ledger, preview) is None


def claim_for_commit(
    sender: Sender, spec: ToolSpec, preview: Preview, approval: Approval | None, *, now: float
) -> Preview | Receipt | None:
    """Claim an approved step for this process, or resend one whose earlier send has no
    definite answer (``unknown``, or ``sending`` by a sender gone or that could not record
    how its send ended: :func:`~airlock.tools._reconcile.needs_resolving`): the claimed
    step, a replayed receipt, or ``None`` when another process moved it first (look again).

    Raises:
        ToolError: the step cannot be sent: ``needs_approval``, ``denied``, or ``conflict``
            (in flight: :class:`CommitInFlightError`, retryable, outcome ``unknown``; the
            system answered for another change under its key: :class:`ReceiptMismatchError`,
            outcome ``unknown``, for an operator; or failed before); ``upstream`` (retryable,
            the step untouched) when the tool has too many sync calls running past their
            timeouts.
    """
    state = preview.state
    # The key answered for another change (Sender.mismatched): never sent again.
    mismatch = mismatch_of(sender.ledger, preview) if state == "unknown" else None
    if mismatch is not None:
        raise ReceiptMismatchError(detail=mismatch)
    stale = state == "sending" and _stuck_here(sender.ledger, spec, preview, now)
    sends = spec.handler if spec.write is None else spec.write.commit  # (an approved read's)
    busy = refusal(spec, sends) if state in ("approved", "unknown") or stale else None
    if busy is not None:  # its sync calls run on past their timeouts: nothing claimed
        raise busy
    try:
        if state == "approved":
            if approval is None:
                raise NeedsApprovalError(rule=preview.rule, preview_id=preview.id)
            # A consumed approval means another commit just claimed it: the ledger's
            # compare-and-set refuses this claim and the next look sees ``sending``.
            return sender.claim(spec, preview, how="claimed by commit", consume=True, now=now)
        if state == "unknown":
            return sender.claim(spec, preview, how="claimed to resend by commit retry", now=now)
        if stale:
            how = "claimed to resend by commit retry: its sender is gone or stuck past its lease"
            return sender.claim(spec, preview, how=how, now=now)
    except StepStateError:
        return None
    if state == "prepared":
        raise NeedsApprovalError(
            f"preview {preview.id!r} waits for approval (rule {preview.rule!r})",
            rule=preview.rule,
            preview_id=preview.id,
        )
    if state == "denied":
        raise DeniedError(
            f"this change was denied ({preview.error or 'no reason'}); do not retry it",
            reason="policy",
        )
    if state == "sending":  # it may have happened already: never "nothing was committed"
        raise CommitInFlightError(
            f"a commit of preview {preview.id!r} is in flight; ask again shortly (the same "
            "commit returns its receipt once it is stored)",
            detail=f"owner {preview.owner}, lease until {preview.lease_until}",
        )
    if state == "failed":
        raise ConflictError(
            f"this change failed ({preview.error}); prepare it again to retry",
            detail=preview.error,
        )
    stored = sender.ledger.receipt(preview.key)  # committed: the receipt came in meanwhile
    return None if stored is None else dataclasses.replace(stored, replayed=True)
