"""What can never succeed says so: not retryable, with a stable code, and raised once.

A closed backend refuses every later use (no engine needed to see it); a temporary directory
so deep that no container's bridge socket can be bound fails the run at once, and the warm
pool stops instead of trying again twice a second for as long as the process lives.
"""

from __future__ import annotations

import asyncio
import logging
import os
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from airlock.policies import SandboxProfile
from airlock.sandbox import DockerBackend, SandboxError
from airlock.sandbox._errors import SandboxClosed, SocketPathTooLong
from tests.bridge.records import ALICE
from tests.conftest import IMAGE, require_docker


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def _run(backend: DockerBackend) -> object:
    return await backend.run("1")


async def _keep(backend: DockerBackend) -> object:
    return backend.keep(ALICE)


# what is done with a closed backend
AFTER_CLOSE: dict[str, Callable[[DockerBackend], Awaitable[object]]] = {
    "run": _run,
    "keep": _keep,
}


@pytest.mark.anyio
@pytest.mark.parametrize("use", sorted(AFTER_CLOSE))
async def test_a_closed_backend_is_not_retryable(use: str) -> None:
    backend = DockerBackend(image=IMAGE)
    await backend.close()
    with pytest.raises(SandboxError) as raised:
        await AFTER_CLOSE[use](backend)
    assert type(raised.value) is SandboxClosed
    assert (raised.value.code, raised.value.retryable) == ("sandbox_closed", False)
    assert "closed" in str(raised.value)


@pytest.mark.docker
@pytest.mark.anyio
async def test_a_socket_path_too_long_fails_the_run_once_and_stops_the_pool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    require_docker()
    # Deeper than the longest socket path Linux binds (107 bytes) on its own.
    deep = tmp_path / ("d" * max(107 - len(os.fsencode(tmp_path)), 1))
    deep.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(deep))
    caplog.set_level(logging.WARNING, logger="airlock.sandbox._pool")
    backend = DockerBackend(image=IMAGE, profile=SandboxProfile(timeout_s=5), pool_size=2)
    await backend.start()
    try:
        with pytest.raises(SocketPathTooLong) as raised:
            await backend.run("1")
        assert raised.value.retryable is False
        assert raised.value.path.startswith(str(deep))
        with pytest.raises(SocketPathTooLong):
            await backend.pool.wait_ready(1, timeout=5)
        assert isinstance(backend.pool.stopped_by, SocketPathTooLong)
        # A retrying pool would log a failed start every second per slot.
        caplog.clear()
        with pytest.raises(SocketPathTooLong):
            await backend.run("1")
        await asyncio.sleep(2.5)
        assert [r.getMessage() for r in caplog.records] == []
    finally:
        await backend.close()
