"""Taking the bridge connections of a container: its runner's, and a kept runner's one per
program, told apart from any other.

A kept container's runner (the guest's zygote) opens a new connection to the host's socket for
every program and says ``hello`` on it with the ``run`` frame's one-time ``token``. The socket
file is connectable from anywhere in the container (and, on the host, by anyone who can reach
the directory), so :func:`accept_program` takes a connection only from the runner's own peer
(see :func:`~airlock.sandbox._runtime.is_runner_peer`) that says the token; it closes any
other unread.
"""

from __future__ import annotations

import asyncio
import hmac
import socket
import struct
import time
from typing import Final

from docker.models.containers import Container

from airlock.bridge import FrameError, read_frame
from airlock.bridge import airlock_wire as wire
from airlock.sandbox._errors import SandboxFailure, map_docker_errors
from airlock.sandbox._runtime import is_runner_peer

__all__ = ["HELLO_MAX_BYTES", "accept_program", "accept_runner", "peer_pid"]

HELLO_MAX_BYTES: Final = 4096
"""The largest ``hello`` frame the host reads."""
_STRAY_CONNECTIONS: Final = 8
"""Connections without the program's token a kept container may open before a run fails."""


def peer_pid(sock: socket.socket) -> int:
    """The pid of the process that connected ``sock`` (as the host sees it)."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, _uid, _gid = struct.unpack("3i", creds)
    return int(pid)


async def accept_runner(
    listener: socket.socket, container: Container, *, timeout: float
) -> tuple[socket.socket, int, str]:
    """The first connection to ``listener``: the container's runner, with its pid (as the
    host sees it) and the container's runtime.

    Raises:
        SandboxFailure: another process connected.
        TimeoutError: nothing connected within ``timeout`` seconds.
    """
    loop = asyncio.get_running_loop()
    connection, _ = await asyncio.wait_for(loop.sock_accept(listener), timeout)
    # The socket file is world-connectable on the host: only the container's own first
    # process (the runner) may be the peer.
    with map_docker_errors():
        await asyncio.to_thread(container.reload)
    runner_pid = int(container.attrs["State"]["Pid"])
    runtime = str(container.attrs["HostConfig"].get("Runtime") or "runc")
    if not is_runner_peer(
        peer_pid(connection),
        runtime=runtime,
        container_pid=runner_pid,
        container_id=str(container.id),
    ):
        connection.close()
        raise SandboxFailure("a process other than the container's runner connected")
    return connection, runner_pid, runtime


async def accept_program(
    listener: socket.socket,
    *,
    token: str,
    deadline: float,
    runtime: str,
    runner_pid: int,
    container_id: str,
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
    """The connection the kept runner opened for the program of ``token``, by ``deadline``
    (monotonic); ``None`` when none came, or after :data:`_STRAY_CONNECTIONS` others."""
    loop = asyncio.get_running_loop()
    for _ in range(_STRAY_CONNECTIONS):
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        try:
            connection, _ = await asyncio.wait_for(loop.sock_accept(listener), left)
        except TimeoutError:
            return None
        if not is_runner_peer(
            peer_pid(connection),
            runtime=runtime,
            container_pid=runner_pid,
            container_id=container_id,
        ):
            connection.close()
            continue
        reader, writer = await asyncio.open_unix_connection(sock=connection)
        try:
            hello = await asyncio.wait_for(
                read_frame(reader, max_bytes=HELLO_MAX_BYTES),
                max(deadline - time.monotonic(), 0.0),
            )
        except (TimeoutError, FrameError, OSError):
            writer.transport.abort()
            continue
        given = hello.get("token") if hello else None
        if (
            hello is not None
            and hello.get("type") == wire.HELLO
            and isinstance(given, str)
            and hmac.compare_digest(given.encode(), token.encode())
        ):
            return reader, writer
        writer.transport.abort()
    return None
