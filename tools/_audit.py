"""Audit events: what one call did, made in one place, and the contracts of their stores.

Each call that reaches the registry ends with exactly one *final* event, written whichever
step stopped it, built by :func:`audit_event` (the one place events are made). The event
names that step (:attr:`AuditEvent.stage`), so it stands for the whole admission trail: a
call stopped at ``authorize`` passed ``lookup`` and ``validate``.
Later layers (the write path) may add non-final events (``final=False``) for steps with
their own durable state: a person's approval (:attr:`AuditEvent.approver`), each send of a
commit; a reader counts calls by final events, and what ran by :attr:`AuditEvent.exercised`.

An :class:`AuditStore` keeps events and the text of programs (by :func:`program_hash`);
:class:`~airlock.tools.AuditLog` records into one without waiting and makes events durable
before a call returns; an :class:`AuditSink` sees each stored batch (OpenTelemetry spans).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal, Protocol

from airlock.policies import Effect, Principal
from airlock.tools._context import Caller
from airlock.tools._errors import Outcome
from airlock.tools._redact import escape_controls, redact

__all__ = [
    "EXERCISED_STAGES",
    "AdmissionDecision",
    "AuditEvent",
    "AuditSink",
    "AuditStore",
    "CallIdentity",
    "CallOutcome",
    "RunSummary",
    "Stage",
    "audit_event",
    "call_event",
    "program_hash",
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
EXERCISED_STAGES: Final[frozenset[Stage]] = frozenset({"execute", "shape", "done"})
"""The stages at which a call has reached its handler (or a write step its system of
record): its effects happened, or may have (see :attr:`AuditEvent.exercised`)."""


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
    """BLAKE2b of the canonical JSON of the arguments, fields marked secret removed; for a
    program (``execute_code``), its :func:`program_hash`, under which its text is stored."""
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
    """The call's resolved effects, e.g. ``read(billing:invoice/inv_1)``; exercised when
    :attr:`exercised` is true. A read tool that declares which records it returned
    (``records=``) has one effect per record read."""
    detail: str | None = None
    """Operator-only detail (never shown to the model)."""
    final: bool = True
    approver: str | None = None
    """Who decided a write step: the person who approved or denied it, or ``policy:RULE``
    when an approval rule allowed it; ``None`` on every other event."""

    @property
    def exercised(self) -> bool:
        """Whether what this event records reached the tool or the system of record, so its
        effects happened or may have: admission allowed it, it got to ``execute`` or later,
        and it is not a ``preview``. So a read that ran counts (even one that then failed),
        a write call that only stored its preview does not, and a write counts by the
        events of its sends (``done`` when committed), never by its approval."""
        return (
            self.decision == "allow"
            and self.stage in EXERCISED_STAGES
            and self.outcome != "preview"
        )


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


PROGRAM_TOOL: Final = "execute_code"
"""The tool name of a program's own record (stage ``done``), whose ``args_hash`` is the
:func:`program_hash` of its text: the audit log verifies that the text is stored."""


def program_hash(text: str) -> str:
    """The hash a program is recorded and stored under (BLAKE2b-128 of its UTF-8 text, in
    hex): the ``args_hash`` of its ``execute_code`` event, and what ``airlock audit
    program HASH`` takes."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


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
    """The audit event of ``who``'s call of ``tool``, ending at ``ts`` (default: now).

    What may come from elsewhere is made safe to record here, the one place events are made:
    credentials are redacted from ``detail`` (an upstream's error body may echo the request's
    ``Authorization`` header), and control characters in ``tool`` (the name as a program
    sent it), ``rule``, ``effects`` and ``detail`` are escaped (see :mod:`._redact`).
    """
    return call_event(
        who,
        tool,
        stage,
        decision,
        rule,
        outcome,
        code,
        args_hash,
        effects,
        detail,
        duration_s,
        final,
        time.time() if ts is None else ts,
    )


