"""The write path: prepare → preview → approve → commit → receipt, on a durable ledger.

:class:`WritePath` attaches itself to a :class:`~airlock.tools.Registry`. A direct call of a write
tool then goes through admission as usual and, instead of running a handler, prepares the
exact effect and stores a :class:`~airlock.tools.Preview`; the call answers ``needs_approval`` with
the preview id. An ``allow`` rule approves the preview by policy on the spot (the harness may
commit at once); ``ask`` leaves it for a person (:meth:`WritePath.approve`, or
``airlock approvals approve``); ``deny`` refuses the call.

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

import contextlib
import dataclasses
import hmac
import secrets
import time
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel

from airlock.policies import Effect, EffectArgumentError, Principal
from airlock.tools._approvals import approve_preview, deny_preview, load_preview
from airlock.tools._audit import AdmissionDecision
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
from airlock.tools._prepare import model_message, run_prepare
from airlock.tools._preview import (
    Approval,
    Preview,
    Receipt,
    ResolvedBy,
    fingerprint,
    idempotency_key,
)
from airlock.tools._reconcile import Resolution, resolve
from airlock.tools._registry import Registry
from airlock.tools._sender import Sender, contract_of
from airlock.tools._spec import ToolSpec
from airlock.tools._write_contract import Proposal, WriteContract

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

    async def propose(self, spec: ToolSpec, args: BaseModel, ctx: CallContext) -> Proposal:
        """Prepare the effect, check it against the grant and the approval rules, and store
        its preview (approved at once when a rule allows it).

        Raises:
            ToolError: ``prepare`` failed: its own error (``not_found``...), ``timeout``,
                or ``upstream`` for anything unexpected (prepare changes nothing, so the
                outcome is ``error``); ``conflict`` when the run id was reused by another
                principal.
        """
        contract = contract_of(spec)
        budget = min(spec.timeout, ctx.remaining())
        effect = await run_prepare(contract, args, ctx.principal, budget=budget)
        effect_json = effect.model_dump(mode="json")
        try:
            resolved = tuple(e.resolve(effect_json) for e in spec.effects)
        except EffectArgumentError as exc:
            raise UpstreamError(
                "the tool computed an effect it cannot describe; report this to its owner",
                detail=f"prepare of {spec.name}: {exc}",
            ) from None
        outside = ctx.grant.uncovered(resolved)
        if outside is not None:
            rule = "spend" if outside.kind == "spend" else "grant"
            answer = DeniedError(
                f"{outside} is outside this run's grant; do not retry it",
                reason="spend" if outside.kind == "spend" else "effect",
            )
            return Proposal(decision="deny", rule=rule, effects=resolved, answer=answer)
        verdict = ctx.approvals.decide(spec.name, resolved, reversible=spec.reversible)
        if verdict.verdict == "deny":
            answer = DeniedError(
                "a policy rule forbids this change; do not retry it",
                reason="policy",
                detail=verdict.reason,
            )
            return Proposal(decision="deny", rule=verdict.rule_id, effects=resolved, answer=answer)
        preview = self._store_preview(
            spec, contract, args, effect, effect_json, resolved, ctx, rule=verdict.rule_id
        )
        if verdict.verdict == "allow" and preview.state == "prepared":
            preview = self._approve_by_policy(preview, verdict.rule_id)
        approval = self.ledger.approval(preview.id)
        decision: AdmissionDecision = (
            "allow" if approval is not None and approval.kind == "policy" else "ask"
        )
        return Proposal(
            decision=decision,
            rule=verdict.rule_id,
            effects=resolved,
            answer=NeedsApprovalError(
                model_message(preview, self.clock()),
                rule=preview.rule,
                preview_id=preview.id,
            ),
        )

    async def preview_call(self, name: str, args: Mapping[str, Any], ctx: CallContext) -> Preview:
        """Make a direct write call through the registry and return the preview it stored.

        What a harness does with a model's write call: admission, prepare, policy; then it
        commits at once when :attr:`Preview.state` is ``approved``, or pauses for a person.

        Raises:
            ToolError: admission or prepare refused the call (``denied``, ``invalid_input``,
                ``not_found``...); ``unknown_tool`` when ``name`` is no write tool.
        """
        spec = self.registry.get(name)
        if spec is None or spec.write is None:
            raise UnknownToolError(name=name, detail="no write tool of that name")
        try:
            await self.registry.call(name, args, ctx)
        except NeedsApprovalError as exc:
            if exc.preview_id is None:  # pragma: no cover - the write path always sets it
                raise
            return load_preview(self.ledger, exc.preview_id)
        raise AssertionError("a write call always ends in needs_approval or an error")

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
            preview, "authorize", "allow", approval.rule, "ok", None, f"approved by {approver}"
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
            preview, "authorize", "deny", preview.rule, "error", "denied", reason[:200]
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

    # -- sending -------------------------------------------------------------------------

    # -- helpers -------------------------------------------------------------------------

    def _spec(self, preview: Preview) -> ToolSpec:
        spec = self.registry.get(preview.tool)
        if spec is None or spec.write is None:
            raise UpstreamError(
                "the tool of this change is not available here",
                detail=f"tool {preview.tool!r} is not a registered write tool",
            )
        return spec

    def _store_preview(
        self,
        spec: ToolSpec,
        contract: WriteContract,
        args: BaseModel,
        effect: BaseModel,
        effect_json: dict[str, Any],
        resolved: tuple[Effect, ...],
        ctx: CallContext,
        *,
        rule: str,
    ) -> Preview:
        intent = args.model_dump(mode="json", include=set(contract.intent))
        key = idempotency_key(ctx.run_id, spec.name, intent)
        summary = (
            contract.summarize(effect)
            if contract.summarize is not None
            else ", ".join(str(e) for e in resolved)
        )[:300]
        for _ in range(2):
            now = self.clock()
            fresh = Preview(
                id="pv_" + secrets.token_hex(12),
                run_id=ctx.run_id,
                tool=spec.name,
                principal=ctx.principal,
                effect=effect_json,
                effects=tuple(str(e) for e in resolved),
                summary=summary,
                key=key,
                fingerprint=fingerprint(spec.name, effect_json, ctx.principal, key),
                rule=rule,
                created=now,
                expires=now + self.ttl,
                state="prepared",
                updated=now,
            )
            stored = self.ledger.add_preview(fresh)
            if stored.id == fresh.id:
                return fresh
            owner = stored.principal
            if (owner.user_id, owner.tenant_id) != (ctx.principal.user_id, ctx.principal.tenant_id):
                raise ConflictError(
                    "this run id is in use by another principal; start a new run",
                    detail=f"key {key} belongs to {owner.user_id}@{owner.tenant_id}",
                )
            if not (stored.state in ("prepared", "approved") and stored.expired(now)):
                return stored  # the same intent in this run: one preview for it
            # An expired, never-sent preview of the same intent gives way to a new one.
            with contextlib.suppress(StepStateError):
                self.ledger.transition(
                    stored.id,
                    expect={stored.state},
                    expect_attempts=stored.attempts,
                    to="failed",
                    at=now,
                    actor="ledger",
                    how="expired; the same intent was prepared again",
                    error="preview_expired",
                )
        raise ConflictError("the same change is being prepared concurrently; call again")

    def _approve_by_policy(self, preview: Preview, rule: str) -> Preview:
        now = self.clock()
        approval = Approval(
            preview_id=preview.id,
            fingerprint=preview.fingerprint,
            kind="policy",
            approver=f"policy:{rule}",
            rule=rule,
            at=now,
            reason="approved by policy",
        )
        try:
            approved = self.ledger.transition(
                preview.id,
                expect={"prepared"},
                to="approved",
                at=now,
                actor=f"policy:{rule}",
                how=f"approved by policy rule {rule!r}",
                approval=approval,
            )
        except StepStateError as exc:
            return exc.preview
        self._sender.audit(approved, "authorize", "allow", rule, "ok", None, "approved by policy")
        return approved


def _fingerprint_holds(preview: Preview, given: str, approval: Approval | None) -> bool:
    """Given == stored == recomputed from the stored fields == the approval's (if any)."""
    same = hmac.compare_digest(given, preview.fingerprint) and hmac.compare_digest(
        preview.computed_fingerprint(), preview.fingerprint
    )
    if approval is not None:
        same = same and hmac.compare_digest(approval.fingerprint, preview.fingerprint)
    return same
