"""A person's decision on a preview: approve its fingerprint, or deny it with a reason.

These need only the ledger, not the tools, so ``airlock approvals`` can run anywhere the
ledger is. The approver's id comes from whoever operates the approval surface (the CLI's
user, a web session), never from the run, and ``policy:`` ids are reserved for rules. The
person who asked for a change (the preview's principal) cannot approve it unless the policy
allows it (``self_approval = true``): a second person's look is the point of asking.
"""

from __future__ import annotations

import hmac
import re

from airlock.tools._batch_records import Batch
from airlock.tools._errors import (
    ApprovalMismatchError,
    ConflictError,
    DeniedError,
    InvalidInputError,
    NotFoundError,
    PreviewExpiredError,
)
from airlock.tools._ledger import LedgerStore, StepStateError
from airlock.tools._preview import Approval, Preview

__all__ = ["approve_preview", "deny_preview", "is_requester", "load_preview"]

_APPROVER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@:-]{0,127}$")


def load_preview(ledger: LedgerStore, preview_id: str) -> Preview:
    """The preview with this id.

    Raises:
        NotFoundError: there is none.
    """
    preview = ledger.preview(preview_id)
    if preview is None:
        raise NotFoundError(f"no preview {preview_id[:64]!r}; list them with `approvals list`")
    return preview


def approve_preview(
    ledger: LedgerStore,
    preview_id: str,
    *,
    approver: str,
    now: float,
    fingerprint: str | None = None,
    reason: str = "",
    self_approval: bool = False,
) -> Approval:
    """Record that ``approver`` (a person) approved the preview's fingerprint.

    ``fingerprint`` is the one the person was shown; when given it must still be the
    preview's. Either way the stored effect must still hash to the stored fingerprint.
    ``self_approval`` (the policy's setting) lets the requester approve their own change.

    Raises:
        NotFoundError: no such preview.
        DeniedError: ``approver`` asked for this change and ``self_approval`` is off.
        ApprovalMismatchError: the preview's effect or fingerprint changed since it was shown.
        PreviewExpiredError: the preview is past its expiry.
        ConflictError: the preview is not waiting for approval (already approved, denied,
            sent); the message says which state it is in.
        InvalidInputError: the approver id is malformed or reserved.
    """
    _check_approver(approver)
    preview = load_preview(ledger, preview_id)
    if not self_approval and is_requester(approver, preview):
        raise DeniedError(
            f"{approver!r} asked for preview {preview.id!r} and cannot approve it; ask another "
            "person, or set self_approval = true in the policy"
        )
    shown = preview.fingerprint if fingerprint is None else fingerprint
    if not (
        # As bytes: compare_digest refuses a str with non-ASCII characters (TypeError).
        hmac.compare_digest(shown.encode("utf-8", "surrogatepass"), preview.fingerprint.encode())
        and hmac.compare_digest(preview.computed_fingerprint(), preview.fingerprint)
    ):
        raise ApprovalMismatchError(
            f"preview {preview.id!r} no longer matches what was shown; do not approve it",
            detail="stored effect does not hash to the approved fingerprint",
        )
    if preview.expired(now):
        raise PreviewExpiredError(f"preview {preview.id!r} expired; the run must prepare it again")
    approval = Approval(
        preview_id=preview.id,
        fingerprint=preview.fingerprint,
        kind="person",
        approver=approver,
        rule=preview.rule,
        at=now,
        reason=reason[:500],
    )
    try:
        ledger.transition(
            preview.id,
            expect={"prepared"},
            to="approved",
            at=now,
            actor=approver,
            how=f"approved by {approver}" + (f": {reason[:200]}" if reason else ""),
            approval=approval,
        )
    except StepStateError as exc:
        raise _not_waiting(exc.preview) from None
    return approval


def deny_preview(
    ledger: LedgerStore, preview_id: str, *, approver: str, reason: str, now: float
) -> Preview:
    """Record that ``approver`` refused the preview; it can never be committed.

    A policy approval that no commit used yet can be revoked this way too.

    Raises:
        NotFoundError: no such preview.
        ConflictError: the preview was already sent, committed, failed or denied.
        InvalidInputError: the approver id is malformed or reserved, or no reason was given.
    """
    _check_approver(approver)
    if not reason.strip():
        raise InvalidInputError("give a reason for the denial; the run's owner will see it")
    preview = load_preview(ledger, preview_id)
    try:
        return ledger.transition(
            preview.id,
            expect={"prepared", "approved"},
            to="denied",
            at=now,
            actor=approver,
            how=f"denied by {approver}: {reason[:200]}",
            error=f"denied: {reason[:200]}",
        )
    except StepStateError as exc:
        raise _not_waiting(exc.preview) from None


def is_requester(approver: str, preview: Preview | Batch) -> bool:
    """Whether ``approver`` is the principal who asked for ``preview`` (or proposed a batch):
    ``USER`` or ``USER@TENANT``."""
    who = preview.principal
    return approver in (who.user_id, f"{who.user_id}@{who.tenant_id}")


def _check_approver(approver: str) -> None:
    if not _APPROVER.fullmatch(approver) or approver.startswith("policy:"):
        raise InvalidInputError(
            f"approver {approver[:64]!r} must be a person's id (letters, digits, _ . @ : -), "
            "not starting with 'policy:'"
        )


def _not_waiting(preview: Preview) -> ConflictError:
    return ConflictError(
        f"preview {preview.id!r} is {preview.state!r}, not waiting for a decision",
        detail=f"state {preview.state}, attempts {preview.attempts}",
    )
