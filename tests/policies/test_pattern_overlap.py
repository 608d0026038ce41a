"""Whether two patterns of the glob language stand for a common text (``may_share_text``):
exact, so a ``deny`` with targets names every pattern effect that may reach one of them and
no other, and ``airlock audit find`` lists as possible only what can be inside a resource."""

from __future__ import annotations

import itertools
import random

import pytest

from airlock.policies import glob_regex, may_share_text

PAIRS = [
    ("billing:*", "billing:invoice/inv_1", False),  # a `*` does not cross a `/`
    ("billing:**", "billing:invoice/inv_1", True),
    ("billing:*/inv_2", "billing:invoice/inv_1", False),
    ("billing:*/inv_1", "billing:invoice/*", True),
    ("billing:invoice/*", "billing:refund/*", False),
    ("a*", "a", False),  # a `*` stands for one character at least
    ("*b", "a*", True),
    ("**", "x/y/z", True),
    ("*", "x/y", False),
    ("a*c", "ab*", True),
    ("a*c*e", "a**e", True),
    ("abc", "abc", True),
    ("abc", "abd", False),
]


@pytest.mark.parametrize(("one", "two", "shared"), PAIRS)
def test_two_patterns_share_a_text_exactly_when_one_exists(
    one: str, two: str, shared: bool
) -> None:
    assert may_share_text(one, two) is shared
    assert may_share_text(two, one) is shared


def test_it_agrees_with_the_texts_each_pattern_matches() -> None:
    # Random patterns of at most three pieces share a text, if any, of at most 7 characters.
    alphabet = "ab/"
    texts = ["".join(t) for n in range(1, 8) for t in itertools.product(alphabet, repeat=n)]
    pieces = ["a", "b", "/", "*", "**"]
    rng = random.Random(17)
    for _ in range(300):
        one, two = ("".join(rng.choices(pieces, k=rng.randint(1, 3))) for _ in range(2))
        first, second = glob_regex(one), glob_regex(two)
        common = any(first.fullmatch(t) and second.fullmatch(t) for t in texts)
        assert may_share_text(one, two) is common, (one, two)
