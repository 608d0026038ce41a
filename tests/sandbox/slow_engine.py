"""A Docker engine slow to remove containers, for tests of bounded waits.

A Unix-socket proxy in front of the engine's socket holds every ``DELETE`` request for
``delay`` seconds before passing it on (a loaded host, a big overlay to unmount): what a
removal costs then is the delay, and nothing else changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import docker

from airlock.sandbox._owner import labelled_containers

ENGINE_SOCKET = "/var/run/docker.sock"


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    try:
        while data := await reader.read(65536):
            if delay and data.startswith(b"DELETE "):
                await asyncio.sleep(delay)
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


async def _shut(server: asyncio.Server) -> None:
    """Stop serving and end every connection still piped (a removal still held, say)."""
    server.close()
    others = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    for task in others:
        task.cancel()
    await asyncio.gather(*others, return_exceptions=True)


@contextlib.contextmanager
def slow_removals(delay: float) -> Iterator[docker.DockerClient]:
    """A client whose container removals the engine answers ``delay`` seconds late."""
    loop = asyncio.new_event_loop()
    folder = tempfile.mkdtemp(prefix="slow-engine-")
    path = str(Path(folder) / "docker.sock")

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_unix_connection(ENGINE_SOCKET)
        down = asyncio.create_task(_pipe(up_reader, writer, 0))
        await _pipe(reader, up_writer, delay)
        await down

    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    serving = asyncio.run_coroutine_threadsafe(
        asyncio.start_unix_server(connection, path=path), loop
    )
    server = serving.result(10)
    client = docker.DockerClient(base_url=f"unix://{path}", timeout=30)
    try:
        yield client
    finally:
        client.close()
        asyncio.run_coroutine_threadsafe(_shut(server), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()
        with contextlib.suppress(OSError):
            Path(path).unlink()
            Path(folder).rmdir()


async def left_containers(owner: str, *, within: float = 0.0) -> list[str]:
    """The backend's (``owner``'s) containers still on the engine once ``within`` seconds have
    passed without all of them going."""
    client = docker.from_env()
    try:
        until = time.monotonic() + within
        while True:
            left = await asyncio.to_thread(labelled_containers, client, owner=owner)
            if not left or time.monotonic() >= until:
                return [str(entry["Id"])[:12] for entry in left]
            await asyncio.sleep(0.5)
    finally:
        client.close()
