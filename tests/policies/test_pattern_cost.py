"""The glob language matched without backtracking: the same answers as the regular
expression it once compiled to, in time that grows with the product of the lengths only.

Patterns with several wildcards against long texts took seconds (``/**/a/**/a/**/a/**/raw``
against an 826-character URL: 9 s), on the event loop, past any call's deadline."""

from __future__ import annotations

import itertools
import random
import re
import time

import pytest

from airlock.policies import Grant, covers, glob_regex, network
from airlock.policies._patterns import _ANY


def reference(pattern: str) -> re.Pattern[str]:
    """The regular expression a pattern compiled to before: right, but backtracking."""
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


# (pattern, text): the pathological shapes, short enough for the reference to answer
PATHOLOGICAL = [
    ("/**/a/**/a/**/a/**/raw", "/" + "a/" * 12 + "x"),
    ("/**/a/**/a/**/a/**/raw", "/" + "a/" * 12 + "raw"),
    ("/*-*-*-*-*.pdf", "/" + "-" * 14 + ".pdfx"),
    ("/*-*-*-*-*.pdf", "/" + "-" * 14 + ".pdf"),
    ("/*-*-*-*-*.pdf", "/-a-b-c-d.pdf"),
    ("/*-*-*-*-*.pdf", "/a-b-c-d-e.pdf"),
    ("**a**a**a**b", "a" * 20),
    ("**a**a**a**b", "a" * 20 + "b"),
    ("*a*a*a*b", "a" * 20),
    ("*a*a*a*b", "a/" * 5 + "b"),
    ("***", "ab"),
    ("***", "a/b"),
    ("***", "a/"),
    ("a**", "a"),
    ("", ""),
    ("", "a"),
    ("a", "A"),  # literal characters match as they are
    ("*", "\n"),
    ("**", "\n/\n"),
    ("a*b", "a\x01b"),  # a declared "**" is covered by "**" only
    ("a**b", "a\x01b"),
    ("a*b", "a\x00b"),
]


@pytest.mark.parametrize(("pattern", "text"), PATHOLOGICAL)
def test_a_pattern_matches_what_its_regular_expression_matched(pattern: str, text: str) -> None:
    expected = reference(pattern).fullmatch(text) is not None
    assert (glob_regex(pattern).fullmatch(text) is not None) is expected
    assert bool(glob_regex(pattern).fullmatch(text)) is expected


def test_it_agrees_with_the_regular_expression_on_every_short_pair() -> None:
    alphabet = "ab/\x00\x01"
    texts = ["".join(t) for n in range(6) for t in itertools.product(alphabet, repeat=n)]
    pieces = ["a", "b", "/", "*", "**"]
    rng = random.Random(23)
    patterns = {"".join(rng.choices(pieces, k=rng.randint(0, 5))) for _ in range(300)}
    for pattern in sorted(patterns):
        mine, theirs = glob_regex(pattern), reference(pattern)
        for text in texts:
            assert (mine.fullmatch(text) is not None) is (theirs.fullmatch(text) is not None), (
                pattern,
                text,
            )


# (grant pattern, path of an up-to-2048-character URL): seconds each with backtracking
WORST = [
    ("https://docs.example.com/**/a/**/a/**/a/**/raw", "/" + "a/" * 1100 + "x"),
    ("https://docs.example.com/*-*-*-*-*.pdf", "/" + "-" * 2100 + ".pdfx"),
    ("https://docs.example.com/" + "**a" * 40 + "b", "/" + "a" * 2100),
    ("https://docs.example.com/" + "*a" * 40 + "b", "/" + "a" * 2100),
    ("https://docs.example.com/**" + "ab" * 40, "/" + "ab" * 1100 + "x"),  # one wildcard
]


@pytest.mark.parametrize(("pattern", "path"), WORST, ids=["**a", "*-", "40 **", "40 *", "one **"])
def test_a_long_text_is_matched_in_bounded_time(pattern: str, path: str) -> None:
    url = ("https://docs.example.com" + path)[:2048]
    grant = Grant(effects=(network(pattern),))
    (effect,) = network("{url}").resolve_all({"url": url})
    started = time.perf_counter()
    assert not grant.covers(effect)
    assert not covers(pattern, url)
    assert time.perf_counter() - started < 1.0


# (pattern, text): each way a pattern is matched (in-order finds, the atomic regex forwards
# and backwards, the walk), on long texts, agrees with the regular expression
SHAPES = [
    ("/**/zz3/**", "/" + "a/" * 1000 + "zz3/x"),  # every wildcard "**": finds
    ("/**/zz3/**", "/" + "a/" * 1000 + "x"),
    ("billing:*/*", "billing:" + "i" * 3000 + "/inv_1"),  # "*" then "*": atomic forwards
    ("billing:*/*", "billing:" + "i" * 3000 + "/inv/1"),
    ("/a/*/**", "/a/" + "b" * 2000 + "/c"),  # "*" then "**"
    ("/docs/**/*.pdf", "/docs/" + "a/" * 1000 + "x.pdf"),  # "**" then "*": backwards
    ("/docs/**/*.pdf", "/docs/" + "a/" * 1000 + "x/.pdf"),
    ("***", "a" * 100 + "/" + "b" * 100),
    ("***", "a" * 100 + "/"),
    ("/api/**/v*/**", "/api/" + "x/" * 500 + "v2/yy"),  # both orders: the walk
    ("/api/**/v*/**", "/api/" + "x/" * 500 + "v/yy"),
]


@pytest.mark.parametrize(("pattern", "text"), SHAPES)
def test_each_way_of_matching_agrees_with_the_regular_expression(pattern: str, text: str) -> None:
    expected = reference(pattern).fullmatch(text) is not None
    assert (glob_regex(pattern).fullmatch(text) is not None) is expected
    assert (glob_regex(pattern).match(text) is not None) is (
        reference(pattern).match(text) is not None
    )
    assert glob_regex(pattern).pattern == pattern


def test_many_patterns_against_many_long_urls_cost_str_speed() -> None:
    # 480 URLs of 2 KB against 30 patterns took 6 s walked one character at a time
    patterns = [glob_regex(f"/**/zz{i}/**") for i in range(30)]
    paths = ["/" + "a/" * 1000 + str(i) for i in range(480)]
    started = time.perf_counter()
    assert not any(p.fullmatch(path) for p in patterns for path in paths)
    assert time.perf_counter() - started < 0.5
