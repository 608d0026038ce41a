"""Whether a run's grant can use a tool at all, so a session lists only tools that may work."""

from __future__ import annotations

from airlock.policies import ApprovalPolicy, Grant, approval_cases, refusal
from airlock.tools import ToolSpec

__all__ = ["usable"]


def usable(spec: ToolSpec, grant: Grant, approvals: ApprovalPolicy) -> bool:
    """The grant has the tool's scope and may cover some target of every declared effect,
    and the approval rules do not deny every call: the effect inventory's judgement
    (:func:`airlock.policies.refusal`), so the two never disagree on what is offered."""
    cases = approval_cases(
        spec.name, spec.effects, reversible=spec.reversible, approvals=approvals, grant=grant
    )
    return refusal(spec.scope, spec.effects, cases, grant) is None
