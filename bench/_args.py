"""Argument types for the benchmarks' command lines: a count or a time that cannot measure
anything (no runs, no seconds) is refused with a usage line, before any container starts."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

__all__ = ["at_least", "counts", "positive_seconds"]


def at_least(minimum: int) -> Callable[[str], int]:
    """An ``argparse`` type: a whole number of at least ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, not {value}")
        return value

    return parse


def counts(minimum: int) -> Callable[[str], list[int]]:
    """An ``argparse`` type: whole numbers of at least ``minimum``, separated by commas
    (``1,2,8``; none, ``""``, leaves out the cases they would name)."""
    one = at_least(minimum)

    def parse(text: str) -> list[int]:
        return [one(part.strip()) for part in text.split(",") if part.strip()]

    return parse


def positive_seconds(text: str) -> float:
    """An ``argparse`` type: a number of seconds above zero."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a time above 0 seconds, not {text}")
    return value
