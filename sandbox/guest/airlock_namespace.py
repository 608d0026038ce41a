"""The ``tools`` namespace a sandboxed program calls, and ``tools.propose`` under it.

Standard library only; shipped in the image next to the runner. One attribute per tool the run
may call from code (an ``airlock_tool_functions.ToolFunction``), plus ``log()`` and the error
classes; any other public name is a tool this run was not given, refused on the spot as
``UnknownTool`` (and reported to the host once per name).
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing's, which the guest does not import (see airlock.sandbox.guest)
if TYPE_CHECKING:
    from typing import Any

    from airlock.bridge import airlock_wire as wire
    from airlock.sandbox.guest import airlock_errors as errors
    from airlock.sandbox.guest.airlock_connection import Connection
    from airlock.sandbox.guest.airlock_tool_functions import ProposalFunction, ToolFunction
else:  # in the image, the guest's modules sit side by side on the runner's path
    import airlock_errors as errors
    import airlock_wire as wire
    from airlock_tool_functions import ProposalFunction, ToolFunction

_LISTED_NAMES = 30


class Proposals:
    """The ``tools.propose`` namespace: one attribute per write the run may propose. Any
    other public name is refused on the spot as ``UnknownTool``, as for tools."""

    def __init__(self, tools: Tools | None, functions: list[ProposalFunction]) -> None:
        self._tools = tools
        self._names = []
        for function in functions:
            setattr(self, function.name, function)
            self._names.append(function.name)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        if self._tools is not None:
            self._tools._refuse(f"propose.{name}")
        shown = ", ".join(sorted(self._names)[:_LISTED_NAMES]) or "none"
        raise errors.UnknownTool(
            f"no write named {name!r} may be proposed by this program; it may propose: "
            f"{shown}. Return what should change as the program's value instead.",
            name=name,
        )

    def __dir__(self) -> list[str]:
        return sorted(self._names)

    def __repr__(self) -> str:
        return f"<tools.propose: {', '.join(sorted(self._names)) or 'none'}>"


def unknown_tool(name: str, offered: list[str]) -> errors.UnknownTool:
    """The error for a tool this run was not given, naming it and what the run can call.

    Write tools, tools hidden from the principal and names that do not exist get the same
    answer: the program learns nothing about which one it was.
    """
    shown = sorted(offered)[:_LISTED_NAMES]
    if not shown:
        choice = "this run has no tools"
    else:
        more = ", ..." if len(offered) > len(shown) else ""
        choice = f"call one of: {', '.join(shown)}{more}"
    return errors.UnknownTool(
        f"no tool named {name!r} is available to this program; {choice}. "
        "Write tools are never callable from code: return what should change as the "
        "program's value and call the write tool directly.",
        name=name,
    )


class Tools:
    """The ``tools`` namespace: one attribute per tool, plus ``log()`` and the error classes.

    Its members that are not tools are ``airlock_wire.NAMESPACE_MEMBERS``, which the host's
    static check of programs reads.

    Any other public name is a tool this run was not given: reaching for it raises
    ``UnknownTool`` (never ``None``, which RestrictedPython's attribute guard would
    otherwise hand back, and which failed later as "'NoneType' object is not callable").
    """

    ToolError = errors.ToolError
    UnknownTool = errors.UnknownTool
    InvalidInput = errors.InvalidInput
    Denied = errors.Denied
    NotFound = errors.NotFound
    Conflict = errors.Conflict
    RateLimited = errors.RateLimited
    Upstream = errors.Upstream
    Timeout = errors.Timeout
    AmbiguousWrite = errors.AmbiguousWrite
    ResultTooLarge = errors.ResultTooLarge
    ApprovalMismatch = errors.ApprovalMismatch
    PreviewExpired = errors.PreviewExpired
    NeedsApproval = errors.NeedsApproval
    LimitExceeded = errors.LimitExceeded
    ProtocolError = errors.ProtocolError
    propose = Proposals(None, [])
    """The writes this program may propose (``tools.propose.NAME(...)``); set per run."""

    def __init__(self, connection: Connection | None, stubs: list[dict[str, Any]]) -> None:
        self._connection = connection
        self._refused: set[str] = set()
        self._names = []
        proposals = []
        for stub in stubs:
            if connection is None:
                break
            if stub.get("proposal") is True:
                proposals.append(ProposalFunction(connection, stub))
                continue
            function = ToolFunction(connection, stub)
            setattr(self, function.name, function)
            self._names.append(function.name)
        self.propose = Proposals(self, proposals)

    def __getattr__(self, name: str) -> Any:
        # Only reached when no tool, error class or method has that name.
        if name.startswith("_"):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        self._refuse(name)
        raise unknown_tool(name, self._names)

    def _refuse(self, name: str) -> None:
        if self._connection is not None and name not in self._refused:
            # The host records what a program tried to reach, not only what it was given.
            self._refused.add(name)
            self._connection.send({"type": wire.REFUSED, "tool": name[: wire.MAX_TOOL_NAME_CHARS]})

    def log(self, message: str) -> None:
        """Send a line to the operator's log (not to the model)."""
        if self._connection is not None:
            self._connection.send({"type": wire.LOG, "message": str(message)[: wire.MAX_LOG_CHARS]})

    def __dir__(self) -> list[str]:
        return sorted(self._names)

    def __repr__(self) -> str:
        return f"<tools: {', '.join(sorted(self._names)) or 'none'}>"


__all__ = ["Proposals", "Tools", "unknown_tool"]
