"""Measuring a forged final value does not hold the event loop (other runs go on meanwhile).

A forged ``done`` frame may carry a final value of up to the done frame's budget (about
16 MiB for the default profile: the output caps, JSON-escaped, and the value's limit). The
host measures it on a worker thread (:func:`~airlock.sandbox._final_value.oversized`), and
that must not hold the interpreter lock for long at a time: ``json``'s C encoder would, for
the whole value (hundreds of milliseconds on a small machine), and every other run would
wait that long. So no one call of the encoder may make more than a slice's worth of text:
what these tests check, rather than time, which a shared machine makes noisy (the time is
the benchmark's: ``bench/hostile_frames.py``).
"""

from __future__ import annotations

from typing import Any, Final

import pytest

from airlock.bridge import MAX_ELEMENTS, count_elements
from airlock.sandbox import _final_value as final_value
from airlock.sandbox._final_value import oversized

_DONE_BYTES: Final = 16 << 20
_MOST_AT_ONCE: Final = max(final_value._CHUNK_BYTES, 12 * final_value._SLICE_CHARS) + 64
"""The most text one call of the encoder may make: a run of items, or a slice of a text
(12 bytes a character at worst), and its brackets."""

# (case, a value as large as a forged done frame may carry)
VALUES: list[tuple[str, Any]] = [
    ("floats", [1.2345678901234567e-300] * (MAX_ELEMENTS - 1000)),
    ("texts", ["y" * 80] * (_DONE_BYTES // 83)),
    ("one_text", "x" * (_DONE_BYTES - 100)),
    ("escaped_text", "\0" * (_DONE_BYTES // 6 - 100)),
    ("astral_text", "\U0001f600" * (_DONE_BYTES // 12 - 100)),
    ("records", [{"k" * 30: "v" * 40}] * ((MAX_ELEMENTS - 1000) // 3)),
]


def _encoded_lengths(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    made: list[int] = []
    encode = final_value._encode

    def counted(value: Any) -> str:
        text = encode(value)
        made.append(len(text))
        return text

    monkeypatch.setattr(final_value, "_encode", counted)
    return made


@pytest.mark.anyio
@pytest.mark.parametrize(("case", "value"), VALUES, ids=[c[0] for c in VALUES])
async def test_measuring_a_forged_value_encodes_it_a_slice_at_a_time(
    case: str, value: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = _encoded_lengths(monkeypatch)
    refusal = await oversized(value)
    assert refusal is not None
    assert refusal.code == "result_too_large"
    assert made, "the value was measured"
    assert max(made) <= _MOST_AT_ONCE, f"one call of the encoder made {max(made)} characters"


def _records(count: int) -> list[dict[str, Any]]:
    return [
        {"id": n, "name": f"customer {n}", "total": n * 1.5, "paid": n % 2 == 0, "tags": ["a"]}
        for n in range(count)
    ]


# (case, a legitimate value too large for the quick bound: measured on every run that
# returns it)
LEGITIMATE: list[tuple[str, Any]] = [
    ("records", _records(20_000)),
    ("numbers", list(range(200_000))),
    ("texts", ["x" * 100] * 50_000),
    ("nested", [{"rows": _records(20), "note": "é" * 50} for _ in range(1_000)]),
]


def _encoder_alone(value: Any) -> tuple[int, int]:
    text = final_value._encode(value)
    return len(text), count_elements(text.encode())


@pytest.mark.parametrize(("case", "value"), LEGITIMATE, ids=[c[0] for c in LEGITIMATE])
def test_a_legitimate_value_is_measured_exactly_a_run_at_a_time(
    case: str, value: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = _encoder_alone(value)
    made = _encoded_lengths(monkeypatch)
    assert final_value._size_of(value) == expected
    assert max(made) <= _MOST_AT_ONCE
    # Runs of items, not an item at a time (which cost 8 times the encoder's time).
    assert len(made) <= expected[0] // 1000 + 10, f"{len(made)} calls of the encoder"
