"""What one run's program acts with and within: its authority, its limits, how it ended.

A :class:`ToolSession` is built by the host for each run (the principal, grant and approvals
come from the application's session, never from a frame) and :class:`BridgeLimits` bound what
the run may do through the bridge; :func:`~airlock.bridge.serve_run` serves the run under both
and answers a :class:`RunEnd` when it had to stop it. An :class:`ArtifactSink` takes the files
the program left, piece by piece, when the host collects them.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Literal, Protocol

from airlock.bridge._api import ToolStub, tool_stubs
from airlock.policies import ApprovalPolicy, Grant, Principal
from airlock.tools import (
    CallContext,
    Observations,
    Registry,
    RunAuthority,
    audit_event,
)

__all__ = [
    "ArtifactRefused",
    "ArtifactSink",
    "BridgeLimits",
    "EndCode",
    "RunEnd",
    "RunLimit",
    "ToolSession",
]

EndCode = Literal["protocol_error", "limit_exceeded", "timeout"]
RunLimit = Literal["calls", "in_flight", "bytes", "timeout", "artifacts"]


class ArtifactRefused(Exception):
    """An :class:`ArtifactSink` refused a piece: over a limit (``limit``: the run ends with
    ``limit_exceeded``), or against the contract (the run ends with ``protocol_error``)."""

    def __init__(self, message: str, *, limit: bool) -> None:
        super().__init__(message)
        self.message = message
        self.limit = limit


class ArtifactSink(Protocol):
    """Where the files a program left go, as the guest sends them (``artifact`` frames).

    The bridge has checked the frame's shape, the name (``airlock_wire.ARTIFACT_NAME``) and
    the piece's size before it calls :meth:`receive`, on a worker thread.
    """

    def receive(self, name: str, offset: int, data: bytes, *, end: bool) -> None:
        """Store ``data`` at ``offset`` of the file ``name``; ``end`` closes the file.

        Raises:
            ArtifactRefused: the piece is over a limit or out of order.
        """
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class BridgeLimits:
    """Per-run limits of the bridge. Reaching one ends the run."""

    max_calls: int = 10_000
    """Logical tool calls in one run (each batch item counts)."""
    max_in_flight: int = 256
    """Calls sent and not yet answered; a guest that queues more is ended."""
    max_concurrency: int = 32
    """Calls the host executes at once; the rest wait their turn (not an error)."""
    max_bytes_in: int = 64 * 1024 * 1024
    """Bytes of frames the guest may send in one run (the final result included)."""
    max_bytes_out: int = 64 * 1024 * 1024
    """Bytes of results the host may send back in one run."""
    max_call_frame_bytes: int = 1024 * 1024
    """Largest ``call``, ``batch`` or ``log`` frame."""
    max_batch_items: int = 1000
    """Items in one ``batch`` frame."""


@dataclass(frozen=True, slots=True)
class RunEnd:
    """How the bridge ended a run that did not finish by itself."""

    code: EndCode
    limit: RunLimit | None
    message: str


@dataclass(kw_only=True)
class ToolSession:
    """The authority one run's program calls tools with, fixed by the host for the run.

    Build one per run from the application's session; a program can neither see nor change
    any of it.
    """

    registry: Registry
    principal: Principal
    grant: Grant
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    approvals: ApprovalPolicy = field(default_factory=ApprovalPolicy)
    limits: BridgeLimits = field(default_factory=BridgeLimits)
    observations: Observations = field(default_factory=Observations)
    calls: int = 0
    """Logical calls admitted to dispatch so far in this run."""
    tool_names: frozenset[str] | None = None
    """When set, the program is offered only these tools (a harness leaves out what the
    grant cannot use); admission still judges every call."""
    call_prefix: str | None = None
    """Prefix of this program's call ids in the audit log (default: the run id); a harness
    running several programs in one run gives each its own."""
    authority: RunAuthority = field(init=False, repr=False)
    """The run's authority, from the fields above; every call's context comes from it."""

    def __post_init__(self) -> None:
        self.authority = RunAuthority(
            principal=self.principal,
            grant=self.grant,
            run_id=self.run_id,
            approvals=self.approvals,
            observations=self.observations,
        )

    def stubs(self) -> list[ToolStub]:
        """The tools this run's program may call, for the ``run`` frame."""
        return tool_stubs(self.registry, self.principal, names=self.tool_names)

    def context(self, call_id: str, deadline: float) -> CallContext:
        """The context of one call from code."""
        return self.authority.context("code", call_id, deadline=deadline)

    def record_refused(self, tool: str, number: int) -> None:
        """Record that the program reached for ``tool``, which it was not given: the guest
        refused it without a call, so admission never saw it. ``number`` counts the run's
        refused names (call ids ``PREFIX:refused:N``); ``*`` stands for every name past the
        bridge's per-run limit."""
        prefix = self.call_prefix or self.run_id
        self.registry.audit.record(
            audit_event(
                self.authority.context("code", f"{prefix}:refused:{number}"),
                tool,
                stage="lookup",
                decision="deny",
                rule="lookup",
                outcome="error",
                code="unknown_tool",
                detail="refused in the sandbox: not a tool of this program",
            )
        )

    def record_end(self, end: RunEnd) -> None:
        """Append the bridge's ending of this run to the audit log."""
        self.registry.audit.record(
            audit_event(
                self.authority.context("code", f"{self.run_id}:end"),
                "",
                stage="bridge",
                decision="deny",
                rule=end.limit or end.code,
                outcome="error",
                code=end.code,
                detail=end.message[:500],
            )
        )
