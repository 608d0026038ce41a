"""Which steps reconciliation must resolve, and how it reports what it did.

A step needs resolving when the system of record may have acted and the ledger holds no
receipt: ``unknown`` (a send timed out or failed without a definite answer), or ``sending``
whose sender is gone — its lease ran out, or it was a process on this host that no longer
exists (killed between send and receipt).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from airlock.tools._approvals import load_preview
from airlock.tools._egress import checked_invoke, reach_of
from airlock.tools._errors import AmbiguousWriteError, ToolError
from airlock.tools._ledger import StepStateError
from airlock.tools._preview import Preview, Receipt, StepState
from airlock.tools._registry import Registry
from airlock.tools._sender import Sender, effect_of, owner_alive

__all__ = ["Resolution", "ResolutionOutcome", "needs_resolving", "resolve"]

ResolutionOutcome = Literal["committed", "failed", "unresolved", "in_flight"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Resolution:
    """What reconciliation did with one step."""

    preview_id: str
    tool: str
    before: StepState
    after: StepState
    outcome: ResolutionOutcome
    """``committed`` (a receipt is stored), ``failed`` (the system refused: nothing
    happened), ``unresolved`` (still unknown; run again later), ``in_flight`` (another live
    process is sending; left alone)."""
    how: str
    """How it was resolved, as recorded in the ledger: ``queried``, ``resent``, a reason."""
    receipt: Receipt | None = None


def needs_resolving(preview: Preview, now: float) -> bool:
    """Whether ``preview`` is a step reconciliation must resolve at ``now``."""
    if preview.state == "unknown":
        return True
    if preview.state != "sending":
        return False
    if preview.lease_until is None or now > preview.lease_until:
        return True
    alive = owner_alive(preview.owner)
    return alive is False


async def resolve(sender: Sender, registry: Registry, preview: Preview) -> Resolution:
    """Resolve one step: query the system of record, or resend with the same key.

    The step is claimed first, like a commit, so two reconcilers never both act on it.
    """

    def result(
        after: Preview, outcome: ResolutionOutcome, how: str, receipt: Receipt | None = None
    ) -> Resolution:
        return Resolution(
            preview_id=preview.id,
            tool=preview.tool,
            before=preview.state,
            after=after.state,
            outcome=outcome,
            how=how,
            receipt=receipt,
        )

    now = sender.clock()
    if not needs_resolving(preview, now):
        return result(preview, "in_flight", f"a live sender ({preview.owner}) holds it")
    spec = registry.get(preview.tool)
    if spec is None or spec.write is None:
        return result(preview, "unresolved", f"tool {preview.tool!r} is not registered here")
    try:
        claimed = sender.claim(spec, preview, how="claimed by reconcile", now=now)
    except StepStateError as exc:
        return result(exc.preview, "in_flight", "another process claimed it first")
    contract = spec.write
    if contract.lookup is not None:
        # A query reads: it may reach the tool's destinations, and write no file.
        check = reach_of(spec).check(
            phase="lookup", tenant=claimed.principal.tenant_id, effects=claimed.effects
        )
        try:
            found = await checked_invoke(
                check, contract.lookup, effect_of(contract, claimed), claimed.key
            )
        except Exception as exc:  # the query failed: still undecided
            found, how = None, f"query failed: {type(exc).__name__}"
        else:
            how = ""
        denial = check.denial(outcome="unknown")
        if denial is not None:  # its answer, if any, is not to be trusted: still undecided
            first = check.violations[0]
            how = f"query stopped by the runtime check: {first.action}"
            sender.audit(claimed, "execute", "deny", first.rule, "unknown", "denied", denial.detail)
        if how:
            after = sender.mark(claimed, "unknown", how=how, error=how[:200])
            return result(after, "unresolved", how)
        if found is not None:
            try:
                receipt = sender.store_receipt(
                    spec, claimed, found, resolved_by="query", actor="reconcile"
                )
            except ToolError as exc:  # an unusable answer: the step stays undecided
                after = load_preview(sender.ledger, claimed.id)
                return result(after, "unresolved", f"query answer refused: {exc.code}")
            after = load_preview(sender.ledger, claimed.id)
            return result(
                after, "committed", "queried: the system of record holds the key", receipt
            )
    try:
        receipt = await sender.send(spec, claimed, resolved_by="resend", actor="reconcile")
    except AmbiguousWriteError as exc:
        after = load_preview(sender.ledger, claimed.id)
        return result(after, "unresolved", f"resend with the same key: {exc.detail or exc.code}")
    except ToolError as exc:
        after = load_preview(sender.ledger, claimed.id)
        outcome: ResolutionOutcome = "failed" if after.state == "failed" else "unresolved"
        return result(after, outcome, f"resend refused: {exc.code}")
    after = load_preview(sender.ledger, claimed.id)
    return result(after, "committed", "resent with the same key", receipt)
