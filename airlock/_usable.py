"""Whether a run's grant can use a tool at all, so a session lists only tools that may work."""

from __future__ import annotations

from airlock._approval_cases import approval_cases
from policies import ApprovalPolicy, Effect, Grant
from tools import ToolSpec

__all__ = ["usable"]


def usable(spec: ToolSpec, grant: Grant, approvals: ApprovalPolicy) -> bool:
    """The grant has the tool's scope and may cover some target of every declared effect,
    and the approval rules do not deny every call.

    A declared pattern such as ``read(billing:invoice/{invoice_id})`` counts when the grant
    covers it whole or in part (``read(billing:invoice/inv_1)``): some calls may pass, and
    admission still judges each one. A declared spend needs a limit in its currency. The
    same judgement as the effect inventory's, so the two never disagree on what is offered.
    """
    if not grant.allows_scope(spec.scope):
        return False
    if not all(_may_cover(grant, effect) for effect in spec.effects):
        return False
    cases = approval_cases(spec, approvals, grant)
    return not cases or any(case.verdict != "deny" for case in cases)


def _may_cover(grant: Grant, effect: Effect) -> bool:
    if effect.kind == "spend":
        return effect.target in grant.spend_limits
    if grant.covers(effect):
        return True
    declared = _literal_prefix(effect.pattern)
    return any(
        allowed.kind == effect.kind
        and (
            _literal_prefix(allowed.target).startswith(declared)
            or declared.startswith(_literal_prefix(allowed.target))
        )
        for allowed in grant.effects
    )


def _literal_prefix(pattern: str) -> str:
    return pattern.split("*", 1)[0]
