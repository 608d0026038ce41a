"""A session's batches: the writes its programs proposed, waiting for approval as one.

When a program proposed writes (``tools.propose.NAME(...)``), its result carries one short
note about them (:meth:`PausedBatches.hold`): the batch id and fingerprint, how many items,
the total per currency and the preview ids, never every preview. :meth:`PausedBatches.finish`
(``Session.resume(batch_id)``) commits each approved item once and answers with a summary of
where the items stand; asking again returns the same receipts, sending nothing twice.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Final

from airlock.harness._model_tools import ModelResult
from airlock.harness._results import success
from airlock.policies import Principal
from airlock.tools import (
    Batch,
    BatchItem,
    DeniedError,
    NotFoundError,
    Preview,
    WritePath,
    spend_totals,
)

__all__ = ["PausedBatches"]


class PausedBatches:
    """The batches of one run and principal that are not settled yet."""

    def __init__(self, writes: WritePath | None, principal: Principal, run_id: str) -> None:
        self._writes = writes
        self.principal = principal
        self.run_id = run_id
        self._batches: dict[str, Batch] = {}

    def hold(self, batch: Batch, previews: Sequence[Preview]) -> dict[str, object]:
        """Keep ``batch`` as pending; the note about it for the program's result."""
        self._batches[batch.id] = batch
        minutes = max(0, round((min(p.expires for p in previews) - time.time()) / 60))
        if all(p.state == "approved" for p in previews):  # an allow rule approved each
            return {
                "status": "approved",
                "batch_id": batch.id,
                "count": len(batch.items),
                "total": spend_totals(previews),
                "preview_ids": list(batch.items),
                "message": f"the program proposed {len(batch.items)} change(s), approved by "
                "policy; they are committed once the session resumes the batch. Do not "
                "propose or call them again",
            }
        return {
            "status": "needs_approval",
            "batch_id": batch.id,
            "fingerprint": batch.fingerprint,
            "count": len(batch.items),
            "total": spend_totals(previews),
            "preview_ids": list(batch.items),
            "expires_in_min": minutes,
            "message": f"the program proposed {len(batch.items)} change(s); they wait for a "
            "person to approve them as one batch. Tell the user, and do not propose or call "
            "them again",
        }

    def waiting(self) -> list[str]:
        """The ids of the batches held, oldest first."""
        return list(self._batches)

    async def finish(self, batch_id: str) -> ModelResult:
        """Commit every approved item of the batch once; a summary of where they stand.

        Raises:
            NotFoundError: no batch of this run and principal with this id.
            ToolError: the batch no longer matches what was proposed (``approval_mismatch``).
        """
        if self._writes is None:
            raise DeniedError("writes are not enabled in this deployment; do not retry")
        batch = self._writes.ledger.batch(batch_id)
        mine = batch is not None and (
            batch.run_id == self.run_id
            and (batch.principal.user_id, batch.principal.tenant_id)
            == (self.principal.user_id, self.principal.tenant_id)
        )
        if batch is None or not mine:
            raise NotFoundError(
                f"no batch {batch_id[:64]!r} in this session; resume one its programs proposed",
                detail=f"batch {batch_id[:64]!r} missing or of another run or principal",
            )
        items = await self._writes.commit_batch(batch.id, self.principal)
        body = _summary(batch, items)
        if body["status"] not in ("waiting", "undecided"):  # nothing more will change
            self._batches.pop(batch.id, None)
        return success(body, code="needs_approval" if body["status"] == "waiting" else None)

    def restore(self) -> list[str]:
        """Load this run's batches from the ledger (another process may have made them)."""
        if self._writes is None:
            return []
        for batch in reversed(self._writes.ledger.batches(run_id=self.run_id, limit=10_000)):
            same = (batch.principal.user_id, batch.principal.tenant_id) == (
                self.principal.user_id,
                self.principal.tenant_id,
            )
            if same:
                self._batches.setdefault(batch.id, batch)
        return self.waiting()


_UNDECIDED: Final = ("approved", "sending", "unknown")
"""Item states that may yet end committed: a batch holding one is not settled."""


def _summary(batch: Batch, items: Sequence[BatchItem]) -> dict[str, object]:
    """Where a batch's items stand, in short: counts and preview ids by state."""
    by_state: dict[str, list[str]] = {}
    for item in items:
        by_state.setdefault(item.state, []).append(item.preview_id)
    counts = {state: len(ids) for state, ids in by_state.items()}
    if counts.get("committed") == len(items):
        status = "committed"
    elif counts.get("waiting"):
        status = "waiting"
    elif any(counts.get(state) for state in _UNDECIDED):
        status = "undecided"
    else:
        status = "settled"
    messages = {
        "committed": "every item is committed, each once; do not propose them again",
        "waiting": "some items still wait for a person; tell the user",
        "undecided": "some items have no definite answer yet: the system may have made them. "
        "Resume this batch later (it sends them again with the same key, never twice) and "
        "tell the user; do not propose them again",
        "settled": "the batch is settled: the items that are not committed were denied, "
        "expired or failed; tell the user, and do not retry them without being asked",
    }
    return {
        "status": status,
        "batch_id": batch.id,
        "counts": counts,
        "preview_ids": by_state,
        "message": messages[status],
    }
