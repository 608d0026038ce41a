"""Connection limits for the MCP server over HTTP: any local process can connect, token or not.

uvicorn's h11 protocol waits for a request's head as long as the client likes and keeps every
connection it accepts: a process that opens a thousand connections and sends a byte now and
then holds the server's file descriptors until ``accept`` fails, and asyncio then logs each
failed accept, many times a second. So here (as the approval page does for its own server):

- a request's line and headers must arrive within ``head_timeout`` seconds of the connection
  opening or its previous answer, and its body within ``head_timeout`` of its head: else the
  connection is closed, whatever the request was (a token is checked only once the head is
  in);
- a client that does not read its answer (writing to it waits ``head_timeout``) is cut off,
  so an answer it never reads is not held for ever;
- beyond ``max_connections``, an open connection gives way to the new one: one that never
  sent a request with the token first, then the one idle longest. A connection answering a
  request that passed the token check (``AUTHORIZED``, which the gate sets) is never closed
  for room; when every other one is, the new one is closed at once;
- the soft limit of open files is raised to the hard one, and the connections (with those
  accepted in one turn of the loop, before the cap closes them) fit in half of what is left:
  a process short of files cannot accept, and asyncio then logs each failed accept many
  times a second; that line is let through at most once a minute all the same.
"""

from __future__ import annotations

import asyncio
import logging
import os
import resource
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = [
    "ACCEPT_BACKLOG",
    "AUTHORIZED",
    "HEAD_TIMEOUT",
    "MAX_CONNECTIONS",
    "fit_open_files",
    "limited_protocol",
    "quiet_accept_errors",
    "raise_open_files_limit",
]

HEAD_TIMEOUT: Final = 10.0
"""Seconds a connection may take to send a request's line and headers, and then its body."""
MAX_CONNECTIONS: Final = 64
"""Open connections at once, by default (each MCP client uses two or three)."""
ACCEPT_BACKLOG: Final = 128
"""Connections accepted in one turn of the event loop (and queued by the kernel) before the
limit above closes the extra ones: what a burst can take at once."""
AUTHORIZED: Final = "airlock.authorized"
"""The key of a request's ``scope["state"]`` that the gate sets to True once the request's
token is accepted: only such a request keeps its connection open when the cap is reached."""
_ACCEPT_FAILED: Final = "socket.accept() out of system resource"
_ACCEPT_LOG_EVERY_S: Final = 60.0
_log = logging.getLogger("airlock.mcp")


class _LimitedProtocol(H11Protocol):
    head_timeout = HEAD_TIMEOUT
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
            and not (c._answering() and c._authorized())
        ]
        if not may_go:
            return False
        min(may_go, key=lambda c: (c._vouched or c._authorized(), c._idle_since)).transport.abort()
        return True

    def handle_events(self) -> None:
        super().handle_events()
        if self.cycle is not None and self.cycle is not self._timed:
            self._timed = self.cycle
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
        """The current request passed the token check."""
        cycle = self.cycle
        return cycle is not None and cycle.scope.get("state", {}).get(AUTHORIZED) is True

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
    *, head_timeout: float = HEAD_TIMEOUT, max_connections: int = MAX_CONNECTIONS
) -> type[H11Protocol]:
    """uvicorn's h11 protocol with these limits (``Config(http=...)``)."""

    class Limited(_LimitedProtocol):
        pass

    Limited.head_timeout = head_timeout
    Limited.max_connections = max_connections
    return Limited


def raise_open_files_limit() -> int:
    """Raise this process's soft limit of open files to its hard limit; the soft limit now
    (-1: none). Connections beyond the server's limit are closed, but each is a file until
    then."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or soft < hard):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):  # a hard limit over the kernel's, or a sandbox
            return soft
        return hard
    return soft


def fit_open_files(max_connections: int) -> tuple[int, int]:
    """The accept backlog and connection cap to use, after raising the limit of open files:
    together at most half the files this process may still open, so that connections alone
    never exhaust them (asyncio then fails every accept, and logs each, many a second)."""
    soft = raise_open_files_limit()
    if soft == resource.RLIM_INFINITY:
        return ACCEPT_BACKLOG, max_connections
    try:
        used = len(os.listdir("/proc/self/fd"))
    except OSError:  # no procfs: a guess at what a server holds besides its connections
        used = 64
    spare = max(2, (soft - used) // 2)
    backlog = max(1, min(ACCEPT_BACKLOG, spare // 3))
    fitting = max(1, min(max_connections, spare - backlog))
    if fitting < max_connections:
        _log.warning(
            "%d files may be open at once (ulimit -n): the MCP server takes %d connections "
            "at once, not %d; raise the limit to serve more clients",
            soft,
            fitting,
            max_connections,
        )
    return backlog, fitting


class _EveryMinute(logging.Filter):
    """Lets asyncio's failed-accept record through once a minute, saying how many it held
    back; every other record goes through."""

    def __init__(self) -> None:
        super().__init__()
        self._last = -_ACCEPT_LOG_EVERY_S
        self._held = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith(_ACCEPT_FAILED):
            return True
        now = time.monotonic()
        if now - self._last < _ACCEPT_LOG_EVERY_S:
            self._held += 1
            return False
        if self._held:
            record.msg = f"{record.msg} ({self._held} more since the last such line)"
        self._last, self._held = now, 0
        return True


@contextmanager
def quiet_accept_errors() -> Iterator[None]:
    """asyncio's "out of system resource" line for a failed accept (it comes for each
    connection it could not take, many a second) at most once a minute, within the block."""
    logger = logging.getLogger("asyncio")
    quiet = _EveryMinute()
    logger.addFilter(quiet)
    try:
        yield
    finally:
        logger.removeFilter(quiet)
