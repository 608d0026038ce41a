"""A :class:`~airlock.ModelToolSurface` served over MCP (stdio or streamable HTTP on loopback).

The low-level SDK server is used rather than the decorator-based one because the tools are
not Python functions here: their names, descriptions and strict schemas come from the session,
and every call goes through ``surface.call`` so an MCP client gets exactly the answers a
provider loop gets (write tools answer with a preview, never a commit).

A write answers ``needs_approval`` with its preview id; once a person decides, the server
commits it (``airlock serve`` settles approved writes every second) and the client asks
``write_status(preview_id)`` for the receipt, ``denied`` or ``needs_approval`` while it
waits: never by calling the write again. Each paused write is also the resource
``airlock://writes/PREVIEW_ID`` (its status, read without counting as one of the model's
calls); a client that listens for it over stdio (``subscriptions/listen``) is notified when
the write is settled.

Artifacts (the files a program left in ``/out``) are resources: a call's result carries a
``resource_link`` for each that fits the session's result cap, beside the text the model
reads (which holds their references, never their bytes), and the client may list them (a
page at a time) and read them. Only the artifacts this conversation's own calls produced are
offered; a file changed on disk since (its SHA-256 no longer the one reported) is refused.
Reads share one budget of bytes per server (:class:`ReadBudget`), so many reads at once,
answered or not, cannot take the host's memory.

Over stdio the server has one client and one conversation. Over streamable HTTP each MCP
session (the handshake's ``Mcp-Session-Id``) gets an airlock session of its own
(:func:`build_per_client_server`), and every request must carry the server's bearer token.
"""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Awaitable, Callable, Mapping
from importlib import metadata
from typing import Any, Final

from airlock._extras import requires_extra
from airlock.harness import Budget, ModelResult, ModelTool, ModelToolSurface, Session, failure

with requires_extra("mcp", feature="the MCP server (airlock serve --mcp)"):
    import mcp_types as types
    from mcp.server import Server, ServerRequestContext
    from mcp.server.stdio import stdio_server
    from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler
    from mcp.shared.exceptions import MCPError
    from mcp.shared.subscriptions import ResourceUpdated

    from airlock.frontends._mcp_conversations import (
        Conversation,
        FindConversation,
        SessionsPerClient,
        sessions_per_client,
    )
    from airlock.frontends._mcp_http import LOOPBACK, check_token, listen_loopback, serve_asgi
    from airlock.frontends._mcp_lines import MAX_LINE_BYTES
    from airlock.frontends._mcp_read_budget import ReadBudget
    from airlock.frontends._mcp_resources import (
        MAX_RESOURCE_BYTES,
        fitting_links,
        list_page,
        read_artifact,
        read_offered,
    )
    from airlock.frontends._mcp_stdin import stdin_lines

__all__ = [
    "LOOPBACK",
    "MAX_CLIENTS",
    "MAX_RESOURCE_BYTES",
    "WRITES_URI",
    "WRITE_STATUS",
    "ReadBudget",
    "SessionsPerClient",
    "build_mcp_server",
    "build_per_client_server",
    "check_token",
    "listen_loopback",
    "mcp_tool",
    "read_artifact",
    "serve_http",
    "serve_stdio",
    "sessions_per_client",
    "write_status_tool",
]

MAX_CLIENTS: Final = 16
"""How many MCP sessions an HTTP server keeps at once, by default."""
IDLE_SESSION_S: Final = 30 * 60
"""An MCP session over HTTP with no request for this long ends (its airlock session too)."""
WRITE_STATUS: Final = "write_status"
"""The tool that tells where a paused write stands (offered beside the session's tools)."""
PREVIEW_ID_PATTERN: Final = r"^pv_[0-9a-f]{24}$"
WRITES_URI: Final = "airlock://writes/"
"""A paused write's status resource is this prefix and its preview id."""
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


def write_status_tool() -> types.Tool:
    """The MCP definition of ``write_status``: where a paused write stands."""
    return types.Tool(
        name=WRITE_STATUS,
        description=(
            "Where a write that answered needs_approval stands, by its preview id: its receipt "
            "once a person approved it and it was committed, denied with the reason, or "
            "needs_approval while it waits. Use it instead of calling the write again. It "
            "commits nothing that was not approved."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "preview_id": {"type": "string", "pattern": PREVIEW_ID_PATTERN, "maxLength": 27}
            },
            "required": ["preview_id"],
            "additionalProperties": False,
        },
        annotations=types.ToolAnnotations(
            read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
        ),
    )


