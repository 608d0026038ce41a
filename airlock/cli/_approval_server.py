"""The approval page's HTTP server: uvicorn on loopback, with the connection limits of
airlock's HTTP servers (``airlock._http_limits``): deadlines for a request's head and body
and for a client that stops reading, and a cap on connections at which one that never made an
allowed request (the page marks a request with a valid session) gives way first, then the
one idle longest, so neither idle keep-alive connections nor unread pipelined requests can
lock the person out. The form's body has its own deadline too
(:class:`~airlock.cli._approval_page.ApprovalPage`).
"""

from __future__ import annotations

from airlock._extras import requires_extra

with requires_extra("web", feature="the approval page (airlock approvals serve)"):
    import uvicorn
    from starlette.types import ASGIApp

    from airlock._http_limits import HEAD_TIMEOUT, MAX_CONNECTIONS, limited_protocol

__all__ = ["HEAD_TIMEOUT", "MAX_CONNECTIONS", "page_server"]


def page_server(
    app: ASGIApp,
    *,
    host: str,
    port: int,
    head_timeout: float = HEAD_TIMEOUT,
    max_connections: int = MAX_CONNECTIONS,
) -> uvicorn.Server:
    """A server of ``app`` on ``host:port``; ``run()`` serves until interrupted."""

    # The page answers a form whose body is late itself (408, with the page's own deadline).
    protocol = limited_protocol(
        head_timeout=head_timeout, max_connections=max_connections, app_reads_body=True
    )
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", http=protocol)
    return uvicorn.Server(config)
