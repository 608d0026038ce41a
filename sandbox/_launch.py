"""Starting one sandbox container: its socket, the hardened container, its runner's hello.

Each container gets a host directory of its own, bind-mounted read-only at ``/run/airlock``,
holding the Unix socket its runner connects to (the container has no network). The container
is created and started through the engine (:func:`~airlock.sandbox._masked.run_masked`), the
runner's connection is accepted only from the process that container started
(:func:`~airlock.sandbox._program_link.accept_runner`), and it must say ``hello`` in this
protocol's version. Whatever fails on the way, nothing is left: the container is removed and
the directory deleted before the error is raised. A create the engine did not answer may
still make its container after that (a loaded engine finishes it late): it is looked for by
its name in the background (:func:`chase_late_create`), as work of whoever runs the start
(:data:`AFTER_START`), which ends it when it closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import socket
import tempfile
from collections.abc import Callable, Coroutine
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import docker
from docker.models.containers import Container

from airlock.bridge import PROTOCOL_VERSION, FrameError, read_frame
from airlock.bridge import airlock_wire as wire
from airlock.policies import SandboxProfile
from airlock.sandbox._engine_thread import on_engine_thread
from airlock.sandbox._errors import (
    SandboxError,
    SandboxFailure,
    SocketPathTooLong,
    map_docker_errors,
)
from airlock.sandbox._hardening import WarmUp, container_config
from airlock.sandbox._inputs import RunInput
from airlock.sandbox._masked import run_masked
from airlock.sandbox._owner import remove_container
from airlock.sandbox._program_link import HELLO_MAX_BYTES, accept_runner

__all__ = [
    "AFTER_START",
    "SOCKET_PATH_LIMIT",
    "Launched",
    "chase_late_create",
    "launch",
    "remove",
]

_log = logging.getLogger(__name__)

STARTUP_TIMEOUT_S: Final = 30.0
"""How long a new container's runner may take to connect and say ``hello``."""
SOCKET_PATH_LIMIT: Final = 107
"""The longest path a Unix socket binds to on Linux, in bytes (``sun_path`` holds 108 with
the terminating zero)."""
LATE_CREATE_S: Final = 60.0
"""How long a container whose create got no answer is looked for by its name."""
_LATE_FIRST_S: Final = 0.25
_LATE_MOST_S: Final = 8.0
"""The first and the longest wait between two looks (each one twice the one before)."""

AFTER_START: ContextVar[Callable[[Coroutine[Any, Any, object]], bool] | None] = ContextVar(
    "airlock_after_start", default=None
)
"""Where a start puts the work it leaves to go on after it (``False``: refused, too much
of it already): set by whoever runs the start, which must end that work when it closes
(:class:`~airlock.sandbox._closing.Starts`). Unset: the work is not done, and what it would
have removed is left to the backend's last sweep, or to the next backend's reaper."""


@dataclass(frozen=True, slots=True)
class Launched:
    """A started container whose runner said ``hello`` on ``reader``/``writer``."""

    container: Container
    socket_dir: Path
    """The host directory of its socket: deleted when the container is destroyed."""
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    listener: socket.socket
    """Still open: a kept runner connects again for each program."""
    runner_pid: int
    """The runner's process id on the host, as the engine reported it."""
    runtime: str


