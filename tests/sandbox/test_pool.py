"""The warm pool retries a start that may succeed later, and stops at one that cannot.

No Docker: the pool is given a start function that fails as scripted (errors of the sandbox
layer, with their ``retryable`` flags) and then hands out stand-ins for containers.
"""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import cast

import pytest

from airlock.sandbox import EngineUnavailable, ImageMissing, SandboxError, SandboxFailure, _pool
from airlock.sandbox._container import SandboxContainer
from airlock.sandbox._errors import SandboxClosed, SocketPathTooLong
from airlock.sandbox._inputs import InputRefused
from airlock.sandbox._pool import DEMAND_S, WarmPool


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class _Container:
    """Enough of a started container for the pool: alive until destroyed."""

    alive = True

    async def destroy(self) -> None:
        self.alive = False


class _Starts:
    """Fails the first ``failures`` starts with ``error``, then starts containers."""

    def __init__(self, error: SandboxError | InputRefused | None = None, failures: int = 0) -> None:
        self.error = error
        self.failures = failures
        self.calls = 0
        self.warm: list[bool] = []

    async def __call__(self, *, warm: bool) -> SandboxContainer:
        self.calls += 1
        self.warm.append(warm)
        if self.error is not None and self.calls <= self.failures:
            raise self.error
        return cast(SandboxContainer, _Container())


# Errors that no later start can escape: the pool stops at the first and says why.
FOR_GOOD = [
    pytest.param(SandboxClosed(), "sandbox_closed", id="closed-backend"),
    pytest.param(
        SocketPathTooLong("/deep/" + "d" * 120 + "/bridge.sock", limit=107),
        "sandbox_socket_path_too_long",
        id="socket-path-too-long",
    ),
    pytest.param(ImageMissing("airlock-sandbox:latest"), "sandbox_image_missing", id="no-image"),
]
# Errors a later start may not meet: the pool tries again (after a second) and fills up.
PASSING = [
    pytest.param(SandboxFailure("the engine refused"), id="sandbox-failure"),
    pytest.param(EngineUnavailable("no answer"), id="engine-unavailable"),
    # An input changed on the host since the pool began: the operator may mend it.
    pytest.param(
        InputRefused("sales.csv is not readable", name="sales.csv", reason="unreadable"),
        id="input-refused",
    ),
]


@pytest.mark.anyio
@pytest.mark.parametrize(("error", "code"), FOR_GOOD)
async def test_a_failure_that_is_not_retryable_stops_the_pool(
    error: SandboxError, code: str
) -> None:
    starts = _Starts(error, failures=1_000)
    pool = WarmPool(starts, size=1)
    began = time.monotonic()
    with pytest.raises(SandboxError) as raised:
        await pool.wait_ready(1, timeout=3.0)
    assert raised.value is error
    assert (raised.value.code, raised.value.retryable) == (code, False)
    assert time.monotonic() - began < 1.0, "wait_ready says so at once, not at its timeout"
    assert pool.stopped_by is error
    # No retries: neither in the background nor when runs take (and would refill).
    await asyncio.sleep(1.5)
    assert pool.take() is None
    await asyncio.sleep(0.1)
    assert starts.calls == 1
    await pool.close()


@pytest.mark.anyio
@pytest.mark.parametrize("error", PASSING)
async def test_a_retryable_failure_is_tried_again(error: SandboxError | InputRefused) -> None:
    starts = _Starts(error, failures=1)
    pool = WarmPool(starts, size=1)
    await pool.wait_ready(1, timeout=5.0)
    assert (starts.calls, pool.ready, pool.stopped_by) == (2, 1, None)
    await pool.close()


@pytest.mark.anyio
async def test_the_pool_warms_its_containers_unless_runs_find_it_empty(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [1000.0]
    # The pool's clock alone: the event loop's own goes on, so the waits below time out.
    monkeypatch.setattr(_pool, "time", SimpleNamespace(monotonic=lambda: now[0]))
    starts = _Starts()
    pool = WarmPool(starts, size=1)
    pool.fill()
    await pool.wait_ready(1, timeout=5.0)
    assert pool.take() is not None  # found: its refill warms up
    await pool.wait_ready(1, timeout=5.0)
    assert starts.warm == [True, True]
    assert pool.take() is not None
    assert pool.take() is None  # a run found it empty: the refill it began does not warm up
    await pool.wait_ready(1, timeout=5.0)
    assert pool.take() is not None  # within DEMAND_S of that: nor does the next
    await pool.wait_ready(1, timeout=5.0)
    now[0] += DEMAND_S
    assert pool.take() is not None  # DEMAND_S later: warm again
    await pool.wait_ready(1, timeout=5.0)
    assert starts.warm == [True, True, False, False, True]
    await pool.close()
