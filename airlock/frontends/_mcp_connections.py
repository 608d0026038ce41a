"""The MCP server's share of the connection limits over HTTP (the limits themselves are
``airlock._http_limits``, shared with the approval page): the soft limit of open files is
raised to the hard one, and the connections (with those accepted in one turn of the loop,
before the cap closes them) fit in half of what is left: a process short of files cannot
accept, and asyncio then logs each failed accept many times a second; that line is let
through at most once a minute all the same.
"""

from __future__ import annotations

import logging
import os
import resource
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

__all__ = [
    "ACCEPT_BACKLOG",
    "fit_open_files",
    "quiet_accept_errors",
    "raise_open_files_limit",
]

ACCEPT_BACKLOG: Final = 128
"""Connections accepted in one turn of the event loop (and queued by the kernel) before the
limit above closes the extra ones: what a burst can take at once."""
_ACCEPT_FAILED: Final = "socket.accept() out of system resource"
_ACCEPT_LOG_EVERY_S: Final = 60.0
_log = logging.getLogger("airlock.mcp")


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
