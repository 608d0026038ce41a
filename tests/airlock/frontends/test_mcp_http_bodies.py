"""Over HTTP, a POST body the MCP SDK would not answer as a request (an id it reads as a
notification's, a batch, params that are no object) gets the JSON-RPC error stdio answers
with, as HTTP 400; a valid one goes on to the SDK as it came, streamed answers included. A
body over the limit of a stdio line is answered 413 with JSON-RPC's -32700, at once when its
Content-Length says so."""

from __future__ import annotations

import asyncio
import json
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx
import pytest

from airlock.frontends._mcp_lines import MAX_LINE_BYTES
from airlock.frontends.mcp import build_mcp_server
from tests.airlock.fake_surface import EchoSurface
from tests.airlock.frontends.mcp_servers import BEARER, open_session, serving

PING = {"jsonrpc": "2.0", "id": 5, "method": "ping"}
CALL = {
    "jsonrpc": "2.0",
    "id": 6,
    "method": "tools/call",
    "params": {"name": "billing_invoice_get", "arguments": {"invoice_id": "inv_1"}},
}


def _json(value: object) -> bytes:
    return json.dumps(value).encode()


# (the body) -> HTTP status, the JSON-RPC error code (None: answered), the id answered
BODIES: list[tuple[str, bytes, int, int | None, object]] = [
    ("id null", _json({**PING, "id": None}), 400, -32600, None),
    ("id a decimal number", _json({**PING, "id": 1.5}), 400, -32600, None),
    ("id an object", _json({**PING, "id": {"a": 1}}), 400, -32600, None),
    ("id a boolean", _json({**PING, "id": True}), 400, -32600, None),
    ("id a list", _json({**PING, "id": [1]}), 400, -32600, None),
    ("id null on a call", _json({**CALL, "id": None}), 400, -32600, None),
    ("a batch", _json([PING, {**PING, "id": 7}]), 400, -32600, None),
    ("an empty batch", b"[]", 400, -32600, None),
    ("params a list", _json({**PING, "id": 11, "params": [1]}), 400, -32600, 11),
    ("params a list, id a string", _json({**PING, "id": "r", "params": [1]}), 400, -32600, "r"),
    ("a number for a message", b"5", 400, -32600, None),
    ("no JSON", b"{{{", 400, -32700, None),
    ("an empty body", b"", 400, -32700, None),
    ("a blank body", b" \r\n", 400, -32700, None),
    ("a lone surrogate id", b'{"jsonrpc":"2.0","id":"\\ud800","method":"ping"}', 400, -32700, None),
    (
        "bytes that are no UTF-8",
        b'{"jsonrpc":"2.0","id":8,"method":"ping","params":{"a":"\xff"}}',
        400,
        -32700,
        8,
    ),
    (
        "a body over the limit",  # refused on its Content-Length, unread: no id to answer
        b'{"jsonrpc":"2.0","id":9,"method":"ping","params":{"a":"' + b"x" * MAX_LINE_BYTES + b'"}}',
        413,
        -32700,
        None,
    ),
    (
        "more objects, arrays and members than a message may hold",  # refused unparsed
        _json({**CALL, "id": 12, "params": {"name": "x", "arguments": {"a": [[]] * 60_000}}}),
        400,
        -32700,
        12,
    ),
    ("control: a request", _json(PING), 200, None, 5),
    ("control: a call", _json(CALL), 200, None, 6),
    ("control: a notification", _json({"jsonrpc": "2.0", "method": "x/y"}), 202, None, None),
]


def _answer(response: httpx.Response) -> dict[str, Any]:
    """The one JSON-RPC message of an answer, whether JSON or a stream of server events."""
    if response.headers["content-type"].startswith("text/event-stream"):
        data = [line[5:] for line in response.text.splitlines() if line.startswith("data:")]
        found: dict[str, Any] = json.loads(next(d for d in data if d.strip()))
        return found
    answer: dict[str, Any] = json.loads(response.content)
    return answer


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("body", "status", "code", "answered_id"), [b[1:] for b in BODIES], ids=[b[0] for b in BODIES]
)
async def test_each_body_is_answered_as_over_stdio(
    body: bytes, status: int, code: int | None, answered_id: object
) -> None:
    async with (
        serving(build_mcp_server(EchoSurface())) as url,
        httpx.AsyncClient(timeout=20) as http,
    ):
        headers = {**await open_session(http, url), "Content-Type": "application/json"}
        response = await http.post(url, content=body, headers=headers)
        assert response.status_code == status, response.text[:300]
        if status != 202:
            answer = _answer(response)
            assert answer["id"] == answered_id
            if code is None:
                assert "result" in answer, answer
            else:
                assert answer["error"]["code"] == code, answer
                message = answer["error"]["message"]
                assert "\n" not in message, message  # one line, no dump of pydantic's errors
                assert len(message) <= 200, message
        # The session serves on after a refusal.
        ping = await http.post(url, content=_json({**PING, "id": 99}), headers=headers)
        assert _answer(ping) == {"jsonrpc": "2.0", "id": 99, "result": {}}


