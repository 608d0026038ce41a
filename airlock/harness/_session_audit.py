"""The records a session writes itself, beside those of the registry: a call of a tool the
session does not offer, a call refused because the budget is used up, and one record per
program, whose text is stored once by its hash.
"""

from __future__ import annotations

from collections.abc import Iterable

from airlock.harness._execute_code import EXECUTE_CODE
from airlock.policies import Effect
from airlock.tools import AuditLog, CallContext, audit_event

__all__ = ["SessionAudit"]


class SessionAudit:
    """Writes a session's own audit records to the registry's log."""

    def __init__(self, log: AuditLog) -> None:
        self.log = log

    def unknown_tool(self, ctx: CallContext, name: str) -> None:
        """Record a call of a tool the session does not offer (the registry never saw it)."""
        self.log.record(
            audit_event(
                ctx,
                name[:128],
                stage="lookup",
                decision="deny",
                rule="lookup",
                outcome="error",
                code="unknown_tool",
                detail="not in this session's tool list",
            )
        )

    def over_budget(self, ctx: CallContext, name: str, limit: str) -> None:
        """Record a call refused because the session's budget (``limit``) was used up."""
        self.log.record(
            audit_event(
                ctx,
                name[:128],
                stage="lookup",
                decision="deny",
                rule="budget",
                outcome="error",
                code="limit_exceeded",
                detail=f"the session's {limit} budget is used up",
            )
        )

    def program_text(self, code: str) -> str:
        """Store the program's text (once per text) before it runs; its hash."""
        return self.log.record_program(code)

    def program(
        self,
        ctx: CallContext,
        digest: str,
        *,
        code: str | None,
        detail: str,
        duration_s: float,
        effects: Iterable[Effect] = (),
    ) -> None:
        """One record per program, beside its tool calls (call ids ``CALL:1``, ``:2``...):
        which program ran (``args_hash`` is its hash), how it ended, what it called, and the
        inputs it was given (``read(file:NAME)``, in ``effects``)."""
        self.log.record(
            audit_event(
                ctx,
                EXECUTE_CODE,
                stage="done",
                decision="allow",
                rule=EXECUTE_CODE,
                outcome="ok" if code is None else "error",
                code=code,
                args_hash=digest,
                effects=effects,
                detail=detail,
                duration_s=duration_s,
            )
        )

    def inputs_refused(self, ctx: CallContext, effect: Effect, digest: str) -> None:
        """Record a program refused before its container started: an input outside the
        session's grant."""
        self.log.record(
            audit_event(
                ctx,
                EXECUTE_CODE,
                stage="authorize",
                decision="deny",
                rule="effect",
                outcome="error",
                code="denied",
                args_hash=digest,
                effects=(effect,),
                detail=f"input outside the grant: {effect}",
            )
        )

    async def durable(self) -> None:
        """Wait, without blocking the event loop, until everything recorded so far (this
        call's events among them) is stored."""
        await self.log.wait_durable()
