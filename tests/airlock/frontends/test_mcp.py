"""The MCP server, driven by the SDK's own client."""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import docker
import httpx
import httpx2
import mcp_types as types
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from typer.testing import CliRunner

from airlock.cli import app
from airlock.frontends._mcp_lines import MAX_LINE_BYTES
from airlock.frontends._mcp_stdin import StdinLines
from airlock.frontends.mcp import (
    SessionsPerClient,
    build_mcp_server,
    build_per_client_server,
    serve_http,
    sessions_per_client,
)
from airlock.harness import Budget, Harness, ModelResult, ModelTool
from airlock.policies import load_policy
from airlock.sandbox import ArtifactRef
from airlock.sandbox._owner import OWNER_LABEL, labelled_containers
from airlock.sandbox.testing import ScriptedBackend, ok_result
from airlock.tools import MemoryAuditStore, SQLiteLedgerStore
from airlock.tools.testing import SystemOfRecord
from tests.airlock.cli.test_serve import SERVE
from tests.airlock.conversation_registry import ALICE, DUPLICATES, build_registry
from tests.airlock.fake_surface import INVOICE_TOOL, EchoSurface
from tests.conftest import require_docker
from tests.ports import free_port

VOID_TOOL = ModelTool(
    name="billing_invoice_void",
    description="Void an invoice. Answers with a preview to approve.",
    input_schema=INVOICE_TOOL.input_schema,
    read_only=False,
    destructive=True,
    idempotent=True,
)


class TwoTools(EchoSurface):
    def tools(self) -> list[ModelTool]:
        return [INVOICE_TOOL, VOID_TOOL]

    async def call(self, name: str, arguments: dict[str, Any]) -> ModelResult:
        if name == VOID_TOOL.name:
            self.calls.append((name, arguments))
            return ModelResult(
                is_error=False,
                content='{"status":"needs_approval","preview_id":"pv_1"}',
                code="needs_approval",
            )
        return await super().call(name, arguments)


@pytest.mark.anyio
async def test_tools_are_listed_with_schema_and_behaviour_hints() -> None:
    async with Client(build_mcp_server(TwoTools())) as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
    assert list(listed) == ["billing_invoice_get", "billing_invoice_void"]
    read = listed["billing_invoice_get"]
    assert read.input_schema == INVOICE_TOOL.input_schema
    assert read.description == INVOICE_TOOL.description
    assert read.annotations == types.ToolAnnotations(
        read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=True
    )
    write = listed["billing_invoice_void"].annotations
    assert write is not None
    assert (write.read_only_hint, write.destructive_hint) == (False, True)


@pytest.mark.anyio
async def test_a_call_goes_to_the_surface_and_its_result_comes_back_as_text() -> None:
    surface = TwoTools()
    async with Client(build_mcp_server(surface)) as client:
        ok = await client.call_tool("billing_invoice_get", {"invoice_id": "inv_1"})
        paused = await client.call_tool("billing_invoice_void", {"invoice_id": "inv_1"})
        unknown = await client.call_tool("nope_tool", {})
    assert isinstance(ok, types.CallToolResult)
    assert not ok.is_error
    assert ok.content == [types.TextContent(text='{"invoice_id":"inv_1"}')]
    assert isinstance(paused, types.CallToolResult)
    assert not paused.is_error
    assert isinstance(paused.content[0], types.TextContent)
    assert json.loads(paused.content[0].text)["preview_id"] == "pv_1"
    assert isinstance(unknown, types.CallToolResult)
    assert unknown.is_error
    assert surface.calls[-1] == ("nope_tool", {})


TOKEN = "test-token-" + "x" * 16
BEARER = {"Authorization": f"Bearer {TOKEN}"}


async def _wait_for(url: str) -> None:
    for _ in range(100):
        try:
            async with httpx.AsyncClient() as http:
                await http.get(url)
            return
        except httpx.ConnectError:
            await anyio.sleep(0.05)


