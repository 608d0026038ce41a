"""A session's budget at its door: each model-facing call (a tool call, ``write_status``) is
counted before anything is awaited, or refused once a limit is used up; each answer is
counted in bytes, within the per-result cap. No answer is given before the audit log holds
the records of what produced it: one it cannot store is withheld (:meth:`CallBudget.withheld`).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Final

from airlock.harness._budget import Budget, BudgetMeter
from airlock.harness._model_tools import ModelResult
from airlock.harness._results import (
    PROGRAM_KEPT,
    KeptNotes,
    byte_size,
    failure,
    from_tool_error,
    nothing_kept,
    refusal,
    sized,
)
from airlock.harness._session_audit import SessionAudit
from airlock.tools import CallContext, LedgerError, LimitExceededError

__all__ = ["CallBudget"]

_log = logging.getLogger("airlock.harness")
_SHORT: Final = 768
"""Largest answer, notes included, given once the byte budget is used up (when the notes
allow: the last of a program's notes is under a kilobyte, a write's under 400 bytes)."""


class CallBudget:
    """Admits a session's calls against its :class:`Budget` and counts their answers."""

    def __init__(
        self,
        budget: Budget,
        *,
        run_id: str,
        audit: SessionAudit,
        context: Callable[[str], CallContext],
    ) -> None:
        self.meter = BudgetMeter(budget)
        self.run_id = run_id
        self._audit = audit
        self._context = context
        """Makes a call's context from its call id (for the audit record of a refusal)."""
        # The nonce keeps call ids unique when another process resumes the same run.
        self._nonce = uuid.uuid4().hex[:6]
        self._refused = 0

    async def admit(self, name: str) -> str | ModelResult:
        """The call id of a call the budget admits (counted at once), or the
        ``limit_exceeded`` answer to one it refuses, recorded in the audit log first."""
        # Counted before any await: concurrent calls of one turn cannot all pass the check
        # while one of them waits (for paused writes to settle, say).
        used_up = self.meter.reserve()
        if used_up is None:
            return f"{self.run_id}:m{self.meter.calls}-{self._nonce}"
        self._refused += 1
        ctx = self._context(f"{self.run_id}:r{self._refused}-{self._nonce}")
        self._audit.over_budget(ctx, name, used_up)
        withheld = await self.withheld(ctx.call_id)
        if withheld is not None:
            return withheld
        return from_tool_error(
            LimitExceededError(self.meter.used_up_message(used_up), limit=used_up)
        )

    async def withheld(self, label: str) -> ModelResult | None:
        """Wait, without blocking the event loop, until everything the session recorded so
        far is stored; then None. When the audit log cannot store it, the answer that
        replaces the call's (labelled ``label`` in the operator's log): its ``ledger_*``
        code, never the message, which names a host path.

        The call's own answer is withheld (fail closed: nothing is told that the audit log
        does not hold); what the call did stands, and asking again answers it, a write's
        commit included, without sending anything twice.
        """
        try:
            await self._audit.durable()
        except LedgerError as exc:
            _log.error("run %s %s: answer withheld: %s (%s)", self.run_id, label, exc.code, exc)
            return failure(
                exc.code,
                f"{exc.store} cannot record this call right now, so its answer is withheld; "
                "what the call did stands (a write is never sent twice): make the same call "
                "again later",
                retryable=exc.retryable,
            )
        return None

    def cap(self) -> int:
        """Largest answer that may be given now."""
        return self.meter.result_cap()

    def account(
        self,
        result: ModelResult,
        *,
        keep: KeptNotes = nothing_kept,
        says: str = PROGRAM_KEPT,
        smaller: str | None = None,
    ) -> ModelResult:
        """``result`` as the model may be given it, counted against the byte budget.

        Over the per-result cap: ``result_too_large`` (see :func:`sized`; ``smaller`` says how
        to make it smaller). What is left of the session's bytes cannot hold it (or its
        refusal): ``limit_exceeded`` (limit ``bytes``), which may take the count past the
        budget by itself, once. Once the bytes are used up: a short ``limit_exceeded``,
        counted as nothing (an application may poll :meth:`~airlock.Session.resume`: its
        answers must not grow the count).
        Each refusal keeps the notes of ``keep`` (``says`` tells what they are): the first
        that fits, else the last, which the caller keeps small and bounded; used up, the
        first within :data:`_SHORT` bytes, else the last."""
        meter = self.meter
        left = meter.budget.bytes - meter.bytes
        if left <= 0:
            return self._used_up(result, keep, says)
        answer = sized(result, meter.budget.result_bytes, keep=keep, says=says, smaller=smaller)
        if byte_size(answer.content) > left:
            size = byte_size(result.content)
            said = meter.too_little_left_message(size)
            fields = {"limit": "bytes", "size_bytes": size, "limit_bytes": left}
            plain = failure("limit_exceeded", said, extra=fields)
            answer = refusal(plain, keep, f"{said}; {says}", fields=fields, cap=left)
            answer = answer.model_copy(update={"artifacts": result.artifacts})
        meter.bytes += byte_size(answer.content)
        return answer

    def _used_up(self, result: ModelResult, keep: KeptNotes, says: str) -> ModelResult:
        """The answer once the byte budget is used up: not counted, so short and bounded."""
        said = self.meter.used_up_message("bytes")
        fields = {"limit": "bytes"}
        plain = failure("limit_exceeded", said, extra=fields)
        answer = refusal(plain, keep, f"{said}; {says}", fields=fields, cap=_SHORT)
        return answer.model_copy(update={"artifacts": result.artifacts})
