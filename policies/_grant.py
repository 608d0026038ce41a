"""A run's authority, cap(u): the scopes, effect patterns and limits it may use.

Admission requires req(tool, args) ⊆ cap(u): the tool's scope is in :attr:`Grant.scopes`,
every resolved effect of the call matches one of :attr:`Grant.effects` of the same kind
(pattern language in :mod:`airlock.policies._patterns`; a ``network`` target is matched part
by part, :mod:`airlock.policies._network`), and the call's spends, added up per currency,
stay within :attr:`Grant.spend_limits` for that currency (a limit per call, so two spends of
9,999 USD exceed a limit of 10,000). Nothing is implied: ``write`` does not imply ``read``,
and a grant without a currency in ``spend_limits`` allows no spending in it.

:attr:`Grant.propose` names the write tools a run's programs may *propose* from code (tool
name patterns); a proposal is then admitted like a direct call of the tool, so the grant's
effects and limits judge its prepared effect as well.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from airlock.policies._effects import Effect, spend
from airlock.policies._network import target_covers
from airlock.policies._patterns import glob_regex

__all__ = ["Grant"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Grant:
    """What a run may do. Build one per run from a policy (:meth:`Policy.grant_for`)."""

    scopes: frozenset[str] = frozenset()
    """Scopes the run may use; a tool whose scope is missing is ``denied``."""
    effects: tuple[Effect, ...] = ()
    """Effect patterns the run may exercise, e.g. ``read("billing:invoice/*")``."""
    spend_limits: Mapping[str, int] = field(default_factory=dict)
    """Largest amount, in minor units, one call may spend per currency (``{"USD": 5000}``):
    the total of its spends in that currency."""
    propose: frozenset[str] = frozenset()
    """Tool-name patterns (``billing_refund_*``) of write tools the run's programs may
    propose from code; empty: none. The tool must be proposable by its contract too."""

    def __post_init__(self) -> None:
        # A string is a collection of characters: frozenset("billing_refund_*") would be
        # {"b", ..., "*"}, and the pattern "*" lets programs propose every tool.
        for name in ("scopes", "propose"):
            value = getattr(self, name)
            if isinstance(value, str):
                raise ValueError(
                    f"grant {name} is one string {value!r}, not a collection of names: "
                    f"write {name}=frozenset({{{value!r}}})"
                )
        if isinstance(self.effects, str | Effect):
            raise ValueError(
                f"grant effects is one {type(self.effects).__name__} {str(self.effects)!r}, "
                "not a collection of effects: write effects=(read('billing:invoice/*'), ...)"
            )
        object.__setattr__(self, "scopes", frozenset(self.scopes))
        object.__setattr__(self, "propose", frozenset(self.propose))
        object.__setattr__(self, "effects", tuple(self.effects))
        for effect in self.effects:
            if effect.kind == "spend":
                raise ValueError(
                    f"grant effect {effect} is a spend; set spend_limits={{currency: amount}}"
                )
            if effect.placeholders:
                raise ValueError(
                    f"grant effect {effect} has placeholders; grants hold patterns such as "
                    f"{effect.kind}({effect.pattern})"
                )
        limits = dict(self.spend_limits)
        for currency, limit in limits.items():
            if type(limit) is not int or limit < 0:
                raise ValueError(f"spend limit for {currency!r} must be a non-negative integer")
        object.__setattr__(self, "spend_limits", MappingProxyType(limits))

    def allows_scope(self, scope: str) -> bool:
        """Whether the run may use tools that require ``scope``."""
        return scope in self.scopes

    def allows_proposal(self, tool: str) -> bool:
        """Whether the run's programs may propose the write tool ``tool`` from code."""
        return any(glob_regex(pattern).fullmatch(tool) for pattern in self.propose)

    def covers(self, effect: Effect) -> bool:
        """Whether ``effect`` (resolved, or a declared pattern) lies inside this grant; a
        spend on its own (:meth:`uncovered` adds up a call's spends)."""
        if effect.kind == "spend":
            limit = self.spend_limits.get(effect.target)
            return limit is not None and isinstance(effect.amount, int) and effect.amount <= limit
        target = effect.pattern if effect.placeholders else effect.target
        return any(
            allowed.kind == effect.kind and target_covers(effect.kind, allowed.target, target)
            for allowed in self.effects
        )

    def uncovered(self, effects: Iterable[Effect]) -> Effect | None:
        """The first effect of one call outside this grant, or ``None`` when all are inside.

        Spends are added up per currency, in order: the first one that takes the call's
        total over the limit is outside, answered as one spend of that total
        (``spend(19998 USD)``) when earlier spends count towards it.
        """
        spent: dict[str, int] = {}
        for effect in effects:
            if not self.covers(effect):  # a spend: over the limit alone, or no amount known
                return effect
            if effect.kind == "spend":
                assert isinstance(effect.amount, int)  # (covers() holds only for one)
                total = spent.get(effect.target, 0) + effect.amount
                if total > self.spend_limits[effect.target]:
                    return spend(total, currency=effect.target)
                spent[effect.target] = total
        return None

    def union(self, other: Grant) -> Grant:
        """A grant allowing what either allows (the larger limit per currency)."""
        limits = dict(self.spend_limits)
        for currency, limit in other.spend_limits.items():
            limits[currency] = max(limit, limits.get(currency, 0))
        effects = self.effects + tuple(e for e in other.effects if e not in self.effects)
        return Grant(
            scopes=self.scopes | other.scopes,
            effects=effects,
            spend_limits=limits,
            propose=self.propose | other.propose,
        )

    def restrict_scopes(self, scopes: Iterable[str]) -> Grant:
        """This grant with its scopes cut down to those in ``scopes``."""
        return Grant(
            scopes=self.scopes & frozenset(scopes),
            effects=self.effects,
            spend_limits=self.spend_limits,
            propose=self.propose,
        )
