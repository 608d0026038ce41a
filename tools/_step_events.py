"""The audit events of a write step (approved, denied, sent, settled), and who approved it.

A step has no call of its own: its events name the preview's principal and run, the preview
id as the call id, and its fingerprint's start as the argument hash. They are non-final
events; the call that prepared the preview recorded the final one.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from airlock.policies import Principal
from airlock.tools._audit import AdmissionDecision, AuditEvent, CallOutcome, Stage, audit_event
from airlock.tools._context import Caller
from airlock.tools._preview import Approval, Preview

__all__ = ["approver_of", "step_event"]


def step_event(
    preview: Preview,
    stage: Stage,
    decision: AdmissionDecision,
    rule: str,
    outcome: CallOutcome,
    code: str | None,
    detail: str | None,
    *,
    approver: str | None,
    ts: float,
) -> AuditEvent:
    """The non-final audit event of a step of ``preview`` at ``ts``; ``approver`` names who
    approved or denied it (a person, or ``policy:RULE``), when known."""
    event = audit_event(
        _StepCall(preview.principal, preview.run_id, preview.id),
        preview.tool,
        stage=stage,
        decision=decision,
        rule=rule,
        outcome=outcome,
        code=code,
        args_hash=preview.fingerprint[:32],
        effects=preview.effects,
        detail=detail,
        final=False,
        ts=ts,
    )
    return event if approver is None else dataclasses.replace(event, approver=approver)


def approver_of(approval: Approval) -> str:
    """Who approved, as the audit log names it: the person, or ``policy:RULE``."""
    if approval.kind == "person" or approval.approver.startswith("policy:"):
        return approval.approver
    return f"policy:{approval.approver}"


@dataclass(frozen=True, slots=True)
class _StepCall:
    """Whose call a write step's audit event records: the preview's principal and run, the
    preview id as the call id (a step has no call of its own)."""

    principal: Principal
    run_id: str
    call_id: str
    caller: Caller = "direct"
