"""The answer to each HTTP POST body that the MCP SDK would not answer as a request.

The SDK's streamable-HTTP transport reads a request whose id is null, a float, a boolean or an
object as a notification: it answers 202 and never the request, so the client waits forever.
A batch, or params that are no object, it refuses with a dump of pydantic's errors. So each
POST body is read first (at most :data:`~airlock.frontends._mcp_lines.MAX_LINE_BYTES`, as a
line over stdio) and checked as a stdio line is (:func:`~airlock.frontends._mcp_lines.checked`):
what that refuses is answered here, HTTP 400 with the JSON-RPC error of stdio (``-32700``,
``-32600`` or ``-32602``, the request's id when it can be used, else null, a one-line
reason). A body over the limit is answered 413, ``-32700``, as JSON-RPC rather than the SDK's
plain text: at once when its Content-Length says so (unread: the server drops it as it
comes), else once it ends, read to its end unkept. Every other body goes to the SDK
unchanged, which parses it once more, as over stdio.

The body arrives within the connection limits' deadline (``airlock._http_limits``) or the
connection is closed, and only a request with the bearer token gets here.
"""

from __future__ import annotations

from typing import Final

import mcp_types as types
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from airlock.frontends._mcp_lines import MAX_LINE_BYTES, PEEK_BYTES, checked, oversized

__all__ = ["CheckedBodies"]

_JSON: Final = (b"content-type", b"application/json")


class CheckedBodies:
    """ASGI middleware: the body of each HTTP POST is read whole (at most ``max_bytes``) and
    checked before ``app`` sees it; a refused one is answered here (400, or 413 over
    ``max_bytes``), any other given to ``app`` as it came. A request of any method whose
    Content-Length is over ``max_bytes`` is answered 413 without reading its body."""

    def __init__(self, app: ASGIApp, *, max_bytes: int = MAX_LINE_BYTES) -> None:
        self._app = app
        self._max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        if _declared_size(scope) > self._max_bytes:
            # Never read: uvicorn drops the body as it arrives and keeps the connection.
            await _answer(send, 413, oversized("", ""))
            return
        if scope.get("method") != "POST":
            await self._app(scope, receive, send)
            return
        read = await _read(receive, self._max_bytes)
        if read is None:
            return  # the client went away, or its body came too late: no one to answer
        if isinstance(read, tuple):
            head, tail = (part.decode("utf-8", "replace") for part in read)
            await _answer(send, 413, oversized(head, tail))
            return
        refused = _refusal(read)
        if refused is not None:
            await _answer(send, 400, refused)
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:  # a streamed answer waits here for the client to go away
                return await receive()
            replayed = True
            return {"type": "http.request", "body": read, "more_body": False}

        await self._app(scope, replay, send)


def _declared_size(scope: Scope) -> int:
    """The body's size its Content-Length gives (0 without one; h11 refuses a bad one)."""
    for key, value in scope.get("headers", []):
        if key == b"content-length":
            try:
                return int(value)
            except ValueError:  # pragma: no cover  # h11 answers it 400 first
                return 0
    return 0


async def _read(receive: Receive, max_bytes: int) -> bytes | tuple[bytes, bytes] | None:
    """The body; its first and last :data:`PEEK_BYTES` when it is over ``max_bytes`` (the
    rest is read and dropped, so the answer is not lost to a reset connection); None when the
    client went away before its end."""
    chunks: list[bytes] = []
    size = 0
    head = tail = b""
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunk: bytes = message.get("body", b"")
        size += len(chunk)
        if size <= max_bytes:
            chunks.append(chunk)
        else:
            if chunks:  # just over: keep the ends of what was kept
                kept = b"".join(chunks)
                head, tail, chunks = kept[:PEEK_BYTES], kept[-PEEK_BYTES:], []
            if len(head) < PEEK_BYTES:
                head = (head + chunk)[:PEEK_BYTES]
            tail = (tail + chunk)[-PEEK_BYTES:]
        if not message.get("more_body", False):
            return b"".join(chunks) if size <= max_bytes else (head, tail)


def _refusal(body: bytes) -> types.JSONRPCError | None:
    """The answer to a body the SDK would not answer as a request, or None to pass it on."""
    text = body.decode("utf-8", "replace")
    if not text.strip():
        return _error(None, types.PARSE_ERROR, "the body is empty: send one JSON-RPC message")
    found = checked(text)
    if isinstance(found, list):
        return found[0]
    if "\ufffd" in text and not _is_utf8(body):
        # Read with its bad bytes replaced the message is fine; the SDK reads the bytes.
        given = found.id if isinstance(found, types.JSONRPCRequest) else None
        usable = given if "\ufffd" not in str(given) else None
        return _error(usable, types.PARSE_ERROR, "the body is not UTF-8: send JSON in UTF-8")
    return None


def _is_utf8(body: bytes) -> bool:
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _error(request_id: types.RequestId | None, code: int, message: str) -> types.JSONRPCError:
    return types.JSONRPCError(
        jsonrpc="2.0", id=request_id, error=types.ErrorData(code=code, message=message)
    )


async def _answer(send: Send, status: int, error: types.JSONRPCError) -> None:
    body = error.model_dump_json(by_alias=True, exclude_unset=True).encode()
    headers = [_JSON, (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