@pytest.mark.anyio
async def test_streamable_http_serves_on_loopback_only() -> None:
    port = free_port()
    async with anyio.create_task_group() as group:
        group.start_soon(
            functools.partial(serve_http, build_mcp_server(TwoTools()), port=port, token=TOKEN)
        )
        url = f"http://127.0.0.1:{port}/mcp"
        await _wait_for(url)
        async with (
            httpx2.AsyncClient(headers=BEARER) as http,
            Client(streamable_http_client(url, http_client=http)) as client,
        ):
            result = await client.call_tool("billing_invoice_get", {"invoice_id": "inv_2"})
        assert isinstance(result, types.CallToolResult)
        assert result.content == [types.TextContent(text='{"invoice_id":"inv_2"}')]
        # A page on another origin cannot drive the server (DNS-rebinding protection).
        async with httpx.AsyncClient() as http:
            refused = await http.post(
                url,
                headers={"Host": "evil.example", "Content-Type": "application/json", **BEARER},
                json={},
            )
        assert refused.status_code in (400, 403, 421)
        group.cancel_scope.cancel()


# --- `airlock serve --mcp` over stdio, with the real sandbox --------------------------------

ROOT = Path(__file__).resolve().parents[3]
# The program of the bulk-read fixture conversation: 200 invoices, find the duplicates.
BULK_PROGRAM = json.loads(
    (ROOT / "tests" / "airlock" / "fixtures" / "conversations" / "bulk_read.json").read_text()
)["turns"][0]["content"][1]["input"]["code"]


def _text(result: object) -> str:
    assert isinstance(result, types.CallToolResult), result
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


@pytest.mark.docker
@pytest.mark.anyio
async def test_airlock_serve_mcp_over_stdio_lists_runs_code_and_previews_a_write(
    tmp_path: Path,
) -> None:
    require_docker()
    params = StdioServerParameters(
        command=SERVE[0],
        args=SERVE[1:],
        env={**os.environ, "AIRLOCK_HOME": str(tmp_path), "AIRLOCK_POOL_SIZE": "1"},
        cwd=ROOT,
    )
    with anyio.fail_after(120):
        async with Client(params) as client:
            listed = {t.name: t for t in (await client.list_tools()).tools}
            assert next(iter(listed)) == "execute_code"
            assert {"billing_invoice_get", "billing_refund_create"} <= set(listed)
            refund = listed["billing_refund_create"].annotations
            assert refund is not None
            assert (refund.read_only_hint, refund.destructive_hint) == (False, True)
            code = listed["execute_code"].annotations
            assert code is not None
            assert code.read_only_hint is True

            ran = await client.call_tool("execute_code", {"code": BULK_PROGRAM})
            value = json.loads(_text(ran))["value"]
            assert value == {"scanned": 200, "duplicates": DUPLICATES}

            paused = await client.call_tool(
                "billing_refund_create", {"invoice_id": "inv_007", "reason": "duplicate"}
            )
            assert isinstance(paused, types.CallToolResult)
            assert not paused.is_error
            preview = json.loads(_text(paused))
            assert preview["status"] == "needs_approval"
            assert preview["summary"].startswith("refund ")
            assert preview["preview_id"].startswith("pv_")

            # A person approves; the server commits it without the model asking again, and
            # write_status tells where it stands.
            assert "write_status" in listed
            waiting = await client.call_tool("write_status", {"preview_id": preview["preview_id"]})
            assert json.loads(_text(waiting))["status"] == "needs_approval"
            approved = await anyio.to_thread.run_sync(
                functools.partial(
                    CliRunner().invoke,
                    app,
                    [
                        "approvals",
                        "approve",
                        preview["preview_id"],
                        "--as",
                        "carol",
                        "--fingerprint",
                        preview["fingerprint"],
                        "--ledger",
                        str(tmp_path / "ledger.db"),
                    ],
                )
            )
            assert approved.exit_code == 0, approved.output
            status: dict[str, Any] = {}
            while status.get("status") != "committed":
                await anyio.sleep(0.2)
                done = await client.call_tool("write_status", {"preview_id": preview["preview_id"]})
                status = json.loads(_text(done))
            again = await client.call_tool("write_status", {"preview_id": preview["preview_id"]})
            assert json.loads(_text(again))["receipt"] == status["receipt"]
    assert (tmp_path / "ledger.db").exists()


