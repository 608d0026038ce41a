"""``airlock serve --mcp --http PORT``: one airlock session per MCP client, behind a token.

Each MCP session (the streamable-HTTP handshake's ``Mcp-Session-Id``) gets a session of its
own, with its own budget, artifacts and paused writes, closed when the MCP session ends (the
client's DELETE, or 30 minutes without a request); at most ``--max-clients`` live at once.
Every request carries ``Authorization: Bearer TOKEN``: the token is ``AIRLOCK_MCP_TOKEN``
when it is set, else one generated at start and printed once on stderr for the operator.
"""

from __future__ import annotations

import os
import secrets
import signal
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from types import FrameType
from typing import Final

from airlock.harness import Session

__all__ = ["TOKEN_ENV", "bearer_token", "serve_clients"]

TOKEN_ENV: Final = "AIRLOCK_MCP_TOKEN"
"""The bearer token of ``serve --http`` when set (else one is generated at start)."""


def bearer_token(environ: Mapping[str, str] | None = None) -> tuple[str, bool]:
    """The token HTTP clients must send, and whether it came from :data:`TOKEN_ENV` (else it
    was generated now: 32 random bytes, URL-safe).

    Raises:
        UsageError: :data:`TOKEN_ENV` is set to a token too short or not printable ASCII.
    """
    from airlock.frontends.mcp import check_token

    given = (os.environ if environ is None else environ).get(TOKEN_ENV)
    if given is None:
        return secrets.token_urlsafe(32), False
    return check_token(given), True


async def serve_clients(
    open_session: Callable[[], Session],
    *,
    port: int,
    token: str,
    from_env: bool,
    max_clients: int,
) -> None:
    """Serve streamable HTTP on ``127.0.0.1:port``, a session from ``open_session`` for each
    MCP session, until the server is stopped (SIGTERM, SIGINT).

    Raises:
        UsageError, InputRefused: a session cannot be opened as configured (checked once
            before the port is taken, as over stdio), or the port is taken.
    """
    from airlock.frontends.mcp import (
        build_per_client_server,
        listen_loopback,
        serve_http,
        sessions_per_client,
    )

    # The operator's mistakes (inputs a restricted program cannot open, or outside the
    # grant) stop the server here, not at each client's first request.
    await open_session().close()
    with listen_loopback(port) as listener:
        async with sessions_per_client(open_session, limit=max_clients) as clients:
            server = build_per_client_server(clients)
            # Once, on stderr (stdout is free, but logs and the operator's eyes are here).
            shown = f"the value of {TOKEN_ENV}" if from_env else token
            print(
                f"airlock serve: MCP on http://127.0.0.1:{port}/mcp; clients send the header "
                f"'Authorization: Bearer TOKEN', TOKEN being {shown}",
                file=sys.stderr,
                flush=True,
            )
            with _signals_after_uvicorn():
                await serve_http(
                    server, port=port, token=token, max_sessions=max_clients, listener=listener
                )


@contextmanager
def _signals_after_uvicorn() -> Iterator[None]:
    # uvicorn shuts down gracefully on SIGTERM/SIGINT and then raises the signal again under
    # the handler it found; a no-op there lets the sandbox and the ledger close on the way
    # out instead of the process dying at once.
    found = {sig: signal.signal(sig, _ignore) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in found.items():
            signal.signal(sig, handler)


def _ignore(signum: int, frame: FrameType | None) -> None:
    return None
