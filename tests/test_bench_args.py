"""The benchmarks' argument types: what cannot measure anything is refused by the parser."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import pytest

from bench._args import at_least, counts, positive_seconds

ACCEPTED: list[tuple[Callable[[str], Any], str, Any]] = [
    (at_least(1), "1", 1),
    (at_least(1), "5000", 5000),
    (at_least(0), "0", 0),
    (at_least(200), "200", 200),
    (counts(1), "1,2,8,32", [1, 2, 8, 32]),
    (counts(0), "0, 4", [0, 4]),
    (counts(1), "", []),
    (counts(1), "8,", [8]),
    (positive_seconds, "0.5", 0.5),
    (positive_seconds, "30", 30.0),
]

REFUSED: list[tuple[Callable[[str], Any], str, str]] = [
    (at_least(1), "0", "must be at least 1, not 0"),
    (at_least(0), "-1", "must be at least 0, not -1"),
    (at_least(200), "10", "must be at least 200, not 10"),
    (at_least(1), "x", "'x' is not a whole number"),
    (at_least(1), "1.5", "'1.5' is not a whole number"),
    (counts(1), "1,0", "must be at least 1, not 0"),
    (counts(0), "0,x", "'x' is not a whole number"),
    (positive_seconds, "0", "must be a time above 0 seconds, not 0"),
    (positive_seconds, "-2", "must be a time above 0 seconds, not -2"),
    (positive_seconds, "nan", "must be a time above 0 seconds, not nan"),
    (positive_seconds, "inf", "must be a time above 0 seconds, not inf"),
    (positive_seconds, "soon", "'soon' is not a number of seconds"),
]


@pytest.mark.parametrize(("parse", "text", "expected"), ACCEPTED)
def test_accepted(parse: Callable[[str], Any], text: str, expected: Any) -> None:
    assert parse(text) == expected


@pytest.mark.parametrize(("parse", "text", "message"), REFUSED)
def test_refused(parse: Callable[[str], Any], text: str, message: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError) as refused:
        parse(text)
    assert str(refused.value) == message


def test_a_refusal_is_a_usage_error_before_anything_runs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    parser = argparse.ArgumentParser(prog="bridge.py")
    parser.add_argument("--runs", type=at_least(1), default=5)
    with pytest.raises(SystemExit) as ended:
        parser.parse_args(["--runs", "0"])
    assert ended.value.code == 2
    assert "argument --runs: must be at least 1, not 0" in capsys.readouterr().err
