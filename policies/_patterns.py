"""The one glob language of airlock: resource, destination and tool-name patterns.

``*`` matches one or more characters other than ``/``; ``**`` matches one or more of any
characters, ``/`` included; every other character is literal. A pattern is matched against
the whole text (no implicit prefix or suffix).

Containment: a *declared* effect may itself hold wildcards (a tool that lists invoices reads
``billing:invoice/*``). :func:`covers` answers whether every text a declared pattern can
stand for also matches a grant pattern. It is conservative: it may say no to an exotic pair
that is in fact contained, never yes to one that is not.
"""

from __future__ import annotations

import re
from functools import lru_cache

__all__ = ["covers", "glob_regex", "has_wildcard", "literal_prefix", "may_share_text"]

# Stand-ins for the wildcards of a declared pattern when it is matched as text against a
# grant pattern. No valid pattern contains these characters, so a literal part of a grant can
# never match them; only a grant wildcard can. "\x01" is excluded from the single-segment
# class, so a declared "**" is covered only by a grant "**".
_ONE = "\x00"
_ANY = "\x01"


@lru_cache(maxsize=4096)
def glob_regex(pattern: str) -> re.Pattern[str]:
    """Compile ``pattern`` to a regular expression that must match a whole text."""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**", i):
            out.append(".+")
            i += 2
        elif pattern[i] == "*":
            out.append(f"[^/{_ANY}]+")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out), re.DOTALL)


def has_wildcard(text: str) -> bool:
    """Whether ``text`` holds a ``*`` (and so is a pattern rather than one name)."""
    return "*" in text


def literal_prefix(pattern: str) -> str:
    """The literal beginning of ``pattern``: what every text it stands for starts with."""
    return pattern.split("*", 1)[0]


@lru_cache(maxsize=16384)
def _as_text(declared: str) -> str:
    return declared.replace("**", _ANY).replace("*", _ONE)


def covers(grant_pattern: str, declared: str) -> bool:
    """Whether every text ``declared`` stands for matches ``grant_pattern``."""
    return glob_regex(grant_pattern).fullmatch(_as_text(declared)) is not None


def may_share_text(one: str, two: str) -> bool:
    """Whether two patterns may stand for a common text: their literal beginnings and
    endings agree (a conservative test: it may say yes to a pair with nothing in common)."""
    head_one, head_two = literal_prefix(one), literal_prefix(two)
    tail_one, tail_two = one.rsplit("*", 1)[-1], two.rsplit("*", 1)[-1]
    heads = head_one.startswith(head_two) or head_two.startswith(head_one)
    tails = tail_one.endswith(tail_two) or tail_two.endswith(tail_one)
    return heads and tails
