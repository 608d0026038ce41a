"""Servers for the MCP tests: a session whose programs leave chosen files, and an HTTP server
on a free loopback port with chosen limits."""

from __future__ import annotations

import functools
import hashlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
from mcp.server import Server

from airlock.frontends._mcp_http import LOOPBACK, serve_asgi
from airlock.harness import Budget, Harness
from airlock.policies import load_policy
from airlock.sandbox import ArtifactRef
from airlock.sandbox.testing import ScriptedBackend, ok_result
from airlock.tools import MemoryAuditStore, SQLiteLedgerStore
from airlock.tools.testing import SystemOfRecord
from tests.airlock.conversation_registry import build_registry
from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[3]
TOKEN = "test-token-" + "x" * 16
BEARER = {"Authorization": f"Bearer {TOKEN}"}
HELLO = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}
ACCEPT = {"Accept": "application/json, text/event-stream"}


def stored_files(folder: Path, sizes: dict[str, int]) -> list[ArtifactRef]:
    """Files of these names and sizes in ``folder``, as a program's artifacts."""
    refs = []
    for name, size in sizes.items():
        path = folder / name
        path.write_bytes(bytes(range(256)) * (size // 256) + b"x" * (size % 256))
        data = path.read_bytes()
        refs.append(
            ArtifactRef(
                name=name,
                size_bytes=len(data),
                media_type="application/octet-stream",
                sha256=hashlib.sha256(data).hexdigest(),
                uri=f"airlock://artifacts/run_a-m1/{name}",
                path=str(path),
            )
        )
    return refs


def harness(tmp_path: Path, *, budget: Budget, files: dict[str, int]) -> Harness:
    """The conversation registry over a scripted sandbox whose programs leave ``files``."""
    refs = stored_files(tmp_path, files)
    ran = ok_result("done").model_copy(update={"artifacts": refs})
    return Harness(
        build_registry(SystemOfRecord(tmp_path / "system.db")),
        load_policy(ROOT / "tests" / "airlock" / "conversation_policy.toml"),
        ScriptedBackend(lambda program, profile: ran),
        SQLiteLedgerStore(tmp_path / "ledger.db"),
        audit=MemoryAuditStore(),
        artifacts=tmp_path / "artifacts",
        budget=budget,
    )


async def wait_for(url: str) -> None:
    for _ in range(200):
        try:
            async with httpx.AsyncClient() as http:
                await http.get(url)
            return
        except httpx.ConnectError:
            await anyio.sleep(0.05)


@asynccontextmanager
async def serving(server: Server[Any], **limits: Any) -> AsyncIterator[str]:
    """``server`` over streamable HTTP with ``limits`` (of ``serve_asgi``); its URL."""
    port = free_port()
    app = server.streamable_http_app(streamable_http_path="/mcp", host=LOOPBACK)
    async with anyio.create_task_group() as group:
        group.start_soon(functools.partial(serve_asgi, app, port=port, token=TOKEN, **limits))
        url = f"http://{LOOPBACK}:{port}/mcp"
        await wait_for(url)
        yield url
        group.cancel_scope.cancel()


async def open_session(http: httpx.AsyncClient, url: str) -> dict[str, str]:
    """The headers of a new MCP session (the handshake, done)."""
    hello = await http.post(url, json=HELLO, headers={**BEARER, **ACCEPT})
    assert hello.status_code == 200, hello.text
    headers = {
        **BEARER,
        **ACCEPT,
        "Mcp-Session-Id": hello.headers["mcp-session-id"],
        "MCP-Protocol-Version": "2025-11-25",
    }
    done = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    await http.post(url, json=done, headers=headers)
    return headers
