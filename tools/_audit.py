"""The audit log: one final event per call, buffered and written durably in batches.

Each call that reaches the registry ends with exactly one *final* event, written whichever
step stopped it, built by :func:`audit_event` (the one place events are made). The event
names that step (:attr:`AuditEvent.stage`), so it stands for the whole admission trail: a
call stopped at ``authorize`` passed ``lookup`` and ``validate``.
Later layers (the write path) may add non-final events (``final=False``) for steps with
their own durable state; a reader counts calls by final events.

:class:`AuditLog` buffers events in memory and hands them to an :class:`AuditStore` in
batches; :meth:`AuditLog.flush` makes everything recorded so far durable and must be called
before a run's result is returned (the harness does; the registry never blocks a call on it).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Literal, Protocol

from airlock.policies import Effect, Principal
from airlock.tools._context import Caller
from airlock.tools._errors import Outcome

__all__ = [
    "AdmissionDecision",
    "AuditEvent",
    "AuditLog",
    "AuditStore",
    "CallIdentity",
    "CallOutcome",
    "MemoryAuditStore",
    "RunSummary",
    "Stage",
    "audit_event",
]

Stage = Literal[
    "lookup", "validate", "authorize", "precondition", "execute", "shape", "done", "bridge"
]
"""The admission step a call stopped at; ``done`` when it went through all of them.
``bridge`` marks a run the bridge ended (a protocol error or a run limit) before admission."""
AdmissionDecision = Literal["allow", "ask", "deny"]
"""Admission's verdict: ``allow`` once the call was authorized, else ``deny`` or ``ask``."""
CallOutcome = Outcome | Literal["preview"]
"""How a call ended: an :data:`~airlock.tools.Outcome` (``ok``, ``error``, ``unknown``), or
``preview``: a write call that stored its preview (waiting for approval, or approved by
policy) and changed nothing yet."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditEvent:
    """One audit record. Holds no argument values: only their hash, secrets left out."""

    ts: float
    """Wall-clock time the call ended (seconds since the epoch)."""
    run_id: str
    call_id: str
    caller: Caller
    tool: str
    """The name as called (it may name no tool)."""
    user_id: str
    tenant_id: str
    args_hash: str
    """BLAKE2b of the canonical JSON of the arguments, fields marked secret removed."""
    stage: Stage
    decision: AdmissionDecision
    rule: str
    """What decided: ``lookup``, ``input``, ``scope``, ``grant``, ``spend``, ``precondition``,
    an approval rule id, or ``default``."""
    outcome: CallOutcome
    code: str | None
    """The answer's code when the outcome is not ``ok`` (``needs_approval`` for a preview)."""
    duration_s: float
    effects: tuple[str, ...]
    """The call's resolved effects, e.g. ``read(billing:invoice/inv_1)``; exercised when the
    stage is ``execute`` or later."""
    detail: str | None = None
    """Operator-only detail (never shown to the model)."""
    final: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class RunSummary:
    """One line per run for ``airlock audit list``."""

    run_id: str
    started: float
    ended: float
    calls: int
    ok: int
    error: int
    unknown: int
    users: tuple[str, ...]
    previews: int = 0
    """Write calls that stored a preview: neither ``ok`` nor ``error``."""


class CallIdentity(Protocol):
    """Whose call an event records: a :class:`~airlock.tools.CallContext`, or anything else
    that names the principal, run, call and caller (a write step names its preview)."""

    @property
    def principal(self) -> Principal: ...
    @property
    def run_id(self) -> str: ...
    @property
    def call_id(self) -> str: ...
    @property
    def caller(self) -> Caller: ...


def audit_event(
    who: CallIdentity,
    tool: str,
    *,
    stage: Stage,
    decision: AdmissionDecision,
    rule: str,
    outcome: CallOutcome,
    code: str | None = None,
    args_hash: str = "",
    effects: Iterable[Effect | str] = (),
    detail: str | None = None,
    duration_s: float = 0.0,
    final: bool = True,
    ts: float | None = None,
) -> AuditEvent:
    """The audit event of ``who``'s call of ``tool``, ending at ``ts`` (default: now)."""
    return AuditEvent(
        ts=time.time() if ts is None else ts,
        run_id=who.run_id,
        call_id=who.call_id,
        caller=who.caller,
        tool=tool,
        user_id=who.principal.user_id,
        tenant_id=who.principal.tenant_id,
        args_hash=args_hash,
        stage=stage,
        decision=decision,
        rule=rule,
        outcome=outcome,
        code=code,
        duration_s=duration_s,
        effects=tuple(str(e) for e in effects),
        detail=detail,
        final=final,
    )


