"""Who is sending a claimed step: this process's token, and whether a token's process runs.

A claim records its sender's :class:`~airlock.tools.ProcessMark` token, so reconciliation can
tell a live sender (leave it alone) from one that is gone (take the step over), pid reuse
included.
"""

from __future__ import annotations

import os

from airlock.tools._process import ProcessMark

__all__ = ["owner_alive", "owner_token"]


def owner_token() -> str:
    """This process's :class:`~airlock.tools.ProcessMark` token, recorded on every claimed
    send so that reconciliation can tell when its sender is gone (pid reuse included)."""
    pid = os.getpid()
    token = _TOKENS.get(pid)  # keyed by pid: a forked child is another sender
    if token is None:
        token = _TOKENS[pid] = ProcessMark.of(pid).token()
    return token


def owner_alive(owner: str | None) -> bool | None:
    """Whether the process named by ``owner`` still runs: ``None`` when this host cannot tell
    (another host, another PID namespace, or a malformed token)."""
    mark = None if owner is None else ProcessMark.parse(owner)
    state = "unknown" if mark is None else mark.state()
    return None if state == "unknown" else state == "alive"


_TOKENS: dict[int, str] = {}
