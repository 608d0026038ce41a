"""Whether a grant and approval rules let *some* call of a tool through, judged once.

A session offers a model only tools that may work, and the effect inventory lists what each
subject can reach; both ask the same questions of a tool's scope and declared effects, so
they are answered here, once:

- :func:`coverage`: how much of a declared effect a grant covers (``full``, ``partial``,
  ``none``). A pattern such as ``read(billing:invoice/{invoice_id})`` is ``partial`` against
  ``read(billing:invoice/inv_1)``: some calls may pass and admission judges each one. A
  spend with an amount from the input is ``partial`` up to the grant's limit in its currency;
  a fixed amount is ``full`` within the limit and ``none`` over it.
- :func:`approval_cases`: the approval verdict as a step function of the amount spent, at
  every amount where it can change (0, each rule threshold, one past the grant's limit),
  each point decided by the same :meth:`ApprovalPolicy.decide` admission uses.
- :func:`refusal`: why no call can pass, or ``None`` when some may.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from airlock.policies._approval import ApprovalPolicy, Verdict
from airlock.policies._effects import Effect, spend
from airlock.policies._grant import Grant

__all__ = [
    "SPEND_LIMIT_RULE",
    "STRICTNESS",
    "ApprovalCase",
    "Coverage",
    "approval_cases",
    "breakpoints",
    "coverage",
    "refusal",
    "verdict_at",
]

Coverage = Literal["full", "partial", "none"]
"""Whether a grant covers every target a declared effect can stand for, some, or none."""
STRICTNESS: Final[dict[Verdict, int]] = {"allow": 0, "ask": 1, "deny": 2}
SPEND_LIMIT_RULE: Final = "spend_limit"


class ApprovalCase(BaseModel):
    """The verdict for calls from one amount up (the next case's amount ends it)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    from_amount: int = Field(
        ge=0, description="Spends from this amount up, in minor units (0: every call)."
    )
    currency: str | None = Field(description="Currency of the amount, when the tool spends.")
    verdict: Verdict = Field(description="allow, ask (approval needed) or deny.")
    rule: str = Field(
        description="The rule that decides: an approval rule id, 'default' or 'spend_limit'."
    )


def coverage(grant: Grant, effect: Effect) -> Coverage:
    """How much of the declared ``effect`` (a pattern, or resolved) ``grant`` covers: a
    fixed target or amount is ``full`` or ``none``; only a pattern can be ``partial``."""
    if effect.kind == "spend":
        limit = grant.spend_limits.get(effect.target)
        if limit is None:
            return "none"
        if isinstance(effect.amount, int):
            return "full" if effect.amount <= limit else "none"
        return "partial"  # amounts up to the limit
    if grant.covers(effect):
        return "full"
    if not effect.placeholders and "*" not in effect.target:
        return "none"  # one fixed target, judged exactly by Grant.covers
    declared = _literal_prefix(effect.pattern)
    for allowed in grant.effects:
        granted = _literal_prefix(allowed.target)
        if allowed.kind == effect.kind and (
            granted.startswith(declared) or declared.startswith(granted)
        ):
            return "partial"  # the two patterns may share targets: some calls may pass
    return "none"


def approval_cases(
    tool: str,
    effects: Sequence[Effect],
    *,
    reversible: bool,
    approvals: ApprovalPolicy,
    grant: Grant,
) -> tuple[ApprovalCase, ...]:
    """The verdicts on calls of ``tool`` by amount, merged where consecutive ones agree."""
    variable = [e for e in effects if e.kind == "spend" and isinstance(e.amount, str)]
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
        decision = approvals.decide(tool, _at_amount(effects, amount), reversible=reversible)
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


def refusal(
    scope: str, effects: Sequence[Effect], cases: Sequence[ApprovalCase], grant: Grant
) -> str | None:
    """Why no call of a tool with ``scope`` and declared ``effects`` can pass ``grant`` and
    the approval ``cases``; ``None`` when some call may."""
    if not grant.allows_scope(scope):
        return f"the grant lacks scope {scope!r}"
    for effect in effects:
        if coverage(grant, effect) == "none":
            return f"the grant covers no target of {effect}"
    if cases and all(case.verdict == "deny" for case in cases):
        rules = ", ".join(dict.fromkeys(case.rule for case in cases))
        return f"approval rule(s) {rules} deny every call"
    return None


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


def _at_amount(effects: Sequence[Effect], amount: int) -> tuple[Effect, ...]:
    return tuple(
        spend(amount, currency=e.target) if e.kind == "spend" and isinstance(e.amount, str) else e
        for e in effects
    )


def _literal_prefix(pattern: str) -> str:
    return pattern.split("*", 1)[0]
