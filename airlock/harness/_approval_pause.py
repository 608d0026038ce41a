"""The approval pause of a session: its writes and batches that wait for a person, and
finishing them (a part of :class:`~airlock.Session`, kept in its own module).

A paused write goes on with :meth:`ApprovalPause.resume` (by preview id, or a batch id), or
without anyone asking: :meth:`ApprovalPause.settle_writes` commits what a person approved
meanwhile, and the model's next answer carries the outcomes under ``settled_writes``.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Final

from airlock.harness._batches import PausedBatches
from airlock.harness._model_tools import ModelResult
from airlock.harness._paused import PausedWrites, PendingWrite
from airlock.harness._results import failure, from_tool_error
from airlock.harness._session_audit import SessionAudit
from airlock.tools import BATCH_PREFIX, BatchItemState, ToolError, WritePath, batch_items

__all__ = ["ApprovalPause"]

_FINAL: Final[frozenset[BatchItemState]] = frozenset({"committed", "denied", "expired", "failed"})


class ApprovalPause:
    """The approval-pause methods of a :class:`~airlock.Session`."""

    _writes: WritePath | None
    _paused: PausedWrites
    _batches: PausedBatches
    _audit: SessionAudit

    def _account(self, result: ModelResult) -> ModelResult:
        raise NotImplementedError  # the session counts the answer against its budget

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
        ``expired``...). Never raises for tool errors.
        """
        if preview_id is not None and preview_id.startswith(BATCH_PREFIX):
            try:
                result = await self._batches.finish(preview_id)
            except ToolError as exc:
                result = from_tool_error(exc)
            await self._audit.durable()
            return self._account(result)
        if preview_id is None:
            waiting = self._paused.waiting()
            if not waiting:
                return self._account(
                    failure(
                        "not_found", "no write of this session waits; there is nothing to resume"
                    )
                )
            preview_id = waiting[0].preview_id
        try:
            result = await self._paused.finish(preview_id)
        except ToolError as exc:
            result = from_tool_error(exc)
        await self._audit.durable()
        return self._account(result)

    async def settle_writes(self) -> list[ModelResult]:
        """Commit the paused writes approved meanwhile (once each, with the fingerprint the
        model was shown) and the approved items of its batches, and note the denied and
        expired ones; their outcomes are returned and kept for the model's next answer
        (:meth:`take_settled`). Never raises for tool errors."""
        settled = await self._paused.settle(also=self._settle_batches)
        if settled:
            await self._audit.durable()
        return settled

    async def _settle_batches(self) -> list[ModelResult]:
        """Finish the batches with an item approved and not committed, or none undecided."""
        if self._writes is None:
            return []
        answers = []
        for batch_id in self._batches.waiting():
            try:
                items = batch_items(self._writes.ledger, batch_id, now=time.time())
            except ToolError:
                continue  # resume(batch_id) reports it
            approved = any(item.state == "approved" for item in items)
            if approved or all(item.state in _FINAL for item in items):
                try:
                    answers.append(await self._batches.finish(batch_id))
                except ToolError as exc:
                    answers.append(from_tool_error(exc))
        return answers

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
