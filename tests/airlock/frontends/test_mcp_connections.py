"""The MCP server over HTTP under connections that never finish: deadlines for each request's
head and body, a cap on open connections, and a token holder who still gets through."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import resource
import socket
import subprocess
import sys
import time

import anyio
import httpx
import pytest

from airlock.frontends._mcp_connections import quiet_accept_errors
from airlock.frontends.mcp import build_mcp_server
from tests.airlock.fake_surface import EchoSurface
from tests.airlock.frontends.mcp_servers import (
    ACCEPT,
    BEARER,
    HELLO,
    ROOT,
    TOKEN,
    free_port,
    serving,
    wait_for,
)

HEAD = b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:PORT\r\n"
AUTHORIZED = (
    HEAD
    + f"Authorization: Bearer {TOKEN}\r\n".encode()
    + b"Accept: application/json, text/event-stream\r\nContent-Type: application/json\r\n"
)


def _stalled(port: int, sent: bytes) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    if sent:
        s.sendall(sent.replace(b"PORT", str(port).encode()))
    return s


def _ends(s: socket.socket) -> bytes:
    """What the server sends before it closes ``s`` (within the socket's timeout)."""
    got = b""
    while True:
        try:
            piece = s.recv(65536)
        except ConnectionResetError:
            return got
        if not piece:
            return got
        got += piece


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("sent", "answered"),
    [
        (b"", b""),  # connected, then nothing
        (HEAD, b""),  # a head never finished
        (HEAD + b"Content-Length: 100\r\n\r\n" + b"{" * 10, b"401"),  # refused, body unsent
        (AUTHORIZED + b"Content-Length: 100\r\n\r\n" + b"{" * 10, b""),  # a body never finished
    ],
    ids=["nothing", "head", "body-without-token", "body-with-token"],
)
async def test_a_request_that_does_not_arrive_in_time_is_closed(
    sent: bytes, answered: bytes
) -> None:
    async with serving(build_mcp_server(EchoSurface()), head_timeout=0.5) as url:
        port = httpx.URL(url).port or 0
        s = _stalled(port, sent)
        with s:
            start = time.monotonic()
            got = await anyio.to_thread.run_sync(_ends, s)
            # Closed by the deadline, long before the socket's own timeout of 5 s.
            assert time.monotonic() - start < 4
        assert answered in got
        assert (answered == b"") == (got == b"")


@pytest.mark.anyio
async def test_beyond_the_cap_the_connection_idle_longest_gives_way() -> None:
    async with serving(build_mcp_server(EchoSurface()), max_connections=8) as url:
        port = httpx.URL(url).port or 0
        stalled = [_stalled(port, HEAD) for _ in range(20)]
        try:
            async with httpx.AsyncClient(headers={**BEARER, **ACCEPT}, timeout=5) as http:
                hello = await http.post(url, json=HELLO)
            assert hello.status_code == 200
            # The first ones opened gave way (the deadline is 10 s away: not it).
            for s in stalled[:12]:
                s.settimeout(2)
                assert await anyio.to_thread.run_sync(_ends, s) == b""
        finally:
            for s in stalled:
                s.close()


SERVER = """
import anyio, sys
from airlock.frontends.mcp import build_mcp_server, serve_http
from tests.airlock.fake_surface import EchoSurface
anyio.run(lambda: serve_http(build_mcp_server(EchoSurface()), port=int(sys.argv[1]), token=sys.argv[2]))
"""


def _limit_open_files(count: int) -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (count, count))


# Fewer files than the cap needs: the cap is lowered to fit them.
@pytest.mark.parametrize(("open_files", "stalled"), [(1024, 1100), (100, 400), (60, 400)])
def test_connections_that_never_finish_do_not_lock_out_a_token_holder(
    open_files: int, stalled: int
) -> None:
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(port), TOKEN],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        preexec_fn=lambda: _limit_open_files(open_files),  # no threads yet
    )
    url = f"http://127.0.0.1:{port}/mcp"
    held: list[socket.socket] = []
    try:
        anyio.run(wait_for, url)
        for _ in range(stalled):
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", port))
            held.append(s)
        time.sleep(1)
        for s in held:
            with contextlib.suppress(OSError):  # closed already: the server let it go
                s.send(HEAD.replace(b"PORT", str(port).encode()))
        start = time.monotonic()
        answer = httpx.post(url, json=HELLO, headers={**BEARER, **ACCEPT}, timeout=15)
        took = time.monotonic() - start
        assert answer.status_code == 200
        assert json.loads(answer.text.split("data: ", 1)[-1])["id"] == 1
        assert took < 5, f"the token holder waited {took:.1f} s"
        fds = len(os.listdir(f"/proc/{server.pid}/fd"))
        assert fds < 64 + 128 + 40, f"the server holds {fds} files"
    finally:
        for s in held:
            s.close()
        server.terminate()
        _, err = server.communicate(timeout=30)
    # asyncio's line for a failed accept comes at most once a minute.
    assert err.count(b"out of system resource") <= 1, err[-2000:].decode(errors="replace")
    assert len(err) < 20_000


def test_a_failed_accept_is_logged_at_most_once_a_minute(caplog: pytest.LogCaptureFixture) -> None:
    asyncio_log = logging.getLogger("asyncio")
    with caplog.at_level(logging.ERROR, logger="asyncio"), quiet_accept_errors():
        for _ in range(1000):
            asyncio_log.error("socket.accept() out of system resource\nsocket: <...>")
        asyncio_log.error("another error")
    assert [r.getMessage().split("\n")[0] for r in caplog.records] == [
        "socket.accept() out of system resource",
        "another error",
    ]
