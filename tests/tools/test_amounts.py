"""An amount in minor units, shown to a person in its currency's own unit: ISO 4217 says how
many decimals each currency has (a yen has none, a Kuwaiti dinar three), so 1001 JPY is
¥1001, never 10.01."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from airlock.policies import Grant, write
from airlock.tools import Preview, format_amount

from .test_write_world import ASK, INVOICES, TOOL, World

# (amount in minor units, currency, as a person reads it)
AMOUNTS = [
    (1001, "USD", "10.01 USD"),
    (5, "EUR", "0.05 EUR"),
    (0, "USD", "0.00 USD"),
    (-150, "USD", "-1.50 USD"),
    (1001, "JPY", "1001 JPY"),
    (1001, "KRW", "1001 KRW"),
    (7, "CLP", "7 CLP"),
    (1001, "KWD", "1.001 KWD"),
    (5, "BHD", "0.005 BHD"),
    (12345, "CLF", "1.2345 CLF"),
    (1001, "XYZ", "10.01 XYZ"),  # a code not in ISO 4217's table: two decimals
    (10**20 + 1, "USD", "1000000000000000000.01 USD"),  # exact, where a float is not
    # A lowercase code (as Stripe writes them) is the same currency: its decimals, its case.
    (1001, "jpy", "1001 jpy"),
    (1001, "Kwd", "1.001 Kwd"),
    (1001, "usd", "10.01 usd"),
]


@pytest.mark.parametrize(
    ("minor", "currency", "shown"), AMOUNTS, ids=[f"{a[0]} {a[1]}" for a in AMOUNTS]
)
def test_an_amount_is_shown_with_its_currencys_decimals(
    minor: int, currency: str, shown: str
) -> None:
    assert format_amount(minor, currency) == shown


# (invoice currency, what the refund of inv_2, 1002 minor units, reads in its summary)
SUMMARIES = [
    ("USD", "refund 10.02 USD on inv_2 to cus_2"),
    ("JPY", "refund 1002 JPY on inv_2 to cus_2"),
    ("KWD", "refund 1.002 KWD on inv_2 to cus_2"),
]


@pytest.mark.parametrize(("currency", "summary"), SUMMARIES, ids=[s[0] for s in SUMMARIES])
def test_the_refund_tools_summary_uses_the_currencys_decimals(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, currency: str, summary: str
) -> None:
    monkeypatch.setitem(INVOICES["inv_2"], "currency", currency)
    world = World(tmp_path)
    grant = Grant(
        scopes=frozenset({"billing.write"}),
        effects=(write("billing:refund/*"),),
        spend_limits={currency: 10_000},
    )
    ctx = world.ctx(approvals=ASK, grant=grant)
    args = {"invoice_id": "inv_2", "reason": "duplicate"}
    try:
        preview: Preview = anyio.run(world.writes.preview_call, TOOL, args, ctx)
    finally:
        world.close()
    assert preview.summary == summary
    assert f"spend(1002 {currency})" in preview.effects  # what is judged stays in minor units