async def launch(
    client: docker.DockerClient,
    *,
    image: str,
    profile: SandboxProfile,
    labels: dict[str, str],
    socket_root: Path,
    inputs: tuple[RunInput, ...] = (),
    warm_up: WarmUp = "first",
) -> Launched:
    """Start a container (with ``inputs`` mounted) and wait until its runner says hello;
    ``warm_up``: when its runner warms up (see :data:`WarmUp`).

    Raises:
        SocketPathTooLong: the socket's path under ``socket_root`` is too long to bind.
        SandboxFailure: the container did not start or its runner did not connect.
        SandboxError: the engine or the image is missing.
    """
    socket_dir: Path | None = None
    container: Container | None = None
    unanswered: list[str] = []  # the name of a container whose create got no answer
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        socket_dir = Path(tempfile.mkdtemp(prefix="run-", dir=socket_root))
        # The runner is not root and not the host's user: it needs to traverse the
        # directory and connect to the socket. Who connects is checked by accept_runner.
        socket_dir.chmod(0o755)
        path = socket_dir / wire.SOCKET_NAME
        if len(os.fsencode(path)) > SOCKET_PATH_LIMIT:
            # bind() would fail with an OSError that reads like a passing failure; no start
            # under this directory can ever succeed.
            raise SocketPathTooLong(str(path), limit=SOCKET_PATH_LIMIT)
        listener.bind(str(path))
        path.chmod(0o666)
        listener.listen(1)
        listener.setblocking(False)
        config = container_config(
            profile,
            image=image,
            socket_dir=socket_dir,
            labels=labels,
            inputs=inputs,
            warm_up=warm_up,
        )
        create = asyncio.ensure_future(
            on_engine_thread(_run_detached, client, config, unanswered.append)
        )
        try:
            container = await asyncio.shield(create)
        except asyncio.CancelledError:
            # The engine goes on creating and starting it (a pool closing cancels its
            # starts; nested timeouts cancel twice): wait for its answer, whatever cancels
            # again meanwhile, so that the container is removed below, never left running.
            container = await _answer(create)
            raise
        connection, runner_pid, runtime = await accept_runner(
            listener, container, timeout=STARTUP_TIMEOUT_S
        )
        try:
            reader, writer = await asyncio.open_unix_connection(sock=connection)
        except BaseException:  # (failed, or cancelled): no stream holds it yet
            connection.close()
            raise
        try:
            hello = await asyncio.wait_for(
                read_frame(reader, max_bytes=HELLO_MAX_BYTES), STARTUP_TIMEOUT_S
            )
        except BaseException:
            writer.transport.abort()
            raise
        if not hello or hello.get("type") != wire.HELLO or hello.get("version") != PROTOCOL_VERSION:
            writer.transport.abort()
            raise SandboxFailure(f"the runner's hello was not understood: {hello!r}")
    except BaseException as exc:
        listener.close()
        for name in unanswered:
            _chase_later(client, name)
        try:
            if container is not None:
                await remove(client, str(container.id))
        finally:
            if socket_dir is not None:
                shutil.rmtree(socket_dir, ignore_errors=True)
        if isinstance(exc, (TimeoutError, FrameError, OSError)):
            raise SandboxFailure(f"the sandbox runner did not start: {exc!r}") from exc
        raise
    return Launched(container, socket_dir, reader, writer, listener, runner_pid, runtime)


async def _answer(create: asyncio.Future[Container]) -> Container | None:
    """The container ``create`` made, once the engine answered, or ``None``; waits for that
    answer however often it is cancelled meanwhile."""
    while not create.done():
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(create)
    if create.cancelled() or create.exception() is not None:
        return None
    return create.result()


async def remove(client: docker.DockerClient, container_id: str) -> None:
    """Force-remove a container; one gone already, or being removed, is not an error.

    Raises:
        SandboxError: the engine refused for another reason.
    """
    await on_engine_thread(remove_container, client, container_id)


def _run_detached(
    client: docker.DockerClient, config: dict[str, Any], unanswered: Callable[[str], object]
) -> Container:
    with map_docker_errors():
        container = run_masked(client, config, unanswered=unanswered)
    if not isinstance(container, Container):
        raise SandboxFailure("the engine did not return a detached container")
    return container


def _chase_later(client: docker.DockerClient, name: str) -> None:
    later = AFTER_START.get()
    if later is None or not later(chase_late_create(client, name)):
        _log.warning(
            "sandbox container %s, whose create got no answer, may still be made: "
            "it is left to the backend's last sweep",
            name,
        )


async def chase_late_create(
    client: docker.DockerClient, name: str, *, within: float = LATE_CREATE_S
) -> bool:
    """Remove the container called ``name`` that a create the engine did not answer may make
    later: looked for after 0.25 s, then after twice as long each time (8 s at most), for
    ``within`` seconds in all. Whether it was found and removed; an engine that fails is
    asked again."""
    loop = asyncio.get_running_loop()
    until, wait = loop.time() + within, _LATE_FIRST_S
    while True:
        await asyncio.sleep(max(min(wait, until - loop.time()), 0.0))
        try:
            if await on_engine_thread(remove_container, client, name):
                _log.info("removed sandbox container %s, created after its create failed", name)
                return True
        except SandboxError as exc:
            _log.debug("could not remove sandbox container %s yet: %s", name, exc)
        if loop.time() >= until:
            return False
        wait = min(wait * 2, _LATE_MOST_S)
