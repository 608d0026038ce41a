"""An exception's text is cleaned (``Secret()`` values, credentials) on no more of it than
what is kept needs: a handler failing on a megabyte argument costs no seconds of the event
loop, and what is kept is what cleaning the whole text and then cutting it would keep; a
secret straddling where the text was cut first leaves no piece of itself."""

from __future__ import annotations

import pytest

from airlock.tools import _step_text as step_text
from airlock.tools._redact import REDACTED, redact, redaction_reach, remember_secret
from airlock.tools._step_text import (
    _TRACE_CHARS,
    DETAIL_CHARS,
    argument_secrets,
    failure_detail,
    failure_trace,
    kept_text,
    without_secrets,
)

BIG = "x" * (1 << 20)
TOKEN = "rk_" + "Zt8Qw2Lp5Vn9Xc3Bm7Hj4Kd6"
remember_secret(TOKEN)
PIN = "pin-4417-secret"
LONG = "L" * 300 + "-long-secret"


def _key_error(key: str) -> KeyError:
    try:
        {}[key]
    except KeyError as exc:
        return exc
    raise AssertionError("it raised")


@pytest.mark.parametrize("values", [0, 1, 10_000])
def test_a_megabyte_exception_with_many_secret_values_is_cleaned_only_where_it_is_kept(
    values: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = {"codes": [f"c{i:05d}" for i in range(values)], "name": BIG}
    secrets = argument_secrets(args, {"codes"})
    exc = _key_error(BIG)
    cleaned: list[int] = []

    def counted(text: str) -> str:
        cleaned.append(len(text))
        return redact(text)

    monkeypatch.setattr(step_text, "redact", counted)
    detail = failure_detail(exc, secrets)
    trace = failure_trace(exc, secrets)

    # What is cleaned is bounded by what is kept and how far a secret reaches past a cut (the
    # secrets other tests remembered count), not by the megabyte: the whole text was cleaned
    # before (0.6 s of the event loop with no secret value, 30 s with 10,000).
    reach = len(max(secrets, key=len, default="")) + redaction_reach()
    past_a_cut = 2 * (len(REDACTED) + 3) * reach
    assert sum(cleaned) < 2 * (DETAIL_CHARS + _TRACE_CHARS) + 2 * past_a_cut + 2 * len(trace)
    assert sum(cleaned) < len(BIG)
    assert len(detail) == DETAIL_CHARS
    assert len(trace) < 2 * _TRACE_CHARS


def _texts() -> dict[str, tuple[str, tuple[str, ...]]]:
    """(text, its Secret() values) of shapes where cleaning changes lengths before the cut."""
    shrinking = f"a {LONG} b " * 40  # each 312 characters become 10
    growing = "pin 7 " * 400  # each 1 becomes 10
    header = "password: " + "p" * 5000 + f"\nthen {TOKEN} and " + "y" * 2000
    cases: dict[str, tuple[str, tuple[str, ...]]] = {
        "plain": (BIG, (PIN,)),
        "shrinking, then a secret": (shrinking + PIN + BIG, (LONG, PIN)),
        "growing": (growing + PIN * 300, ("7", PIN)),
        "a header value to the end of a long line": (header, ()),
        "escaped credential": ("e " + TOKEN.replace("_", "%5F") * 200, ()),
    }
    for offset in range(DETAIL_CHARS - 40, DETAIL_CHARS + 5, 3):
        cases[f"token at {offset}"] = ("z" * offset + TOKEN + BIG[:3000], ())
        cases[f"pin at {offset} after shrinking"] = (
            shrinking[:2000] + "z" * offset + PIN + "z" * 3000,
            (LONG, PIN),
        )
    return cases


TEXTS = _texts()


@pytest.mark.parametrize("case", TEXTS)
def test_the_kept_text_is_what_cleaning_the_whole_then_cutting_keeps(case: str) -> None:
    text, secrets = TEXTS[case]
    whole = redact(without_secrets(text, secrets))[:DETAIL_CHARS]
    assert kept_text(text, secrets) == whole
    assert TOKEN[:8] not in whole
    assert [s for s in secrets if s in whole] == []


@pytest.mark.parametrize("offset", range(_TRACE_CHARS - 40, _TRACE_CHARS + 5, 3))
def test_a_long_exception_text_is_cut_in_the_trace_without_half_a_secret(offset: int) -> None:
    exc = RuntimeError("z" * offset + TOKEN + " " + PIN + "z" * 100_000)
    exc.add_note(f"note {PIN}")
    trace = failure_trace(exc, (PIN,))
    assert "RuntimeError: zzz" in trace
    assert "cut" in trace
    assert TOKEN[:8] not in trace
    assert PIN[:8] not in trace
    assert REDACTED in trace or offset >= _TRACE_CHARS - len(TOKEN)
