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
from typing import Literal

__all__ = ["Glob", "covers", "glob_regex", "has_wildcard", "literal_prefix", "may_share_text"]

# Stand-ins for the wildcards of a declared pattern when it is matched as text against a
# grant pattern. No valid pattern contains these characters, so a literal part of a grant can
# never match them; only a grant wildcard can. "\x01" is excluded from the single-segment
# class, so a declared "**" is covered only by a grant "**".
_ONE = "\x00"
_ANY = "\x01"
_NOT_ONE = "/" + _ANY  # what "*" does not match


class Glob:
    """A compiled pattern. It matches without backtracking: a walk over the pattern's steps
    that keeps every step a prefix of the text may have reached, as bits of one integer, so
    a text costs at most its length times the pattern's (a backtracking regular expression
    of several wildcards costs a power of the text's length: seconds for a 2 KB URL). A
    pattern of at most one wildcard, as most are, is a regular expression still: it costs
    at most the same, and is faster on short texts."""

    __slots__ = ("_accept", "_any", "_literal", "_one", "_regex", "_repeats", "pattern")

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        """The pattern, as written."""
        steps = _steps(pattern)
        self._regex = _regex(pattern) if sum(repeat for _, repeat in steps) <= 1 else None
        literal: dict[str, int] = {}
        one = any_char = repeats = 0
        for index, (token, repeat) in enumerate(steps):
            bit = 1 << index
            if repeat:
                repeats |= bit
            if token == "**":
                any_char |= bit
            elif token == "*":
                one |= bit
            else:
                literal[token] = literal.get(token, 0) | bit
        self._literal, self._one, self._any = literal, one, any_char
        self._repeats, self._accept = repeats, 1 << len(steps)

    def fullmatch(self, text: str) -> Literal[True] | None:
        """``True`` when ``text`` is wholly matched, else ``None`` (as
        :meth:`re.Pattern.fullmatch` answers, read as a truth value)."""
        if self._regex is not None:
            return True if self._regex.fullmatch(text) is not None else None
        literal, one, any_char, repeats = self._literal, self._one, self._any, self._repeats
        single = one | any_char
        state = 1  # at the first step (never a repeat: each follows its wildcard's first)
        for char in text:
            fits = state & (literal.get(char, 0) | (any_char if char in _NOT_ONE else single))
            # A step of one character moves on; a repeat may take another, or stop (and a
            # repeat is always followed by a step of one character: no chain of stops).
            state = ((fits & ~repeats) << 1) | (fits & repeats)
            state |= (state & repeats) << 1
            if not state:
                return None
        return True if state & self._accept else None

    def __repr__(self) -> str:
        return f"Glob({self.pattern!r})"


@lru_cache(maxsize=4096)
def glob_regex(pattern: str) -> Glob:
    """Compile ``pattern``; :meth:`Glob.fullmatch` matches it against a whole text. (Named
    for the regular expression it once compiled to; callers use only ``fullmatch``.)"""
    return Glob(pattern)


def _regex(pattern: str) -> re.Pattern[str]:
    """A pattern of at most one wildcard as a regular expression: one ``.+`` (or ``[^/]+``)
    between literals backtracks over that wildcard only, in at most the text's length times
    the pattern's."""
    wildcards = {"**": ".+", "*": f"[^{_NOT_ONE}]+"}
    tokens = _STEP.findall(pattern)
    return re.compile("".join(wildcards.get(t) or re.escape(t) for t in tokens), re.DOTALL)


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


@lru_cache(maxsize=4096)
def may_share_text(one: str, two: str) -> bool:
    """Whether two patterns stand for a common text, exactly: whether a walk of both, one
    character at a time, reaches both ends (in at most as many steps as the product of their
    lengths). ``billing:*`` and ``billing:invoice/inv_1`` share none: that ``*`` does not
    reach across the ``/``."""
    a, b = _steps(one), _steps(two)
    seen: set[tuple[int, int]] = set()
    todo = [(0, 0)]
    while todo:
        i, j = todo.pop()
        if (i, j) in seen:
            continue
        seen.add((i, j))
        if (i, j) == (len(a), len(b)):
            return True
        if i < len(a) and a[i][1]:  # a repeat may stop
            todo.append((i + 1, j))
        if j < len(b) and b[j][1]:
            todo.append((i, j + 1))
        if i < len(a) and j < len(b) and _one_char_fits(a[i][0], b[j][0]):
            todo.append((i + (not a[i][1]), j + (not b[j][1])))
    return False


_STEP = re.compile(r"\*\*|\*|[^*]")


def _steps(pattern: str) -> tuple[tuple[str, bool], ...]:
    """``pattern`` as (character class, repeats) steps: a literal character, or ``*`` and
    ``**`` each as one character of its class followed by a repeat of it."""
    steps: list[tuple[str, bool]] = []
    for token in _STEP.findall(pattern):
        steps.extend([(token, False), (token, True)] if token.startswith("*") else [(token, False)])
    return tuple(steps)


def _one_char_fits(one: str, two: str) -> bool:
    """Whether one character can be of both classes (a literal, ``*`` or ``**``)."""
    if "**" in (one, two):
        return True
    if one == "*":
        return two != "/"
    if two == "*":
        return one != "/"
    return one == two
