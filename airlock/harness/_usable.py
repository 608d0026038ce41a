"""Whether a run's grant can use a tool at all, so a session lists only tools that may work."""

from __future__ import annotations

from airlock.policies import ApprovalPolicy, Grant, approval_cases, refusal
from airlock.tools import ToolSpec

__all__ = ["needs_ledger", "usable"]


def usable(spec: ToolSpec, grant: Grant, approvals: ApprovalPolicy) -> bool:
    """The grant has the tool's scope and may cover some target of every declared effect,
    and the approval rules do not deny every call: the effect inventory's judgement
    (:func:`airlock.policies.refusal`), so the two never disagree on what is offered."""
    cases = approval_cases(
        spec.name, spec.effects, reversible=spec.reversible, approvals=approvals, grant=grant
    )
    return refusal(spec.scope, spec.effects, cases, grant) is None


def needs_ledger(spec: ToolSpec, grant: Grant, approvals: ApprovalPolicy) -> bool:
    """Whether every call of ``spec`` that may pass waits for an approval, which only a
    harness with a ledger can ask for: a write tool, or a read no call of which is allowed
    without one."""
    if spec.write is not None:
        return True
    cases = approval_cases(
        spec.name, spec.effects, reversible=spec.reversible, approvals=approvals, grant=grant
    )
    return not any(case.verdict == "allow" for case in cases)