@pytest.mark.anyio
@pytest.mark.parametrize(
    "arguments",
    [{}, {"preview_id": 7}, {"preview_id": "pv_1"}, {"preview_id": "pv_" + "a" * 24, "x": 1}],
)
async def test_write_status_refuses_malformed_arguments(arguments: dict[str, Any]) -> None:
    asked: list[str] = []

    async def status(preview_id: str) -> ModelResult:
        asked.append(preview_id)
        return ModelResult(is_error=False, content='{"status":"committed"}')

    async with Client(build_mcp_server(TwoTools(), write_status=status)) as client:
        listed = [t.name for t in (await client.list_tools()).tools]
        refused = await client.call_tool("write_status", arguments)
        ok = await client.call_tool("write_status", {"preview_id": "pv_" + "0" * 24})
    assert listed == ["billing_invoice_get", "billing_invoice_void", "write_status"]
    assert isinstance(refused, types.CallToolResult)
    assert refused.is_error
    assert json.loads(_text(refused))["error"] == "invalid_input"
    assert json.loads(_text(ok)) == {"status": "committed"}
    assert asked == ["pv_" + "0" * 24]


@pytest.mark.anyio
async def test_without_write_status_the_tool_is_not_offered() -> None:
    async with Client(build_mcp_server(TwoTools())) as client:
        listed = [t.name for t in (await client.list_tools()).tools]
        called = await client.call_tool("write_status", {"preview_id": "pv_" + "0" * 24})
    assert "write_status" not in listed
    assert isinstance(called, types.CallToolResult)
    assert called.is_error


POLICY_ARGS = [
    "--policy",
    str(ROOT / "tests" / "airlock" / "conversation_policy.toml"),
    "--user",
    "alice",
]


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--registry", "tests.airlock.conversation_registry:registry"], "give --mcp"),
        (["--mcp", "--registry", "nowhere_at_all:registry"], "registry_ref"),
    ],
)
def test_serve_usage_errors_exit_2_with_their_code(args: list[str], fragment: str) -> None:
    result = CliRunner().invoke(app, ["serve", *args, *POLICY_ARGS])
    assert result.exit_code == 2, result.output
    assert fragment in result.output


@pytest.mark.docker
@pytest.mark.parametrize("transport", [[], ["--http"]], ids=["stdio", "http"])
def test_sigterm_stops_serving_and_removes_the_sandbox_containers(
    transport: list[str], tmp_path: Path
) -> None:
    require_docker()
    if transport:
        transport = ["--http", str(free_port())]
    process = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "airlock"),
            "serve",
            "--mcp",
            *transport,
            "--registry",
            "tests.airlock.conversation_registry:registry",
            *POLICY_ARGS,
        ],
        cwd=ROOT,
        env={**os.environ, "AIRLOCK_HOME": str(tmp_path), "AIRLOCK_POOL_SIZE": "1"},
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
    )
    client = docker.from_env()

    def containers() -> list[str]:
        # One listing, no inspection: other processes' containers may go meanwhile.
        return [
            str(entry.get("State"))
            for entry in labelled_containers(client)
            if (entry.get("Labels") or {}).get(OWNER_LABEL, "").split("/")[1:2]
            == [str(process.pid)]
        ]

    began = int(time.time()) - 1
    try:
        deadline = time.monotonic() + 60
        while "running" not in containers():
            assert process.poll() is None, "the server ended before its sandbox started"
            assert time.monotonic() < deadline, "no sandbox container started"
            time.sleep(0.2)
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0
        exited_ns = time.time_ns()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    assert containers() == []
    # Gone by the server's own hand: another test process's reaper removes a dead owner's
    # containers too, but only after the owner exited.
    created, destroyed = _lifecycle(client, process.pid, since=began)
    assert created
    assert all(destroyed.get(cid, exited_ns + 1) <= exited_ns for cid in created)