class AuditStore(Protocol):
    """Where audit events live. ``append`` returns only once the events are durable."""

    def append(self, events: Sequence[AuditEvent]) -> None:
        """Store ``events`` durably, all or none."""

    def query(
        self, *, run_id: str | None = None, tool: str | None = None, limit: int | None = None
    ) -> list[AuditEvent]:
        """Events in the order they were stored, filtered by run and/or tool."""

    def runs(self, *, limit: int = 50) -> list[RunSummary]:
        """The most recent runs first."""

    def close(self) -> None:
        """Release resources; the store is unusable afterwards."""


class MemoryAuditStore:
    """An :class:`AuditStore` in memory, for tests and for measuring without a disk."""

    def __init__(self) -> None:
        self._events: list[AuditEvent] = []
        self._lock = threading.Lock()

    def append(self, events: Sequence[AuditEvent]) -> None:
        with self._lock:
            self._events.extend(events)

    def query(
        self, *, run_id: str | None = None, tool: str | None = None, limit: int | None = None
    ) -> list[AuditEvent]:
        with self._lock:
            found = [
                e
                for e in self._events
                if (run_id is None or e.run_id == run_id) and (tool is None or e.tool == tool)
            ]
        return found if limit is None else found[:limit]

    def runs(self, *, limit: int = 50) -> list[RunSummary]:
        with self._lock:
            events = list(self._events)
        by_run: dict[str, list[AuditEvent]] = {}
        for event in events:
            by_run.setdefault(event.run_id, []).append(event)
        summaries = [summarize(run_id, group) for run_id, group in by_run.items()]
        summaries.sort(key=lambda s: s.ended, reverse=True)
        return summaries[:limit]

    def close(self) -> None:
        return None


def summarize(run_id: str, events: Sequence[AuditEvent]) -> RunSummary:
    """A :class:`RunSummary` of one run's events."""
    final = [e for e in events if e.final]
    return RunSummary(
        run_id=run_id,
        started=min(e.ts - e.duration_s for e in events),
        ended=max(e.ts for e in events),
        calls=len(final),
        ok=sum(e.outcome == "ok" for e in final),
        error=sum(e.outcome == "error" for e in final),
        unknown=sum(e.outcome == "unknown" for e in final),
        users=tuple(sorted({e.user_id for e in events})),
        previews=sum(e.outcome == "preview" for e in final),
    )


class AuditLog:
    """Buffers events and writes them to a store in batches; thread-safe.

    ``record`` never waits for the disk unless the buffer is full; ``flush`` waits until
    every event recorded before it is durable. Use as a context manager to flush and close.
    """

    def __init__(self, store: AuditStore, *, batch_size: int = 1024) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, not {batch_size!r}")
        self.store = store
        self._batch_size = batch_size
        self._buffer: list[AuditEvent] = []
        self._buffer_lock = threading.Lock()
        self._write_lock = threading.Lock()

    def record(self, event: AuditEvent) -> None:
        """Add ``event``; writes a batch when the buffer is full."""
        with self._buffer_lock:
            self._buffer.append(event)
            full = len(self._buffer) >= self._batch_size
        if full:
            self.flush()

    def flush(self) -> None:
        """Make every event recorded so far durable.

        Raises:
            Exception: whatever the store raised; the events stay buffered for a retry.
        """
        with self._write_lock:
            with self._buffer_lock:
                batch, self._buffer = self._buffer, []
            if not batch:
                return
            try:
                self.store.append(batch)
            except BaseException:
                with self._buffer_lock:
                    self._buffer[:0] = batch
                raise

    @property
    def pending(self) -> int:
        """Events recorded but not yet durable."""
        with self._buffer_lock:
            return len(self._buffer)

    def events(
        self, *, run_id: str | None = None, tool: str | None = None, limit: int | None = None
    ) -> list[AuditEvent]:
        """Flush, then query the store."""
        self.flush()
        return self.store.query(run_id=run_id, tool=tool, limit=limit)

    def runs(self, *, limit: int = 50) -> list[RunSummary]:
        """Flush, then summarize the most recent runs."""
        self.flush()
        return self.store.runs(limit=limit)

    def close(self) -> None:
        """Flush and close the store."""
        try:
            self.flush()
        finally:
            self.store.close()

    def __enter__(self) -> AuditLog:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
