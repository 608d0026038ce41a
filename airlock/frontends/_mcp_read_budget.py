"""One budget per server of the artifact bytes its ``resources/read`` answers hold at once.

A read holds the file, its base64 text and the JSON answer (a few times the file's size)
until the answer has left; over HTTP a client that asks many times and never reads its
answers would keep all of them, the host's memory with them. So each read first reserves its
artifact's size (at most the whole budget, so any one read can go alone), in the order the
reads asked, and gives up after ``wait`` seconds with a retryable error (``server_busy``).

Over HTTP the reservation is kept until the answer's last chunk is written, which uvicorn
does only once the transport has drained the chunks before it (or the connection is gone:
a client that stops reading is cut off by the connection limits of ``_mcp_connections``);
:class:`SentAnswers` hands each request's reservations to its response. Over stdio it ends
when the handler returns.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

import anyio
import mcp_types as types
from mcp.shared.exceptions import MCPError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["READ_BUDGET_BYTES", "READ_WAIT_S", "ReadBudget", "SentAnswers", "hand_off"]

READ_BUDGET_BYTES: Final = 64 * 2**20
"""Artifact bytes that reads of one server hold at once, by default (the largest served)."""
READ_WAIT_S: Final = 30.0
"""How long a read waits for its share of the budget before it is refused, by default."""
_DELIVERIES: Final = "airlock.deliveries"

Release = Callable[[], None]


@dataclass(eq=False)
class _Waiter:
    size: int
    granted: anyio.Event = field(default_factory=anyio.Event)


class ReadBudget:
    """The bytes of artifacts being read and answered, at most ``limit_bytes`` at once."""

    def __init__(self, *, limit_bytes: int = READ_BUDGET_BYTES, wait: float = READ_WAIT_S):
        if limit_bytes < 1 or wait < 0:
            raise ValueError(f"need limit_bytes >= 1 and wait >= 0, not {limit_bytes!r}, {wait!r}")
        self.limit_bytes = limit_bytes
        self.wait = wait
        self.held_bytes = 0
        self.holders = 0
        self.most_holders = 0
        """The most reads that held a share at once (what a test checks)."""
        self._queue: deque[_Waiter] = deque()

    async def reserve(self, size: int) -> Release:
        """Wait for ``size`` bytes (the whole budget, if more) after the reads that asked
        first; the call that gives them back (once; later calls do nothing).

        Raises:
            MCPError: ``server_busy`` (retryable), the share did not come within ``wait``.
        """
        waiter = _Waiter(min(max(size, 0), self.limit_bytes))
        self._queue.append(waiter)
        self._grant()
        try:
            with anyio.move_on_after(self.wait):
                await waiter.granted.wait()
        except BaseException:
            self._leave(waiter)
            raise
        if not waiter.granted.is_set():
            self._leave(waiter)
            raise MCPError(
                types.INTERNAL_ERROR,
                f"the server is sending {self.held_bytes} bytes of artifacts to its clients, "
                f"the most it holds at once; nothing was read: ask again in a few seconds",
                data={"code": "server_busy", "retryable": True},
            )
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self.held_bytes -= waiter.size
                self.holders -= 1
                self._grant()

        return release

    def _grant(self) -> None:
        while self._queue and self.held_bytes + self._queue[0].size <= self.limit_bytes:
            waiter = self._queue.popleft()
            self.held_bytes += waiter.size
            self.holders += 1
            self.most_holders = max(self.most_holders, self.holders)
            waiter.granted.set()

    def _leave(self, waiter: _Waiter) -> None:
        """``waiter`` gives up: its share back if it got one, else its place in the line."""
        if waiter.granted.is_set():
            self.held_bytes -= waiter.size
            self.holders -= 1
        else:
            self._queue.remove(waiter)
        self._grant()  # a large read at the head may have held back smaller ones


class _Deliveries:
    """The reservations one HTTP request's answer holds until it is sent."""

    def __init__(self) -> None:
        self.held: list[Release] = []
        self.settled = False

    def hold(self, release: Release) -> None:
        if self.settled:  # the request is over already: nothing more will be sent
            release()
        else:
            self.held.append(release)

    def settle(self) -> None:
        self.settled = True
        while self.held:
            self.held.pop()()


def hand_off(request: object, release: Release) -> None:
    """Give ``release`` to the HTTP response of ``request`` (a handler's ``ctx.request``),
    which calls it once it is sent; without one (stdio) call it now."""
    scope = getattr(request, "scope", None)
    deliveries = scope.get(_DELIVERIES) if isinstance(scope, dict) else None
    if isinstance(deliveries, _Deliveries):
        deliveries.hold(release)
    else:
        release()


class SentAnswers:
    """ASGI middleware: the reservations a request's handlers hand off (:func:`hand_off`)
    are given back once its response is sent, or the request is over."""

    def __init__(self, app: ASGIApp) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        deliveries = _Deliveries()
        scope[_DELIVERIES] = deliveries

        async def sending(message: Message) -> None:
            last = message["type"] == "http.response.body" and not message.get("more_body")
            if last and deliveries.held and message.get("body"):
                # uvicorn writes a chunk once the transport has drained those before it:
                # the answer has left when an empty last chunk is written after it.
                await send({**message, "more_body": True})
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            else:
                await send(message)
            if last:
                deliveries.settle()

        try:
            await self._app(scope, receive, sending)
        finally:
            deliveries.settle()
