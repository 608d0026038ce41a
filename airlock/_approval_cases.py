"""A tool's approval rule as a step function of the amount it spends.

Approval rules may depend on the amount of a ``spend`` (``min_amount``), and the grant caps
one spend per currency. For an inventory the amount is not known yet, so the verdict is
computed at every amount where it can change: 0, each rule threshold, and one past the
grant's limit. Each point is decided by the same :meth:`ApprovalPolicy.decide` admission
uses, so the inventory cannot drift from what happens at call time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from airlock._inventory_model import ApprovalCase
from policies import ApprovalPolicy, Effect, Grant, Verdict, spend
from tools import ToolSpec

__all__ = ["STRICTNESS", "approval_cases", "breakpoints", "verdict_at"]

STRICTNESS: Final[dict[Verdict, int]] = {"allow": 0, "ask": 1, "deny": 2}
SPEND_LIMIT_RULE: Final = "spend_limit"


def approval_cases(
    spec: ToolSpec, approvals: ApprovalPolicy, grant: Grant
) -> tuple[ApprovalCase, ...]:
    """The verdicts on calls of ``spec`` by amount, merged where consecutive ones agree."""
    variable = [e for e in spec.effects if e.kind == "spend" and isinstance(e.amount, str)]
    currencies = sorted({e.target for e in variable})
    currency = currencies[0] if len(currencies) == 1 else None
    points = {0}
    if variable:
        points.update(
            rule.min_amount
            for rule in approvals.rules
            if rule.min_amount is not None
            and (rule.currency is None or rule.currency in currencies)
        )
    # The grant refuses a spend over its limit before any approval rule is asked.
    limits = [grant.spend_limits[c] for c in currencies if c in grant.spend_limits]
    ceiling = min(limits) + 1 if limits and len(limits) == len(currencies) else None
    cases: list[ApprovalCase] = []
    for amount in sorted(points):
        if ceiling is not None and amount >= ceiling:
            break
        decision = approvals.decide(
            spec.name, _at_amount(spec.effects, amount), reversible=spec.reversible
        )
        cases.append(
            ApprovalCase(
                from_amount=amount,
                currency=currency,
                verdict=decision.verdict,
                rule=decision.rule_id,
            )
        )
    if ceiling is not None:
        cases.append(
            ApprovalCase(
                from_amount=ceiling, currency=currency, verdict="deny", rule=SPEND_LIMIT_RULE
            )
        )
    merged: list[ApprovalCase] = []
    for case in cases:
        if merged and (merged[-1].verdict, merged[-1].rule) == (case.verdict, case.rule):
            continue
        merged.append(case)
    return tuple(merged)


def _at_amount(effects: Sequence[Effect], amount: int) -> tuple[Effect, ...]:
    return tuple(
        spend(amount, currency=e.target) if e.kind == "spend" and isinstance(e.amount, str) else e
        for e in effects
    )


def verdict_at(cases: Sequence[ApprovalCase], amount: int) -> Verdict:
    """The verdict the step function ``cases`` gives a call spending ``amount``."""
    verdict: Verdict = "ask"
    for case in sorted(cases, key=lambda c: c.from_amount):
        if case.from_amount <= amount:
            verdict = case.verdict
    return verdict


def breakpoints(*case_lists: Sequence[ApprovalCase]) -> list[int]:
    """Every amount where one of the step functions may change, sorted."""
    return sorted({0} | {c.from_amount for cases in case_lists for c in cases})
