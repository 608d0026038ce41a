"""Whom an MCP request talks to: the one conversation of a server (stdio, in memory), or over
streamable HTTP the conversation of the request's MCP session, each with its own
:class:`~airlock.Session`.

Over HTTP, clients are told apart by the transport's session id (``Mcp-Session-Id``: the SDK
issues it at ``initialize`` and answers 404 to a request naming one it does not hold). Each
MCP session gets its own airlock session, so its own budget, artifacts, paused and settled
writes, built at its first request after the handshake; nothing of it is listed or readable
from another. When the MCP session ends (the client's DELETE, the SDK's idle timeout, the
server's end), its airlock session is closed and forgotten. A request with no session id (the
single-exchange protocol of 2026-07-28) joins no conversation and is refused: it would
otherwise start a new budget at every call.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import mcp_types as types
from anyio.abc import TaskGroup
from mcp.server import ServerRequestContext
from mcp.server.connection import Connection
from mcp.shared.exceptions import MCPError

from airlock.harness import Budget, ModelResult, ModelToolSurface, Session
from airlock.sandbox import ArtifactRef

__all__ = ["Conversation", "FindConversation", "SessionsPerClient", "sessions_per_client"]

_log = logging.getLogger("airlock.mcp")


@dataclass(eq=False, kw_only=True)
class Conversation:
    """What one MCP client talks to, and what its own calls left for it."""

    surface: ModelToolSurface
    write_status: Callable[[str], Awaitable[ModelResult]] | None = None
    """The session's :meth:`~airlock.Session.write_status`: offered as a tool when given."""
    read_status: Callable[[str], Awaitable[ModelResult]] | None = None
    """Where a paused write stands, for its resource: a read the client makes, not the
    model, so not counted as one of the model's calls (the session's
    :meth:`~airlock.Session.resume`, whose answer the byte budget still counts)."""
    result_bytes: int = Budget().result_bytes
    """The session's cap on one result: a call's links to its artifacts fit in it too."""
    offered: dict[str, ArtifactRef] = field(default_factory=dict)
    """The artifacts this conversation's calls produced, by URI: its resources."""
    paused: dict[str, str] = field(default_factory=dict)
    """Resource URI -> preview id, of the writes this conversation's calls paused."""


FindConversation = Callable[[ServerRequestContext[Any]], Conversation]
"""The conversation a request belongs to; raises ``MCPError`` when it belongs to none."""


@dataclass(eq=False)
class _Open:
    session: Session
    conversation: Conversation
    watching: anyio.CancelScope


class SessionsPerClient:
    """One airlock session per MCP session over streamable HTTP, at most ``limit`` at once.

    Build it with :func:`sessions_per_client`; its :meth:`find` is what
    :func:`~airlock.frontends.mcp.build_per_client_server` asks for each request.
    """

    def __init__(
        self, open_session: Callable[[], Session], *, limit: int, group: TaskGroup
    ) -> None:
        self._open_session = open_session
        self.limit = limit
        self._group = group
        self._open: dict[str, _Open] = {}

    def __len__(self) -> int:
        return len(self._open)

    def find(self, ctx: ServerRequestContext[Any]) -> Conversation:
        """The conversation of the request's MCP session, opened at its first request.

        Raises:
            MCPError: the request has no MCP session (no handshake), or ``limit`` sessions
                are open already.
        """
        connection = _connection_of(ctx)
        session_id = connection.session_id if connection is not None else None
        if connection is None or session_id is None:
            raise MCPError(
                types.INVALID_REQUEST,
                "this server keeps one conversation per MCP session: connect with the "
                "initialize handshake (a protocol version up to 2025-11-25) and send its "
                "Mcp-Session-Id with every request",
            )
        found = self._open.get(session_id)
        if found is not None:
            return found.conversation
        if len(self._open) >= self.limit:
            _log.warning("refused a conversation: %d MCP sessions are open", len(self._open))
            raise MCPError(
                types.INVALID_REQUEST,
                f"{len(self._open)} MCP sessions are open, the most this server keeps at once "
                "(airlock serve --max-clients): end one (HTTP DELETE with its Mcp-Session-Id) "
                "or wait until an idle one expires",
            )
        # No await from the check above to here: two requests of one MCP session cannot both
        # open a conversation, nor two clients both take the last place.
        session = self._open_session()
        conversation = Conversation(
            surface=session,
            write_status=session.write_status,
            read_status=session.resume,
            result_bytes=session.budget.result_bytes,
        )
        watching = anyio.CancelScope()
        self._open[session_id] = _Open(session, conversation, watching)
        self._group.start_soon(_watch, session, watching)
        # The SDK unwinds the connection's exit stack (shielded) when the MCP session ends.
        connection.exit_stack.push_async_callback(self._release, session_id)
        return conversation

    async def _release(self, session_id: str) -> None:
        found = self._open.pop(session_id, None)
        if found is None:
            return
        found.watching.cancel()
        try:
            await found.session.close()
        except Exception:  # one client's kept container must not fail the others' server
            _log.exception("closing the session of an ended MCP session failed")

    async def aclose(self) -> None:
        """Close every session still open (the server is ending)."""
        for session_id in list(self._open):
            with anyio.CancelScope(shield=True):
                await self._release(session_id)


async def _watch(session: Session, scope: anyio.CancelScope) -> None:
    # Approved writes of this client commit while it waits for its next call.
    with scope:
        await session.watch_writes()


@asynccontextmanager
async def sessions_per_client(
    open_session: Callable[[], Session], *, limit: int
) -> AsyncIterator[SessionsPerClient]:
    """:class:`SessionsPerClient` for the block: ``open_session`` builds the airlock session of
    each new MCP session; every session still open is closed at the end."""
    if limit < 1:
        raise ValueError(f"limit must be at least 1, not {limit!r}")
    async with anyio.create_task_group() as group:
        clients = SessionsPerClient(open_session, limit=limit, group=group)
        try:
            yield clients
        finally:
            await clients.aclose()
            group.cancel_scope.cancel()


def _connection_of(ctx: ServerRequestContext[Any]) -> Connection | None:
    # The SDK gives a low-level handler its connection only inside its ServerSession
    # (Context.connection is not built for these handlers yet). Without it there is no
    # session id to go by, and the request is refused rather than put in a shared one.
    found = getattr(ctx.session, "_connection", None)
    return found if isinstance(found, Connection) else None
