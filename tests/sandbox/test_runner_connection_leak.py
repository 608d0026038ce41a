"""A start that fails or is cancelled once its runner connected closes that connection.

After the runner's connection is accepted, the start asks the engine who the runner is
(``container.reload``) and wraps the connection in a stream: either may fail (the engine
refuses, its answer is late) or be cancelled (a pool closing, close() cutting a start). The
connection is then nobody's and must be closed at once: the runner sees its end, and no
socket is left for the garbage collector to close (with a ``ResourceWarning``), one more at
each retry of a warm pool.

The first tests stand in for the container (no Docker: a real listening socket, a fake
engine); the last starts real ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import shutil
import socket
import tempfile
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import docker
import docker.errors
import pytest
from docker.models.containers import Container

from airlock.policies import SandboxProfile
from airlock.sandbox import DockerBackend, SandboxError, SandboxFailure
from airlock.sandbox._program_link import accept_runner
from tests.conftest import IMAGE, require_docker


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def listening() -> Iterator[tuple[socket.socket, socket.socket]]:
    """A listener the start accepts on, and the runner's end, connected to it."""
    folder = Path(tempfile.mkdtemp(prefix="airlock-test-"))  # (a short path: bind limit)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    runner = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(str(folder / "bridge.sock"))
        listener.listen(1)
        listener.setblocking(False)
        runner.connect(str(folder / "bridge.sock"))
        runner.settimeout(1.0)
        yield listener, runner
    finally:
        runner.close()
        listener.close()
        shutil.rmtree(folder, ignore_errors=True)


class _Container:
    """A container whose reload the engine refuses, or answers only once ``answer`` is set."""

    id = "0" * 64

    def __init__(self, *, refuses: bool) -> None:
        self.refuses = refuses
        self.asked = threading.Event()
        self.answer = threading.Event()

    def reload(self) -> None:
        self.asked.set()
        if self.refuses:
            raise docker.errors.APIError("500 Server Error: injected inspect failure")
        self.answer.wait(10)
        raise docker.errors.NotFound("gone meanwhile")


def _closed_by_the_host(runner: socket.socket) -> bool:
    """Whether the host closed its end of the runner's connection (the runner reads EOF)."""
    try:
        return runner.recv(1) == b""
    except TimeoutError:
        return False


@pytest.mark.anyio
async def test_a_runner_connection_is_closed_when_the_engine_fails_to_say_who_the_runner_is(
    listening: tuple[socket.socket, socket.socket],
) -> None:
    listener, runner = listening
    container = _Container(refuses=True)
    with pytest.raises(SandboxError):
        await accept_runner(listener, cast(Container, container), timeout=5)
    assert _closed_by_the_host(runner), "the accepted connection was left open"


@pytest.mark.anyio
async def test_a_runner_connection_is_closed_when_the_start_is_cancelled_meanwhile(
    listening: tuple[socket.socket, socket.socket],
) -> None:
    listener, runner = listening
    container = _Container(refuses=False)
    accepting = asyncio.create_task(accept_runner(listener, cast(Container, container), timeout=5))
    try:
        assert await asyncio.to_thread(container.asked.wait, 5)
        accepting.cancel()  # (a pool closing, close() cutting the start)
        with pytest.raises(asyncio.CancelledError):
            await accepting
        assert _closed_by_the_host(runner), "the accepted connection was left open"
    finally:
        container.answer.set()


def _unclosed_bridge_sockets(caught: list[warnings.WarningMessage]) -> list[str]:
    return [
        str(w.message)
        for w in caught
        if issubclass(w.category, ResourceWarning) and "bridge.sock" in str(w.message)
    ]


async def _failed_runs(client: docker.DockerClient) -> None:
    backend = DockerBackend(image=IMAGE, profile=SandboxProfile(timeout_s=5), client=client)
    await backend.start()
    try:
        for _ in range(2):
            with pytest.raises(SandboxFailure):
                await backend.run("1")
    finally:
        await backend.close()


@pytest.mark.docker
@pytest.mark.anyio
@pytest.mark.parametrize("fails", ["inspect", "stream"])
async def test_a_start_failing_after_its_runner_connected_leaves_no_socket_open(
    monkeypatch: pytest.MonkeyPatch, fails: str
) -> None:
    require_docker()
    client = docker.from_env(timeout=30)
    if fails == "inspect":

        def refused(*args: Any, **kwargs: Any) -> Any:
            raise docker.errors.APIError("500 Server Error: injected inspect failure")

        monkeypatch.setattr(client.api, "inspect_container", refused)
    else:

        async def refused_stream(*args: Any, **kwargs: Any) -> Any:
            raise OSError("injected: the stream could not be made")

        monkeypatch.setattr(asyncio, "open_unix_connection", refused_stream)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        try:
            await _failed_runs(client)
        finally:
            client.close()
        with contextlib.suppress(Exception):
            gc.collect()
    assert _unclosed_bridge_sockets(caught) == []
