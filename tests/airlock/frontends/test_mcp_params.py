"""A request whose params are an object of the wrong shape for its method is answered
``-32602`` with the field that is wrong (the SDK says only "Invalid request parameters"),
over stdio and over HTTP alike; params the server takes go on to the SDK."""

from __future__ import annotations

import json

import httpx
import mcp_types as types
import pytest

from airlock.frontends._mcp_lines import checked
from airlock.frontends.mcp import build_mcp_server
from tests.airlock.fake_surface import EchoSurface
from tests.airlock.frontends.mcp_servers import open_session, serving


def _line(method: str, params: object = None, *, request_id: int | str = 4) -> str:
    message: dict[str, object] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        message["params"] = params
    return json.dumps(message)


# (the line) -> the start of the error's message (None: the line goes on to the SDK)
PARAMS: list[tuple[str, str, str | None]] = [
    ("a call's name a number", _line("tools/call", {"name": 5}), "params.name: "),
    (
        "a call's arguments a string",
        _line("tools/call", {"name": "billing_invoice_get", "arguments": "x"}),
        "params.arguments: ",
    ),
    ("a call without a name", _line("tools/call", {"arguments": {}}), "params.name: Field"),
    ("a call without params", _line("tools/call"), "params.name: Field required"),
    (
        "a call's _meta a list",
        _line("tools/call", {"name": "billing_invoice_get", "_meta": [1]}),
        "params._meta: ",
    ),
    ("a read's uri a number", _line("resources/read", {"uri": 5}), "params.uri: "),
    ("a read without a uri", _line("resources/read", {}), "params.uri: Field required"),
    ("a list's cursor a number", _line("tools/list", {"cursor": 5}), "params.cursor: "),
    ("resources' cursor a list", _line("resources/list", {"cursor": [1]}), "params.cursor: "),
    ("control: a call", _line("tools/call", {"name": "x", "arguments": {"a": 1}}), None),
    ("control: a call without arguments", _line("tools/call", {"name": "x"}), None),
    ("control: a list", _line("tools/list"), None),
    ("control: a list's cursor", _line("tools/list", {"cursor": "c"}), None),
    ("control: a read", _line("resources/read", {"uri": "airlock://a/b"}), None),
    ("control: another method", _line("prompts/get", {"name": 5}), None),
]


@pytest.mark.parametrize(("line", "said"), [p[1:] for p in PARAMS], ids=[p[0] for p in PARAMS])
def test_params_of_the_wrong_shape_are_answered_with_the_field(line: str, said: str | None) -> None:
    found = checked(line)
    if said is None:
        assert isinstance(found, types.JSONRPCRequest), found
        return
    assert isinstance(found, list), found
    [error] = found
    assert (error.id, error.error.code) == (4, types.INVALID_PARAMS)
    assert error.error.message.startswith(said), error.error.message
    assert "\n" not in error.error.message
    assert len(error.error.message) <= 200


def test_a_string_id_is_answered_as_it_came() -> None:
    [error] = checked(_line("tools/call", {"name": 5}, request_id="7"))  # type: ignore[misc]
    assert error.id == "7"


@pytest.mark.anyio
async def test_over_http_params_of_the_wrong_shape_are_answered_400_with_the_field() -> None:
    async with (
        serving(build_mcp_server(EchoSurface())) as url,
        httpx.AsyncClient(timeout=20) as http,
    ):
        headers = {**await open_session(http, url), "Content-Type": "application/json"}
        body = _line("tools/call", {"name": "billing_invoice_get", "arguments": "x"})
        response = await http.post(url, content=body, headers=headers)
    assert response.status_code == 400, response.text
    error = response.json()
    assert (error["id"], error["error"]["code"]) == (4, types.INVALID_PARAMS)
    assert error["error"]["message"].startswith("params.arguments: "), error
