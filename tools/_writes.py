"""The write path: prepare → preview → approve → commit → receipt, on a durable ledger.

:class:`WritePath` attaches itself to a :class:`~airlock.tools.Registry`. A direct call of a
write tool is admitted as usual (:meth:`Registry.admit <airlock.tools.Registry.admit>`) and,
instead of running a handler, prepares the exact effect, authorizes it, and stores a
:class:`~airlock.tools.Preview`: :meth:`WritePath.preview_call` returns it, and a plain
:meth:`Registry.call` answers ``needs_approval`` with its id. An ``allow`` rule approves the
preview by policy on the spot (the harness may commit at once); ``ask`` leaves it for a
person (:meth:`WritePath.approve`, or ``airlock approvals approve``); ``deny`` refuses the
call.

:meth:`WritePath.commit` runs its checks in a fixed order, each failure stopping it::

    exists      same principal  fingerprint         receipt stored?    expiry
    not_found   denied          approval_mismatch   return it,         preview_expired
                                                    marked replayed
    ─► claim (approved/unknown → sending; else conflict / needs_approval / denied)
    ─► send once with the key ─► store the receipt and mark committed, in one transaction

The claim is a compare-and-set in the ledger (``approved``/``unknown`` → ``sending``), so of
many concurrent commits of one preview, in any number of processes, one sends; the others
answer ``conflict`` while it is in flight and the stored receipt afterwards. A send that
ends without a definite answer leaves the step ``unknown``; :meth:`WritePath.reconcile`
resolves it by querying the system of record or resending with the same key, never a new one.
"""

from __future__ import annotations

import dataclasses
import hmac
import time
from collections.abc import Callable, Mapping
from typing import Any

from airlock.policies import Principal
from airlock.tools._admission import Admission
from airlock.tools._approvals import approve_preview, deny_preview, load_preview
from airlock.tools._context import CallContext
from airlock.tools._errors import (
    ApprovalMismatchError,
    ConflictError,
    DeniedError,
    NeedsApprovalError,
    PreviewExpiredError,
    UnknownToolError,
    UpstreamError,
)
from airlock.tools._ledger import LedgerStore, StepStateError
from airlock.tools._prepare import model_message
from airlock.tools._preview import Approval, Preview, Receipt, ResolvedBy
from airlock.tools._proposals import propose_write
from airlock.tools._reconcile import Resolution, resolve
from airlock.tools._registry import Registry
from airlock.tools._sender import Sender, approver_of
from airlock.tools._spec import ToolSpec

__all__ = ["WritePath"]

_MAX_CLAIMS = 4


