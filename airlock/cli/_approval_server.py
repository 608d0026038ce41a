"""The approval page's HTTP server: uvicorn on loopback, with deadlines for slow clients.

uvicorn's h11 protocol waits for a request's head as long as the client likes: a local
process could hold every connection it opens (and the page's file descriptors, which the
ledger needs too) by sending a request one byte a minute, or nothing. This protocol closes a
connection that has no request being answered ``head_timeout`` seconds after it opened or
after its last answer. A client that stops reading its answers (many pipelined requests,
never read) keeps a request "being answered" for ever: its connection is aborted once
writing to it has waited ``head_timeout``. Beyond ``max_connections``, the connection idle
longest gives way to the new one, so idle keep-alive connections cannot lock the person
out; only when every connection is answering a request is the new one closed at once. The
form's body has its own deadline (:class:`~airlock.cli._approval_page.ApprovalPage`).
"""

from __future__ import annotations

import asyncio

from airlock._extras import requires_extra

with requires_extra("web", feature="the approval page (airlock approvals serve)"):
    import uvicorn
    from starlette.types import ASGIApp
    from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["HEAD_TIMEOUT", "MAX_CONNECTIONS", "page_server"]

HEAD_TIMEOUT = 10.0
"""Seconds a connection may take to send a request's line and headers."""
MAX_CONNECTIONS = 64
"""Open connections at once; a browser uses six or so."""


class _DeadlineProtocol(H11Protocol):
    """uvicorn's h11 protocol, with a deadline for each request's head and a cap on
    connections."""

    head_timeout = HEAD_TIMEOUT
    max_connections = MAX_CONNECTIONS
    _head_timer: asyncio.TimerHandle | None = None
    _stall_timer: asyncio.TimerHandle | None = None
    _idle_since = 0.0
    """When the connection last finished an answer (or opened): the oldest gives way first."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._idle_since = self.loop.time()
        if len(self.connections) > self.max_connections and not self._make_room():
            transport.close()
            return
        self._arm()

    def _make_room(self) -> bool:
        """Abort the connection idle longest (answering nothing); whether there was one."""
        idle = [
            c
            for c in self.connections
            if c is not self
            and isinstance(c, _DeadlineProtocol)
            and not c._answering()
            and not c.transport.is_closing()
        ]
        if not idle:
            return False
        min(idle, key=lambda c: c._idle_since).transport.abort()
        return True

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._idle_since = self.loop.time()
        self._arm()  # the next request on this connection gets the same time

    def pause_writing(self) -> None:
        super().pause_writing()
        # The client does not read what it asked for: the answer would never complete.
        if self._stall_timer is None:
            self._stall_timer = self.loop.call_later(self.head_timeout, self.transport.abort)

    def resume_writing(self) -> None:
        self._cancel_stall()
        super().resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self._cancel_stall()
        super().connection_lost(exc)

    def _cancel_stall(self) -> None:
        if self._stall_timer is not None:
            self._stall_timer.cancel()
            self._stall_timer = None

    def _answering(self) -> bool:
        return self.cycle is not None and not self.cycle.response_complete

    def _arm(self) -> None:
        self._disarm()
        if not self.transport.is_closing():
            self._head_timer = self.loop.call_later(self.head_timeout, self._head_late)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_late(self) -> None:
        self._head_timer = None
        # A request being answered has arrived; the app bounds the read of its body.
        if not self._answering():
            self.transport.close()
            # close() first sends what is buffered, as long as the client takes to read it.
            self.loop.call_later(self.head_timeout, self.transport.abort)


def page_server(
    app: ASGIApp,
    *,
    host: str,
    port: int,
    head_timeout: float = HEAD_TIMEOUT,
    max_connections: int = MAX_CONNECTIONS,
) -> uvicorn.Server:
    """A server of ``app`` on ``host:port``; ``run()`` serves until interrupted."""

    class Protocol(_DeadlineProtocol):
        pass

    Protocol.head_timeout = head_timeout
    Protocol.max_connections = max_connections
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", http=Protocol)
    return uvicorn.Server(config)
