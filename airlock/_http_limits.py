"""Connection limits for airlock's HTTP servers on loopback (the MCP server over HTTP, the
approval page), which any local process can connect to, allowed or not.

uvicorn's h11 protocol waits for a request's head as long as the client likes and keeps every
connection it accepts: a process that opens many connections and sends a byte now and then,
or pipelines requests and never reads the answers, holds the server's file descriptors and
its places. So with :func:`limited_protocol`:

- a request's line and headers must arrive within ``head_timeout`` seconds of the connection
  opening or its previous answer, and its body within ``head_timeout`` of its head (unless
  the application bounds the body itself: ``app_reads_body``): else the connection is closed,
  whatever the request was (who asks is checked only once the head is in);
- a client that does not read its answer (writing to it waits ``head_timeout``) is cut off,
  so an answer it never reads is not held for ever;
- beyond ``max_connections``, an open connection gives way to the new one: one that never
  sent an allowed request first, then the one idle longest. A connection serving a request
  the application allowed (it sets ``scope["state"][AUTHORIZED]``: the MCP server's token
  gate, the page's session check) is never closed for room; when every other one is, the
  new one is closed at once.
"""

from __future__ import annotations

import asyncio
from typing import Final

from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["AUTHORIZED", "HEAD_TIMEOUT", "MAX_CONNECTIONS", "limited_protocol"]

HEAD_TIMEOUT: Final = 10.0
"""Seconds a connection may take to send a request's line and headers, and then its body."""
MAX_CONNECTIONS: Final = 64
"""Open connections at once, by default (an MCP client uses two or three, a browser six)."""
AUTHORIZED: Final = "airlock.authorized"
"""The key of a request's ``scope["state"]`` that the application sets to True once the
request is allowed: only such a request keeps its connection open when the cap is reached."""


class _LimitedProtocol(H11Protocol):
    head_timeout = HEAD_TIMEOUT
    app_reads_body = False
    max_connections = MAX_CONNECTIONS
    _timer: asyncio.TimerHandle | None = None
    _stall: asyncio.TimerHandle | None = None
    _timed: object = None
    """The request whose head the timer last started for (None: waiting for a head)."""
    _idle_since = 0.0
    """When the connection opened or last finished an answer: the oldest gives way first."""
    _vouched = False
    """A request of this connection passed the token check."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._idle_since = self.loop.time()
        if len(self.connections) > self.max_connections and not self._make_room():
            transport.close()
            return
        self._arm()

    def _make_room(self) -> bool:
        """Abort a connection that may give way (one never vouched for first, then the one
        idle longest); whether there was one."""
        may_go = [
            c
            for c in self.connections
            if c is not self
            and isinstance(c, _LimitedProtocol)
            and not c.transport.is_closing()
            and not c._serving_authorized()
        ]
        if not may_go:
            return False
        min(may_go, key=lambda c: (c._vouched or c._authorized(), c._idle_since)).transport.abort()
        return True

    def handle_events(self) -> None:
        super().handle_events()
        if self.cycle is not None and self.cycle is not self._timed:
            self._timed = self.cycle
            if self.app_reads_body:
                self._disarm()  # the head is in; the application answers a late body
            else:
                self._arm()  # the head is in: the body gets its own time

    def on_response_complete(self) -> None:
        self._vouched = self._vouched or self._authorized()
        super().on_response_complete()
        self._idle_since = self.loop.time()
        self._arm()  # the next request on this connection gets the same time

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._stall is None:
            self._stall = self.loop.call_later(self.head_timeout, self.transport.abort)

    def resume_writing(self) -> None:
        self._cancel_stall()
        super().resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self._cancel_stall()
        super().connection_lost(exc)

    def _answering(self) -> bool:
        """A request has been received whole, and its answer is not complete."""
        cycle = self.cycle
        return cycle is not None and not cycle.more_body and not cycle.response_complete

    def _authorized(self) -> bool:
        """The current request passed the server's check (``AUTHORIZED``)."""
        cycle = self.cycle
        return cycle is not None and cycle.scope.get("state", {}).get(AUTHORIZED) is True

    def _serving_authorized(self) -> bool:
        """An authorized request is in, and its answer is not complete (its body may still
        be on its way, within its own deadline)."""
        cycle = self.cycle
        return self._authorized() and cycle is not None and not cycle.response_complete

    def _cancel_stall(self) -> None:
        if self._stall is not None:
            self._stall.cancel()
            self._stall = None

    def _arm(self) -> None:
        self._disarm()
        if not self.transport.is_closing():
            self._timer = self.loop.call_later(self.head_timeout, self._late)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _late(self) -> None:
        self._timer = None
        if not self._answering():
            self.transport.close()
            # close() first sends what is buffered, as long as the client takes to read it.
            self.loop.call_later(self.head_timeout, self.transport.abort)


def limited_protocol(
    *,
    head_timeout: float = HEAD_TIMEOUT,
    max_connections: int = MAX_CONNECTIONS,
    app_reads_body: bool = False,
) -> type[H11Protocol]:
    """uvicorn's h11 protocol with these limits (``Config(http=...)``); ``app_reads_body``:
    the application bounds the read of a request's body itself (and answers a late one)."""

    class Limited(_LimitedProtocol):
        pass

    Limited.head_timeout = head_timeout
    Limited.max_connections = max_connections
    Limited.app_reads_body = app_reads_body
    return Limited