def call_event(
    who: CallIdentity,
    tool: str,
    stage: Stage,
    decision: AdmissionDecision,
    rule: str,
    outcome: CallOutcome,
    code: str | None,
    args_hash: str,
    effects: Iterable[Effect | str],
    detail: str | None,
    duration_s: float,
    final: bool,
    ts: float,
) -> AuditEvent:
    """:func:`audit_event`, its arguments by position (the registry records one event on
    every call, and keywords cost more than the rest of a small event); the same event."""
    # Every call makes one of these, so the common case is kept cheap: printable ASCII
    # (almost all of it) is checked in C and kept as it is; other text may hold characters
    # str.isprintable() passes that a reader cannot see, so escape_controls decides.
    if type(effects) is tuple and len(effects) == 1:  # (most calls: one effect, no loop)
        effect = effects[0]
        text = (
            f"{effect.kind}({effect.target})"  # (str(), without the call of __str__)
            if type(effect) is Effect and effect.kind != "spend"
            else str(effect)
        )
        texts: tuple[str, ...] = (_escaped(text),)
    else:
        texts = tuple(_escaped(str(effect)) for effect in effects)
    principal = who.principal
    # An _EventBuilder's slots, set directly; then it is the AuditEvent (see there).
    event = _new_builder(_EventBuilder)
    event.ts = ts
    event.run_id = who.run_id
    event.call_id = who.call_id
    event.caller = who.caller
    event.tool = _escaped(tool)
    event.user_id = principal.user_id
    event.tenant_id = principal.tenant_id
    event.args_hash = args_hash
    event.stage = stage
    event.decision = decision
    event.rule = _escaped(rule)
    event.outcome = outcome
    event.code = code
    event.duration_s = duration_s
    event.effects = texts
    event.detail = None if detail is None else escape_controls(redact(detail))
    event.final = final
    event.approver = None
    event.__class__ = AuditEvent  # type: ignore[assignment]
    made: AuditEvent = event  # type: ignore[assignment]  # (it is one: see _EventBuilder)
    return made


def _escaped(text: str) -> str:
    return text if text.isascii() and text.isprintable() else escape_controls(text)


_new_builder = object.__new__


class _EventBuilder:
    """Makes an :class:`AuditEvent`: an ``_EventBuilder`` *is* one once its slots are set.

    A frozen dataclass sets each field through ``object.__setattr__`` (about 0.1 us a field,
    18 fields, on every call). This class has the same slots without the frozen
    ``__setattr__``: :func:`call_event` sets them directly, then makes the object the
    :class:`AuditEvent` it is (the layouts are the same, so its class may be assigned; a test
    holds the two in step). Assigning the class raises one ``object.__setattr__`` audit
    event, which every audit hook of the process sees (the runtime checks' hook ignores it
    in about 0.2 us: far less than the 18 calls it saves)."""

    __slots__ = AuditEvent.__slots__

    if TYPE_CHECKING:  # (the slots, typed: the fields of AuditEvent)
        ts: float
        run_id: str
        call_id: str
        caller: Caller
        tool: str
        user_id: str
        tenant_id: str
        args_hash: str
        stage: Stage
        decision: AdmissionDecision
        rule: str
        outcome: CallOutcome
        code: str | None
        duration_s: float
        effects: tuple[str, ...]
        detail: str | None
        final: bool
        approver: str | None


class AuditStore(Protocol):
    """Where audit events and program texts live. ``append`` returns only once they are
    durable; :class:`~airlock.tools.AuditLog` calls it from one writer thread at a time."""

    def append(
        self, events: Sequence[AuditEvent], programs: Mapping[str, str] | None = None
    ) -> None:
        """Store ``events`` and ``programs`` (text by :func:`program_hash`) durably, all or
        none; a program already stored is kept once.

        Raises:
            LedgerError: the store cannot take them; its subclass says why (a full disk:
                :class:`~airlock.tools.LedgerIOError`, retryable). Raise one of these: the
                log hands it to its waiters as it is, so a session answers its code. Any
                other ``OSError`` reaches them as ``ledger_io``, any other exception as
                ``ledger_unavailable`` (retryable); the log keeps the events and retries.
            AuditStoreError: the log's last records are not the ones its head names.
        """

    def query(
        self,
        *,
        run_id: str | None = None,
        tool: str | None = None,
        since: float | None = None,
        limit: int | None = None,
    ) -> list[AuditEvent]:
        """Events in the order they were stored, filtered by run, tool and/or end time
        (``ts >= since``)."""

    def runs(self, *, limit: int = 50) -> list[RunSummary]:
        """The most recent runs first."""

    def program(self, digest: str) -> str | None:
        """The text of the program stored under ``digest``, if any."""

    def close(self) -> None:
        """Release resources; the store is unusable afterwards."""


class AuditSink(Protocol):
    """Sees every batch of events once it is stored (on the log's writer thread, never on
    the event loop), e.g. to export them as OpenTelemetry spans."""

    def emit(self, events: Sequence[AuditEvent]) -> None:
        """Take ``events``; an exception is logged and never stops the audit log."""

    def close(self) -> None:
        """Send anything buffered: the log closes, or the process exits, after its last
        batch was stored. It runs on a thread of its own, and the log waits for it at most
        10 s (at exit, what is left of 10 s once the logs are flushed): then the log goes
        on, and the process may end, without it."""
