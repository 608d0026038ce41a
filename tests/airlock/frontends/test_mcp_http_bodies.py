"""Over HTTP, a POST body the MCP SDK would not answer as a request (an id it reads as a
notification's, a batch, params that are no object) gets the JSON-RPC error stdio answers
with, as HTTP 400; a valid one goes on to the SDK as it came, streamed answers included."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from airlock.frontends._mcp_lines import MAX_LINE_BYTES
from airlock.frontends.mcp import build_mcp_server
from tests.airlock.fake_surface import EchoSurface
from tests.airlock.frontends.mcp_servers import open_session, serving

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
        "a body over the limit",
        b'{"jsonrpc":"2.0","id":9,"method":"ping","params":{"a":"' + b"x" * MAX_LINE_BYTES + b'"}}',
        413,
        -32700,
        9,
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
