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
- :func:`approval_cases`: the approval verdict as a step function of the amount spent, at
  every amount where it can change (0, each rule threshold, one past the grant's limit),
  and, when rules name ``targets``, once per *target class*: calls whose effects reach
  what a target rule names (``network(https://docs.example.com/**)``), and every other call
  (``targets`` empty). Each point is decided by the same :meth:`ApprovalPolicy.decide`
  admission uses, with the class's pattern standing for the call's target. A spend in a
  currency the call names is judged in each currency the grant limits, and at each amount
  the least strict of their verdicts is the tool's (some call may pass there).
- :func:`refusal`: why no call can pass, or ``None`` when some may.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from airlock.policies._approval import ApprovalPolicy, Verdict
from airlock.policies._effects import Effect, spend
from airlock.policies._grant import Grant
from airlock.policies._network import DEFAULT_PORTS, NetworkTarget, split_network, target_covers

__all__ = [
    "SPEND_LIMIT_RULE",
    "STRICTNESS",
    "ApprovalCase",
    "Coverage",
    "approval_cases",
    "breakpoints",
    "coverage",
    "may_overlap",
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
    if not effect.placeholders and "*" not in effect.target:
        return "none"  # one fixed target, judged exactly by Grant.covers
    declared = _literal_prefix(effect.pattern)
    for allowed in grant.effects:
        if allowed.kind != effect.kind:
            continue
        if effect.kind == "network":
            shared = _network_may_overlap(effect.pattern, allowed.target)
        else:
            granted = _literal_prefix(allowed.target)
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
            case = min((_case_at(c, amount, labels) for c in each), key=_strictness)
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
    # The grant refuses a spend over its limit before any approval rule is asked.
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
    return effect.kind == "spend" and effect.target.startswith("{")


def _strictness(case: ApprovalCase) -> int:
    return STRICTNESS[case.verdict]


def _case_at(cases: Sequence[ApprovalCase], amount: int, targets: tuple[str, ...]) -> ApprovalCase:
    """The case of ``cases`` that decides a call spending ``amount`` in the target class
    ``targets``, as :func:`verdict_at` finds it."""
    chosen = [c for c in cases if c.targets == targets] or [c for c in cases if not c.targets]
    return max((c for c in chosen if c.from_amount <= amount), key=lambda c: c.from_amount)


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
        variable = bool(effect.placeholders) or "*" in effect.target
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


def may_overlap(kind: str, one: str, two: str) -> bool:
    """Whether two target patterns of an effect of ``kind`` may stand for a common target:
    part by part for ``network``, as one glob otherwise. Conservative: it may say yes to a
    pair with nothing in common, never no to a pair that shares a target."""
    if kind == "network":
        return _network_may_overlap(one, two)
    return _may_overlap(one, two)


def _network_may_overlap(one: str, two: str) -> bool:
    """Whether two network patterns may stand for a common target, part by part as
    :func:`network_covers` judges them: a part either leaves out allows every value of it
    (a port left out next to a known scheme is that scheme's default)."""
    mine, theirs = split_network(one), split_network(two)
    ports = _port(mine), _port(theirs)
    return (
        _parts_may_overlap(mine.scheme, theirs.scheme)
        and _may_overlap(mine.host, theirs.host)
        and _parts_may_overlap(*ports)
        and _parts_may_overlap(mine.path, theirs.path)
    )


def _port(target: NetworkTarget) -> str | None:
    if target.port is None and target.scheme is not None:
        return DEFAULT_PORTS.get(target.scheme)
    return target.port


def _parts_may_overlap(one: str | None, two: str | None) -> bool:
    return one is None or two is None or _may_overlap(one, two)


def _may_overlap(one: str, two: str) -> bool:
    """Whether two patterns may stand for a common text: their literal beginnings and
    endings agree (a conservative test: it may say yes to a pair with nothing in common)."""
    head_one, head_two = _literal_prefix(one), _literal_prefix(two)
    tail_one, tail_two = one.rsplit("*", 1)[-1], two.rsplit("*", 1)[-1]
    heads = head_one.startswith(head_two) or head_two.startswith(head_one)
    tails = tail_one.endswith(tail_two) or tail_two.endswith(tail_one)
    return heads and tails


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


def verdict_at(
    cases: Sequence[ApprovalCase], amount: int, targets: tuple[str, ...] = ()
) -> Verdict:
    """The verdict the step function ``cases`` gives a call spending ``amount`` that reaches
    the target class ``targets`` (every other call when ``cases`` has no such class)."""
    chosen = [c for c in cases if c.targets == targets] or [c for c in cases if not c.targets]
    verdict: Verdict = "ask"
    for case in sorted(chosen, key=lambda c: c.from_amount):
        if case.from_amount <= amount:
            verdict = case.verdict
    return verdict


def breakpoints(*case_lists: Sequence[ApprovalCase]) -> list[int]:
    """Every amount where one of the step functions may change, sorted."""
    return sorted({0} | {c.from_amount for cases in case_lists for c in cases})


def target_classes(*case_lists: Sequence[ApprovalCase]) -> list[tuple[str, ...]]:
    """Every target class the step functions tell apart, the class of every other call
    (``()``) first."""
    found = {c.targets for cases in case_lists for c in cases} | {()}
    return sorted(found, key=lambda key: (bool(key), key))


def _at_amount(effects: Sequence[Effect], amount: int) -> tuple[Effect, ...]:
    return tuple(
        spend(amount, currency=e.target) if e.kind == "spend" and isinstance(e.amount, str) else e
        for e in effects
    )


def _literal_prefix(pattern: str) -> str:
    return pattern.split("*", 1)[0]