def build_mcp_server(
    surface: ModelToolSurface,
    *,
    name: str = "airlock",
    write_status: Callable[[str], Awaitable[ModelResult]] | None = None,
    on_settled: Callable[[Callable[[list[ModelResult]], Awaitable[None]]], None] | None = None,
    read_status: Callable[[str], Awaitable[ModelResult]] | None = None,
    reads: ReadBudget | None = None,
) -> Server[Any]:
    """An MCP server whose tools are ``surface.tools()`` and whose calls go to ``surface``;
    the artifacts its calls produce are its resources, read within ``reads`` (a budget of
    its own by default). With ``write_status`` (a session's
    :meth:`~airlock.Session.write_status`), the tool ``write_status(preview_id)`` is offered
    too, and each write its calls paused is a resource, read with ``read_status`` (by
    default the session's :meth:`~airlock.Session.resume` when ``surface`` is a session,
    which the model's call budget does not count; else ``write_status``); with
    ``on_settled`` (a session's :meth:`~airlock.Session.on_settled`), listeners of such a
    resource are notified when its write is settled. Every client of this server shares
    the one conversation (one client over stdio); over HTTP,
    :func:`build_per_client_server` gives each its own."""
    bus = InMemorySubscriptionBus()
    if read_status is None and write_status is not None:
        read_status = surface.resume if isinstance(surface, Session) else write_status
    one = Conversation(
        surface=surface,
        write_status=write_status,
        read_status=read_status,
        result_bytes=(surface.budget if isinstance(surface, Session) else Budget()).result_bytes,
    )

    async def settled(results: list[ModelResult]) -> None:
        for result in results:
            preview_id = _preview_id(result)
            if preview_id is not None and WRITES_URI + preview_id in one.paused:
                await bus.publish(ResourceUpdated(uri=WRITES_URI + preview_id))

    if on_settled is not None:
        on_settled(settled)
    return _server(
        lambda ctx: one,
        name=name,
        bus=bus,
        status=write_status is not None,
        reads=reads or ReadBudget(),
    )


def build_per_client_server(
    clients: SessionsPerClient, *, name: str = "airlock", reads: ReadBudget | None = None
) -> Server[Any]:
    """An MCP server whose every MCP session (over streamable HTTP) talks to an airlock
    session of its own, opened by ``clients``: its own tools' budget, artifacts and paused
    writes (``write_status`` is offered), none of which another session can list or read.
    Their reads of artifacts share ``reads`` (one budget for the server by default)."""
    return _server(
        clients.find,
        name=name,
        bus=InMemorySubscriptionBus(),
        status=True,
        reads=reads or ReadBudget(),
    )


