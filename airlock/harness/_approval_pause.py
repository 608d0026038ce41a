"""The approval pause of a session: its writes and batches that wait for a person, and
finishing them (a part of :class:`~airlock.Session`, kept in its own module).

A paused write goes on with :meth:`ApprovalPause.resume` (by preview id, or a batch id), or
without anyone asking: :meth:`ApprovalPause.settle_writes` commits what a person approved
meanwhile, and the model's next answer carries the outcomes under ``settled_writes``. Before
a call it settles within the session's time: no send starts once the time is up (the rest
wait for a later settle, the watcher's or a resume), so the call answers within its budget
plus at most the sends in progress then. A model asks where a write stands with
:meth:`ApprovalPause.write_status` (MCP's ``write_status``): a call of its own, counted
against the session's budget, which starts no send of a batch once the session's time is up
(the application's own :meth:`ApprovalPause.resume` is not counted, and sends every item).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from airlock.harness._batches import PausedBatches
from airlock.harness._call_budget import CallBudget
from airlock.harness._model_tools import ModelResult
from airlock.harness._paused import PausedWrites, PendingWrite
from airlock.harness._results import failure, from_ledger_error, from_tool_error
from airlock.harness._session_audit import SessionAudit
from airlock.harness._write_notes import WRITE_KEPT, write_notes
from airlock.tools import BATCH_PREFIX, LedgerError, ToolError, WritePath, escape_controls

__all__ = ["ApprovalPause"]

_log = logging.getLogger("airlock.harness")


class ApprovalPause:
    """The approval-pause methods of a :class:`~airlock.Session`."""

    run_id: str
    _writes: WritePath | None
    _paused: PausedWrites
    _held_batches: PausedBatches
    _audit: SessionAudit
    _calls: CallBudget

    @property
    def _batches(self) -> PausedBatches:
        return self._held_batches

    @_batches.setter
    def _batches(self, batches: PausedBatches) -> None:
        # Set once, when the session is built (after its paused writes): the proposals the
        # ledger cannot hold as one batch wait among its paused writes, so a person's
        # approval of one is committed by this session's settling and told to its model.
        batches.paused_writes = self._paused
        self._held_batches = batches

    def pending(self) -> list[PendingWrite]:
        """Writes of this session waiting for approval or commit, oldest first."""
        return self._paused.waiting()

    async def resume(self, preview_id: str | None = None) -> ModelResult:
        """Go on with a paused write (the oldest one when ``preview_id`` is None), or with a
        batch of proposals when ``preview_id`` is a batch id (``pb_...``).

        Approved: commit once and return the receipt (again on every later resume, the
        same receipt; nothing is sent twice). Denied: ``denied`` with the reason. Still
        waiting: ``needs_approval`` again. A batch: each approved item is committed once,
        and the answer counts the items by state (``committed``, ``waiting``, ``denied``,
        ``expired``...). Never raises for tool errors, nor for a ledger or an audit log that
        cannot be used (``ledger_*``, as a direct write answers; an answer the audit log
        cannot record is withheld, the commit stands).

        The answer counts against the byte budget, the call not against the calls budget:
        an application may poll while a person decides. Once the bytes are used up, the
        answer is ``limit_exceeded`` (limit ``bytes``), counted as nothing, that still names
        the write, its status and, once committed, its receipt's identifiers. A model asks
        with :meth:`write_status`.
        """
        return await self._resume(preview_id, until=None)

    async def _resume(self, preview_id: str | None, *, until: float | None) -> ModelResult:
        """:meth:`resume`, starting no send of a batch after ``until`` (a model call's
        deadline, on the :func:`time.monotonic` clock)."""
        if preview_id is None:
            waiting = self._paused.waiting()
            if not waiting:
                return self._calls.account(
                    failure(
                        "not_found", "no write of this session waits; there is nothing to resume"
                    )
                )
            preview_id = waiting[0].preview_id
        shown = escape_controls(preview_id[:64])  # the model's text, on one line in the log
        try:
            if preview_id.startswith(BATCH_PREFIX):
                result = await self._batches.finish(preview_id, until=until)
            else:
                result = await self._paused.finish(preview_id)
        except ToolError as exc:
            result = from_tool_error(exc)
        except LedgerError as exc:
            # The message names a host path: the operator's log gets it, the model does not.
            _log.error("run %s resume %s: %s (%s)", self.run_id, shown, exc.code, exc)
            result = from_ledger_error(exc)
        withheld = await self._calls.withheld(f"resume {shown}")
        if withheld is not None:
            return self._calls.account(withheld)
        return self._calls.account(result, keep=write_notes(result), says=WRITE_KEPT)

    async def write_status(self, preview_id: str) -> ModelResult:
        """:meth:`resume` as a tool the model calls (MCP's ``write_status``): a call counted
        against the session's budget like any other, refused as ``limit_exceeded`` once a
        limit is used up. A batch's items start no send once the session's time is up: the
        answer says how many were not sent, and a later resume sends them. Never raises for
        tool or ledger errors."""
        admitted = await self._calls.admit("write_status")
        if isinstance(admitted, ModelResult):
            return admitted
        return await self._resume(preview_id, until=self._calls.meter.deadline)

    async def settle_writes(self) -> list[ModelResult]:
        """Commit the paused writes approved meanwhile (once each, with the fingerprint the
        model was shown) and the approved items of its batches, resend those whose send got
        no definite answer (a few times, then the model is told their outcome is unknown),
        and note the denied and expired ones; their outcomes are returned and kept for the
        model's next answer (:meth:`take_settled`). A write the session's grant or rules no
        longer allow is denied, not sent. Never raises for tool errors.

        Raises:
            LedgerError: the ledger cannot be used (the outcomes found before it failed are
                kept for the model's next answer all the same).
        """
        return await self._settle(until=None)

    async def _settle(self, *, until: float | None) -> list[ModelResult]:
        """:meth:`settle_writes`, starting no send after ``until`` (a call's deadline, on the
        :func:`time.monotonic` clock)."""

        async def batches(answers: list[ModelResult]) -> None:
            await self._batches.settle(answers, until=until)

        settled = await self._paused.settle(also=batches, until=until)
        if settled:
            await self._audit.durable()
        return settled

    def on_settled(self, listener: Callable[[list[ModelResult]], Awaitable[None]]) -> None:
        """Call ``listener`` with the outcomes each time paused writes are settled (an MCP
        server notifies its client with it); its errors are logged, never raised."""
        self._paused.listeners.append(listener)

    def take_settled(self) -> list[ModelResult]:
        """The outcomes of settled writes the model was not told yet (each is given once)."""
        return self._paused.take_untold()

    async def watch_writes(self, *, interval: float = 1.0) -> None:
        """Settle paused writes every ``interval`` seconds until cancelled (what ``serve``
        and ``chat`` run, so an approval commits without the model asking again)."""
        await self._paused.watch(self.settle_writes, interval=interval)

    async def resume_all(self) -> dict[str, ModelResult]:
        """:meth:`resume` every pending write, by preview id."""
        return {p.preview_id: await self.resume(p.preview_id) for p in self.pending()}

    def restore_pending(self) -> list[PendingWrite]:
        """Load this run's unfinished writes and batches from the ledger (another process
        may have paused them); returns the pending writes, oldest first."""
        self._batches.restore()
        return self._paused.restore()

    def pending_batches(self) -> list[str]:
        """Ids of this session's batches of proposals that are not settled, oldest first."""
        return self._batches.waiting()
