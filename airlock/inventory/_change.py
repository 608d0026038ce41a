"""One difference between two effect locks, and which way it goes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["Change", "Direction"]

Direction = Literal["growth", "shrink", "change"]


@dataclass(frozen=True, slots=True, order=True)
class Change:
    """One difference between two locks."""

    direction: Direction
    subject: str
    tool: str
    kind: str
    """What changed, e.g. ``new_tool``, ``approval_loosened``, ``sandbox_widened``."""
    detail: str
