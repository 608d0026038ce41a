"""A stdio client that writes requests and reads no answers: the server stops reading once
:data:`~airlock.frontends._mcp_stdin.MAX_OPEN_REQUESTS` of its requests wait to be answered
(the pipe then fills and the client blocks), rather than taking every line as a task that
holds its answer; once the client reads, every request is answered."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from mcp.server.stdio import stdio_server

from airlock.frontends._mcp_stdin import MAX_OPEN_REQUESTS, StdinLines
from airlock.frontends.mcp import build_mcp_server
from tests.airlock.fake_surface import EchoSurface

HELLO = {
    "jsonrpc": "2.0",
    "id": "hello",
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}
REQUESTS = 10 * MAX_OPEN_REQUESTS


class Counted:
    """The lines, as the SDK takes them, counted."""

    def __init__(self, lines: StdinLines) -> None:
        self._lines = lines
        self.taken = 0

    def __aiter__(self) -> Counted:
        return self

    async def __anext__(self) -> str:
        line = await anext(self._lines)
        self.taken += 1
        return line


class Stdout:
    """A client's end of stdout: nothing is read until ``reading`` is set."""

    def __init__(self) -> None:
        self.reading = asyncio.Event()
        self.lines: list[str] = []

    async def write(self, text: str) -> None:
        await self.reading.wait()
        self.lines.append(text)

    async def flush(self) -> None:
        return None


async def _settled(counted: Counted) -> int:
    """Lines taken once the count stops changing (a few turns of the loop each)."""
    last = -1
    while counted.taken != last:
        last = counted.taken
        await asyncio.sleep(0.05)
    return last


@pytest.mark.anyio
async def test_a_client_that_reads_nothing_stops_the_reading_at_the_bound() -> None:
    lines = [HELLO, {"jsonrpc": "2.0", "method": "notifications/initialized"}]
    lines += [{"jsonrpc": "2.0", "id": i, "method": "ping"} for i in range(REQUESTS)]
    reader = asyncio.StreamReader()
    reader.feed_data(b"".join(json.dumps(line).encode() + b"\n" for line in lines))
    stdin = StdinLines(reader)  # a pipe's lines: the end waits for nothing
    counted = Counted(stdin)
    stdout = Stdout()
    server = build_mcp_server(EchoSurface())
    given_in: Any = counted
    given_out: Any = stdout
    async with stdio_server(stdin=given_in, stdout=given_out) as (read_stream, write_stream):
        stdin.answer_with(write_stream)
        answers: Any = stdin.noting(write_stream)
        serving = asyncio.ensure_future(
            server.run(read_stream, answers, server.create_initialization_options())
        )
        try:
            # The handshake's two lines, then as many pings as may wait for an answer.
            assert await _settled(counted) == 2 + MAX_OPEN_REQUESTS
            stdout.reading.set()
            while len(stdout.lines) < 1 + REQUESTS:  # (pytest's timeout bounds it)
                await asyncio.sleep(0.05)
            answered = [json.loads(line) for line in stdout.lines]
            assert sorted(a["id"] for a in answered[1:]) == list(range(REQUESTS))
            assert all(a["result"] == {} for a in answered[1:])
            assert counted.taken == len(lines)
        finally:
            serving.cancel()
            reader.feed_eof()
