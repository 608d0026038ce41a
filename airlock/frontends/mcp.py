"""A :class:`~airlock.ModelToolSurface` served over MCP (stdio or streamable HTTP on loopback).

The low-level SDK server is used rather than the decorator-based one because the tools are
not Python functions here: their names, descriptions and strict schemas come from the session,
and every call goes through ``surface.call`` so an MCP client gets exactly the answers a
provider loop gets (write tools answer with a preview, never a commit).

Artifacts (the files a program left in ``/out``) are resources: a call's result carries a
``resource_link`` for each, beside the text the model reads (which holds their references,
never their bytes), and the client may list them and read them. Only the artifacts this
server's own calls produced are offered; a file changed on disk since (its SHA-256 no longer
the one reported) is refused.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
from importlib import metadata
from typing import Any, Final

from airlock._extras import requires_extra
from airlock.harness import ModelTool, ModelToolSurface
from airlock.sandbox import ArtifactRef

with requires_extra("mcp", feature="the MCP server (airlock serve --mcp)"):
    import mcp_types as types
    import uvicorn
    from mcp.server import Server, ServerRequestContext
    from mcp.server.stdio import stdio_server
    from mcp.shared.exceptions import MCPError

__all__ = [
    "LOOPBACK",
    "MAX_RESOURCE_BYTES",
    "build_mcp_server",
    "mcp_tool",
    "read_artifact",
    "serve_http",
    "serve_stdio",
]

LOOPBACK: Final = "127.0.0.1"
MAX_RESOURCE_BYTES: Final = 64 * 2**20
"""The largest artifact served as a resource (larger ones: ``airlock artifacts get``)."""
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
            open_world_hint=tool.open_world,
        ),
    )


def _resource(ref: ArtifactRef) -> types.Resource:
    return types.Resource(
        name=ref.name,
        uri=ref.uri,
        mime_type=ref.media_type,
        size=ref.size_bytes,
        description=f"a file a program left in /out (sha256 {ref.sha256})",
    )


def _link(ref: ArtifactRef) -> types.ResourceLink:
    return types.ResourceLink(
        name=ref.name,
        uri=ref.uri,
        mime_type=ref.media_type,
        size=ref.size_bytes,
        description=f"a file a program left in /out (sha256 {ref.sha256})",
    )


def read_artifact(ref: ArtifactRef, *, max_bytes: int = MAX_RESOURCE_BYTES) -> bytes:
    """The content of ``ref`` as stored, when it is still what was reported.

    Raises:
        MCPError: too large, gone, or changed since (its SHA-256 differs).
    """
    if ref.size_bytes > max_bytes:
        raise MCPError(
            types.INVALID_PARAMS,
            f"{ref.uri} is {ref.size_bytes} bytes; resources are served up to {max_bytes}: "
            f"copy it with `airlock artifacts get`",
        )
    try:
        fd = os.open(ref.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as file:
            data = file.read(max_bytes + 1)
    except OSError:
        raise MCPError(types.INVALID_PARAMS, f"{ref.uri} is no longer stored") from None
    if hashlib.sha256(data).hexdigest() != ref.sha256:
        raise MCPError(types.INVALID_PARAMS, f"{ref.uri} changed since the program wrote it")
    return data


def build_mcp_server(surface: ModelToolSurface, *, name: str = "airlock") -> Server[Any]:
    """An MCP server whose tools are ``surface.tools()`` and whose calls go to ``surface``;
    the artifacts its calls produce are its resources."""
    offered: dict[str, ArtifactRef] = {}

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[mcp_tool(t) for t in surface.tools()])

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        result = await surface.call(params.name, dict(params.arguments or {}))
        content: list[types.ContentBlock] = [types.TextContent(text=result.content)]
        for ref in result.artifacts:
            offered[ref.uri] = ref
            content.append(_link(ref))
        return types.CallToolResult(content=content, is_error=result.is_error)

    async def list_resources(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=[_resource(r) for r in offered.values()])

    async def read_resource(
        ctx: ServerRequestContext[Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        ref = offered.get(str(params.uri))
        if ref is None:
            raise MCPError(
                types.INVALID_PARAMS,
                f"no resource {params.uri!r}: this server offers the artifacts of its own calls",
            )
        data = await asyncio.to_thread(read_artifact, ref)
        contents: types.TextResourceContents | types.BlobResourceContents
        if ref.media_type.startswith("text/"):
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                text = None
            if text is not None:
                contents = types.TextResourceContents(
                    uri=ref.uri, mime_type=ref.media_type, text=text
                )
                return types.ReadResourceResult(contents=[contents])
        contents = types.BlobResourceContents(
            uri=ref.uri, mime_type=ref.media_type, blob=base64.b64encode(data).decode("ascii")
        )
        return types.ReadResourceResult(contents=[contents])

    return Server(
        name,
        instructions=_INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_read_resource=read_resource,
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
