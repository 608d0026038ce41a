"""Policy files built to hurt the loader: each is refused as a :class:`PolicyFileError`,
quickly, never as a raw traceback or a stall."""

from __future__ import annotations

import time

import pytest

from airlock.policies import PolicyFileError, parse_policy
from airlock.policies._policy_file import KeyPath, _find_line


def _nested(n: int, opening: str, inner: str, closing: str) -> str:
    return opening * n + inner + closing * n


# (name, the value of one key): nested past what the TOML parser's recursion takes
DEEP = [
    ("arrays", _nested(100_000, "[", "", "]")),
    ("arrays around a string", _nested(2_000, "[", '"a"', "]")),
    ("inline tables", _nested(5_000, "{a=", "1", "}")),
    ("inline tables, just past the limit", _nested(400, "{a=", "1", "}")),
    ("arrays of inline tables", _nested(2_000, "[{a=", "1", "}]")),
]


@pytest.mark.parametrize("key", ["x", "version", 'principals."*".effects'])
@pytest.mark.parametrize("value", [v for _, v in DEEP], ids=[name for name, _ in DEEP])
def test_a_value_nested_too_deeply_is_refused(key: str, value: str) -> None:
    table, _, name = key.rpartition(".")
    text = f"version = 1\n[{table}]\n{name} = {value}\n" if table else f"{key} = {value}\n"
    with pytest.raises(PolicyFileError) as info:
        parse_policy(text, source="deep.toml")
    assert info.value.code == "policy_file"
    assert info.value.retryable is False
    assert "nested too deeply" in info.value.reason
    assert str(info.value).startswith("deep.toml")


def _in_a_string(line: str) -> str:
    # A valid file whose multi-line string holds ``line``; the unknown key ``rolez`` makes
    # the loader look for the line of the error.
    return f'version = 1\n[roles.r]\ndescription = """\n{line}\n"""\n[principals."*"]\nrolez = []\n'


@pytest.mark.parametrize(
    "line",
    [
        "[" + " " * 20_000 + "x",
        "[[" + " " * 20_000 + "x",
        " " * 20_000 + "[x",
        "[" + " " * 20_000 + "]" + " " * 20_000 + "x",
        "[" + "a." * 10_000 + "x",
        "[" + "a " * 10_000,
    ],
    ids=["open", "open-array", "spaces-first", "closed-then-text", "dots", "words"],
)
def test_finding_the_line_of_an_error_takes_linear_time(line: str) -> None:
    started = time.perf_counter()
    with pytest.raises(PolicyFileError) as info:
        parse_policy(_in_a_string(line), source="p.toml")
    assert time.perf_counter() - started < 1.0  # (generous: it takes milliseconds)
    assert (info.value.key, info.value.line) == ('principals."*".rolez', 7)


# (the file, a key, the line found): what the header pattern reads as a table
LINES: list[tuple[str, KeyPath, int | None]] = [
    ("[a]\nx = 1\n", ("a", "x"), 2),
    ("[ a . b ]  # a comment\nx = 1\n", ("a", "b", "x"), 2),
    ('[ "a b" . c ]\nx = 1\n', ("a b", "c", "x"), 2),
    ("[[a.rules]]\nid = 1\n[[a.rules]]\nid = 2\n", ("a", "rules", 1, "id"), 4),
    ("[[ a.rules ]]\nid = 1\n", ("a", "rules", 0, "id"), 2),
    ("  [a]\n  x = 1\n", ("a", "x"), 2),
    ("[a] x\ny = 1\n", ("a",), None),  # text after the bracket: not a header
    ("[a\ny = 1\n", ("a",), None),
    ("[]\nx = 1\n", ("x",), 2),
    ("[a]\nx = 1\n", ("a", "y"), 1),  # the nearest ancestor
]


@pytest.mark.parametrize(("text", "key", "line"), LINES)
def test_the_line_of_a_key(text: str, key: KeyPath, line: int | None) -> None:
    assert _find_line(text, key) == line
