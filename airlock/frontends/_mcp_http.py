"""Streamable HTTP on loopback, behind a bearer token.

Loopback is not a boundary between the users and programs of one machine: any local process
(a browser page's fetch included, had DNS rebinding not been checked) can reach the port. So
every request, whatever its method or path, carries ``Authorization: Bearer TOKEN`` and is
answered 401 without it, before the MCP SDK reads anything of it; the token is compared in
constant time.

The server keeps one conversation per MCP session (``Mcp-Session-Id``, issued at the
``initialize`` handshake). A request of the single-exchange protocol (``MCP-Protocol-Version:
2026-07-28``) has no session, so it is answered ``unsupported protocol version`` naming the
handshake versions; the SDK's client then falls back to the handshake by itself.

Each POST body that passes the gate is read and checked as a line over stdio is
(``_mcp_http_bodies``): a request the SDK would take for a notification and never answer (an
id that is null, a decimal number or an object), a batch or params that are no object get the
JSON-RPC error stdio answers with, as HTTP 400; a body over 4 MiB (a stdio line's limit,
``MAX_LINE_BYTES``), 413, at once when its Content-Length says so.

Connections are limited whoever makes them (``_mcp_connections``): a deadline for each
request's head and body, a cap on open connections that closes the one idle longest, and a
client that does not read its answers cut off; the soft limit of open files is raised to the
hard one as the server starts, and the cap lowered if the files left are too few for it.
"""

from __future__ import annotations

import hmac
import json
import socket
from collections.abc import Iterable
from typing import Final

import mcp_types as types
import uvicorn
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from airlock._http_limits import AUTHORIZED, HEAD_TIMEOUT, MAX_CONNECTIONS, limited_protocol
from airlock.frontends._mcp_connections import ACCEPT_BACKLOG, fit_open_files, quiet_accept_errors
from airlock.frontends._mcp_http_bodies import CheckedBodies
from airlock.frontends._mcp_read_budget import SentAnswers
from airlock.policies import UsageError

__all__ = [
    "LOOPBACK",
    "MIN_TOKEN_CHARS",
    "BearerGate",
    "check_token",
    "listen_loopback",
    "serve_asgi",
]

LOOPBACK: Final = "127.0.0.1"
MIN_TOKEN_CHARS: Final = 16
"""The shortest bearer token accepted (a generated one is 43 characters)."""
_PROTOCOL_VERSION: Final = b"mcp-protocol-version"
_SESSION_ID: Final = b"mcp-session-id"
# A refused client gets one answer, then the connection is closed: requests it pipelined
# behind are not answered one by one into a socket it may never read.
_CLOSE: Final = (b"connection", b"close")


def check_token(token: str) -> str:
    """``token``, when it can be a bearer token here.

    Raises:
        UsageError: shorter than :data:`MIN_TOKEN_CHARS`, or not printable ASCII without
            spaces (it could not be sent in a header as it is).
    """
    if len(token) < MIN_TOKEN_CHARS or not all("!" <= c <= "~" for c in token):
        raise UsageError(
            f"a bearer token of {len(token)} characters is refused: give at least "
            f"{MIN_TOKEN_CHARS} printable ASCII characters without spaces"
        )
    return token


class BearerGate:
    """ASGI middleware: an HTTP request without ``Authorization: Bearer TOKEN`` is answered
    401, and one of a protocol version without sessions 400, each closing the connection;
    others go on to ``app``, marked :data:`AUTHORIZED` in ``scope["state"]``. One
    that would open an MCP session beyond the SDK's limit is answered 503 with ``full``.

    Raises:
        UsageError: the token is refused (see :func:`check_token`).
    """

    def __init__(self, app: ASGIApp, *, token: str, full: str = "") -> None:
        self._app = app
        self._expected = f"Bearer {check_token(token)}".encode("ascii")
        self._full = full or "the server keeps no more MCP sessions at once; end one first"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._app(scope, receive, send)
            return
        headers: Iterable[tuple[bytes, bytes]] = scope.get("headers", [])
        given = [value for key, value in headers if key == b"authorization"]
        # compare_digest takes as long whatever prefix matches; only the length may show.
        if len(given) != 1 or not hmac.compare_digest(given[0], self._expected):
            await _refuse(
                send,
                401,
                types.INVALID_REQUEST,
                "missing or wrong bearer token: send the header 'Authorization: Bearer TOKEN' "
                "with the token airlock serve printed (or AIRLOCK_MCP_TOKEN's)",
                extra=[(b"www-authenticate", b'Bearer realm="airlock"'), _CLOSE],
            )
            return
        # The connection limits keep open only connections answering such a request.
        scope.setdefault("state", {})[AUTHORIZED] = True
        version = next((v for k, v in headers if k == _PROTOCOL_VERSION), None)
        if version is not None and version.decode("latin-1") not in HANDSHAKE_PROTOCOL_VERSIONS:
            data = {
                "supported": list(HANDSHAKE_PROTOCOL_VERSIONS),
                "requested": version.decode("latin-1")[:64],
            }
            await _refuse(
                send,
                400,
                types.UNSUPPORTED_PROTOCOL_VERSION,
                "this server keeps one conversation per MCP session: connect with the "
                "initialize handshake",
                data=data,
                extra=[_CLOSE],
            )
            return
        if any(key == _SESSION_ID for key, _ in headers):
            await self._app(scope, receive, send)
        else:
            await self._app(scope, receive, _Full(send, self._full))


