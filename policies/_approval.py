"""Approval rules as data: whether a call may go ahead, must be asked about, or is refused.

A rule matches a call by tool name (globs of :mod:`airlock.policies._patterns`), effect kind, amount
threshold and reversibility; every condition a rule sets must hold. Among the rules that
match, the strictest verdict wins (``deny`` > ``ask`` > ``allow``), and among equally strict
ones the first listed, so the order of rules never loosens a policy. When no rule matches, a
call with only ``read``/``network`` effects is allowed and any other is asked about.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from airlock.policies._effects import SIDE_EFFECT_KINDS, Effect, EffectKind
from airlock.policies._patterns import glob_regex

__all__ = ["ApprovalPolicy", "ApprovalRule", "Decision", "Verdict"]

Verdict = Literal["allow", "ask", "deny"]
_STRICTNESS: Final[dict[Verdict, int]] = {"allow": 0, "ask": 1, "deny": 2}

_RuleId = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9_.-]{0,63}$")]
_ToolGlob = Annotated[str, StringConstraints(pattern=r"^[a-z0-9_*]{1,64}$")]
_Currency = Annotated[str, StringConstraints(pattern=r"^[A-Z]{3}$")]


class ApprovalRule(BaseModel):
    """One rule: when its conditions hold, its ``action`` applies."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: _RuleId = Field(description="Name recorded with every decision the rule makes.")
    action: Verdict = Field(description="allow, ask (a person approves) or deny.")
    tools: tuple[_ToolGlob, ...] = Field(
        default=("*",), min_length=1, description="Tool names or globs the rule applies to."
    )
    effect: EffectKind | None = Field(
        default=None, description="Applies only to calls with an effect of this kind."
    )
    min_amount: int | None = Field(
        default=None, ge=0, description="Applies when one spend is at least this (minor units)."
    )
    currency: _Currency | None = Field(
        default=None, description="Restricts min_amount to spends in this currency."
    )
    reversible: bool | None = Field(
        default=None, description="Applies to tools whose effects can (true) or cannot be undone."
    )

    def matches(self, tool: str, effects: Sequence[Effect], *, reversible: bool) -> bool:
        """Whether every condition of this rule holds for the call."""
        if not any(glob_regex(t).fullmatch(tool) for t in self.tools):
            return False
        if self.effect is not None and not any(e.kind == self.effect for e in effects):
            return False
        if self.reversible is not None and self.reversible != reversible:
            return False
        if self.min_amount is not None:
            threshold = self.min_amount
            return any(
                e.kind == "spend"
                and (self.currency is None or e.target == self.currency)
                and isinstance(e.amount, int)
                and e.amount >= threshold
                for e in effects
            )
        return True


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


@dataclass(frozen=True, slots=True)
class ApprovalPolicy:
    """An ordered list of rules; :meth:`decide` applies them to one call."""

    rules: tuple[ApprovalRule, ...] = ()

    def decide(self, tool: str, effects: Sequence[Effect], *, reversible: bool) -> Decision:
        """The strictest verdict among matching rules, or the default.

        ``effects`` are the call's resolved effects (amounts known), ``reversible`` whether the
        tool's effects can be undone.
        """
        best: ApprovalRule | None = None
        for rule in self.rules:
            if rule.matches(tool, effects, reversible=reversible) and (
                best is None or _STRICTNESS[rule.action] > _STRICTNESS[best.action]
            ):
                best = rule
        if best is not None:
            return Decision(best.action, best, f"rule {best.id!r} ({best.action})")
        if any(e.kind in SIDE_EFFECT_KINDS for e in effects):
            return Decision("ask", None, "no rule matched a call with side effects")
        return Decision("allow", None, "no rule matched a read-only call")
