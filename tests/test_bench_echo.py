"""The machine's floor under a bridge round trip (``bench/_echo.py``): every round trip a real
one, between two processes, answered whole."""

from __future__ import annotations

import asyncio

import pytest

from bench import _echo
from bench._echo import echo_round_trips


def test_each_round_trip_is_timed_by_the_client_after_the_warm_up() -> None:
    latencies = asyncio.run(echo_round_trips(50))

    assert len(latencies) == 50
    # A round trip between two processes is never free, and never takes seconds idle.
    assert all(0 < latency < 5 for latency in latencies)


def test_a_client_that_fails_is_an_error_not_an_empty_figure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_echo, "_CLIENT", "raise SystemExit(3)")

    with pytest.raises(RuntimeError, match="exited with 3"):
        asyncio.run(echo_round_trips(10))
