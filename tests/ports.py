"""A free TCP port on loopback, for a server a test (or the write benchmark) starts."""

from __future__ import annotations

import socket

__all__ = ["free_port"]


def free_port() -> int:
    """A port of 127.0.0.1 nobody listens on now (the kernel picks it): the server started on
    it right after binds it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
