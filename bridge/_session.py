"""What one run's program acts with and within: its authority, its limits, how it ended.

A :class:`ToolSession` is built by the host for each run (the principal, grant and approvals
come from the application's session, never from a frame) and :class:`BridgeLimits` bound what
the run may do through the bridge; :func:`~airlock.bridge.serve_run` serves the run under both
and answers a :class:`RunEnd` when it had to stop it. An :class:`ArtifactSink` takes the files
the program left, piece by piece, when the host collects them.

A session with a write path (``writes``) also takes the program's *proposals* of the write
tools in ``proposable`` (``tools.propose.NAME(...)``): each is admitted and prepared by
:meth:`WritePath.propose_from_code <airlock.tools.WritePath.propose_from_code>`, nothing is
committed, and :meth:`ToolSession.proposed_previews` lists what the program proposed, in
order, for the harness to store as one batch.
"""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass, field
from typing import Final, Literal, Protocol

from airlock.bridge._api import ToolStub, proposal_stubs, tool_stubs
from airlock.policies import ApprovalPolicy, Grant, Principal
from airlock.tools import (
    CallContext,
    ConflictError,
    JSONObject,
    LimitExceededError,
    Observations,
    Preview,
    Registry,
    RunAuthority,
    UnknownToolError,
    WritePath,
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

_log = logging.getLogger(__name__)

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
    """Per-run limits of the bridge. Reaching one ends the run.

    They bound what a run costs the host in work, not only in bytes (``max_bytes_in``): each
    frame the host handles counts against ``max_calls`` (a call, a proposal, a batch: each
    item, an empty batch as one) or ``max_log_frames`` (``log``, ``refused`` and ``cancel``
    frames); the ``done`` frame comes once, and artifacts have limits of their own.
    """

    max_calls: int = 10_000
    """Logical tool calls in one run (each batch item counts; an empty batch counts as one)."""
    max_in_flight: int = 256
    """Calls sent and not yet answered; a guest that queues more is ended."""
    max_concurrency: int = 32
    """Calls the host executes at once; the rest wait their turn (not an error)."""
    max_bytes_in: int = 64 * 1024 * 1024
    """Bytes of frames the guest may send in one run, but for the ``done`` frame, which has a
    budget of its own (``serve_run``'s ``max_done_bytes``: the output caps, JSON-escaped, and
    the final value's limit)."""
    max_bytes_out: int = 64 * 1024 * 1024
    """Bytes of results the host may send back in one run. Results count as soon as the host
    holds them: a batch's items as each finishes, so a guest that does not read its answers
    costs the host about this much, plus the results of the calls running at that moment
    (``max_concurrency``)."""
    max_call_frame_bytes: int = 1024 * 1024
    """Largest ``call``, ``batch`` or ``log`` frame."""
    max_batch_items: int = 1000
    """Items in one ``batch`` frame."""
    max_log_frames: int = 10_000
    """``log`` frames (lines of ``tools.log``), ``refused`` frames (a name the program
    reached for and was not given; the guest sends each name once) and ``cancel`` frames (a
    call the program cancelled) in one run; one more ends it as ``limit_exceeded``
    (``calls``), as a call over ``max_calls`` does."""
    max_proposals: int = 100
    """Writes one program may propose; each one more is refused as ``limit_exceeded``
    (``proposals``), and the program goes on."""


_DEFAULT_LIMITS: Final = BridgeLimits()
_NO_RULES: Final = ApprovalPolicy()
"""A session's defaults, made once: both are frozen, so every session shares them (made anew
for each, they cost building one 10 to 30 us more on a machine cold from a pause)."""


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
    run_id: str = field(default_factory=lambda: secrets.token_hex(16))
    """The run's id in the audit log and the ledger (by default 128 random bits in hex, as long
    as a UUID's: a ``uuid4()`` cost building a session 20 us more on a machine cold from a
    pause)."""
    approvals: ApprovalPolicy = _NO_RULES
    limits: BridgeLimits = _DEFAULT_LIMITS
    observations: Observations = field(default_factory=Observations)
    calls: int = 0
    """Logical calls admitted to dispatch so far in this run."""
    tool_names: frozenset[str] | None = None
    """When set, the program is offered only these tools (a harness leaves out what the
    grant cannot use); admission still judges every call."""
    call_prefix: str | None = None
    """Prefix of this program's call ids in the audit log (default: the run id); a harness
    running several programs in one run gives each its own."""
    writes: WritePath | None = None
    """Where the program's proposals go; without it, it may propose nothing."""
    proposable: frozenset[str] = frozenset()
    """Write tools the program is offered under ``tools.propose`` (a harness offers those
    the tool's contract and the grant allow); admission judges every proposal anyway."""
    durable_by_caller: bool = False
    """The caller waits for the registry's audit log to store what the run recorded before
    it hands the run's result on (a harness does, before every answer it gives): the bridge
    then does not wait as well, which spares the run a wait for the log's writer and a
    synced commit."""
    proposed: int = field(default=0, init=False)
    """Proposals the program made so far, refused ones included."""
    _proposals: list[tuple[int, Preview]] = field(default_factory=list, init=False, repr=False)
    """Each kept proposal's order and its preview."""
    _withdrawn: dict[int, float] = field(default_factory=dict, init=False, repr=False)
    """The orders the program withdrew, and when."""
    _released: list[tuple[str, float]] = field(default_factory=list, init=False, repr=False)
    """The previews withdrawn proposals let go of, and when, for the write path."""
    _preparing: int = field(default=0, init=False, repr=False)
    _ended_at: float | None = field(default=None, init=False, repr=False)
    _holder: object = field(default_factory=object, init=False, repr=False)
    """This program, to the write path: the holder of its proposals' previews."""
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
        """The tools this run's program may call, and the writes it may propose, for the
        ``run`` frame."""
        stubs = tool_stubs(self.registry, self.principal, names=self.tool_names)
        if self.writes is not None and self.proposable:
            stubs += proposal_stubs(self.registry, self.principal, names=self.proposable)
        return stubs

    async def propose(
        self, tool: str, args: dict[str, object], ctx: CallContext, *, order: int
    ) -> JSONObject:
        """One proposal of the program (the ``order``-th frame of the run): its preview's id,
        tool, summary and state. Nothing is committed.

        Raises:
            LimitExceededError: the program proposed more than ``limits.max_proposals``.
            UnknownToolError: this run takes no proposals (no write path).
            ToolError: as :meth:`WritePath.propose_from_code
                <airlock.tools.WritePath.propose_from_code>`.
        """
        self.proposed += 1
        limit = self.limits.max_proposals
        if self.writes is None or self.proposed > limit:
            error: LimitExceededError | UnknownToolError
            if self.writes is None:
                error = UnknownToolError(name=tool, detail="this run takes no proposals")
            else:
                error = LimitExceededError(
                    f"the program proposed {self.proposed} writes; the limit is {limit} per "
                    "program. Propose fewer, or split the work across programs",
                    limit="proposals",
                )
            self.registry.audit.record(
                audit_event(
                    ctx,
                    tool[:128],
                    stage="lookup" if self.writes is None else "authorize",
                    decision="deny",
                    rule="proposals" if self.writes is not None else "lookup",
                    outcome="error",
                    code=error.code,
                    detail=f"proposal refused: {error.detail or error.message}"[:500],
                )
            )
            raise error
        self._preparing += 1
        try:
            preview = await self.writes.propose_held(tool, args, ctx, holder=self._holder)
            withdrawn_at = self._withdrawn.get(order, self._ended_at)
            if withdrawn_at is not None:  # (ended: no batch will list it)
                self._released.append(self._withdrawing(preview, withdrawn_at))
            else:
                self._proposals.append((order, preview))
        finally:
            self._preparing -= 1
            self._release_withdrawn()
        return {
            "preview_id": preview.id,
            "tool": preview.tool,
            "summary": preview.summary,
            "state": preview.state,
        }

    def proposed_previews(self) -> list[Preview]:
        """The previews the program proposed, in the order it proposed them, each once (the
        same intent proposed twice is one preview)."""
        seen: dict[str, Preview] = {}
        for _, preview in sorted(self._proposals, key=lambda entry: entry[0]):
            seen.setdefault(preview.id, preview)
        return list(seen.values())

    def withdraw(self, order: int) -> None:
        """Take the ``order``-th proposal out of the run's proposals, now or as it ends: the
        program cancelled it while it was prepared (the bridge lets a running proposal run
        to its end rather than cut it short), so :meth:`proposed_previews` never lists it.

        Once its preview exists, the ledger denies it, "withdrawn by the program"
        (:meth:`WritePath.withdraw <airlock.tools.WritePath.withdraw>`: a step event in its
        history and a ``deny`` in the audit log), even when a rule had approved it: nothing
        that loads a run's waiting previews from the ledger (a harness's
        ``restore_pending``) finds it, an approval of it is refused (``conflict``) and a
        commit too (``denied``). Its key is free again, so the same intent proposed later
        gets a preview of its own. The exceptions: the proposal only lets go of its preview
        (:meth:`WritePath.withdraw <airlock.tools.WritePath.withdraw>`), which is denied once
        nobody holds it: while another proposal of this program, a proposal of another
        program of the run or a direct call of the model holds it (the same intent, one
        preview), it stays ``prepared`` and listed for them; one stored elsewhere (by another
        process) is not this program's to deny; and one a person approved stays approved.
        The write path is told once no proposal of the program is being prepared, so one
        that would share the preview holds it by then.
        """
        at = self._withdrawn[order] = self._now()
        self._released += [self._withdrawing(p, at) for n, p in self._proposals if n == order]
        self._proposals = [entry for entry in self._proposals if entry[0] != order]
        self._release_withdrawn()

    def end(self) -> None:
        """The program ended, however: its withdrawn or failed proposals let go of their
        previews now, and one still being prepared as it ends (no batch lists it: it is
        withdrawn); a denial the ledger could not record is tried again at each of these
        steps, and before anything is approved or committed in this process
        (:meth:`WritePath.settle_denials <airlock.tools.WritePath.settle_denials>`)."""
        self._ended_at = self._now()
        self._release_withdrawn()

    def _release_withdrawn(self) -> None:
        if self._preparing or self.writes is None:
            return  # (one being prepared may yet answer the same preview, and hold it)
        self.writes.settle_denials()  # (those the ledger failed to record before)
        released, self._released = self._released, []
        for preview_id, at in released:
            try:
                self.writes.withdraw(preview_id, holder=self._holder, withdrawn_at=at)
            except ConflictError as exc:  # (being sent: denied if that send never starts)
                _log.info("run %s: withdrawn preview %s: %s", self.run_id, preview_id, exc)
            except Exception as exc:  # (the bridge goes on; the preview is in no batch)
                _log.error(
                    "run %s: withdrawn preview %s could not be denied in the ledger (%s); "
                    "until it is, it is neither approved nor committed in this process",
                    self.run_id,
                    preview_id,
                    type(exc).__name__,
                )

    def _withdrawing(self, preview: Preview, at: float) -> tuple[str, float]:
        if self.writes is not None:  # (it is: a proposal came back from it)
            self.writes.withdrawing(preview.id, holder=self._holder)
        return preview.id, at

    def _now(self) -> float:
        """The write path's clock (a proposal's withdrawal is judged against its approvals)."""
        return self.writes.clock() if self.writes is not None else 0.0

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

    def record_end(self, end: RunEnd, *, tool: str = "") -> None:
        """Append the bridge's ending of this run to the audit log; ``tool``: the tool the
        call that ended it named (one over a limit), as its frame named it."""
        self.registry.audit.record(
            audit_event(
                self.authority.context("code", f"{self.call_prefix or self.run_id}:end"),
                tool,
                stage="bridge",
                decision="deny",
                rule=end.limit or end.code,
                outcome="error",
                code=end.code,
                detail=end.message[:500],
            )
        )
