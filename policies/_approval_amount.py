"""An approval rule's currency and amount conditions, over the spends of one call."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from airlock.policies._effects import Effect

__all__ = ["spends_enough"]


def spends_enough(
    effects: Sequence[Effect],
    *,
    currency: str | None,
    min_amount: int | None,
    codes: Collection[str] | None,
) -> bool:
    """Whether ``effects`` spend in ``currency`` (in any currency when ``None``) and, with
    ``min_amount``, at least that much in one currency, all of the call's spends in it added
    up (a limit "per call" that two spends could each stay under is no limit). With
    ``codes`` (a rule on spends with targets), only the spends in those currencies count."""
    spent = False
    totals: dict[str, int] = {}
    for effect in effects:
        if effect.kind != "spend" or currency not in (None, effect.target):
            continue
        if codes is not None and effect.target not in codes:
            continue
        spent = True
        if isinstance(effect.amount, int):  # (a declared "{field}" amount is unknown)
            totals[effect.target] = totals.get(effect.target, 0) + effect.amount
    if min_amount is None:
        return spent
    return any(total >= min_amount for total in totals.values())
