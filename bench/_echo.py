"""The machine's own floor under a bridge round trip: an asyncio server on a Unix socket
answering a blocking client in another process, with messages the size of a call frame and
its result, and no work between them. A round trip of the bridge quoted against it says what
the bridge adds on this machine, apart from how fast the machine wakes a process and switches
to it (on a virtual machine, much of it)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile

__all__ = ["echo_round_trips"]

CALL_BYTES = 86
"""About a ``call`` frame of ``bench/bridge.py``'s tool, header included."""
RESULT_BYTES = 270
"""About its ``result`` frame."""
_WARM_UP = 200

_CLIENT = """
import json, socket, sys, time
path, count, request, answer = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
sock = socket.socket(socket.AF_UNIX)
sock.connect(path)
message, latencies = b"q" * request, []
for _ in range(count):
    began = time.perf_counter()
    sock.sendall(message)
    got = 0
    while got < answer:
        piece = sock.recv(65536)
        if not piece:
            raise SystemExit("the echo server closed the connection")
        got += len(piece)
    latencies.append(time.perf_counter() - began)
print(json.dumps(latencies))
"""


class _Answers(asyncio.Protocol):
    """Answers each whole request with ``RESULT_BYTES`` bytes, at once."""

    def __init__(self) -> None:
        self._transport: asyncio.WriteTransport | None = None
        self._pending = 0
        self._answer = b"a" * RESULT_BYTES

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.WriteTransport)
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        assert self._transport is not None
        self._pending += len(data)
        while self._pending >= CALL_BYTES:
            self._pending -= CALL_BYTES
            self._transport.write(self._answer)


async def echo_round_trips(count: int) -> list[float]:
    """``count`` round trips' times in seconds, measured by the client, after a warm-up (as
    the benchmark program warms the bridge), served by the running event loop.

    Raises:
        RuntimeError: the client process failed.
    """
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "echo.sock")
        server = await asyncio.get_running_loop().create_unix_server(_Answers, path)
        async with server:
            client = await asyncio.create_subprocess_exec(
                sys.executable,
                "-c",
                _CLIENT,
                path,
                str(_WARM_UP + count),
                str(CALL_BYTES),
                str(RESULT_BYTES),
                stdout=asyncio.subprocess.PIPE,
            )
            out, _ = await client.communicate()
    if client.returncode != 0:
        raise RuntimeError(f"the echo client exited with {client.returncode}")
    latencies: list[float] = json.loads(out)
    return latencies[_WARM_UP:]
