"""From an admitted write call to its stored preview: prepare, authorize, one preview per
intent and run, and approval on the spot when a policy rule allows it."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Callable

from pydantic import BaseModel

from airlock.policies import Effect, EffectArgumentError
from airlock.tools._admission import Admission, authorize
from airlock.tools._context import CallContext
from airlock.tools._errors import ConflictError, UpstreamError
from airlock.tools._ledger import LedgerStore, StepStateError
from airlock.tools._prepare import run_prepare
from airlock.tools._preview import Approval, Preview, fingerprint, idempotency_key
from airlock.tools._sender import Sender, contract_of

__all__ = ["propose_write"]


async def propose_write(
    admission: Admission,
    ctx: CallContext,
    *,
    ledger: LedgerStore,
    sender: Sender,
    ttl: float,
    clock: Callable[[], float],
) -> Preview:
    """Prepare, authorize and store the preview of an admitted write call, and record the
    call's final audit event (``preview``, or how it failed).

    Raises:
        ToolError: as :meth:`WritePath.propose <airlock.tools.WritePath.propose>`.
    """
    spec = admission.spec
    contract = contract_of(spec)
    with admission.trail.recording() as trail:
        budget = min(spec.timeout, ctx.remaining())
        effect = await run_prepare(contract, admission.input, ctx.principal, budget=budget)
        effect_json = effect.model_dump(mode="json")
        try:
            resolved = tuple(e.resolve(effect_json) for e in spec.effects)
        except EffectArgumentError as exc:
            raise UpstreamError(
                "the tool computed an effect it cannot describe; report this to its owner",
                detail=f"prepare of {spec.name}: {exc}",
            ) from None
        trail.effects = resolved
        verdict = authorize(spec, resolved, ctx)
        trail.decision, trail.rule = verdict.decision, verdict.rule
        if verdict.refusal is not None:
            raise verdict.refusal
        preview = _store_preview(
            admission, effect, resolved, ctx, rule=verdict.rule, ledger=ledger, ttl=ttl, now=clock
        )
        if verdict.decision == "allow" and preview.state == "prepared":
            preview = _approve_by_policy(preview, verdict.rule, ledger, sender, clock())
        approval = ledger.approval(preview.id)
        by_policy = approval is not None and approval.kind == "policy"
        trail.decision = "allow" if by_policy else "ask"
    trail.record("preview", code="needs_approval", detail=f"{preview.id} {preview.state}")
    return preview


def _store_preview(
    admission: Admission,
    effect: BaseModel,
    resolved: tuple[Effect, ...],
    ctx: CallContext,
    *,
    rule: str,
    ledger: LedgerStore,
    ttl: float,
    now: Callable[[], float],
) -> Preview:
    """A new preview, or the live one of the same intent in this run (one per key)."""
    spec = admission.spec
    contract = contract_of(spec)
    effect_json = effect.model_dump(mode="json")
    intent = admission.input.model_dump(mode="json", include=set(contract.intent))
    key = idempotency_key(ctx.run_id, spec.name, intent)
    summary = (
        contract.summarize(effect)
        if contract.summarize is not None
        else ", ".join(str(e) for e in resolved)
    )[:300]
    for _ in range(2):
        at = now()
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
            created=at,
            expires=at + ttl,
            state="prepared",
            updated=at,
        )
        stored = ledger.add_preview(fresh)
        if stored.id == fresh.id:
            return fresh
        owner = stored.principal
        if (owner.user_id, owner.tenant_id) != (ctx.principal.user_id, ctx.principal.tenant_id):
            raise ConflictError(
                "this run id is in use by another principal; start a new run",
                detail=f"key {key} belongs to {owner.user_id}@{owner.tenant_id}",
            )
        if not (stored.state in ("prepared", "approved") and stored.expired(at)):
            return stored  # the same intent in this run: one preview for it
        # An expired, never-sent preview of the same intent gives way to a new one.
        with contextlib.suppress(StepStateError):
            ledger.transition(
                stored.id,
                expect={stored.state},
                expect_attempts=stored.attempts,
                to="failed",
                at=at,
                actor="ledger",
                how="expired; the same intent was prepared again",
                error="preview_expired",
            )
    raise ConflictError("the same change is being prepared concurrently; call again")


def _approve_by_policy(
    preview: Preview, rule: str, ledger: LedgerStore, sender: Sender, now: float
) -> Preview:
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
        approved = ledger.transition(
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
    sender.audit(
        approved,
        "authorize",
        "allow",
        rule,
        "ok",
        None,
        "approved by policy",
        approver=f"policy:{rule}",
    )
    return approved