def _server(
    find: FindConversation,
    *,
    name: str,
    bus: InMemorySubscriptionBus,
    status: bool,
    reads: ReadBudget,
) -> Server[Any]:
    """The server of :func:`build_mcp_server` and :func:`build_per_client_server`: every
    request is answered from the conversation ``find`` gives for it."""

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        talk = find(ctx)
        tools = [mcp_tool(t) for t in talk.surface.tools()]
        if talk.write_status is not None:
            tools.append(write_status_tool())
        return types.ListToolsResult(tools=tools)

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        talk = find(ctx)
        if talk.write_status is not None and params.name == WRITE_STATUS:
            result = await _write_status(talk.write_status, params.arguments)
            return types.CallToolResult(
                content=[types.TextContent(text=result.content)], is_error=result.is_error
            )
        result = await talk.surface.call(params.name, dict(params.arguments or {}))
        preview_id = _preview_id(result) if result.code == "needs_approval" else None
        if talk.write_status is not None and preview_id is not None:
            talk.paused[WRITES_URI + preview_id] = preview_id
        for ref in result.artifacts:
            talk.offered[ref.uri] = ref
        room = talk.result_bytes - len(result.content.encode())
        content: list[types.ContentBlock] = [
            types.TextContent(text=result.content),
            *fitting_links(result.artifacts, room),
        ]
        return types.CallToolResult(content=content, is_error=result.is_error)

    async def list_resources(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        return list_page(find(ctx), params.cursor if params is not None else None)

    async def read_resource(
        ctx: ServerRequestContext[Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        talk = find(ctx)
        waiting = talk.paused.get(str(params.uri))
        if waiting is not None and talk.read_status is not None:
            status = await talk.read_status(waiting)
            where = types.TextResourceContents(
                uri=str(params.uri), mime_type="application/json", text=status.content
            )
            return types.ReadResourceResult(contents=[where])
        ref = talk.offered.get(str(params.uri))
        if ref is None:
            raise MCPError(
                types.INVALID_PARAMS,
                f"no resource {params.uri!r}: this server offers the artifacts of its own calls",
            )
        return await read_offered(ref, reads=reads, request=ctx.request)

    instructions = _INSTRUCTIONS
    if status:
        instructions += (
            " Once a person decided, the server commits an approved write itself; "
            "write_status(preview_id) tells where it stands."
        )
    return Server(
        name,
        instructions=instructions,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_read_resource=read_resource,
        on_subscriptions_listen=ListenHandler(bus),
    )


def _preview_id(result: ModelResult) -> str | None:
    """The preview id a result names, if it is a pv_... id."""
    try:
        body = json.loads(result.content)
    except ValueError:
        return None
    found = body.get("preview_id") if isinstance(body, dict) else None
    if isinstance(found, str) and re.fullmatch(PREVIEW_ID_PATTERN, found):
        return found
    return None


async def _write_status(
    status: Callable[[str], Awaitable[ModelResult]], arguments: Mapping[str, Any] | None
) -> ModelResult:
    given = dict(arguments or {})
    preview_id = given.get("preview_id")
    if (
        set(given) != {"preview_id"}
        or not isinstance(preview_id, str)
        or not re.fullmatch(PREVIEW_ID_PATTERN, preview_id)
    ):
        return failure(
            "invalid_input",
            "give exactly preview_id: the pv_... id a write answered needs_approval with",
        )
    return await status(preview_id)


def _version() -> str:
    try:
        return metadata.version("airlock")
    except metadata.PackageNotFoundError:  # running from a source tree that is not installed
        return ""


async def serve_stdio(server: Server[Any]) -> None:
    """Serve one client over this process's stdin and stdout until it disconnects (or the
    call is cancelled)."""
    lines = await stdin_lines()
    stdin: Any = lines  # iterated line by line, as the SDK's AsyncFile is
    async with stdio_server(stdin=stdin) as (read_stream, write_stream):
        answers: Any = write_stream
        if lines is not None:
            lines.answer_with(write_stream)  # a line the SDK cannot read is answered there
            answers = lines.noting(write_stream)  # a file's end waits for its answers
        await server.run(read_stream, answers, server.create_initialization_options())


async def serve_http(
    server: Server[Any],
    *,
    port: int,
    token: str,
    path: str = "/mcp",
    max_sessions: int = MAX_CLIENTS,
    idle_timeout: float = IDLE_SESSION_S,
    listener: socket.socket | None = None,
) -> None:
    """Serve streamable HTTP on ``127.0.0.1:port`` (loopback only, DNS-rebinding checked)
    to clients that send ``Authorization: Bearer TOKEN``, with MCP sessions (the handshake);
    at most ``max_sessions`` at once (a client beyond is answered 503), each ended after
    ``idle_timeout`` seconds without a request. ``listener``: a socket already listening
    there (:func:`listen_loopback`).

    Raises:
        UsageError: ``token`` is too short or not printable ASCII, or the port is taken.
    """
    app = server.streamable_http_app(
        streamable_http_path=path,
        host=LOOPBACK,
        max_sessions=max_sessions,
        session_idle_timeout=idle_timeout,
        # The limit of a stdio line, which the bodies were checked against before the SDK
        # sees them (it answers a body over its own in plain text).
        max_request_body_size=MAX_LINE_BYTES,
    )
    await serve_asgi(
        app, port=port, token=token, limits=(max_sessions, idle_timeout), listener=listener
    )
