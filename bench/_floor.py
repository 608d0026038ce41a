"""The warm run's floor: the same request -> result with nothing of airlock in between.

A ``python3`` waiting in a container of the sandbox image (``--network none``, not root)
on a Unix socket the host listens on, as a kept runner's program process waits: the host
sends it a program, it runs the program (its last line's value is the answer) and sends
the value back. No fresh process per run, no clearing, no checks, no bridge: what a run
costs this machine's processors, caches and the engine's socket path alone, taken at the
same moments as the warm run's, so that its ratio to this says what airlock adds.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import struct
import tempfile
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import docker
import docker.errors

__all__ = ["Floor", "FloorAnswer", "floor"]

_GUEST = """
import json, socket, struct, time
s = socket.socket(socket.AF_UNIX)
s.connect('/floor/floor.sock')
f = s.makefile('rb')
while True:
    head = f.read(4)
    if len(head) < 4:
        break
    source = f.read(struct.unpack('>I', head)[0]).decode()
    body, _, last = source.rstrip('\\n').rpartition('\\n')
    names = {}
    started = time.time()
    exec(compile(body, '<program>', 'exec'), names)
    value = eval(compile(last, '<program>', 'eval'), names)
    answer = json.dumps({'value': value, 'started': started, 'ended': time.time()}).encode()
    s.sendall(struct.pack('>I', len(answer)) + answer)
"""


@dataclass(frozen=True)
class FloorAnswer:
    """One round trip's answer: the program's value, and when (``time.time()``, the clock
    the host and its containers share) the program began and ended in the container."""

    value: object
    started: float
    ended: float


class Floor:
    """A connected waiting ``python3`` in a container: :meth:`run` is one round trip."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer

    async def run(self, program: str) -> FloorAnswer:
        """Send ``program``, wait for its answer."""
        data = program.encode()
        self._writer.write(struct.pack(">I", len(data)) + data)
        head = await self._reader.readexactly(4)
        answer = json.loads(await self._reader.readexactly(struct.unpack(">I", head)[0]))
        return FloorAnswer(answer["value"], answer["started"], answer["ended"])


@contextlib.asynccontextmanager
async def floor(image: str, runtime: str | None = None) -> AsyncIterator[Floor]:
    """Start the floor's container of ``image`` and yield it once connected; removed after.

    Raises:
        SystemExit: the container did not connect within 30 s.
    """
    client = docker.from_env()
    with tempfile.TemporaryDirectory(prefix="airlock-floor-") as directory:
        os.chmod(directory, 0o755)
        path = os.path.join(directory, "floor.sock")
        accepted: asyncio.Future[Floor] = asyncio.get_running_loop().create_future()

        def connected(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            if not accepted.done():
                accepted.set_result(Floor(reader, writer))

        server = await asyncio.start_unix_server(connected, path)
        os.chmod(path, 0o777)  # the container's user is not the host's
        container = await asyncio.to_thread(
            client.containers.run,
            image,
            ["python3", "-I", "-S", "-c", _GUEST],
            entrypoint=[],
            detach=True,
            network_mode="none",
            runtime=runtime,
            user="65534:65534",
            volumes={directory: {"bind": "/floor", "mode": "ro"}},
            name="airlock-bench-floor-" + uuid.uuid4().hex[:12],
        )
        try:
            try:
                yield await asyncio.wait_for(accepted, 30)
            except TimeoutError:
                raise SystemExit("the floor's container did not connect in 30 s") from None
        finally:
            server.close()
            with contextlib.suppress(docker.errors.APIError):
                await asyncio.to_thread(container.remove, force=True)