def _lifecycle(
    client: docker.DockerClient, pid: int, *, since: int
) -> tuple[set[str], dict[str, int]]:
    """The containers the process ``pid`` created since ``since`` (epoch seconds), and when
    each was destroyed (epoch nanoseconds), from the engine's events."""
    created: set[str] = set()
    destroyed: dict[str, int] = {}
    events = client.events(
        since=since,
        until=int(time.time()) + 1,
        filters={"type": "container", "label": OWNER_LABEL},
        decode=True,
    )
    for event in events:
        actor = event.get("Actor") or {}
        owner = (actor.get("Attributes") or {}).get(OWNER_LABEL, "")
        if owner.split("/")[1:2] != [str(pid)]:
            continue
        if event.get("Action") == "create":
            created.add(actor["ID"])
        elif event.get("Action") == "destroy":
            destroyed[actor["ID"]] = int(event["timeNano"])
    return created, destroyed


class PausingSurface(TwoTools):
    """A write pauses with a real-looking preview id."""

    preview_id = "pv_" + "1" * 24

    async def call(self, name: str, arguments: dict[str, Any]) -> ModelResult:
        if name == VOID_TOOL.name:
            body = {"status": "needs_approval", "preview_id": self.preview_id}
            return ModelResult(is_error=False, content=json.dumps(body), code="needs_approval")
        return await super().call(name, arguments)


@pytest.mark.anyio
async def test_a_listening_client_is_notified_when_its_write_is_settled() -> None:
    from mcp.shared.subscriptions import ResourceUpdated

    surface = PausingSurface()
    listeners: list[Any] = []
    state = {"status": "needs_approval"}

    async def status(preview_id: str) -> ModelResult:
        return ModelResult(is_error=False, content=json.dumps({**state, "preview_id": preview_id}))

    server = build_mcp_server(surface, write_status=status, on_settled=listeners.append)
    uri = "airlock://writes/" + surface.preview_id
    async with Client(server) as client:
        await client.call_tool("billing_invoice_void", {"invoice_id": "inv_1"})
        listed = [str(r.uri) for r in (await client.list_resources()).resources]
        assert listed == [uri]
        async with client.listen(resource_subscriptions=[uri]) as subscription:
            state["status"] = "committed"
            settled = ModelResult(
                is_error=False,
                content=json.dumps({"status": "committed", "preview_id": surface.preview_id}),
            )
            [listener] = listeners
            await listener([settled])
            with anyio.fail_after(10):
                event = await subscription.__aiter__().__anext__()
        assert event == ResourceUpdated(uri=uri)
        read = await client.read_resource(uri)
    [contents] = read.contents
    assert isinstance(contents, types.TextResourceContents)
    assert json.loads(contents.text)["status"] == "committed"


# --- lines over stdio that the SDK cannot read -----------------------------------------------


class Answers:
    """Stands in for the SDK's write stream: keeps what would go to stdout."""

    def __init__(self) -> None:
        self.sent: list[SessionMessage] = []

    async def send(self, item: SessionMessage) -> None:
        self.sent.append(item)


PROBE = b'{"jsonrpc":"2.0","id":"probe","method":"tools/list"}'
LINE_LIMIT = 2**20


