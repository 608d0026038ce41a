"""A Docker engine slow to remove or to create containers, for tests of bounded waits.

A Unix-socket proxy in front of the engine's socket holds every ``DELETE`` request (or every
container create) for ``delay`` seconds before passing it on (a loaded host, a big overlay to
unmount, a wedged daemon): what a removal or a start costs then is the delay, and nothing
else changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import docker

from airlock.sandbox._owner import labelled_containers

ENGINE_SOCKET = "/var/run/docker.sock"
REMOVALS = re.compile(rb"DELETE ")
CREATES = re.compile(rb"POST /v[0-9.]+/containers/create")


async def _pipe(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    delay: float,
    held: re.Pattern[bytes] = REMOVALS,
) -> None:
    try:
        while data := await reader.read(65536):
            if delay and held.match(data):
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


def slow_removals(delay: float) -> contextlib.AbstractContextManager[docker.DockerClient]:
    """A client whose container removals the engine answers ``delay`` seconds late."""
    return slow_engine(delay, held=REMOVALS)


def slow_creates(delay: float) -> contextlib.AbstractContextManager[docker.DockerClient]:
    """A client whose container creates reach the engine ``delay`` seconds late."""
    return slow_engine(delay, held=CREATES)


@contextlib.contextmanager
def slow_engine(delay: float, *, held: re.Pattern[bytes]) -> Iterator[docker.DockerClient]:
    """A client whose requests that ``held`` matches reach the engine ``delay`` seconds late."""
    loop = asyncio.new_event_loop()
    folder = tempfile.mkdtemp(prefix="slow-engine-")
    path = str(Path(folder) / "docker.sock")

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_unix_connection(ENGINE_SOCKET)
        down = asyncio.create_task(_pipe(up_reader, writer, 0))
        await _pipe(reader, up_writer, delay, held)
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
