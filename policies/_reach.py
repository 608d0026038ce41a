"""Whether a grant and approval rules let *some* call of a tool through, judged once.

A session offers a model only tools that may work, and the effect inventory lists what each
subject can reach; both ask the same questions of a tool's scope and declared effects, so
they are answered here, once:

- :func:`coverage`: how much of a declared effect a grant covers (``full``, ``partial``,
  ``none``). A pattern such as ``read(billing:invoice/{invoice_id})`` is ``partial`` against
  ``read(billing:invoice/inv_1)``: some calls may pass and admission judges each one. A
  spend with an amount from the input is ``partial`` up to the grant's limit in its currency;
  a fixed amount is ``full`` within the limit and ``none`` over it. A spend in a currency
  the call names (``currency="{currency}"``) is at most ``partial``: only the currencies the
  grant limits can pass, and ``none`` when it limits none. Network patterns are
  compared part by part, as admission matches them: ``https://{region}.api.example.com/v1``
  is ``partial`` against ``eu.api.example.com`` (any scheme, port and path on that host).
- :func:`approval_cases`: the approval verdict as a step function of the amount a call
  spends in all (in a currency, its spends there added up, as the grant's limit and the
  rules' ``min_amount`` add them), at every amount where it can change (0, each rule
  threshold, one past the grant's limit), and, when rules name ``targets``, once per
  *target class*: calls whose effects reach what a target rule names
  (``network(https://docs.example.com/**)``), and every other call (``targets`` empty).
  Each point is decided by the same :meth:`ApprovalPolicy.decide` admission uses, with the
  class's pattern standing for the call's target. A spend in a currency the call names is
  judged in each currency the grant limits, and at each amount the least strict of their
  verdicts is the tool's (some call may pass there).
- :func:`refusal`: why no call can pass, or ``None`` when some may: its fixed spends are
  added up per currency first (two of 9,999 USD pass no limit of 10,000).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from airlock.policies._approval import ApprovalPolicy, Verdict
from airlock.policies._effects import Effect, spend
from airlock.policies._grant import Grant
from airlock.policies._network import may_overlap, target_covers
from airlock.policies._patterns import has_wildcard, literal_prefix
from airlock.policies._spend import currency_from_field

__all__ = [
    "SPEND_LIMIT_RULE",
    "STRICTNESS",
    "ApprovalCase",
    "Coverage",
    "approval_cases",
    "breakpoints",
    "coverage",
    "refusal",
    "target_classes",
    "verdict_at",
]

Coverage = Literal["full", "partial", "none"]
"""Whether a grant covers every target a declared effect can stand for, some, or none."""
STRICTNESS: Final[dict[Verdict, int]] = {"allow": 0, "ask": 1, "deny": 2}
SPEND_LIMIT_RULE: Final = "spend_limit"
_MAX_CLASSES: Final = 32
"""Most combinations of target classes judged for one tool; past it, one effect at a time."""


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
    targets: tuple[str, ...] = Field(
        default=(),
        exclude_if=lambda value: not value,
        description=(
            "For calls that reach these targets, as kind(pattern) from the rules' targets; "
            "empty: every other call."
        ),
    )


def coverage(grant: Grant, effect: Effect) -> Coverage:
    """How much of the declared ``effect`` (a pattern, or resolved) ``grant`` covers: a
    fixed target or amount is ``full`` or ``none``; only a pattern can be ``partial``."""
    if effect.kind == "spend":
        if _named_currency(effect):
            fixed = effect.amount if isinstance(effect.amount, int) else 0
            fits = any(fixed <= limit for limit in grant.spend_limits.values())
            return "partial" if fits else "none"
        limit = grant.spend_limits.get(effect.target)
        if limit is None:
            return "none"
        if isinstance(effect.amount, int):
            return "full" if effect.amount <= limit else "none"
        return "partial"  # amounts up to the limit
    if grant.covers(effect):
        return "full"
    if not effect.placeholders and not has_wildcard(effect.target):
        return "none"  # one fixed target, judged exactly by Grant.covers
    declared = literal_prefix(effect.pattern)
    for allowed in grant.effects:
        if allowed.kind != effect.kind:
            continue
        if effect.kind == "network":
            shared = may_overlap("network", effect.pattern, allowed.target)
        else:
            granted = literal_prefix(allowed.target)
            shared = granted.startswith(declared) or declared.startswith(granted)
        if shared:
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
    """The verdicts on calls of ``tool`` by target class and amount, merged where
    consecutive ones agree; a class that decides exactly as every other call is left out."""
    codes = sorted(grant.spend_limits) if any(map(_named_currency, effects)) else []
    if not codes:  # fixed currencies; or none a grant limits (coverage is "none" then)
        return _approval_cases(tool, effects, reversible, approvals, grant)
    each = [
        _approval_cases(
            tool,
            [Effect("spend", code, e.amount) if _named_currency(e) else e for e in effects],
            reversible,
            approvals,
            grant,
        )
        for code in codes
    ]
    if len(each) == 1:
        return each[0]
    found: dict[tuple[str, ...], tuple[ApprovalCase, ...]] = {}
    for labels in target_classes(*each):
        merged: list[ApprovalCase] = []
        for amount in breakpoints(*each):
            # Where one currency lets a call through, some call of the tool may pass.
            at = [_case_at(c, amount, labels) for c in each]
            case = min((c for c in at if c is not None), key=_strictness)
            if not merged or (merged[-1].verdict, merged[-1].rule) != (case.verdict, case.rule):
                update = {"from_amount": amount, "currency": None, "targets": labels}
                merged.append(case.model_copy(update=update))
        found[labels] = tuple(merged)
    return _ordered(found)


def _approval_cases(
    tool: str,
    effects: Sequence[Effect],
    reversible: bool,
    approvals: ApprovalPolicy,
    grant: Grant,
) -> tuple[ApprovalCase, ...]:
    """:func:`approval_cases` of effects whose spends are in fixed currencies (a currency
    the call names is read as one more, which no rule's ``currency`` names)."""
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
    # The grant refuses a call whose spends in a currency add up to more than its limit,
    # before any approval rule is asked; an amount is such a total (see _at_amount).
    limits = [grant.spend_limits[c] for c in currencies if c in grant.spend_limits]
    ceiling = min(limits) + 1 if limits and len(limits) == len(currencies) else None
    found: dict[tuple[str, ...], tuple[ApprovalCase, ...]] = {}
    for labels, standing in _target_classes(effects, approvals):
        cases: list[ApprovalCase] = []
        for amount in sorted(points):
            if ceiling is not None and amount >= ceiling:
                break
            decision = approvals.decide(tool, _at_amount(standing, amount), reversible=reversible)
            cases.append(
                ApprovalCase(
                    from_amount=amount,
                    currency=currency,
                    verdict=decision.verdict,
                    rule=decision.rule_id,
                    targets=labels,
                )
            )
        if ceiling is not None:
            cases.append(
                ApprovalCase(
                    from_amount=ceiling,
                    currency=currency,
                    verdict="deny",
                    rule=SPEND_LIMIT_RULE,
                    targets=labels,
                )
            )
        merged: list[ApprovalCase] = []
        for case in cases:
            if merged and (merged[-1].verdict, merged[-1].rule) == (case.verdict, case.rule):
                continue
            merged.append(case)
        found.setdefault(labels, tuple(merged))
    return _ordered(found)


def _ordered(found: dict[tuple[str, ...], tuple[ApprovalCase, ...]]) -> tuple[ApprovalCase, ...]:
    """The cases of every target class, every other call's first; a class that decides
    exactly as every other call is left out."""
    other = found.get((), ())
    out: list[ApprovalCase] = []
    for labels in sorted(found, key=lambda key: (not key, key)):
        if labels and _same_steps(found[labels], other):
            continue
        out.extend(found[labels])
    return tuple(out)


def _named_currency(effect: Effect) -> bool:
    """Whether ``effect`` spends in the currency a field of the call names."""
    return effect.kind == "spend" and currency_from_field(effect.target)


def _strictness(case: ApprovalCase) -> int:
    return STRICTNESS[case.verdict]


def _case_at(
    cases: Sequence[ApprovalCase], amount: int, targets: tuple[str, ...]
) -> ApprovalCase | None:
    """The case of ``cases`` that decides a call spending ``amount`` in the target class
    ``targets`` (the class of every other call when ``cases`` has no such class); ``None``
    when no case starts at or below ``amount``."""
    chosen = [c for c in cases if c.targets == targets] or [c for c in cases if not c.targets]
    return max(
        (c for c in chosen if c.from_amount <= amount), key=lambda c: c.from_amount, default=None
    )


def _same_steps(one: Sequence[ApprovalCase], other: Sequence[ApprovalCase]) -> bool:
    return [(c.from_amount, c.verdict, c.rule) for c in one] == [
        (c.from_amount, c.verdict, c.rule) for c in other
    ]


def _target_classes(
    effects: Sequence[Effect], approvals: ApprovalPolicy
) -> list[tuple[tuple[str, ...], tuple[Effect, ...]]]:
    """Which targets the rules tell apart, per effect: each class as its labels and the
    effects that stand for its calls (the rule's pattern in place of the declared one)."""
    named = [r for r in approvals.rules if r.targets is not None]
    if not named:
        return [((), tuple(effects))]
    options: list[list[tuple[str | None, Effect]]] = []
    for effect in effects:
        choices: list[tuple[str | None, Effect]] = [(None, effect)]
        variable = bool(effect.placeholders) or has_wildcard(effect.target)
        if effect.kind != "spend" and variable:
            seen: set[str] = set()
            for rule in named:
                for pattern in rule.targets or ():
                    label = f"{effect.kind}({pattern})"
                    if rule.effect != effect.kind or label in seen:
                        continue
                    standing = _standing(effect, pattern)
                    if standing is not None:
                        seen.add(label)
                        choices.append((label, standing))
        options.append(choices)
    total = 1
    for choices in options:
        total *= len(choices)
    if total <= _MAX_CLASSES:
        combos = list(itertools.product(*options))
    else:  # too many to judge together: vary one effect, the others at "any other"
        base = [choices[0] for choices in options]
        combos = [tuple(base)]
        for i, choices in enumerate(options):
            combos += [(*base[:i], choice, *base[i + 1 :]) for choice in choices[1:]]
    return [
        (tuple(sorted(label for label, _ in combo if label)), tuple(e for _, e in combo))
        for combo in combos
    ]


def _standing(effect: Effect, pattern: str) -> Effect | None:
    """An effect standing for the calls of ``effect`` that reach ``pattern``: the narrower
    of the two patterns, or ``pattern`` when they may share targets; ``None`` when they
    cannot."""
    declared = effect.pattern
    if target_covers(effect.kind, declared, pattern):
        return Effect(effect.kind, pattern)
    if target_covers(effect.kind, pattern, declared):
        return Effect(effect.kind, declared)
    return Effect(effect.kind, pattern) if may_overlap(effect.kind, declared, pattern) else None


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
    # A limit is per call: two fixed spends may each fit it and their total not.
    for code, total in _fixed_totals(effects).items():
        together = spend(total, currency=code)
        if coverage(grant, together) == "none":
            return f"the grant covers no target of {together} (the call's spends in {code})"
    if cases and all(case.verdict == "deny" for case in cases):
        rules = ", ".join(dict.fromkeys(case.rule for case in cases))
        return f"approval rule(s) {rules} deny every call"
    return None


def verdict_at(
    cases: Sequence[ApprovalCase], amount: int, targets: tuple[str, ...] = ()
) -> Verdict:
    """The verdict the step function ``cases`` gives a call spending ``amount`` that reaches
    the target class ``targets`` (every other call when ``cases`` has no such class)."""
    case = _case_at(cases, amount, targets)
    return "ask" if case is None else case.verdict


def breakpoints(*case_lists: Sequence[ApprovalCase]) -> list[int]:
    """Every amount where one of the step functions may change, sorted."""
    return sorted({0} | {c.from_amount for cases in case_lists for c in cases})


def target_classes(*case_lists: Sequence[ApprovalCase]) -> list[tuple[str, ...]]:
    """Every target class the step functions tell apart, the class of every other call
    (``()``) first."""
    found = {c.targets for cases in case_lists for c in cases} | {()}
    return sorted(found, key=lambda key: (bool(key), key))


def _at_amount(effects: Sequence[Effect], amount: int) -> tuple[Effect, ...]:
    """``effects`` as a call that spends ``amount`` in all in each currency it has a
    variable spend in, as admission adds a call's spends up: the first variable spend in a
    currency takes what its fixed spends leave of ``amount`` (0 when they reach it), the
    others nothing."""
    left = {code: amount - total for code, total in _fixed_totals(effects).items()}
    out: list[Effect] = []
    for effect in effects:
        if effect.kind == "spend" and isinstance(effect.amount, str):
            share = max(left.get(effect.target, amount), 0)
            left[effect.target] = 0
            effect = spend(share, currency=effect.target)
        out.append(effect)
    return tuple(out)


def _fixed_totals(effects: Sequence[Effect]) -> dict[str, int]:
    """The fixed amounts of ``effects``' spends added up per currency (or ``"{field}"``)."""
    totals: dict[str, int] = {}
    for effect in effects:
        if effect.kind == "spend" and isinstance(effect.amount, int):
            totals[effect.target] = totals.get(effect.target, 0) + effect.amount
    return totals