def request(body: bytes) -> bytes:
    return b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":' + body + b"}"


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("line", "answers"),
    [
        (b"{not json", [(types.PARSE_ERROR, None)]),
        (b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"n', [(types.PARSE_ERROR, 7)]),
        (b'"a string"', [(types.INVALID_REQUEST, None)]),
        (b"[]", [(types.INVALID_REQUEST, None)]),
        # A batch is answered once, with id null, however many requests it holds.
        (
            b'[{"jsonrpc":"2.0","id":1,"method":"tools/list"},{"jsonrpc":"2.0","method":"x"}]',
            [(types.INVALID_REQUEST, None)],
        ),
        (
            b"[" + b",".join(b'{"method":"a","id":%d}' % i for i in range(5000)) + b"]",
            [(types.INVALID_REQUEST, None)],
        ),
        # The SDK reads these as notifications (it drops the id): nothing would answer.
        (b'{"jsonrpc":"2.0","id":1.5,"method":"tools/list"}', [(types.INVALID_REQUEST, None)]),
        (b'{"jsonrpc":"2.0","id":null,"method":"tools/list"}', [(types.INVALID_REQUEST, None)]),
        (b'{"jsonrpc":"2.0","id":true,"method":"tools/list"}', [(types.INVALID_REQUEST, None)]),
        (b'{"jsonrpc":"2.0","id":{"a":1},"method":"tools/list"}', [(types.INVALID_REQUEST, None)]),
        # The id's key written with escapes is the id all the same.
        (b'{"jsonrpc":"2.0","\\u0069d":1.5,"method":"x"}', [(types.INVALID_REQUEST, None)]),
        (b'{"jsonrpc":"2.0","i\\u0064":null,"method":"x"}', [(types.INVALID_REQUEST, None)]),
        (request(b"[1,2]"), [(types.INVALID_REQUEST, 7)]),
        (request(b'{"name":"x","arguments":{"a":"\\ud800"}}'), [(types.PARSE_ERROR, 7)]),
        (
            b'{"jsonrpc":"2.0","id":"\\ud800","method":"x","params":[1]}',
            [(types.PARSE_ERROR, None)],  # an id that cannot be written back
        ),
        (request(b'{"a":' + b"[" * 300 + b"]" * 300 + b"}"), [(types.PARSE_ERROR, 7)]),
        (request(b'{"a":' + b"[" * 100_000 + b"]" * 100_000 + b"}"), [(types.PARSE_ERROR, 7)]),
        (request(b'{"a":' + b"1" * 5000 + b"}"), [(types.PARSE_ERROR, 7)]),
        # More objects, arrays and members than a message may hold: refused unparsed.
        (request(b'{"a":[' + b"[]," * 60_000 + b"[]]}"), [(types.PARSE_ERROR, 7)]),
        # A response's id is never answered: the client would take it for its own request's.
        (b'{"jsonrpc":"2.0","id":5,"result":[1]}', [(types.INVALID_REQUEST, None)]),
        # The TypeScript SDK writes the id last.
        (
            b'{"method":"tools/call","params":{"a":'
            + b"[" * 100_000
            + b'},"jsonrpc":"2.0","id":9}',
            [(types.PARSE_ERROR, 9)],
        ),
        # Over the line limit: dropped as it comes, answered by the id at either end.
        (request(b'{"x":"' + b"a" * (LINE_LIMIT + 10) + b'"}'), [(types.PARSE_ERROR, 7)]),
        (
            b'{"method":"tools/call","params":{"x":"'
            + b"a" * (3 * LINE_LIMIT)
            + b'"},"jsonrpc":"2.0","id":"twelve"}',
            [(types.PARSE_ERROR, "twelve")],
        ),
        (
            b'{"jsonrpc":"2.0","id":13,"result":{"x":"' + b"a" * (LINE_LIMIT + 1) + b'"}}',
            [(types.PARSE_ERROR, None)],
        ),
        (b"a" * (5 * LINE_LIMIT), [(types.PARSE_ERROR, None)]),
        (b"   \r", []),  # no message: nothing to answer
    ],
    ids=lambda value: None if isinstance(value, list) else value[:60].decode(errors="replace"),
)
async def test_a_line_the_sdk_cannot_read_is_answered_and_the_next_is_read(
    line: bytes, answers: list[tuple[int, object]]
) -> None:
    reader = asyncio.StreamReader(limit=LINE_LIMIT)
    reader.feed_data(line + b"\n" + PROBE + b"\n")
    reader.feed_eof()
    lines = StdinLines(reader)
    sent = Answers()
    lines.answer_with(sent)
    read = [text async for text in lines]
    assert read == [PROBE.decode() + "\n"]
    errors = [message.message for message in sent.sent]
    assert all(isinstance(error, types.JSONRPCError) for error in errors)
    assert [(e.error.code, e.id) for e in errors if isinstance(e, types.JSONRPCError)] == answers


@pytest.mark.anyio
async def test_an_unfinished_line_over_the_limit_at_the_end_is_dropped() -> None:
    reader = asyncio.StreamReader(limit=LINE_LIMIT)
    reader.feed_data(PROBE + b"\n" + request(b'{"x":"' + b"a" * (2 * LINE_LIMIT)))
    reader.feed_eof()
    lines = StdinLines(reader)
    sent = Answers()
    lines.answer_with(sent)
    assert [text async for text in lines] == [PROBE.decode() + "\n"]
    [error] = [message.message for message in sent.sent]
    assert isinstance(error, types.JSONRPCError)
    assert (error.error.code, error.id) == (types.PARSE_ERROR, 7)


