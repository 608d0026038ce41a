"""The one write both write benchmarks make: a refund of one invoice, allowed by policy."""

from __future__ import annotations

from airlock.policies import ApprovalPolicy, ApprovalRule, Grant, Principal, write
from airlock.tools import CallContext

__all__ = ["ARGS", "INVOICES", "PRINCIPAL", "write_context"]

PRINCIPAL = Principal(user_id="alice", tenant_id="acme", scopes=frozenset({"billing.write"}))
GRANT = Grant(
    scopes=frozenset({"billing.write"}),
    effects=(write("billing:refund/*"),),
    spend_limits={"USD": 1_000_000},
)
POLICY = ApprovalPolicy((ApprovalRule(id="refunds-auto", action="allow"),))
INVOICES = {
    "inv_1": {"tenant_id": "acme", "amount_minor": 1200, "currency": "USD", "customer": "c"}
}
ARGS = {"invoice_id": "inv_1", "reason": "duplicate"}


def write_context(i: int) -> CallContext:
    return CallContext(
        principal=PRINCIPAL, grant=GRANT, run_id=f"bench_{i}", caller="direct", approvals=POLICY
    )
