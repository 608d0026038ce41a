"""Measuring a forged final value does not hold the event loop (other runs go on meanwhile).

A forged ``done`` frame may carry a final value of up to the done frame's budget (about
16 MiB for the default profile: the output caps, JSON-escaped, and the value's limit). The
host measures it on a worker thread (:func:`~airlock.sandbox._final_value.oversized`), and
that must not hold the interpreter lock for long at a time: ``json``'s C encoder would, for
the whole value (hundreds of milliseconds on a small machine), and every other run would
wait that long.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Final

import pytest

from airlock.bridge import MAX_ELEMENTS
from airlock.sandbox._final_value import oversized

_DONE_BYTES: Final = 16 << 20
_LAG_S: Final = 0.05
"""The longest the loop may wait for its turn meanwhile (a switch interval is 5 ms)."""

# (case, a value as large as a forged done frame may carry)
VALUES: list[tuple[str, Any]] = [
    ("floats", [1.2345678901234567e-300] * (MAX_ELEMENTS - 1000)),
    ("texts", ["y" * 80] * (_DONE_BYTES // 83)),
    ("one_text", "x" * (_DONE_BYTES - 100)),
    ("escaped_text", "\0" * (_DONE_BYTES // 6 - 100)),
    ("records", [{"k" * 30: "v" * 40}] * ((MAX_ELEMENTS - 1000) // 3)),
]


@pytest.mark.anyio
@pytest.mark.parametrize(("case", "value"), VALUES, ids=[c[0] for c in VALUES])
async def test_measuring_a_forged_value_leaves_the_loop_its_turns(case: str, value: Any) -> None:
    lags: list[float] = []
    measuring = asyncio.create_task(oversized(value))
    last = time.perf_counter()
    while not measuring.done():
        await asyncio.sleep(0.001)
        now = time.perf_counter()
        lags.append(now - last)
        last = now
    refusal = measuring.result()
    assert refusal is not None
    assert refusal.code == "result_too_large"
    assert max(lags) < _LAG_S, f"the loop waited {max(lags) * 1000:.0f} ms for its turn"