def _ping_of(size: int, request_id: int) -> bytes:
    """A ping line of ``size`` bytes, its newline left out."""
    head = b'{"jsonrpc":"2.0","id":%d,"method":"ping","params":{"a":"' % request_id
    return head + b"x" * (size - len(head) - 3) + b'"}}'


def test_the_stdio_server_answers_a_line_over_the_limit_and_serves_on() -> None:
    server = (
        "import anyio\n"
        "from airlock.frontends.mcp import build_mcp_server, serve_stdio\n"
        "from tests.airlock.fake_surface import EchoSurface\n"
        "anyio.run(serve_stdio, build_mcp_server(EchoSurface()))\n"
    )
    hello = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "1"},
        },
    }
    lines = [
        json.dumps(hello).encode(),
        b'{"jsonrpc":"2.0","method":"notifications/initialized"}',
        _ping_of(MAX_LINE_BYTES + 1, 7),
        _ping_of(MAX_LINE_BYTES, 8),  # the longest line taken
        b"{not json",
        PROBE,
    ]
    process = subprocess.Popen(
        [sys.executable, "-c", server],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )
    assert process.stdin is not None
    assert process.stdout is not None
    try:
        process.stdin.write(b"".join(line + b"\n" for line in lines))
        process.stdin.flush()
        # stdin stays open until the probe is answered: at its end the server stops serving.
        answers: list[dict[str, Any]] = []
        while not any(a.get("id") == "probe" for a in answers):  # (pytest's timeout bounds it)
            line = process.stdout.readline()
            assert line, "the server ended: " + process.communicate()[1].decode()[-2000:]
            answers.append(json.loads(line))
        process.stdin.close()
        assert process.wait(30) == 0
        assert process.stderr is not None
        stderr = process.stderr.read()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    by_id = {a["id"]: a for a in answers if "error" in a}
    assert by_id[7]["error"]["code"] == types.PARSE_ERROR
    assert "over 4 MiB" in by_id[7]["error"]["message"]
    assert by_id[None]["error"]["code"] == types.PARSE_ERROR
    assert {"jsonrpc": "2.0", "id": 8, "result": {}} in answers
    [probe] = [a for a in answers if a["id"] == "probe"]
    assert [t["name"] for t in probe["result"]["tools"]] == [INVOICE_TOOL.name]
    assert b"an MCP line that cannot be read" in stderr


# --- streamable HTTP: one airlock session per MCP session, behind a bearer token ----------


def _harness(tmp_path: Path, budget: Budget) -> Harness:
    """The conversation registry over a scripted sandbox whose programs leave ``a.txt``."""
    stored = tmp_path / "a.txt"
    stored.write_text("conversation A only")
    ref = ArtifactRef(
        name="a.txt",
        size_bytes=stored.stat().st_size,
        media_type="text/plain",
        sha256=hashlib.sha256(stored.read_bytes()).hexdigest(),
        uri="airlock://artifacts/run_a/a.txt",
        path=str(stored),
    )
    ran = ok_result("done").model_copy(update={"artifacts": [ref]})
    return Harness(
        build_registry(SystemOfRecord(tmp_path / "system.db")),
        load_policy(ROOT / "tests" / "airlock" / "conversation_policy.toml"),
        ScriptedBackend(lambda program, profile: ran),
        SQLiteLedgerStore(tmp_path / "ledger.db"),
        audit=MemoryAuditStore(),
        artifacts=tmp_path / "artifacts",
        budget=budget,
    )


@asynccontextmanager
async def _per_client_http(
    tmp_path: Path, *, budget: Budget, limit: int = 4
) -> AsyncIterator[tuple[str, SessionsPerClient]]:
    harness = _harness(tmp_path, budget)
    port = free_port()
    async with (
        sessions_per_client(lambda: harness.session(ALICE), limit=limit) as clients,
        anyio.create_task_group() as group,
    ):
        server = build_per_client_server(clients)
        group.start_soon(
            functools.partial(serve_http, server, port=port, token=TOKEN, max_sessions=limit)
        )
        url = f"http://127.0.0.1:{port}/mcp"
        await _wait_for(url)
        yield url, clients
        group.cancel_scope.cancel()


