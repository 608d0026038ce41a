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

import itertools
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
_SHORT = 64


class Glob:
    """A compiled pattern, matched in time linear in the text's length (times the pattern's)
    and, for nearly every pattern, at the speed of ``str`` methods and the ``re`` engine.

    A backtracking regular expression of several wildcards costs a power of the text's
    length (seconds for a 2 KB URL), and a walk of Python steps per character costs a
    quarter of a microsecond per character and pattern (seconds for a call of 480 URLs
    against a grant of 30 patterns). So: the literal chunks between wildcards are looked for
    in order with :meth:`str.find` first, which is the whole answer when every wildcard is
    ``**`` (each chunk as early as it can be leaves every later chunk the most room) and
    rules most other texts out. Otherwise each wildcard but the last takes the shortest run
    up to its chunk in an atomic group (``(?>[^/]+?chunk)``), which never backtracks: exact
    whenever the earliest end of that run leaves the next wildcard every text a later end
    would. That fails only for a ``**`` whose next wildcard is ``*`` (a ``*`` cannot step
    over the ``/`` a later end skipped), and then the pattern read backwards has no ``*``
    followed by ``**``, unless it holds both orders (``*/**/*``): those walk the text."""

    __slots__ = ("_chunks", "_finds", "_regex", "_reversed", "_walk", "pattern")

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        """The pattern, as written."""
        tokens = _STEP.findall(pattern)
        chunks, wildcards = _chunks(tokens)
        self._chunks = tuple(chunks)
        # Every wildcard "**": the in-order finds decide. Otherwise they are a necessary
        # condition ("*" stands for less than "**"), then the regex or the walk decides.
        self._finds = all(w == "**" for w in wildcards)
        pairs = set(itertools.pairwise(wildcards))
        self._regex: re.Pattern[str] | None = None
        self._reversed = False
        self._walk: _Walk | None = None
        if self._finds:
            return
        if ("**", "*") not in pairs:
            self._regex = _atomic(chunks, wildcards)
        elif ("*", "**") not in pairs:
            backwards, back_wildcards = _chunks(tokens[::-1])
            self._regex, self._reversed = _atomic(backwards, back_wildcards), True
        else:
            self._walk = _Walk(pattern)

    def fullmatch(self, text: str) -> Literal[True] | None:
        """``True`` when ``text`` is wholly matched, else ``None`` (as
        :meth:`re.Pattern.fullmatch` answers, read as a truth value)."""
        if self._finds:
            return True if _in_order(self._chunks, text) else None
        if self._regex is not None:
            # (on a short text the finds cost more than the regex saves)
            if len(text) > _SHORT and not _in_order(self._chunks, text):
                return None
            found = self._regex.fullmatch(text[::-1] if self._reversed else text)
            return True if found is not None else None
        assert self._walk is not None
        return self._walk.run(text, whole=True) if _in_order(self._chunks, text) else None

    def match(self, text: str) -> Literal[True] | None:
        """``True`` when a beginning of ``text`` (maybe all of it) is matched, else
        ``None`` (as :meth:`re.Pattern.match` answers, read as a truth value)."""
        return (self._walk or _Walk(self.pattern)).run(text, whole=False)

    def __repr__(self) -> str:
        return f"Glob({self.pattern!r})"


@lru_cache(maxsize=4096)
def glob_regex(pattern: str) -> Glob:
    """Compile ``pattern``: :meth:`Glob.fullmatch` matches it against a whole text,
    :meth:`Glob.match` against a beginning, :attr:`Glob.pattern` is the pattern. (Named for
    the regular expression it once compiled to, which backtracked: seconds on a long text.)"""
    return Glob(pattern)


def _chunks(tokens: list[str]) -> tuple[list[str], list[str]]:
    """The literal chunks around the wildcards of a pattern's tokens (one more chunk than
    wildcards; a chunk between two wildcards may be empty), and the wildcards."""
    chunks: list[str] = []
    wildcards: list[str] = []
    current: list[str] = []
    for token in tokens:
        if token.startswith("*"):
            chunks.append("".join(current))
            wildcards.append(token)
            current = []
        else:
            current.append(token)
    chunks.append("".join(current))
    return chunks, wildcards


def _in_order(chunks: tuple[str, ...], text: str) -> bool:
    """Whether ``text`` starts and ends with the first and last chunk and holds the others
    in order, each after at least one character: whether the pattern matches with every
    wildcard read as ``**``."""
    first = chunks[0]
    if len(chunks) == 1:
        return text == first
    if not text.startswith(first):
        return False
    at = len(first)
    for chunk in chunks[1:-1]:
        found = text.find(chunk, at + 1)
        if found < 0:
            return False
        at = found + len(chunk)
    last = chunks[-1]
    return len(text) - len(last) > at and text.endswith(last)


def _atomic(chunks: list[str], wildcards: list[str]) -> re.Pattern[str]:
    """The pattern as a regular expression whose every wildcard but the last takes the
    shortest run up to its chunk and never gives it back (see :class:`Glob`)."""
    classes = {"**": ".+", "*": f"[^{_NOT_ONE}]+"}
    out = [re.escape(chunks[0])]
    for index, (wildcard, chunk) in enumerate(zip(wildcards, chunks[1:], strict=True)):
        run, last = classes[wildcard], index == len(wildcards) - 1
        out.append(f"{run}{re.escape(chunk)}" if last else f"(?>{run}?{re.escape(chunk)})")
    return re.compile("".join(out), re.DOTALL)


class _Walk:
    """The pattern as steps, matched by a walk that keeps every step a prefix of the text
    may have reached, as bits of one integer: at most the text's length times the
    pattern's, whatever their shapes."""

    __slots__ = ("_accept", "_any", "_literal", "_one", "_repeats")

    def __init__(self, pattern: str) -> None:
        literal: dict[str, int] = {}
        one = any_char = repeats = 0
        steps = _steps(pattern)
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

    def run(self, text: str, *, whole: bool) -> Literal[True] | None:
        """Whether ``text`` (``whole``) or a beginning of it is matched."""
        literal, any_char, repeats, accept = self._literal, self._any, self._repeats, self._accept
        single = self._one | any_char
        state = 1  # at the first step (never a repeat: each follows its wildcard's first)
        for char in text:
            if not whole and state & accept:
                return True
            fits = state & (literal.get(char, 0) | (any_char if char in _NOT_ONE else single))
            # A step of one character moves on; a repeat may take another, or stop (and a
            # repeat is always followed by a step of one character: no chain of stops).
            state = ((fits & ~repeats) << 1) | (fits & repeats)
            state |= (state & repeats) << 1
            if not state:
                return None
        return True if state & accept else None


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
