"""The caller the billing tests use: alice of tenant acme, allowed to read invoices and to
refund up to 10,000 USD, every refund asking a person first."""

from __future__ import annotations

from airlock.policies import ApprovalPolicy, ApprovalRule, Grant, Principal, read, write

ALICE = Principal(
    user_id="alice", tenant_id="acme", scopes=frozenset({"billing.read", "billing.write"})
)
GRANT = Grant(
    scopes=frozenset({"billing.read", "billing.write"}),
    effects=(read("billing:invoice/*"), write("billing:refund/*")),
    spend_limits={"USD": 1_000_000},
)
ASK = ApprovalPolicy((ApprovalRule(id="refunds-ask", action="ask", tools=("billing_refund_*",)),))