def _client(url: str, http: httpx2.AsyncClient) -> Client:
    return Client(streamable_http_client(url, http_client=http))


@pytest.mark.anyio
async def test_each_mcp_session_over_http_has_a_session_of_its_own(tmp_path: Path) -> None:
    async with (
        _per_client_http(tmp_path, budget=Budget(calls=2, starts="first_call")) as (url, clients),
        httpx2.AsyncClient(headers=BEARER) as http,
    ):
        async with _client(url, http) as a:
            ran = await a.call_tool("execute_code", {"code": "1"})
            assert [type(block).__name__ for block in ran.content] == [
                "TextContent",
                "ResourceLink",
            ]
            paused = json.loads(
                _text(
                    await a.call_tool(
                        "billing_refund_create", {"invoice_id": "inv_007", "reason": "duplicate"}
                    )
                )
            )
            write_uri = "airlock://writes/" + paused["preview_id"]
            mine = sorted(str(r.uri) for r in (await a.list_resources()).resources)
            assert mine == ["airlock://artifacts/run_a/a.txt", write_uri]
            used_up = await a.call_tool("billing_invoice_get", {"invoice_id": "inv_001"})
            assert json.loads(_text(used_up))["error"] == "limit_exceeded"

            async with _client(url, http) as b:
                assert (await b.list_resources()).resources == []
                for uri in ("airlock://artifacts/run_a/a.txt", write_uri):
                    with pytest.raises(MCPError, match="no resource"):
                        await b.read_resource(uri)
                other = await b.call_tool("write_status", {"preview_id": paused["preview_id"]})
                assert json.loads(_text(other))["error"] == "not_found"
                fresh = await b.call_tool("billing_invoice_get", {"invoice_id": "inv_001"})
                assert not fresh.is_error  # A's calls did not use up B's budget
                assert len(clients) == 2
        # Each client ended its MCP session (DELETE): its airlock session is closed and gone.
        with anyio.fail_after(10):
            while len(clients):
                await anyio.sleep(0.05)


@pytest.mark.anyio
@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer " + "y" * 27}, {"Authorization": TOKEN}],
    ids=["none", "wrong", "no-scheme"],
)
async def test_http_answers_401_before_any_mcp_handling_without_the_token(
    tmp_path: Path, headers: dict[str, str]
) -> None:
    hello = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
    accept = {"Accept": "application/json, text/event-stream"}
    async with (
        _per_client_http(tmp_path, budget=Budget()) as (url, clients),
        httpx.AsyncClient(headers={**accept, **headers}) as http,
    ):
        answers = [
            await http.post(url, json=hello),
            await http.get(url),
            await http.delete(url, headers={"Mcp-Session-Id": "0" * 32}),
        ]
        assert [a.status_code for a in answers] == [401, 401, 401]
        assert answers[0].headers["www-authenticate"].startswith("Bearer")
        assert "bearer token" in answers[0].json()["error"]["message"]
        assert "mcp-session-id" not in answers[0].headers
        assert len(clients) == 0


@pytest.mark.anyio
async def test_http_refuses_a_client_beyond_the_session_limit_and_a_sessionless_one(
    tmp_path: Path,
) -> None:
    async with (
        _per_client_http(tmp_path, budget=Budget(), limit=1) as (url, _),
        httpx2.AsyncClient(headers=BEARER) as http,
        _client(url, http) as first,
    ):
        await first.list_tools()
        with pytest.raises(Exception) as full:  # noqa: PT011  # an ExceptionGroup of MCPError
            async with _client(url, http) as second:
                await second.list_tools()
        assert "--max-clients" in repr(full.value)
        # The single-exchange protocol (2026-07-28) has no MCP session to keep a budget in.
        with pytest.raises(Exception) as sessionless:  # noqa: PT011
            async with Client(
                streamable_http_client(url, http_client=http), mode="2026-07-28"
            ) as modern:
                await modern.list_tools()
        assert "initialize handshake" in repr(sessionless.value)
