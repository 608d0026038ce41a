"""A rule with an ``effect`` decides the call's effects of that kind, and only those.

The call's other effects need a rule of their own or get the default (a side effect is asked
about): "reads are fine" must not wave a refund's write and spend through because the refund
also reads the invoice.
"""

from __future__ import annotations

import itertools

import pytest

from airlock.policies import (
    ApprovalPolicy,
    ApprovalRule,
    Effect,
    disclose,
    network,
    read,
    spend,
    write,
)

READS = ApprovalRule(id="reads", action="allow", effect="read")
WRITES = ApprovalRule(id="writes", action="allow", effect="write")
USD = ApprovalRule(id="usd", action="allow", effect="spend", currency="USD")
LARGE = ApprovalRule(id="large", action="ask", effect="spend", min_amount=10_000)
MAIL = ApprovalRule(id="mail", action="allow", effect="disclose")
NO_READS = ApprovalRule(id="no-reads", action="deny", effect="read")
BILLING = ApprovalRule(id="billing", action="allow", tools=("billing_*",))
DOCS = ApprovalRule(
    id="docs", action="allow", effect="network", targets=("https://docs.example.com/**",)
)
INERT = ApprovalRule(id="inert", action="allow", effect="network", targets=("never.example",))
"""A target rule no call below reaches: it puts :meth:`ApprovalPolicy.decide` on its path for
policies with targets, which must answer as the path without them does."""

INVOICE = read("billing:invoice/inv_1")
REFUND = write("billing:refund/inv_1")
PAGE = network("https://docs.example.com/guide")
ANN = disclose("email:ann@acme.com")

# (name, rules, the call's effects, verdict, deciding rule)
KINDS: list[tuple[str, tuple[ApprovalRule, ...], tuple[Effect, ...], str, str]] = [
    ("a read rule leaves the write and spend to the default", (READS,),
     (INVOICE, REFUND, spend(99_999)), "ask", "default"),
    ("a read rule leaves a write to the default", (READS,), (INVOICE, REFUND), "ask", "default"),
    ("without the read, the same", (READS,), (REFUND, spend(99_999)), "ask", "default"),
    ("a read rule decides reads", (READS,), (INVOICE,), "allow", "reads"),
    ("a read rule, no effects", (READS,), (), "allow", "default"),
    ("a rule per kind decides each", (READS, WRITES), (INVOICE, REFUND), "allow", "reads"),
    ("the spend no rule decided", (READS, WRITES), (INVOICE, REFUND, spend(5)), "ask", "default"),
    ("every kind decided", (READS, WRITES, USD), (INVOICE, REFUND, spend(5)), "allow", "reads"),
    ("a spend rule leaves the write", (USD,), (REFUND, spend(5)), "ask", "default"),
    ("a spend rule decides spends", (USD,), (spend(5),), "allow", "usd"),
    ("another currency is not decided", (USD, WRITES), (REFUND, spend(5, currency="EUR")),
     "ask", "default"),
    ("an ask that applies is named", (READS, LARGE), (INVOICE, REFUND, spend(50_000)),
     "ask", "large"),
    ("an ask whose amount is not reached", (READS, LARGE), (INVOICE, REFUND, spend(5)),
     "ask", "default"),
    ("a disclose rule leaves the write", (MAIL,), (REFUND, ANN), "ask", "default"),
    ("a tool rule decides the whole call", (READS, BILLING), (INVOICE, REFUND, spend(5)),
     "allow", "reads"),
    ("a tool rule alone", (BILLING,), (INVOICE, REFUND, spend(5)), "allow", "billing"),
    # a deny decides the call it matches, as before
    ("a deny of reads refuses the call", (NO_READS, BILLING), (INVOICE, REFUND), "deny",
     "no-reads"),
    ("a deny of reads, nothing else", (NO_READS,), (INVOICE, REFUND, spend(5)), "deny",
     "no-reads"),
    # with a target rule: what it names is decided, the rest as above
    ("a target rule and a read rule", (DOCS, READS), (PAGE, INVOICE, REFUND), "ask", "default"),
    ("a target rule and a read rule, no write", (DOCS, READS), (PAGE, INVOICE), "allow", "docs"),
]  # fmt: skip


@pytest.mark.parametrize("targeted", [False, True], ids=["rules", "with-target-rule"])
@pytest.mark.parametrize(
    ("rules", "effects", "verdict", "rule"),
    [row[1:] for row in KINDS],
    ids=[row[0] for row in KINDS],
)
def test_a_rule_decides_the_effects_of_its_kind(
    rules: tuple[ApprovalRule, ...],
    effects: tuple[Effect, ...],
    verdict: str,
    rule: str,
    targeted: bool,
) -> None:
    policy = ApprovalPolicy((*rules, INERT) if targeted else rules)
    decision = policy.decide("billing_refund_create", effects, reversible=False)
    assert (decision.verdict, decision.rule_id) == (verdict, rule)
    assert decision.reason


@pytest.mark.parametrize(
    ("rules", "effects", "verdict"),
    [row[1:4] for row in KINDS if len(row[1]) > 1],
    ids=[row[0] for row in KINDS if len(row[1]) > 1],
)
def test_no_order_of_the_rules_changes_a_verdict(
    rules: tuple[ApprovalRule, ...], effects: tuple[Effect, ...], verdict: str
) -> None:
    for order in itertools.permutations(rules):
        decision = ApprovalPolicy(order).decide("billing_refund_create", effects, reversible=False)
        assert decision.verdict == verdict


def test_the_reason_names_the_effect_left_to_the_default() -> None:
    decision = ApprovalPolicy((READS,)).decide(
        "billing_refund_create", (INVOICE, REFUND), reversible=False
    )
    assert decision.reason == (
        "no rule decided write(billing:refund/inv_1), a side effect: a person is asked"
    )
