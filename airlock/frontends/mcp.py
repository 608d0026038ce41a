"""A :class:`~airlock.ModelToolSurface` served over MCP (stdio or streamable HTTP on loopback).

The low-level SDK server is used rather than the decorator-based one because the tools are
not Python functions here: their names, descriptions and strict schemas come from the session,
and every call goes through ``surface.call`` so an MCP client gets exactly the answers a
provider loop gets (write tools answer with a preview, never a commit).
"""

from __future__ import annotations

import asyncio
from importlib import metadata
from typing import Any, Final

from airlock._extras import requires_extra
from airlock.harness import ModelTool, ModelToolSurface

with requires_extra("mcp", feature="the MCP server (airlock serve --mcp)"):
    import mcp_types as types
    import uvicorn
    from mcp.server import Server, ServerRequestContext
    from mcp.server.stdio import stdio_server

__all__ = ["LOOPBACK", "build_mcp_server", "mcp_tool", "serve_http", "serve_stdio"]

LOOPBACK: Final = "127.0.0.1"
# One JSON-RPC message per line; a program in execute_code can be long.
_MAX_LINE_BYTES: Final = 16 * 2**20
_INSTRUCTIONS: Final = (
    "Use execute_code for bulk reads: its programs call read tools and return only their "
    "final value. Write tools answer with a preview that a person or policy must approve; "
    "they never change anything on their own."
)


def mcp_tool(tool: ModelTool) -> types.Tool:
    """The MCP definition of one model tool, with its behaviour hints."""
    return types.Tool(
        name=tool.name,
        description=tool.description,
        input_schema=tool.input_schema,
        annotations=types.ToolAnnotations(
            read_only_hint=tool.read_only,
            destructive_hint=tool.destructive,
            idempotent_hint=tool.idempotent,
            # Tools reach systems of record outside this process.
            open_world_hint=True,
        ),
    )


def build_mcp_server(surface: ModelToolSurface, *, name: str = "airlock") -> Server[Any]:
    """An MCP server whose tools are ``surface.tools()`` and whose calls go to ``surface``."""

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[mcp_tool(t) for t in surface.tools()])

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        result = await surface.call(params.name, dict(params.arguments or {}))
        return types.CallToolResult(
            content=[types.TextContent(text=result.content)], is_error=result.is_error
        )

    return Server(
        name, instructions=_INSTRUCTIONS, on_list_tools=list_tools, on_call_tool=call_tool
    )


def _version() -> str:
    try:
        return metadata.version("airlock")
    except metadata.PackageNotFoundError:  # running from a source tree that is not installed
        return ""


class _StdinLines:
    """Lines of a stdin pipe, read by the event loop: no worker thread.

    The SDK's reader blocks a worker thread in ``readline``, which neither a cancellation nor
    interpreter exit can stop, so SIGTERM would leave the server hanging until the client
    closed stdin; reading the pipe on the loop lets serving end at once.
    """

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader

    def __aiter__(self) -> _StdinLines:
        return self

    async def __anext__(self) -> str:
        line = await self._reader.readline()
        if not line:
            raise StopAsyncIteration
        return line.decode("utf-8", errors="replace")


async def _stdin_pipe() -> _StdinLines | None:
    """stdin as lines read on the loop, or None when it is no pipe (a file, a closed fd)."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=_MAX_LINE_BYTES)
    try:
        pipe = open(0, "rb", buffering=0, closefd=False)  # noqa: SIM115  # the loop owns it
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), pipe)
    except (OSError, ValueError):
        return None
    return _StdinLines(reader)


async def serve_stdio(server: Server[Any]) -> None:
    """Serve one client over this process's stdin and stdout until it disconnects (or the
    call is cancelled)."""
    stdin: Any = await _stdin_pipe()  # iterated line by line, as the SDK's AsyncFile is
    async with stdio_server(stdin=stdin) as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


async def serve_http(server: Server[Any], *, port: int, path: str = "/mcp") -> None:
    """Serve streamable HTTP on ``127.0.0.1:port`` (loopback only, DNS-rebinding checked)."""
    app = server.streamable_http_app(streamable_http_path=path, host=LOOPBACK)
    config = uvicorn.Config(app, host=LOOPBACK, port=port, log_level="warning")
    await uvicorn.Server(config).serve()
