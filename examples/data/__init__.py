"""The data example: a sales export given to a program as a read-only input, per-region totals
computed with pandas in the data image, and a chart and a table returned as artifacts.

:func:`write_sales` makes the export (a CSV of a given size, seeded), :func:`host_totals`
computes the totals on the host with the standard library (what the demo checks the
program's answer against), and :data:`PROGRAM` is what the model would send.
"""

from __future__ import annotations

import csv
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Final

__all__ = ["DEMO_POLICY", "PROGRAM", "REGIONS", "RegionTotal", "host_totals", "write_sales"]

DEMO_POLICY: Final = Path(__file__).with_name("demo_policy.toml")
REGIONS: Final = ("north", "south", "east", "west", "central")
_WEIGHTS: Final = (5, 3, 2, 4, 1)
_PRODUCTS: Final = ("widget", "gadget", "gizmo", "doohickey", "sprocket", "flange")

PROGRAM: Final = """\
import pandas as pd
import matplotlib.pyplot as plt

sales = pd.read_csv("/data/sales.csv", usecols=["region", "units", "amount_cents"])
totals = (
    sales.groupby("region")
    .agg(orders=("amount_cents", "size"), units=("units", "sum"),
         amount_cents=("amount_cents", "sum"))
    .sort_values("amount_cents", ascending=False)
)
totals.to_csv("/out/region_totals.csv")

figure, axes = plt.subplots(figsize=(7, 4))
axes.bar(totals.index, totals["amount_cents"] / 100 / 1e6)
axes.set_title(f"Sales by region ({len(sales):,} orders)")
axes.set_ylabel("USD, millions")
figure.tight_layout()
figure.savefig("/out/region_totals.png", dpi=100)

{
    "orders": len(sales),
    "regions": {
        region: {key: int(value) for key, value in row.items()}
        for region, row in totals.to_dict(orient="index").items()
    },
}
"""
"""What the model sends: the totals come back as its value, the chart and the table as
artifacts."""


@dataclass(frozen=True, slots=True)
class RegionTotal:
    """One region's totals, as the program and the host both compute them."""

    orders: int
    units: int
    amount_cents: int


def write_sales(path: Path, *, size_bytes: int, seed: int = 18) -> int:
    """Write a sales export of about ``size_bytes`` to ``path`` (readable by anyone: the
    sandbox's user reads it); the number of orders."""
    rng = random.Random(seed)
    orders = 0
    with path.open("w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(
            ["order_id", "date", "region", "product", "units", "unit_price_cents", "amount_cents"]
        )
        while file.tell() < size_bytes:
            rows = []
            for _ in range(5000):
                orders += 1
                units = rng.randint(1, 40)
                price = rng.randint(199, 19999)
                day = rng.randint(1, 28)
                rows.append(
                    (
                        f"ord_{orders:08d}",
                        f"2026-{rng.randint(1, 12):02d}-{day:02d}",
                        rng.choices(REGIONS, _WEIGHTS)[0],
                        rng.choice(_PRODUCTS),
                        units,
                        price,
                        units * price,
                    )
                )
            writer.writerows(rows)
    path.chmod(0o644)
    return orders


def host_totals(path: Path) -> dict[str, RegionTotal]:
    """Per-region totals of the export at ``path``, with the standard library."""
    sums: dict[str, list[int]] = {}
    with path.open(newline="") as file:
        reader = csv.reader(file)
        header = next(reader)
        region_at, units_at, amount_at = (
            header.index(c) for c in ("region", "units", "amount_cents")
        )
        for row in reader:
            entry = sums.setdefault(row[region_at], [0, 0, 0])
            entry[0] += 1
            entry[1] += int(row[units_at])
            entry[2] += int(row[amount_at])
    return {region: RegionTotal(*values) for region, values in sorted(sums.items())}
