"""Approval rules as data: whether a call may go ahead, must be asked about, or is refused.

A rule matches a call by tool name (globs of :mod:`airlock.policies._patterns`), effect kind,
currency and amount spent, reversibility and, with ``targets``, what the call reaches: the
targets of its effects of the rule's kind (``network`` targets part by part, see
:mod:`airlock.policies._network`). Every condition a rule sets must hold. Amounts are per
call: ``min_amount`` compares the total of the call's spends in one currency (two spends of
9,999 USD reach a threshold of 10,000; a rule on spends with ``targets`` adds up only those
currencies), and ``currency`` alone holds when the call spends in that currency.

Precedence, in this order (the reason is recorded with every decision):

1. **A matching ``deny`` decides**, whatever else matches: nothing carves a call out of a
   ``deny``. A ``deny`` with ``targets`` names every effect that *may* reach one of them: an
   effect whose target is itself a pattern (a listing's ``read(billing:invoice/*)``, a
   crawler's ``network(https://*.example.com/**)``, a host value that allows every path)
   is denied when it may overlap a denied pattern, not only when it lies wholly inside it.
   (``allow`` and ``ask`` name only the effects wholly inside their targets.)
2. **A rule with ``targets`` decides the effects it names.** Each effect one or more target
   rules name gets the verdict of the rule whose pattern is the narrowest (a pattern strictly
   inside another's, ``a.cdn.example.net`` inside ``*.cdn.example.net``), the strictest of
   them when several are as narrow. This is how a narrower ``allow`` carves out of a broader
   ``ask``: "allow fetches from these hosts" decides the fetches of those hosts, and "ask for
   any other host" (a rule without targets, or with wider ones) the rest.
3. **Rules without ``targets`` judge the rest of the call**: the effects no target rule named.
   Their ``effect``, ``currency`` and ``min_amount`` conditions look at those effects only.
   A rule with an ``effect`` decides the effects of that kind only ("reads are fine" does not
   wave through the write of a call that also reads); one without applies to all of them
   while any is left, or when the call has no effects.
4. **Default**: an effect of kind ``write``, ``spend`` or ``disclose`` that no rule decided
   is asked about, and ``read``/``network`` ones are allowed.

The call's verdict is the strictest of 2-4 (``deny`` > ``ask`` > ``allow``); among equally
strict ones the first rule listed, so the order of rules never loosens a policy. A call of
three e-mails, two to ``*@acme.com`` (allowed by a target rule) and one elsewhere (left to an
``ask``), is asked about.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated, Final, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StringConstraints,
    ValidationInfo,
    field_validator,
    model_validator,
)

from airlock.policies._approval_amount import spends_enough
from airlock.policies._effects import SIDE_EFFECT_KINDS, Effect, EffectKind
from airlock.policies._mail import may_reach_mailbox
from airlock.policies._network import may_overlap, rule_target, split_network, target_covers
from airlock.policies._patterns import glob_regex, has_wildcard
from airlock.policies._spend import CURRENCY

__all__ = ["ApprovalPolicy", "ApprovalRule", "Decision", "Verdict"]

Verdict = Literal["allow", "ask", "deny"]
_STRICTNESS: Final[dict[Verdict, int]] = {"allow": 0, "ask": 1, "deny": 2}

_RuleId = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9_.-]{0,63}$")]
_ToolGlob = Annotated[str, StringConstraints(pattern=r"^[a-z0-9_*]{1,64}$")]
_Currency = Annotated[str, StringConstraints(pattern=f"^{CURRENCY.pattern}$")]
_Target = Annotated[str, StringConstraints(min_length=1, max_length=256)]


class ApprovalRule(BaseModel):
    """One rule: when its conditions hold, its ``action`` applies."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: _RuleId = Field(description="Name recorded with every decision the rule makes.")
    action: Verdict = Field(description="allow, ask (a person approves) or deny.")
    tools: tuple[_ToolGlob, ...] = Field(
        default=("*",), min_length=1, description="Tool names or globs the rule applies to."
    )
    effect: EffectKind | None = Field(
        default=None,
        description=(
            "Decides the call's effects of this kind only: its other effects need a rule of "
            "their own, or get the default (a side effect is asked about)."
        ),
    )
    targets: tuple[_Target, ...] | None = Field(
        default=None,
        min_length=1,
        description=(
            "Target patterns of `effect` (needs `effect`): the rule decides each effect of "
            "that kind whose target matches one, e.g. 'https://docs.example.com/**' for "
            "network, 'email:*@acme.com' for disclose. It outranks rules without targets."
        ),
    )
    min_amount: StrictInt | None = Field(
        default=None,
        ge=0,
        description=(
            "Applies when the call spends at least this in one currency, its spends in that "
            "currency added up (minor units)."
        ),
    )
    currency: _Currency | None = Field(
        default=None,
        description=(
            "Applies to calls that spend in this currency (with min_amount: at least that "
            "much in it)."
        ),
    )
    reversible: StrictBool | None = Field(
        default=None, description="Applies to tools whose effects can (true) or cannot be undone."
    )

    @field_validator("tools", "targets", mode="before")
    @classmethod
    def _refuse_one_string(cls, value: object) -> object:
        # Pydantic refuses a string for these tuples already ("Input should be a valid
        # tuple"); this only says what to write instead (tools = "billing_*" in a policy file).
        if isinstance(value, str):
            raise ValueError(f"give a list of names, not one string: [{value!r}]")
        return value

    @field_validator("targets")
    @classmethod
    def _read_targets(
        cls, value: tuple[str, ...] | None, info: ValidationInfo
    ) -> tuple[str, ...] | None:
        # Read once as the resolved targets they are compared with are: a deny on the host
        # 'metadata.google.internal.' or on 'bob@Competitor.COM' names what a call reaches.
        kind = info.data.get("effect")
        if value is None or kind is None:
            return value
        return tuple(rule_target(kind, target) for target in value)

    @model_validator(mode="after")
    def _check_targets(self) -> ApprovalRule:
        if self.targets is None:
            return self
        if self.effect is None:
            raise ValueError(
                "targets need an effect kind to match: add effect = 'network' (or the kind "
                "whose targets these are)"
            )
        for target in self.targets:
            try:
                pattern = Effect(self.effect, target) if self.effect != "spend" else None
            except ValueError as exc:
                raise ValueError(f"targets: {exc}") from None
            if pattern is not None and pattern.placeholders:
                raise ValueError(
                    f"targets: {target!r} has a placeholder; a rule holds patterns such as "
                    f"{pattern.pattern!r}"
                )
            if self.effect == "spend" and CURRENCY.fullmatch(target) is None:
                raise ValueError(
                    f"targets: a spend's target is its currency (three letters A-Z, as "
                    f"'USD'), not {target!r}"
                )
        return self

    def applies_to(self, tool: str, *, reversible: bool) -> bool:
        """Whether the rule's conditions on the tool itself hold."""
        if not any(glob_regex(t).fullmatch(tool) for t in self.tools):
            return False
        return self.reversible is None or self.reversible == reversible

    def names(self, effect: Effect) -> bool:
        """Whether ``effect`` is of this rule's kind and its target matches one of
        :attr:`targets` (a rule without targets names no effect)."""
        if self.targets is None or effect.kind != self.effect:
            return False
        target = effect.pattern if effect.placeholders else effect.target
        return any(target_covers(effect.kind, pattern, target) for pattern in self.targets)

    def may_name(self, effect: Effect) -> bool:
        """Whether ``effect`` is of this rule's kind and *may* reach a target of one of
        :attr:`targets`: it is named (:meth:`names`), or its target is itself a pattern that
        may overlap one of them. What a ``deny`` names (a rule without targets names none);
        an e-mail address also by the mailbox it may reach (``CEO+x@acme.com`` for a deny
        on ``ceo@acme.com``: :func:`~airlock.policies._mail.mailboxes`).

        A declared effect with placeholders stands for each call's one target, judged when
        it is resolved, so it is named only wholly inside, as by :meth:`names`.
        """
        if self.names(effect):
            return True
        if self.targets is None or effect.kind != self.effect or effect.placeholders:
            return False
        if effect.kind == "disclose" and may_reach_mailbox(effect.target, self.targets):
            return True
        if not _is_pattern(effect):
            return False  # one concrete target: judged exactly above
        return any(may_overlap(effect.kind, effect.target, p) for p in self.targets)

    def pattern_for(self, effect: Effect) -> str | None:
        """The narrowest of :attr:`targets` that names ``effect``, if one does."""
        if self.targets is None or effect.kind != self.effect:
            return None
        target = effect.pattern if effect.placeholders else effect.target
        found = [p for p in self.targets if target_covers(effect.kind, p, target)]
        for pattern in found:
            if all(target_covers(effect.kind, other, pattern) for other in found):
                return pattern
        return found[0] if found else None

    def matches(self, tool: str, effects: Sequence[Effect], *, reversible: bool) -> bool:
        """Whether every condition of this rule holds for a call with ``effects``."""
        if not self.applies_to(tool, reversible=reversible):
            return False
        named = self.may_name if self.action == "deny" else self.names
        if self.targets is not None and not any(named(e) for e in effects):
            return False
        return self._judges(effects, none_left=not effects)

    def _judges(self, effects: Sequence[Effect], *, none_left: bool) -> bool:
        """The rule's effect-kind, currency and amount conditions, over ``effects``."""
        if self.effect is not None and not any(e.kind == self.effect for e in effects):
            return False
        if self.min_amount is not None or self.currency is not None:
            codes = self.targets if self.effect == "spend" else None
            return spends_enough(
                effects, currency=self.currency, min_amount=self.min_amount, codes=codes
            )
        return self.effect is not None or bool(effects) or none_left


