"""How the host's handling of one run's frames says the run must end.

:class:`RunStop` carries the :class:`RunEnd` out of whatever found it (a frame check, a limit,
the deadline) to the one place that ends the run (:func:`airlock.bridge.serve_run`), which
tells the guest, cancels its calls and records the end.
"""

from __future__ import annotations

from airlock.bridge._session import RunEnd, RunLimit

__all__ = ["RunStop", "limit_stop", "protocol_stop"]


class RunStop(Exception):
    """The run must end, as ``end`` says; ``tool`` is the tool the frame that ended it named
    (a call's over a limit), recorded with the end; empty when no frame named one."""

    def __init__(self, end: RunEnd, *, tool: str = "") -> None:
        super().__init__(end.message)
        self.end = end
        self.tool = tool


def protocol_stop(message: str) -> RunStop:
    """The run broke the protocol: it ends with ``protocol_error``."""
    return RunStop(RunEnd("protocol_error", None, message))


def limit_stop(limit: RunLimit, message: str, *, tool: str = "") -> RunStop:
    """The run reached ``limit``: it ends with ``limit_exceeded``; ``tool``: the tool the
    call over the limit named."""
    return RunStop(RunEnd("limit_exceeded", limit, message), tool=tool)
