"""A scripted HTTP upstream on 127.0.0.1 for the REST adapter tests.

It records every request (method, raw path, headers, body) and answers from a script of
:class:`Reply` items, then with a JSON echo of the request.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import anyio
import uvicorn
from starlette.types import Receive, Scope, Send


@dataclass
class Reply:
    status: int = 200
    body: bytes | dict[str, object] = field(default_factory=lambda: {"ok": True})
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    chunks: int = 1
    """Send the body in this many pieces (no Content-Length when over 1)."""
    cut: bool = False
    """Promise the body and close the connection after its first byte."""


@dataclass
class Seen:
    method: str
    raw_path: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes


class Upstream:
    def __init__(self) -> None:
        self.script: deque[Reply] = deque()
        self.seen: list[Seen] = []
        self.base_url = ""

    def then(self, *replies: Reply) -> Upstream:
        self.script.extend(replies)
        return self

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        seen = Seen(
            method=scope["method"],
            raw_path=scope["raw_path"].decode(),
            path=scope["path"],
            query=scope["query_string"].decode(),
            headers={k.decode().lower(): v.decode() for k, v in scope["headers"]},
            body=body,
        )
        self.seen.append(seen)
        reply = self.script.popleft() if self.script else Reply(body={"raw_path": seen.raw_path})
        if reply.delay:
            await anyio.sleep(reply.delay)
        data = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
        headers = [(k.lower().encode(), v.encode()) for k, v in reply.headers.items()]
        headers.append((b"content-type", b"application/json"))
        if reply.cut:
            headers.append((b"content-length", str(len(data) + 10).encode()))
            await send({"type": "http.response.start", "status": reply.status, "headers": headers})
            await send({"type": "http.response.body", "body": data[:1]})
            return
        if reply.chunks == 1:
            headers.append((b"content-length", str(len(data)).encode()))
        await send({"type": "http.response.start", "status": reply.status, "headers": headers})
        step = max(1, len(data) // reply.chunks + 1)
        for start in range(0, max(len(data), 1), step):
            piece = data[start : start + step]
            more = start + step < len(data)
            await send({"type": "http.response.body", "body": piece, "more_body": more})


@contextmanager
def serve(app: Upstream) -> Iterator[Upstream]:
    """Serve ``app`` on a free loopback port in a thread; its ``base_url`` is set."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(
        uvicorn.Config(app, log_level="critical", lifespan="off", timeout_graceful_shutdown=1)
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.005)
    app.base_url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    try:
        yield app
    finally:
        server.should_exit = True
        thread.join(5)
        sock.close()
