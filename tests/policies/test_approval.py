from __future__ import annotations

import pytest
from pydantic import ValidationError

from airlock.policies import ApprovalPolicy, ApprovalRule, Effect, read, spend, write

POLICY = ApprovalPolicy(
    (
        ApprovalRule(id="refunds", action="allow", tools=("billing_refund_*",)),
        ApprovalRule(id="large", action="ask", effect="spend", min_amount=10_000),
        ApprovalRule(
            id="huge-usd", action="deny", effect="spend", min_amount=100_000, currency="USD"
        ),
        ApprovalRule(id="irreversible", action="ask", reversible=False, effect="write"),
        ApprovalRule(id="no-exports", action="deny", tools=("billing_export_*",)),
        ApprovalRule(
            id="usd-shop", action="allow", tools=("shop_*",), effect="spend", currency="USD"
        ),
        ApprovalRule(
            id="no-gbp-shop", action="deny", tools=("shop_*",), effect="spend", currency="GBP"
        ),
    )
)


@pytest.mark.parametrize(
    ("tool", "effects", "reversible", "verdict", "rule"),
    [
        ("billing_refund_create", [spend(500)], True, "allow", "refunds"),
        ("billing_refund_create", [spend(50_000)], True, "ask", "large"),
        ("billing_refund_create", [spend(500_000)], True, "deny", "huge-usd"),
        ("billing_refund_create", [spend(500_000, currency="EUR")], True, "ask", "large"),
        ("billing_invoice_void", [write("billing:invoice/1")], False, "ask", "irreversible"),
        ("billing_invoice_void", [write("billing:invoice/1")], True, "ask", "default"),
        ("billing_invoice_get", [read("billing:invoice/1")], True, "allow", "default"),
        ("billing_export_make", [read("billing:export/1")], True, "deny", "no-exports"),
        # currency is a condition of its own: the call must spend in it
        ("shop_order_buy", [spend(999_999, currency="EUR")], True, "ask", "large"),
        ("shop_order_buy", [spend(5, currency="EUR")], True, "ask", "default"),
        ("shop_order_buy", [spend(5)], True, "allow", "usd-shop"),
        # amounts are per call: the spends of one currency add up
        ("billing_refund_create", [spend(9_999), spend(9_999)], True, "ask", "large"),
        ("billing_refund_create", [spend(60_000), spend(60_000)], True, "deny", "huge-usd"),
    ],
)
def test_decide(
    tool: str, effects: list[Effect], reversible: bool, verdict: str, rule: str
) -> None:
    decision = POLICY.decide(tool, effects, reversible=reversible)
    assert (decision.verdict, decision.rule_id) == (verdict, rule)
    assert decision.reason


def test_the_order_of_rules_never_loosens_a_policy() -> None:
    rules = POLICY.rules
    reversed_policy = ApprovalPolicy(tuple(reversed(rules)))
    for policy in (POLICY, reversed_policy):
        decision = policy.decide("billing_refund_create", [spend(500_000)], reversible=True)
        assert decision.verdict == "deny"


@pytest.mark.parametrize(
    "data",
    [
        {"id": "x", "action": "maybe"},
        {"id": "Bad Id", "action": "allow"},
        {"id": "x", "action": "allow", "min_amount": -1},
        {"id": "x", "action": "allow", "tools": []},
        {"id": "x", "action": "allow", "colour": "red"},
        # strict types: a policy file's "10000", true or 1e4 is not an amount
        {"id": "x", "action": "deny", "min_amount": "10000"},
        {"id": "x", "action": "deny", "min_amount": True},
        {"id": "x", "action": "deny", "min_amount": 1e4},
        {"id": "x", "action": "allow", "reversible": "no"},
        {"id": "x", "action": "allow", "reversible": 0},
    ],
)
def test_invalid_rules_are_refused(data: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        ApprovalRule.model_validate(data)
