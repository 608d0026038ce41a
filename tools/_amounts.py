"""An amount in minor units as a person reads it: in its currency's own unit, with as many
decimals as ISO 4217 gives the currency (``1001 JPY`` is whole yen, ``1001 USD`` is
``10.01 USD``, ``1001 KWD`` is ``1.001 KWD``).

A summary that divides by 100 whatever the currency shows a yen refund a hundred times too
small; the approver reads the summary, so the summary must be right."""

from __future__ import annotations

from typing import Final

__all__ = ["format_amount"]

# ISO 4217's minor-unit exponents that are not 2 (the table's active codes); every other
# currency, and a code not in the table, has two decimals.
_DECIMALS: Final = {
    **dict.fromkeys(
        ("BIF", "CLP", "DJF", "GNF", "ISK", "JPY", "KMF", "KRW", "PYG", "RWF", "UGX", "UYI"),
        0,
    ),
    **dict.fromkeys(("VND", "VUV", "XAF", "XOF", "XPF"), 0),
    **dict.fromkeys(("BHD", "IQD", "JOD", "KWD", "LYD", "OMR", "TND"), 3),
    **dict.fromkeys(("CLF", "UYW"), 4),
}


def format_amount(amount_minor: int, currency: str) -> str:
    """``amount_minor`` minor units of ``currency`` in the currency's unit, exactly (integer
    arithmetic, no float): ``format_amount(1001, "JPY") == "1001 JPY"``,
    ``format_amount(1001, "USD") == "10.01 USD"``."""
    decimals = _DECIMALS.get(currency.upper(), 2)  # "jpy", as Stripe writes it, is JPY
    sign = "-" if amount_minor < 0 else ""
    whole, part = divmod(abs(amount_minor), 10**decimals)
    number = f"{whole}.{part:0{decimals}d}" if decimals else str(whole)
    return f"{sign}{number} {currency}"