def _sized(size: int) -> bytes:
    """A ping of id 9 that is ``size`` bytes long."""
    head, tail = b'{"jsonrpc":"2.0","id":9,"method":"ping","params":{"a":"', b'"}}'
    return head + b"x" * (size - len(head) - len(tail)) + tail


async def _chunks(body: bytes) -> Any:
    for start in range(0, len(body), 2**20):
        yield body[start : start + 2**20]


# (the body's size; whether it is sent chunked, without a Content-Length) -> HTTP status, the
# JSON-RPC error code (None: answered), the id answered (a body refused on its Content-Length
# is never read: the client matches the error to its request)
SIZES: list[tuple[str, int, bool, int, int | None, int | None]] = [
    ("just under the limit", MAX_LINE_BYTES - 1, False, 200, None, 9),
    ("at the limit", MAX_LINE_BYTES, False, 200, None, 9),
    ("over the limit", MAX_LINE_BYTES + 1, False, 413, -32700, None),
    ("at the limit, chunked", MAX_LINE_BYTES, True, 200, None, 9),
    ("over the limit, chunked", MAX_LINE_BYTES + 1, True, 413, -32700, 9),
]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("size", "chunked", "status", "code", "answered_id"),
    [s[1:] for s in SIZES],
    ids=[s[0] for s in SIZES],
)
async def test_a_body_is_taken_up_to_the_limit_of_a_stdio_line(
    size: int, chunked: bool, status: int, code: int | None, answered_id: int | None
) -> None:
    body = _sized(size)
    assert len(body) == size
    async with (
        serving(build_mcp_server(EchoSurface())) as url,
        httpx.AsyncClient(timeout=30) as http,
    ):
        headers = {**await open_session(http, url), "Content-Type": "application/json"}
        sent = _chunks(body) if chunked else body
        response = await http.post(url, content=sent, headers=headers)
        assert response.status_code == status, response.text[:300]
        answer = _answer(response)
        assert answer["id"] == answered_id
        if code is None:
            assert answer["result"] == {}
        else:
            assert response.headers["content-type"] == "application/json"
            assert answer["error"]["code"] == code
            assert f"over {MAX_LINE_BYTES // 2**20} MiB" in answer["error"]["message"]
        ping = await http.post(url, content=_json({**PING, "id": 99}), headers=headers)
        assert _answer(ping) == {"jsonrpc": "2.0", "id": 99, "result": {}}


@pytest.mark.anyio
async def test_a_body_declared_over_the_limit_is_refused_before_it_is_read() -> None:
    async with (
        serving(build_mcp_server(EchoSurface())) as url,
        httpx.AsyncClient(timeout=20) as http,
    ):
        session = await open_session(http, url)
        where = urlsplit(url)
        head = [
            f"POST {where.path} HTTP/1.1",
            f"Host: {where.netloc}",
            f"Authorization: {BEARER['Authorization']}",
            f"Mcp-Session-Id: {session['Mcp-Session-Id']}",
            "Accept: application/json, text/event-stream",
            "Content-Type: application/json",
            f"Content-Length: {MAX_LINE_BYTES + 1}",
        ]
        reader, writer = await asyncio.open_connection(where.hostname, where.port)
        try:
            writer.write(("\r\n".join(head) + "\r\n\r\n").encode())
            await writer.drain()
            # Not a byte of the body is sent: the answer comes all the same, and at once.
            with anyio.fail_after(5):
                status = await reader.readline()
                fields = {}
                while (line := await reader.readline()) != b"\r\n":
                    name, _, value = line.decode().partition(":")
                    fields[name.lower()] = value.strip()
                answer = json.loads(await reader.readexactly(int(fields["content-length"])))
        finally:
            writer.close()
    assert status.split()[1] == b"413", status
    assert fields["content-type"] == "application/json"
    assert answer["id"] is None
    assert answer["error"]["code"] == -32700
    assert f"over {MAX_LINE_BYTES // 2**20} MiB" in answer["error"]["message"]
