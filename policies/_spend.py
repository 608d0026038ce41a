"""``spend`` effects: an amount of money, in minor units, in a currency.

Each of the two is fixed or read from a field of the call (a write tool's prepared effect,
or a tool's validated input)::

    spend(500, currency="USD")                         500 cents, always in dollars
    spend("{amount_minor}", currency="USD")            an amount the call computes, in dollars
    spend("{amount_minor}", currency="{currency}")     amount and currency the call computes

A grant's limit and the approval rules judge the currency the call *spends*, so a tool that
computes its currency must declare it as ``"{currency}"``: a fixed code would have a refund
in euros judged, shown and audited as one in dollars. Registration refuses a write tool
whose effect model has a currency field (``currency``, ``currency_...`` or ``..._currency``)
that no spend is bound to, or one in a nested model (a placeholder names a top-level field).

A resolved spend is a non-negative integer in a code of three upper-case letters (a field
typed as an enum of strings gives its member's value); a value that is not one is refused as
any bad value of a placeholder is (:class:`~airlock.policies.EffectArgumentError`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from enum import Enum
from typing import Final

__all__ = [
    "CURRENCY",
    "SpendValueError",
    "check_spend",
    "currency_from_field",
    "parse_spend",
    "spent",
]

# Matched with fullmatch: "$" would also match before a final newline ("USD\n").
CURRENCY: Final = re.compile(r"[A-Z]{3}")
"""A currency code: three upper-case letters (the one pattern; others are built from it)."""
_NAME: Final = r"[a-z_][a-z0-9_]*"
_FIELD: Final = re.compile(rf"\{{({_NAME})\}}")
_SPEND_TEXT: Final = re.compile(rf"\s*(\d+|\{{{_NAME}\}})\s+({CURRENCY.pattern}|\{{{_NAME}\}})\s*")


class SpendValueError(ValueError):
    """A field of a call cannot stand as a spend's amount or currency (the effects module
    turns it into an :class:`~airlock.policies.EffectArgumentError`)."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


def check_spend(currency: str, amount: int | str | None) -> tuple[str, ...]:
    """The field a spend declaration's amount names (none for a fixed amount); refuse a
    declaration that no call could resolve (the currency's field is a placeholder of its
    target, found with the others).

    Raises:
        ValueError: the currency is neither three upper-case letters nor ``"{field}"``, or
            the amount neither a non-negative integer nor ``"{field}"``.
    """
    if not (CURRENCY.fullmatch(currency) or _FIELD.fullmatch(currency)):
        raise ValueError(
            f"spend currency {currency!r} must be three upper-case letters or '{{field}}' "
            "naming the field that holds them"
        )
    if isinstance(amount, bool) or amount is None:
        raise ValueError("spend needs an amount: minor units or '{field}'")
    if isinstance(amount, int):
        if amount < 0:
            raise ValueError(f"spend amount {amount!r} must not be negative")
        return ()
    if not _FIELD.fullmatch(amount):
        raise ValueError(f"spend amount {amount!r} must be an integer or '{{field}}'")
    return (amount[1:-1],)


def currency_from_field(currency: str) -> bool:
    """Whether a spend's declared ``currency`` is ``"{field}"``, a field of the call that
    names the code, rather than a fixed code (either was checked when it was declared)."""
    return currency.startswith("{")


def spent(amount: int | str, currency: str, args: Mapping[str, object]) -> tuple[str, int]:
    """The currency and amount of one call of a declared spend, from its fields ``args``.

    Raises:
        SpendValueError: a field's value is not minor units, or not a currency code.
    """
    minor = args.get(amount[1:-1]) if isinstance(amount, str) else amount
    if type(minor) is not int or minor < 0:
        raise SpendValueError(str(amount)[1:-1], "must be a non-negative integer (minor units)")
    if not currency_from_field(currency):  # a fixed code, checked when it was declared
        return currency, minor
    code = args.get(currency[1:-1])
    if type(code) is not str:  # (checked first: the plain str is the call of every day)
        code = _enum_text(code)
    if code is None or not CURRENCY.fullmatch(code):
        raise SpendValueError(
            currency[1:-1], "must be a currency code of three upper-case letters, such as 'EUR'"
        )
    return code, minor


def _enum_text(value: object) -> str | None:
    """The text of a member of an enum of strings (a ``StrEnum`` field of a tool's input
    arrives as its member), else ``None``; the plain ``str`` is what a rule compares."""
    if isinstance(value, Enum) and type(value.value) is str:
        return value.value
    return None


def parse_spend(text: str, inner: str) -> tuple[str, int | str]:
    """The currency and amount of ``spend(inner)``, the form ``str`` of an effect writes.

    Raises:
        ValueError: ``inner`` is not ``AMOUNT CURRENCY``; the message quotes ``text``.
    """
    match = _SPEND_TEXT.fullmatch(inner)
    if match is None:
        raise ValueError(f"{text!r}: write spend(AMOUNT CURRENCY), e.g. 'spend(500 USD)'")
    raw, currency = match.groups()
    return currency, (raw if raw.startswith("{") else int(raw))
