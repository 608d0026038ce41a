"""Shared printing for the benchmarks: median, p99 and a ratio to a baseline."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

__all__ = ["percentile", "print_table"]


def percentile(samples: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) by nearest rank: the smallest sample with at least q% of
    the samples at or below it.

    Raises:
        ValueError: there are no samples.
    """
    if not samples:
        raise ValueError("no samples: nothing was measured")
    ordered = sorted(samples)
    # (1-based; 0 for q = 0: the smallest; rounded first: 99.9 / 100 * 1000 is 999.0000000001)
    rank = math.ceil(round(q / 100 * len(ordered), 9))
    return ordered[min(len(ordered), max(rank, 1)) - 1]


def print_table(title: str, rows: Sequence[tuple[str, Sequence[float], str]], unit: str) -> None:
    """Print rows of (name, samples, baseline-row-name or "") with median, p99 and ratio."""
    medians = {name: statistics.median(samples) for name, samples, _ in rows}
    print(f"\n{title}")
    print(f"{'case':<38}{'n':>6}{'median ' + unit:>16}{'p99 ' + unit:>14}  ratio")
    for name, samples, baseline in rows:
        ratio = f"{medians[name] / medians[baseline]:.2f}x {baseline}" if baseline else ""
        print(
            f"{name:<38}{len(samples):>6}{medians[name]:>16.3f}"
            f"{percentile(samples, 99):>14.3f}  {ratio}"
        )