@dataclass(frozen=True, slots=True)
class Decision:
    """The verdict on one call, with the rule that produced it (``None``: the default)."""

    verdict: Verdict
    rule: ApprovalRule | None
    reason: str

    @property
    def rule_id(self) -> str:
        """The matching rule's id, or ``"default"``."""
        return "default" if self.rule is None else self.rule.id


_ASK_SIDE_EFFECTS: Final = Decision("ask", None, "no rule matched a call with side effects")
_ALLOW_READ_ONLY: Final = Decision("allow", None, "no rule matched a read-only call")
"""The two defaults (step 4), made once: a :class:`Decision` is frozen, so one can be shared."""


@dataclass(frozen=True, slots=True)
class ApprovalPolicy:
    """An ordered list of rules; :meth:`decide` applies them to one call."""

    rules: tuple[ApprovalRule, ...] = ()
    _targeted: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_targeted", any(r.targets is not None for r in self.rules))

    def decide(self, tool: str, effects: Sequence[Effect], *, reversible: bool) -> Decision:
        """The verdict on one call, by the precedence in this module's docstring.

        ``effects`` are the call's resolved effects (amounts known), ``reversible`` whether the
        tool's effects can be undone.
        """
        if self._targeted:
            return self._decide_by_targets(tool, effects, reversible=reversible)
        # On every call: without targets, every rule judges the whole call (steps 1, 3, 4).
        best: ApprovalRule | None = None
        decided: set[EffectKind | None] = set()
        for rule in self.rules:
            if rule.matches(tool, effects, reversible=reversible):
                decided.add(rule.effect)
                if best is None or _STRICTNESS[rule.action] > _STRICTNESS[best.action]:
                    best = rule
        default = _left_to_default(effects, decided, ruled=best is not None)
        if best is None:
            return default or _ALLOW_READ_ONLY
        if default is not None and best.action == "allow":
            return default
        return Decision(best.action, best, f"rule {best.id!r} ({best.action})")

    def _decide_by_targets(
        self, tool: str, effects: Sequence[Effect], *, reversible: bool
    ) -> Decision:
        """Steps 1-4 of the module docstring, when some rule names targets."""
        rules = [r for r in self.rules if r.applies_to(tool, reversible=reversible)]
        # 1. a deny decides, targets or not (with targets: any effect that may reach one)
        for rule in rules:
            if (
                rule.action == "deny"
                and (rule.targets is None or any(rule.may_name(e) for e in effects))
                and rule._judges(effects, none_left=not effects)
            ):
                return Decision("deny", rule, f"rule {rule.id!r} (deny)")
        # 2. target rules decide the effects they name (their amount condition holding)
        targeted = [
            r
            for r in rules
            if r.targets is not None and r.action != "deny" and r._judges(effects, none_left=True)
        ]
        found: tuple[ApprovalRule, str] | None = None
        rest: list[Effect] = []
        for effect in effects:
            naming = _most_specific(effect, [r for r in targeted if r.names(effect)])
            if not naming:
                rest.append(effect)
                continue
            strictest = max(naming, key=lambda r: (_STRICTNESS[r.action], -rules.index(r)))
            found = _stricter(found, strictest, f" for {effect}", rules)
        # 3. rules without targets judge the rest (a rule with an effect kind: that kind)
        decided: set[EffectKind | None] = set()
        if rest or not effects:
            for rule in rules:
                if rule.targets is None and rule._judges(rest, none_left=not effects):
                    decided.add(rule.effect)
                    about = next((f" for {e}" for e in rest if e.kind == rule.effect), "")
                    found = _stricter(found, rule, about, rules)
        # 4. the default for what no rule decided
        default = _left_to_default(rest, decided, ruled=found is not None)
        if found is None:
            return default or _ALLOW_READ_ONLY
        rule, about = found
        if default is not None and _STRICTNESS[default.verdict] > _STRICTNESS[rule.action]:
            return default
        return Decision(rule.action, rule, f"rule {rule.id!r} ({rule.action}){about}")