class _Full:
    """``send`` of a request that would open an MCP session: the SDK's 503 at its session
    limit ("Too many open sessions") says here what the client can do about it."""

    def __init__(self, send: Send, message: str) -> None:
        self._send = send
        self._message = message
        self._replaced = False

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start" and message["status"] == 503:
            self._replaced = True
            await _refuse(self._send, 503, types.INTERNAL_ERROR, self._message)
        elif not self._replaced:
            await self._send(message)


async def _refuse(
    send: Send,
    status: int,
    code: int,
    message: str,
    *,
    data: object = None,
    extra: list[tuple[bytes, bytes]] | None = None,
) -> None:
    """Answer with a JSON-RPC error (id null: the client matches it to its request), which the
    SDK's client raises as the request's error, without reading the request's body."""
    error: dict[str, object] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": error}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        *(extra or []),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def listen_loopback(port: int) -> socket.socket:
    """A socket listening on ``127.0.0.1:port``, taken before anything says the server is up.

    Raises:
        UsageError: the port is in use, or not this user's to take.
    """
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((LOOPBACK, port))
        listener.listen(ACCEPT_BACKLOG)
    except OSError as exc:
        listener.close()
        raise UsageError(
            f"cannot listen on {LOOPBACK}:{port} ({exc.strerror or exc}): another program "
            "holds it, or it is not yours to take; give another port with --http PORT"
        ) from None
    return listener


async def serve_asgi(
    app: ASGIApp,
    *,
    port: int,
    token: str,
    limits: tuple[int, float] | None = None,
    listener: socket.socket | None = None,
    head_timeout: float = HEAD_TIMEOUT,
    max_connections: int = MAX_CONNECTIONS,
) -> None:
    """Serve ``app`` (a server's streamable-HTTP app) on ``127.0.0.1:port`` (or on
    ``listener``, from :func:`listen_loopback`) behind :class:`BearerGate` until cancelled;
    ``limits`` (the SDK's session limit and idle timeout) go into the message a client
    beyond the limit gets; each POST body is checked before ``app`` reads it
    (:class:`~airlock.frontends._mcp_http_bodies.CheckedBodies`). At most
    ``max_connections`` are open at once (at least four per MCP session of ``limits``), each
    request's head and then its body must arrive within ``head_timeout`` seconds, and a
    client that reads no answer for as long is cut off.

    Raises:
        UsageError: the token is refused (see :class:`BearerGate`), or the port cannot be
            taken (see :func:`listen_loopback`).
    """
    full = ""
    if limits is not None:
        full = (
            f"{limits[0]} MCP sessions are open, the most this server keeps at once (airlock "
            "serve --max-clients): end one (HTTP DELETE with its Mcp-Session-Id) or wait "
            f"until one has been idle {limits[1]:g} s"
        )
        # Each MCP session may hold a stream of notifications and a request or two.
        max_connections = max(max_connections, 4 * limits[0])
    gate = BearerGate(CheckedBodies(SentAnswers(app)), token=token, full=full)
    backlog, max_connections = fit_open_files(max_connections)
    config = uvicorn.Config(
        gate,
        host=LOOPBACK,
        port=port,
        log_level="warning",
        http=limited_protocol(head_timeout=head_timeout, max_connections=max_connections),
        backlog=backlog,
    )
    # Bound here, not by uvicorn: taken or not, it says so as an error, never by exiting.
    taken = listener or listen_loopback(port)
    with quiet_accept_errors():
        await uvicorn.Server(config).serve(sockets=[taken])
