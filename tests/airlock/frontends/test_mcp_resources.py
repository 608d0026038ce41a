"""A conversation's resources over MCP: reads of a paused write's status that the model's
budget does not count, links within the result cap, pages of resources/list, and one budget
of bytes for the reads of a server."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import anyio
import httpx
import mcp_types as types
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from airlock.frontends._mcp_resources import RESOURCES_PAGE
from airlock.frontends.mcp import (
    ReadBudget,
    build_mcp_server,
    build_per_client_server,
    sessions_per_client,
)
from airlock.harness import Budget
from tests.airlock.conversation_registry import ALICE
from tests.airlock.frontends.mcp_servers import harness, open_session, serving

REFUND = {"invoice_id": "inv_007", "reason": "duplicate"}


def _text(result: object) -> str:
    assert isinstance(result, types.CallToolResult), result
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


@pytest.mark.anyio
async def test_reading_a_paused_writes_resource_is_no_call_of_the_model(tmp_path: Path) -> None:
    session = harness(tmp_path, budget=Budget(calls=2), files={}).session(ALICE)
    server = build_mcp_server(session, write_status=session.write_status)
    async with Client(server) as client:
        paused = json.loads(_text(await client.call_tool("billing_refund_create", REFUND)))
        for _ in range(5):
            read = await client.read_resource("airlock://writes/" + paused["preview_id"])
            [contents] = read.contents
            assert isinstance(contents, types.TextResourceContents)
            assert json.loads(contents.text)["status"] == "needs_approval"
        # One call of two made: the reads above counted none.
        after = await client.call_tool("billing_invoice_get", {"invoice_id": "inv_001"})
        assert not after.is_error, _text(after)
    await session.close()


def _names(count: int, length: int) -> dict[str, int]:
    return {f"{i:05d}".ljust(length, "n"): 10 for i in range(count)}


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("files", "result_bytes", "linked"),
    [
        (3, 32_000, 3),  # all fit: no note
        (64, 32_000, None),  # 64 links of 250-character names do not
        (64, 2_000, None),
        (200, 32_000, None),
    ],
)
async def test_a_calls_links_fit_the_result_cap_and_the_rest_are_counted(
    tmp_path: Path, files: int, result_bytes: int, linked: int | None
) -> None:
    budget = Budget(result_bytes=result_bytes)
    session = harness(tmp_path, budget=budget, files=_names(files, 250)).session(ALICE)
    async with Client(build_mcp_server(session, write_status=session.write_status)) as client:
        ran = await client.call_tool("execute_code", {"code": "1"})
        pages = await _all_pages(client)
    await session.close()
    assert isinstance(ran, types.CallToolResult)
    links = [b for b in ran.content if isinstance(b, types.ResourceLink)]
    notes = [b.text for b in ran.content[1:] if isinstance(b, types.TextContent)]
    size = sum(len(b.model_dump_json(by_alias=True, exclude_none=True)) for b in ran.content[1:])
    assert len(_text(ran).encode()) + size <= result_bytes
    if linked is not None:
        assert (len(links), notes) == (linked, [])
    else:
        [note] = notes
        assert note.startswith(f"{files - len(links)} more files")
    # resources/list names every file, whatever was linked.
    assert sorted(str(r.uri) for r in pages) == sorted(
        f"airlock://artifacts/run_a-m1/{name}" for name in _names(files, 250)
    )


async def _all_pages(client: Client) -> list[types.Resource]:
    found: list[types.Resource] = []
    cursor: str | None = None
    while True:
        page = await client.list_resources(cursor=cursor, cache_mode="bypass")
        assert len(page.resources) <= RESOURCES_PAGE
        found += page.resources
        cursor = page.next_cursor
        if cursor is None:
            return found


@pytest.mark.anyio
async def test_resources_list_pages_name_each_resource_once(tmp_path: Path) -> None:
    session = harness(tmp_path, budget=Budget(), files=_names(120, 8)).session(ALICE)
    async with Client(build_mcp_server(session, write_status=session.write_status)) as client:
        await client.call_tool("execute_code", {"code": "1"})
        first = await client.list_resources()
        # A write paused between two pages is listed on a later one.
        await client.call_tool("billing_refund_create", REFUND)
        rest = await _all_pages_from(client, first.next_cursor)
    await session.close()
    uris = [str(r.uri) for r in [*first.resources, *rest]]
    assert len(uris) == len(set(uris)) == 121
    assert uris[-1].startswith("airlock://writes/pv_")


async def _all_pages_from(client: Client, cursor: str | None) -> list[types.Resource]:
    found: list[types.Resource] = []
    while cursor is not None:
        page = await client.list_resources(cursor=cursor, cache_mode="bypass")
        found += page.resources
        cursor = page.next_cursor
    return found


@pytest.mark.anyio
@pytest.mark.parametrize("cursor", ["", "x", "1", "1.2.3", "-1.0", "9" * 12 + ".0"])
async def test_a_cursor_the_server_did_not_give_is_refused(cursor: str) -> None:
    from tests.airlock.fake_surface import EchoSurface

    async with Client(build_mcp_server(EchoSurface())) as client:
        with pytest.raises(MCPError) as refused:
            await client.list_resources(cursor=cursor, cache_mode="bypass")
    assert refused.value.code == types.INVALID_PARAMS
    assert "cursor" in refused.value.message


# --- one budget of bytes for the reads of a server ------------------------------------------


@pytest.mark.anyio
async def test_the_budget_grants_in_order_within_its_bytes() -> None:
    budget = ReadBudget(limit_bytes=100, wait=5)
    releases = []
    async with anyio.create_task_group() as group:

        async def read(size: int) -> None:
            release = await budget.reserve(size)
            releases.append(release)

        for size in (40, 40, 40, 500, 10):
            group.start_soon(read, size)
            await anyio.sleep(0.01)
        assert (budget.holders, budget.held_bytes) == (2, 80)
        releases[0]()
        releases[0]()  # a second call gives nothing back twice
        await anyio.sleep(0.01)
        assert (budget.holders, budget.held_bytes) == (2, 80)
        releases[1]()
        releases[2]()
        await anyio.sleep(0.01)
        # The large read (all the budget) went before the small one that asked after it.
        assert (budget.holders, budget.held_bytes) == (1, 100)
        releases[3]()
    releases[4]()
    assert (budget.holders, budget.held_bytes, budget.most_holders) == (0, 0, 2)


@pytest.mark.anyio
async def test_a_read_that_waits_too_long_is_refused_as_retryable() -> None:
    budget = ReadBudget(limit_bytes=100, wait=0.1)
    release = await budget.reserve(100)
    with pytest.raises(MCPError) as busy:
        await budget.reserve(1)
    assert busy.value.error.data == {"code": "server_busy", "retryable": True}
    assert (budget.holders, budget.held_bytes) == (1, 100)
    release()
    (await budget.reserve(1))()
    assert budget.held_bytes == 0


SIZE = 8 * 2**20
BIG = "airlock://artifacts/run_a-m1/big.bin"


def _request(request_id: int, method: str, params: dict[str, object]) -> dict[str, object]:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}


def _unread_read(url: str, headers: dict[str, str], request_id: int) -> socket.socket:
    """A resources/read whose answer is never read (the socket's buffer kept small)."""
    body = json.dumps(_request(request_id, "resources/read", {"uri": BIG})).encode()
    target = httpx.URL(url)
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect((target.host, target.port or 0))
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    s.sendall(
        f"POST /mcp HTTP/1.1\r\nHost: {target.host}:{target.port}\r\n{head}"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    return s


@pytest.mark.anyio
async def test_unread_answers_hold_the_read_budget_until_they_are_cut_off(tmp_path: Path) -> None:
    reads = ReadBudget(limit_bytes=2 * SIZE, wait=0.5)
    opened = harness(tmp_path, budget=Budget(), files={"big.bin": SIZE})
    async with (
        sessions_per_client(lambda: opened.session(ALICE), limit=2) as clients,
        serving(build_per_client_server(clients, reads=reads), head_timeout=3) as url,
        httpx.AsyncClient(timeout=30) as http,
    ):
        headers = await open_session(http, url)
        call = _request(2, "tools/call", {"name": "execute_code", "arguments": {"code": "1"}})
        assert (await http.post(url, json=call, headers=headers)).status_code == 200
        unread = [_unread_read(url, headers, 10 + i) for i in range(4)]
        try:
            with anyio.fail_after(20):
                while reads.holders < 2:
                    await anyio.sleep(0.05)
            # Two unread answers hold the whole budget: a third read is refused, retryable.
            asked = _request(3, "resources/read", {"uri": BIG})
            busy = await http.post(url, json=asked, headers=headers)
            error = json.loads(busy.text.split("data: ", 1)[1])["error"]
            assert error["data"] == {"code": "server_busy", "retryable": True}
            # A client that reads nothing is cut off: its share comes back.
            with anyio.fail_after(30):
                while reads.holders or reads.held_bytes:
                    await anyio.sleep(0.1)
        finally:
            for s in unread:
                s.close()
        answer = await http.post(url, json=asked, headers=headers)
        result = json.loads(answer.text.split("data: ", 1)[1])["result"]
        assert len(result["contents"][0]["blob"]) == 4 * -(-SIZE // 3)
    assert reads.most_holders == 2
