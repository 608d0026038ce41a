"""A final value as the host takes it from a ``done`` frame: re-checked against the value's
limits, so a guest that forges its frame with a value over them gets what an honest guest
reports for such a value (``ResultTooLarge``, ``result_too_large``, its size and the limit),
never the value."""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

import pytest

from airlock.policies import SandboxProfile
from airlock.sandbox import _final_value as final_value
from airlock.sandbox._container import MAX_VALUE_BYTES
from airlock.sandbox._final_value import VALUE_ELEMENTS
from airlock.sandbox._outcome import judge_outcome
from tests.sandbox.guest_image import load_guest

MAX = MAX_VALUE_BYTES

# (case, the forged frame's value, whether the host keeps it). Sizes are of compact JSON with
# characters beyond ASCII escaped, as the guest measures: "x" * n is n + 2 bytes, "\0" six
# bytes, an astral character twelve (two \\uXXXX).
VALUES: list[tuple[str, Any, bool]] = [
    ("small_number", 42, True),
    ("small_record", {"total": 8200, "rows": [1, 2.5, None, True, "é"]}, True),
    ("text_just_under", "x" * (MAX - 3), True),
    ("text_at", "x" * (MAX - 2), True),
    ("text_over", "x" * (MAX - 1), False),
    ("text_far_over", "v" * (12 << 20), False),
    ("nul_at", "\0" * ((MAX - 2) // 6), True),
    ("nul_over", "\0" * ((MAX - 2) // 6 + 1), False),
    ("astral_at", "\U0001f600" * ((MAX - 2) // 12), True),
    ("astral_over", "\U0001f600" * ((MAX - 2) // 12 + 1), False),
    ("non_ascii_over", "é" * (MAX // 6 + 1), False),
    ("list_at", ["x" * (MAX - 6), 0], True),
    ("list_over", ["x" * (MAX - 5), 0], False),
    ("records_over", [{"id": "a" * 90, "n": n} for n in range(MAX // 100)], False),
    ("key_over", {"k" * MAX: 0}, False),
    ("elements_at", [0] * (VALUE_ELEMENTS - 1), True),
    ("elements_over", [0] * VALUE_ELEMENTS, False),
    ("empty_lists_over", [[]] * (VALUE_ELEMENTS // 2), False),
]


class _Container(SimpleNamespace):
    id = "0" * 64


async def _judge(value: Any, status: str = "ok") -> Any:
    forged = {"status": status, "exit_status": 0, "has_value": True, "value": value}
    return await judge_outcome(
        {"type": "done", "result": forged},
        container=_Container(),  # type: ignore[arg-type]
        began=0.0,
        profile=SandboxProfile(),
        pooled=False,
    )


@pytest.mark.anyio
@pytest.mark.parametrize(("case", "value", "kept"), VALUES, ids=[c[0] for c in VALUES])
async def test_a_forged_final_value_is_judged_as_the_guest_judges_it(
    case: str, value: Any, kept: bool
) -> None:
    run = await _judge(value)
    frames, output = load_guest("airlock_frames"), load_guest("airlock_output")
    refusal = output.too_large(value, frames.to_json(value), MAX, VALUE_ELEMENTS)
    assert (refusal is None) == kept, refusal
    # (a comparison of booleans: pytest would print a value of megabytes)
    same_value = run.value == value
    if kept:
        assert (run.status, run.exit_status, run.has_value, run.error) == ("ok", 0, True, None)
        assert same_value
        return
    no_value = run.value is None
    assert (run.status, run.exit_status, run.has_value, no_value) == ("error", 1, False, True)
    assert run.error is not None
    assert run.error.model_dump(exclude_none=True) == refusal


@pytest.mark.anyio
async def test_a_value_beside_a_failure_is_checked_too() -> None:
    # The guest refuses an oversized value whatever the program's status (it set a value,
    # then raised): the error the host reports is the value's.
    run = await _judge("x" * MAX, status="error")
    no_value = run.value is None
    assert (run.status, run.has_value, no_value) == ("error", False, True)
    assert run.error is not None
    assert (run.error.code, run.error.size_bytes) == ("result_too_large", MAX + 2)


def _random_json(rng: random.Random, depth: int = 0) -> Any:
    pick = rng.randrange(9 if depth < 4 else 6)
    if pick == 0:
        return rng.choice([None, True, False])
    if pick == 1:
        return rng.randint(-(10**30) + 1, 10**30 - 1)
    if pick == 2:
        return rng.choice([rng.uniform(-1e300, 1e300), -1.7e308, 1e16, -1e-7, 5e-324, 0.1])
    if pick in (3, 4, 5):
        return _random_text(rng)
    if pick in (6, 7):
        return [_random_json(rng, depth + 1) for _ in range(rng.randrange(5))]
    return {_random_text(rng): _random_json(rng, depth + 1) for _ in range(rng.randrange(4))}


def _random_text(rng: random.Random) -> str:
    alphabet = 'a\0\x7f"\\/é\u2028\U0001f600'
    return "".join(rng.choice(alphabet) for _ in range(rng.randrange(6)))


@pytest.mark.parametrize("seed", range(300))
def test_the_bound_is_never_below_the_size(seed: int) -> None:
    value = _random_json(random.Random(seed))
    size = len(load_guest("airlock_frames").to_json(value))
    assert not final_value._surely_fits(value, size - 1)


@pytest.mark.anyio
async def test_a_value_that_surely_fits_is_not_encoded(monkeypatch: pytest.MonkeyPatch) -> None:
    # The bound from a few values costs microseconds; encoding, a hop to a thread and more.
    def measured(value: Any) -> None:
        raise AssertionError("measured")

    monkeypatch.setattr(final_value, "_measured", measured)
    run = await _judge({"rows": [{"id": n, "name": "é" * 40} for n in range(100)]})
    assert run.status == "ok"