class WritePath:
    """The write path of one registry, on one ledger.

    Args:
        registry: the tools; the write path attaches itself so direct write calls reach it.
        ledger: where previews, approvals and receipts live (``SQLiteLedgerStore``).
        ttl: seconds a preview stays committable after it was prepared.
        lease_grace: seconds added to a tool's timeout for how long a claimed send may run
            before reconciliation treats its sender as gone.
        clock: wall-clock time in seconds (injectable for tests).

    Call :meth:`reconcile` at start-up, before committing anything, so that writes a crash
    left undecided are resolved first.
    """

    def __init__(
        self,
        registry: Registry,
        ledger: LedgerStore,
        *,
        ttl: float = 900.0,
        lease_grace: float = 30.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if ttl <= 0:
            raise ValueError(f"ttl must be positive, not {ttl!r}")
        self.registry = registry
        self.ledger = ledger
        self.ttl = ttl
        self.lease_grace = lease_grace
        self.clock = clock
        self._sender = Sender(ledger, registry.audit, clock=clock, lease_grace=lease_grace)
        registry.attach_writes(self)

    # -- prepare (the registry calls this for a direct write call) -----------------------

    async def propose(self, admission: Admission, ctx: CallContext) -> Preview:
        """Prepare the effect of an admitted write call, check it against the grant and the
        approval rules, and store its preview (approved at once when a rule allows it); the
        call's final audit event says ``preview``.

        Raises:
            ToolError: ``prepare`` failed: its own error (``not_found``...), ``timeout``,
                or ``upstream`` for anything unexpected (prepare changes nothing, so the
                outcome is ``error``); ``denied`` when the grant or a rule refuses the
                prepared effect; ``conflict`` when the run id was reused by another principal.
        """
        return await propose_write(
            admission, ctx, ledger=self.ledger, sender=self._sender, ttl=self.ttl, clock=self.clock
        )

    def waiting(self, preview: Preview) -> NeedsApprovalError:
        """What a caller that knows only answers and errors is told about ``preview``: its
        summary, id and what happens next, as ``needs_approval``."""
        return NeedsApprovalError(
            model_message(preview, self.clock()), rule=preview.rule, preview_id=preview.id
        )

    async def preview_call(self, name: str, args: Mapping[str, Any], ctx: CallContext) -> Preview:
        """Make a direct write call (admission, prepare, policy) and return its preview.

        What a harness does with a model's write call: it commits at once when
        :attr:`Preview.state` is ``approved``, or pauses for a person.

        Raises:
            ToolError: admission or prepare refused the call (``denied``, ``invalid_input``,
                ``not_found``...); ``unknown_tool`` when ``name`` is no write tool.
        """
        spec = self.registry.get(name)
        if spec is None or spec.write is None:
            raise UnknownToolError(name=name, detail="no write tool of that name")
        return await self.propose(self.registry.admit(name, args, ctx), ctx)

    # -- approval ------------------------------------------------------------------------

    def approve(
        self, preview_id: str, *, approver: str, fingerprint: str | None = None, reason: str = ""
    ) -> Approval:
        """A person approves the preview (see :func:`~airlock.tools.approve_preview`).

        Raises:
            ToolError: as :func:`~airlock.tools.approve_preview`.
        """
        approval = approve_preview(
            self.ledger,
            preview_id,
            approver=approver,
            now=self.clock(),
            fingerprint=fingerprint,
            reason=reason,
        )
        preview = load_preview(self.ledger, preview_id)
        self._sender.audit(
            preview,
            "authorize",
            "allow",
            approval.rule,
            "ok",
            None,
            f"approved by {approver}",
            approver=approver_of(approval),
        )
        return approval

    def deny(self, preview_id: str, *, approver: str, reason: str) -> Preview:
        """A person refuses the preview (see :func:`~airlock.tools.deny_preview`).

        Raises:
            ToolError: as :func:`~airlock.tools.deny_preview`.
        """
        preview = deny_preview(
            self.ledger, preview_id, approver=approver, reason=reason, now=self.clock()
        )
        self._sender.audit(
            preview,
            "authorize",
            "deny",
            preview.rule,
            "error",
            "denied",
            reason[:200],
            approver=approver,
        )
        return preview

    # -- commit --------------------------------------------------------------------------

    async def commit(
        self, preview_id: str, approved_fingerprint: str, session: Principal
    ) -> Receipt:
        """Send an approved preview once, with its idempotency key, and return the receipt.

        ``session`` is the principal of the session committing; the run cannot name another.

        Raises:
            NotFoundError: no such preview.
            DeniedError: the preview belongs to another principal, or a person denied it.
            ApprovalMismatchError: ``approved_fingerprint`` is not the preview's, or the
                stored effect or approval no longer match it.
            PreviewExpiredError: past its expiry with no receipt stored (outcome ``unknown``
                when an earlier send may have acted: reconcile resolves it).
            NeedsApprovalError: nobody approved it yet.
            ConflictError: another commit of it is in flight, or the step failed before.
            AmbiguousWriteError: the send ended without a definite answer; the step is
                ``unknown``. Commit again (it resends with the same key) or reconcile.
            ToolError: the system of record refused (the tool's error, outcome ``error``).
        """
        preview = load_preview(self.ledger, preview_id)
        principal = preview.principal
        if (principal.user_id, principal.tenant_id) != (session.user_id, session.tenant_id):
            raise DeniedError(
                "this change belongs to another principal's run; you cannot commit it",
                reason="policy",
                detail=f"preview of {principal.user_id}@{principal.tenant_id}",
            )
        approval = self.ledger.approval(preview.id)
        if not _fingerprint_holds(preview, approved_fingerprint, approval):
            raise ApprovalMismatchError(
                f"the approval does not match preview {preview.id!r}; request a new approval",
                detail="given, stored, recomputed or approved fingerprints differ",
            )
        stored = self.ledger.receipt(preview.key)
        if stored is not None:
            return dataclasses.replace(stored, replayed=True)
        if preview.expired(self.clock()):
            maybe_sent = preview.state in ("sending", "unknown")
            raise PreviewExpiredError(
                f"preview {preview.id!r} expired; prepare the change again"
                + ("; an earlier send may have acted, reconcile resolves it" if maybe_sent else ""),
                outcome="unknown" if maybe_sent else "error",
            )
        spec = self._spec(preview)
        for _ in range(_MAX_CLAIMS):
            claimed = self._claim_for_commit(spec, preview, approval)
            if isinstance(claimed, Receipt):
                return claimed
            if claimed is not None:
                resolved_by: ResolvedBy = "send" if claimed.attempts == 1 else "resend"
                return await self._sender.send(
                    spec, claimed, resolved_by=resolved_by, actor="commit"
                )
            preview = load_preview(self.ledger, preview_id)  # lost a race; look again
            approval = self.ledger.approval(preview.id)
        raise ConflictError(f"preview {preview_id!r} keeps changing; try the commit again")

    def _claim_for_commit(
        self, spec: ToolSpec, preview: Preview, approval: Approval | None
    ) -> Preview | Receipt | None:
        """The claimed step, a replayed receipt, ``None`` to look again, or a refusal."""
        state = preview.state
        now = self.clock()
        try:
            if state == "approved":
                if approval is None:
                    raise NeedsApprovalError(rule=preview.rule, preview_id=preview.id)
                # A consumed approval means another commit just claimed it: the ledger's
                # compare-and-set refuses this claim and the next look sees ``sending``.
                return self._sender.claim(
                    spec, preview, how="claimed by commit", consume=True, now=now
                )
            if state == "unknown":
                return self._sender.claim(
                    spec, preview, how="claimed to resend by commit retry", now=now
                )
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
        if state == "sending":
            raise ConflictError(
                f"a commit of preview {preview.id!r} is in flight; ask again shortly",
                detail=f"owner {preview.owner}, lease until {preview.lease_until}",
            )
        if state == "failed":
            raise ConflictError(
                f"this change failed ({preview.error}); prepare it again to retry",
                detail=preview.error,
            )
        stored = self.ledger.receipt(preview.key)  # committed: the receipt came in meanwhile
        return None if stored is None else dataclasses.replace(stored, replayed=True)

    # -- reconcile -----------------------------------------------------------------------

    async def reconcile(self) -> list[Resolution]:
        """Resolve every ``unknown`` step and every ``sending`` step whose sender is gone.

        Each is claimed like a commit (so two reconcilers never both act), then the system
        of record is queried (when the tool declares ``lookup``) or the same key is resent.
        Never a fresh write; how each was resolved is recorded in the ledger.
        """
        results = []
        for preview in self.ledger.previews(states={"unknown", "sending"}, limit=1_000_000):
            results.append(await resolve(self._sender, self.registry, preview))
        return results

    # -- helpers -------------------------------------------------------------------------

    def _spec(self, preview: Preview) -> ToolSpec:
        spec = self.registry.get(preview.tool)
        if spec is None or spec.write is None:
            raise UpstreamError(
                "the tool of this change is not available here",
                detail=f"tool {preview.tool!r} is not a registered write tool",
            )
        return spec


def _fingerprint_holds(preview: Preview, given: str, approval: Approval | None) -> bool:
    """Given == stored == recomputed from the stored fields == the approval's (if any)."""
    same = hmac.compare_digest(given, preview.fingerprint) and hmac.compare_digest(
        preview.computed_fingerprint(), preview.fingerprint
    )
    if approval is not None:
        same = same and hmac.compare_digest(approval.fingerprint, preview.fingerprint)
    return same
