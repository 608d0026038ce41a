"""From an admitted call to its stored preview: one preview per intent and run.

A write call is prepared (code computes its exact effect), authorized, and stored; an
``allow`` rule approves it on the spot. A read call the approval rules ask about is stored
the same way, its validated arguments standing as its effect, so that a person can approve
it once and the write path runs it (:meth:`WritePath.run_read
<airlock.tools.WritePath.run_read>`). Fields marked ``Secret()`` are sealed first
(:mod:`airlock.tools._sealed`). Asking again for an intent already committed in the run
returns its committed preview, recorded as ``already_committed``: nothing is sent again, and
nothing is prepared again (the key comes from the validated input, so the ledger is asked
first: a prepare that reads what the commit changed would refuse).
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Callable

from airlock.policies import Effect, EffectArgumentError
from airlock.tools._admission import Admission, Authorization, CallTrail, authorize, by_rules
from airlock.tools._context import CallContext
from airlock.tools._errors import ConflictError, NotFoundError, UpstreamError
from airlock.tools._json import JSONObject
from airlock.tools._ledger import LedgerStore, StepStateError
from airlock.tools._prepare import run_prepare
from airlock.tools._preview import Approval, Preview, canonical_json, fingerprint, idempotency_key
from airlock.tools._preview_holders import note_received, note_stored
from airlock.tools._sealed import SecretVault, sealed_fields
from airlock.tools._sender import Sender
from airlock.tools._step_effect import contract_of
from airlock.tools._write_contract import WriteContract
from airlock.tools._write_grant import amountless_denials, input_named, outside_grant

__all__ = ["ALREADY_COMMITTED", "propose_read", "propose_write"]

ALREADY_COMMITTED = "already_committed"
"""The code an intent that was already committed in its run is answered and audited with."""


async def propose_write(
    admission: Admission,
    ctx: CallContext,
    *,
    ledger: LedgerStore,
    sender: Sender,
    vault: SecretVault,
    ttl: float,
    clock: Callable[[], float],
) -> Preview:
    """Prepare, authorize and store the preview of an admitted write call, and record the
    call's final audit event (``preview``, ``already_committed``, or how it failed).

    Raises:
        ToolError: as :meth:`WritePath.propose <airlock.tools.WritePath.propose>`.
    """
    spec = admission.spec
    contract = contract_of(spec)
    with admission.trail.recording() as trail:
        intent = admission.input.model_dump(mode="json", include=set(contract.intent))
        key = idempotency_key(ctx.run_id, spec.name, intent)
        done = _committed(ledger, key, ctx)
        if done is not None:
            # Judged as its first call was, on the effects it committed with: a grant or a
            # rule that refuses them now refuses the call, as after a fresh prepare.
            preview, trail.effects = done
            verdict = authorize(spec, trail.effects, ctx)
            trail.decision, trail.rule = verdict.decision, verdict.rule
            if verdict.refusal is not None:
                raise verdict.refusal
            _settle_trail(trail, preview, ledger)
            _record(trail, preview)
            return preview
        budget = min(spec.timeout, ctx.remaining())
        try:
            effect = await run_prepare(admission, ctx.principal, budget=budget)
        except NotFoundError as exc:
            denial = _no_record(admission, ctx, exc)
            if denial is None or denial.refusal is None:
                raise
            trail.decision, trail.rule = denial.decision, denial.rule
            raise denial.refusal from None
        effect_json = effect.model_dump(mode="json")
        try:
            resolved: list[Effect] = []
            for declared in spec.effects:
                resolved.extend(declared.resolve_all(effect_json))
        except EffectArgumentError as exc:
            raise UpstreamError(
                "the tool computed an effect it cannot describe; report this to its owner",
                detail=f"prepare of {spec.name}: {exc}",
            ) from None
        trail.effects = tuple(resolved)
        verdict = authorize(spec, trail.effects, ctx)
        trail.decision, trail.rule = verdict.decision, verdict.rule
        if verdict.refusal is not None:
            raise verdict.refusal
        sealed, clear = vault.seal(effect_json, sealed_fields(spec))
        summary = _summary(contract, sealed, trail.effects)
        preview = _store_preview(
            admission,
            sealed,
            clear,
            key=key,
            summary=summary,
            ctx=ctx,
            rule=verdict.rule,
            ledger=ledger,
            vault=vault,
            ttl=ttl,
            now=clock,
        )
        # The rules judged the effect just prepared; a live preview of the same intent may
        # hold another one (its inputs changed since), and waits for whoever it waited for.
        judged = preview.fingerprint == fingerprint(spec.name, sealed, ctx.principal, preview.key)
        if verdict.decision == "allow" and preview.state == "prepared" and judged:
            preview = _approve_by_policy(preview, verdict.rule, ledger, sender, clock())
        _settle_trail(trail, preview, ledger)
    _record(trail, preview)
    return preview


async def propose_read(
    admission: Admission,
    ctx: CallContext,
    *,
    ledger: LedgerStore,
    vault: SecretVault,
    ttl: float,
    clock: Callable[[], float],
) -> Preview:
    """Store the preview of an admitted read that the approval rules ask about: its
    validated arguments (secrets sealed) as the effect, its resolved effects as admission
    saw them; record the call's final audit event.

    Raises:
        ConflictError: the run id is in use by another principal, or the same read is being
            prepared concurrently.
    """
    spec = admission.spec
    with admission.trail.recording() as trail:
        arguments = admission.input.model_dump(mode="json")
        sealed, clear = vault.seal(arguments, sealed_fields(spec))
        intent = {k: v for k, v in arguments.items() if k not in spec.secret_fields}
        summary = f"{spec.name}: " + (", ".join(str(e) for e in admission.effects) or "no effects")
        preview = _store_preview(
            admission,
            sealed,
            clear,
            key=idempotency_key(ctx.run_id, spec.name, intent),
            summary=summary,
            ctx=ctx,
            rule=trail.rule,
            ledger=ledger,
            vault=vault,
            ttl=ttl,
            now=clock,
        )
        _settle_trail(trail, preview, ledger)
    _record(trail, preview)
    return preview


def _no_record(
    admission: Admission, ctx: CallContext, not_found: NotFoundError
) -> Authorization | None:
    """The denial that answers a write call whose prepare found no record, when the grant or
    a deny rule that needs no amount refuses what its input names (:mod:`._write_grant`): a
    missing record then answers as an existing one that is refused. ``None``: ``not_found``
    stands. The trail records the records judged."""
    spec = admission.spec
    named, judged = input_named(spec, admission.values)
    why = f"prepare found no record ({not_found.detail or 'no detail'}); judged on its input"
    outside = ctx.grant.uncovered(named)
    if outside is not None:
        admission.trail.effects = named
        return Authorization("deny", "grant", outside_grant(outside, detail=why))
    verdict = by_rules(spec, judged, amountless_denials(ctx.approvals))
    if verdict.refusal is None:
        return None
    admission.trail.effects = named
    verdict.refusal.detail = f"{verdict.refusal.detail}; {why}"
    return verdict


def _summary(contract: WriteContract, sealed: JSONObject, effects: tuple[Effect, ...]) -> str:
    """The tool's summary of the sealed effect (a summary never shows a secret), or its
    effects when it has none or a seal does not fit its field.

    Raises:
        UpstreamError: the tool's ``summarize`` failed.
    """
    plain = ", ".join(str(e) for e in effects)
    if contract.summarize is None:
        return plain
    try:
        shown = contract.effect_model.model_validate_json(canonical_json(sealed))
    except ValueError:  # a seal that the field's own constraints refuse
        return plain
    try:
        return contract.summarize(shown)
    except Exception as exc:
        raise UpstreamError(
            "preparing the change failed; nothing was changed",
            detail=f"summarize: {type(exc).__name__}: {exc}"[:500],
        ) from exc


def _committed(
    ledger: LedgerStore, key: str, ctx: CallContext
) -> tuple[Preview, tuple[Effect, ...]] | None:
    """The committed preview that holds ``key``, with the effects it was judged on, when it
    is this principal's. Any other state, or another principal's key, is ``None``: prepare
    runs first and the store answers, as for any call."""
    receipt = ledger.receipt(key)  # (stored in the transaction that marked it committed)
    if receipt is None:
        return None
    preview = ledger.preview(receipt.preview_id)
    if preview is None or preview.state != "committed" or preview.key != key:
        return None
    owner = preview.principal
    if (owner.user_id, owner.tenant_id) != (ctx.principal.user_id, ctx.principal.tenant_id):
        return None
    try:
        effects = tuple(Effect.parse(text, resolved=True) for text in preview.effects)
    except ValueError:  # not as this version writes them: judged after a fresh prepare
        return None
    return preview, effects


def _settle_trail(trail: CallTrail, preview: Preview, ledger: LedgerStore) -> None:
    approval = ledger.approval(preview.id)
    by_policy = approval is not None and approval.kind == "policy"
    trail.decision = "allow" if by_policy else "ask"


def _record(trail: CallTrail, preview: Preview) -> None:
    if preview.state == "committed":
        trail.record(
            "preview",
            code=ALREADY_COMMITTED,
            detail=f"{preview.id} committed before; not sent again",
        )
    else:
        trail.record("preview", code="needs_approval", detail=f"{preview.id} {preview.state}")


def _store_preview(
    admission: Admission,
    effect: JSONObject,
    clear: dict[str, str],
    *,
    key: str,
    summary: str,
    ctx: CallContext,
    rule: str,
    ledger: LedgerStore,
    vault: SecretVault,
    ttl: float,
    now: Callable[[], float],
) -> Preview:
    """A new preview, or the live one of the same intent in this run (one per key)."""
    spec = admission.spec
    for _ in range(2):
        at = now()
        fresh = Preview(
            id="pv_" + secrets.token_hex(12),
            run_id=ctx.run_id,
            tool=spec.name,
            principal=ctx.principal,
            effect=effect,
            effects=tuple(str(e) for e in admission.trail.effects),
            summary=summary[:300],
            key=key,
            fingerprint=fingerprint(spec.name, effect, ctx.principal, key),
            rule=rule,
            created=at,
            expires=at + ttl,
            state="prepared",
            updated=at,
        )
        stored = ledger.add_preview(fresh)
        if stored.id == fresh.id:
            vault.hold(fresh.id, clear, until=fresh.expires, now=at)
            note_stored(fresh.id, until=fresh.expires, clock=now)
            return fresh
        owner = stored.principal
        if (owner.user_id, owner.tenant_id) != (ctx.principal.user_id, ctx.principal.tenant_id):
            raise ConflictError(
                "this run id is in use by another principal; start a new run",
                detail=f"key {key} belongs to {owner.user_id}@{owner.tenant_id}",
            )
        waiting = stored.state in ("prepared", "approved")
        # A preview whose sealed secrets no process here holds can never be sent: it gives
        # way to this one, as an expired, never-sent preview of the same intent does.
        lost = clear and not vault.holds(stored.id)
        if not (waiting and (stored.expired(at) or lost)):
            note_received(stored.id, until=stored.expires, clock=now)
            return stored  # the same intent in this run: one preview for it
        with contextlib.suppress(StepStateError):
            ledger.transition(
                stored.id,
                expect={stored.state},
                expect_attempts=stored.attempts,
                to="failed",
                at=at,
                actor="ledger",
                how="the same intent was prepared again"
                + ("; its secret was not held here" if lost else "; expired"),
                error="secret_unavailable" if lost else "preview_expired",
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
