"""Deterministic seed data: a few hundred invoices over several tenants, some paid twice.

The same ``seed`` always gives the same records (ids, amounts, which invoices were paid
twice), so tests and the demo can name them. Tokens are not seeded: the server issues
fresh ones at every start and hands them to the host.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from typing import Final

from examples.billing.store import BillingStore, token_digest

__all__ = ["TENANTS", "seed_store"]

TENANTS: Final[tuple[str, ...]] = ("acme", "globex", "initech", "umbrella")
"""Tenant ids of the seeded service."""

_NAMES: Final = ("Ada", "Grace", "Alan", "Edsger", "Barbara", "Ken", "Radia", "Donald", "Frances")
_CITIES: Final = ("Lyon", "Porto", "Leeds", "Graz", "Turku", "Ghent", "Brno", "Cork")
_BRANDS: Final = ("visa", "mastercard", "amex")
_NOTES: Final = (
    "customer asked for net-30 terms",
    "VIP account, do not chase",
    "disputed once in 2024",
    "paid after reminder",
    "",
)


def seed_store(
    store: BillingStore,
    tokens: Mapping[str, str],
    *,
    seed: int = 7,
    invoices_per_tenant: int = 80,
    duplicate_rate: float = 0.05,
) -> None:
    """Fill an empty ``store``: one tenant per entry of ``tokens`` (id -> bearer token).

    Each tenant gets 8 customers and ``invoices_per_tenant`` invoices; about 80% are paid,
    and every 20th invoice plus about ``duplicate_rate`` of the rest were charged twice (a
    second payment of the same amount minutes later).
    """
    rng = random.Random(seed)
    with store.transaction() as conn:
        for tenant in sorted(tokens):
            conn.execute(
                "INSERT INTO tenants (id, name, token_sha256) VALUES (?, ?, ?)",
                (tenant, tenant.title(), token_digest(tokens[tenant])),
            )
            customers = []
            for n in range(8):
                customer_id = f"cus_{rng.getrandbits(40):010x}"
                name = f"{rng.choice(_NAMES)} {tenant.title()}{n}"
                address = {
                    "line1": f"{rng.randint(1, 200)} Rue Example",
                    "city": rng.choice(_CITIES),
                    "postcode": f"{rng.randint(10000, 99999)}",
                    "country": "FR",
                }
                conn.execute(
                    "INSERT INTO customers (id, tenant_id, name, email, address) "
                    "VALUES (?, ?, ?, ?, ?)",
                    (
                        customer_id,
                        tenant,
                        name,
                        f"{name.split()[0].lower()}{n}@{tenant}.example",
                        json.dumps(address),
                    ),
                )
                customers.append(customer_id)
            for n in range(invoices_per_tenant):
                invoice_id = f"inv_{rng.getrandbits(48):012x}"
                amount = rng.randrange(500, 250_000, 25)
                day = 1 + n % 28
                paid = rng.random() < 0.8
                # Every 20th invoice (and a random few) was charged twice, so each tenant has some.
                twice = n % 20 == 5 or (paid and rng.random() < duplicate_rate)
                paid = paid or twice
                conn.execute(
                    "INSERT INTO invoices (id, tenant_id, customer_id, number, amount_minor, "
                    "currency, status, issued_at, internal_note) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        invoice_id,
                        tenant,
                        rng.choice(customers),
                        f"{tenant[:3].upper()}-{1000 + n}",
                        amount,
                        "USD",
                        "paid" if paid else rng.choice(("open", "open", "void")),
                        f"2026-{1 + n % 12:02d}-{day:02d}",
                        rng.choice(_NOTES),
                    ),
                )
                for copy in range(2 if twice else 1 if paid else 0):
                    conn.execute(
                        "INSERT INTO payments (id, invoice_id, amount_minor, card_brand, "
                        "card_last4, created_at) VALUES (?, ?, ?, ?, ?, ?)",
                        (
                            f"pay_{rng.getrandbits(48):012x}",
                            invoice_id,
                            amount,
                            rng.choice(_BRANDS),
                            f"{rng.randint(0, 9999):04d}",
                            f"2026-{1 + n % 12:02d}-{day:02d}T10:{copy * 7:02d}:00Z",
                        ),
                    )