def _left_to_default(
    effects: Sequence[Effect], decided: set[EffectKind | None], *, ruled: bool
) -> Decision | None:
    """The default's ``ask`` when a side effect in ``effects`` is of no kind in ``decided``
    (the kinds of the rules that applied; ``None``: a rule on every kind); ``ruled``: some
    rule applied to the call, so the reason names the effect it left."""
    if None in decided:
        return None
    for effect in effects:  # (a loop and shared answers: this runs on every call)
        if effect.kind in SIDE_EFFECT_KINDS and effect.kind not in decided:
            if not ruled:
                return _ASK_SIDE_EFFECTS
            return Decision(
                "ask", None, f"no rule decided {effect}, a side effect: a person is asked"
            )
    return None


def _most_specific(effect: Effect, naming: list[ApprovalRule]) -> list[ApprovalRule]:
    """The rules among ``naming`` whose pattern for ``effect`` no other one's is strictly
    inside: "allow a.cdn.example.net" carves out of "ask *.cdn.example.net"."""
    if len(naming) < 2:
        return naming
    patterns = {id(rule): rule.pattern_for(effect) or "**" for rule in naming}

    def narrower(one: str, two: str) -> bool:
        return target_covers(effect.kind, two, one) and not target_covers(effect.kind, one, two)

    return [
        rule
        for rule in naming
        if not any(narrower(patterns[id(other)], patterns[id(rule)]) for other in naming)
    ]


def _stricter(
    best: tuple[ApprovalRule, str] | None,
    rule: ApprovalRule,
    about: str,
    order: list[ApprovalRule],
) -> tuple[ApprovalRule, str]:
    """The stricter of ``best`` and ``rule``; the earlier listed one on a tie."""
    if best is None:
        return rule, about
    held = best[0]
    if _STRICTNESS[rule.action] > _STRICTNESS[held.action] or (
        _STRICTNESS[rule.action] == _STRICTNESS[held.action]
        and order.index(rule) < order.index(held)
    ):
        return rule, about
    return best


def _is_pattern(effect: Effect) -> bool:
    """Whether a resolved effect's target stands for many targets: it holds a wildcard, or
    (``network``) leaves out its scheme or path, which then allows every value of it."""
    if has_wildcard(effect.target):
        return True
    if effect.kind != "network":
        return False
    parts = split_network(effect.target)
    return parts.scheme is None or parts.path is None
