"""A session's batches: the writes its programs proposed, waiting for approval as one.

When a program proposed writes (``tools.propose.NAME(...)``), its result carries one short
note about them (:meth:`PausedBatches.hold`, :mod:`airlock.harness._proposal_notes`): the
batch id and fingerprint, how many items, the total per currency and the preview ids, never
every preview; proposals the ledger could not hold as one batch wait as the session's paused
writes instead (:meth:`PausedBatches.hold_each`). :meth:`PausedBatches.finish`
(``Session.resume(batch_id)``) commits each approved item once and answers with a summary of
where the items stand; asking again returns the same receipts, sending nothing twice.
:meth:`PausedBatches.settle` does the same for the session's own settling, within its time
(:mod:`airlock.harness._batch_commits`), and resends an item whose send got no definite
answer a bounded number of times, as a direct write's, before it tells the model.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Final, Literal, assert_never

from airlock.harness._batch_commits import Committed, commit_items
from airlock.harness._commit_authority import CommitAuthority
from airlock.harness._model_tools import ModelResult
from airlock.harness._paused import UNKNOWN_TRIES, PausedWrites
from airlock.harness._proposal_notes import (
    NOTHING_EARLIER,
    Proposed,
    batch_item_note,
    batch_item_unknown,
    batch_note,
)
from airlock.harness._results import failure, from_tool_error, success
from airlock.policies import Principal
from airlock.tools import (
    Batch,
    BatchItemState,
    DeniedError,
    LedgerError,
    NotFoundError,
    Preview,
    ToolError,
    WritePath,
    batch_items,
)

__all__ = ["PausedBatches"]

_FINAL: Final[frozenset[BatchItemState]] = frozenset({"committed", "denied", "expired", "failed"})
_OPEN: Final[frozenset[BatchItemState]] = frozenset({"waiting", "approved", "sending"})
"""Item states that a later settle may still move on: a batch holding one stays held."""


class PausedBatches:
    """The batches of one run and principal that are not settled yet."""

    def __init__(
        self,
        writes: WritePath | None,
        principal: Principal,
        run_id: str,
        *,
        authority: CommitAuthority,
    ) -> None:
        self._writes = writes
        self.principal = principal
        self.run_id = run_id
        self._authority = authority
        """What each commit is judged by again: the session's authority now."""
        self._batches: dict[str, Batch] = {}
        self._unknown_tries: dict[str, int] = {}
        """Settles that found items of each batch still ``unknown`` after resending them."""
        self._gave_up: dict[str, int] = {}
        """Batches whose ``unknown`` items settling no longer resends (reconcile settles
        them), with the settles that tried."""
        self._unjudged_told: dict[str, object] = {}
        """Batches whose items that cannot be judged (effects that do not read back) were
        told, with the summary told: each settle finds them again, and says it once."""
        self.paused_writes: PausedWrites | None = None
        """The session's paused writes, where proposals that could not be held as a batch
        wait (:meth:`hold_each`)."""

    def hold(
        self, batch: Batch, previews: Sequence[Preview], earlier: Proposed = NOTHING_EARLIER
    ) -> dict[str, object]:
        """Keep ``batch`` (of ``previews``) as pending; the note about it for the program's
        result, which also names ``earlier``'s changes, proposed again after they were
        committed in the run or while they wait (they are in no new batch)."""
        self._batches[batch.id] = batch
        return batch_note(batch, previews, earlier)

    def holding(self) -> set[str]:
        """The ids of the previews this session holds: items of its batches and its paused
        writes. Proposed again, each stays where it waits, so it is committed and told once."""
        held = {item for batch in self._batches.values() for item in batch.items}
        if self.paused_writes is not None:
            held.update(pending.preview_id for pending in self.paused_writes.waiting())
        return held

    def held_item(self, preview: Preview) -> ModelResult | None:
        """The answer to a direct call whose ``preview`` waits as an item of a batch held
        here (not as a paused write too), as it stands there: it stays in its batch,
        committed and told once with it. ``None`` for a preview no batch holds, or one that
        ended (the caller answers a committed one with its receipt, as any)."""
        pausing = self.paused_writes.waiting() if self.paused_writes is not None else ()
        if any(pending.preview_id == preview.id for pending in pausing):
            return None  # a paused write already: it answers as one
        batch_id = next((b.id for b in self._batches.values() if preview.id in b.items), None)
        if batch_id is None:
            return None
        match preview.state:
            case "prepared":
                return success(batch_item_note(batch_id, preview), code="needs_approval")
            case "approved":
                note = batch_item_note(batch_id, preview, approved_by=self._approver(preview))
                return success(note)
            case "sending":
                return success(batch_item_note(batch_id, preview))
            case "unknown":
                fields = batch_item_unknown(batch_id, preview)
                message = str(fields.pop("message"))
                return failure("ambiguous_write", message, extra=fields)
            case "committed" | "denied" | "failed":
                return None
            case _:
                assert_never(preview.state)

    def _approver(self, preview: Preview) -> Literal["policy", "person"] | None:
        """Who approved ``preview``, as the ledger says (``None`` when it cannot say)."""
        try:
            approval = self._ready().ledger.approval(preview.id)
        except (LedgerError, ToolError):
            return None
        return approval.kind if approval is not None else None

    def hold_each(self, previews: Sequence[Preview]) -> bool:
        """Hold ``previews``, which the ledger could not hold as one batch, as the session's
        paused writes: each waits on its own, and the session's settling commits it once
        approved. Whether they are held (not without the session's paused writes)."""
        if self.paused_writes is None:
            return False
        for preview in previews:
            self.paused_writes.hold(preview)
        return True

    def waiting(self) -> list[str]:
        """The ids of the batches held, oldest first."""
        return list(self._batches)

    async def finish(self, batch_id: str, *, until: float | None = None) -> ModelResult:
        """Commit every approved item of the batch once, and resend each ``unknown`` one with
        its key; a summary of where they stand. An item the session's authority no longer
        allows is denied instead, and nothing is sent for it (one whose earlier send may
        have acted is not resent: reconcile settles it). No send starts after ``until`` (on
        the :func:`time.monotonic` clock: a model's call counted against the session's
        time); the answer counts the items not sent, and the batch stays held for them.

        Raises:
            NotFoundError: no batch of this run and principal with this id.
            ToolError: the batch no longer matches what was proposed (``approval_mismatch``).
        """
        batch = self._own(batch_id)
        done = await commit_items(self._ready(), batch, self._authority, resend=True, until=until)
        body = _summary(batch, done)
        if done.unjudged:
            return _unjudged_answer(batch, done, body)
        if body["status"] not in ("waiting", "undecided"):  # nothing more will change
            self._batches.pop(batch.id, None)
        return success(body, code="needs_approval" if body["status"] == "waiting" else None)

    async def settle(self, answers: list[ModelResult], *, until: float | None = None) -> None:
        """Finish the batches with an item approved, or ``unknown`` (resent on at most
        :data:`UNKNOWN_TRIES` settles, then told as unknown), or none undecided; their
        outcomes go to ``answers`` as they come (kept if the ledger fails later). No send
        starts after ``until`` (on the :func:`time.monotonic` clock): a batch not fully sent
        by then is told on a later settle."""
        if self._writes is None:
            return
        for batch_id in self.waiting():
            try:
                answer = await self._settle_one(batch_id, until)
            except ToolError as exc:
                answer = from_tool_error(exc)
            if answer is not None:
                answers.append(answer)

    async def _settle_one(self, batch_id: str, until: float | None) -> ModelResult | None:
        writes = self._ready()
        try:
            states = {i.state for i in batch_items(writes.ledger, batch_id, now=time.time())}
        except ToolError:
            return None  # resume(batch_id) reports it
        gave_up = batch_id in self._gave_up
        resend = "unknown" in states and not gave_up
        settled = (_FINAL | {"unknown"}) if gave_up else _FINAL
        if "approved" not in states and not resend and not states <= settled:
            return None
        batch = self._own(batch_id)
        done = await commit_items(writes, batch, self._authority, resend=resend, until=until)
        if done.unsent:
            return None  # the time is up: the rest are sent, and told, on a later settle
        if not gave_up and any(
            _resent(i.preview_id, done) for i in done.items if i.state == "unknown"
        ):
            tries = self._unknown_tries.get(batch_id, 0) + 1
            if tries < UNKNOWN_TRIES:
                self._unknown_tries[batch_id] = tries
                return None  # worth another try: not final yet
            self._gave_up[batch_id] = tries
        self._unknown_tries.pop(batch_id, None)
        body = _summary(batch, done, gave_up=self._gave_up.get(batch_id, 0))
        if done.unjudged:
            # Those items stay approved, so every settle finds them: told once, and again
            # only when the rest of the batch moved on.
            told = (body["counts"], sorted(done.unjudged))
            if self._unjudged_told.get(batch_id) == told:
                return None
            self._unjudged_told[batch_id] = told
            return _unjudged_answer(batch, done, body, self._gave_up.get(batch_id, 0))
        self._unjudged_told.pop(batch_id, None)
        if not {i.state for i in done.items} & _OPEN:
            # Each unknown item is given up on or not resent: nothing a later settle moves on.
            self._batches.pop(batch_id, None)
        return success(body, code="needs_approval" if body["status"] == "waiting" else None)

    def _ready(self) -> WritePath:
        if self._writes is None:
            raise DeniedError("writes are not enabled in this deployment; do not retry")
        return self._writes

    def _own(self, batch_id: str) -> Batch:
        """The batch, if it belongs to this run and principal.

        Raises:
            NotFoundError: no such batch, or one of another run or principal.
        """
        batch = self._ready().ledger.batch(batch_id)
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
        return batch

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


def _unjudged_answer(
    batch: Batch, done: Committed, body: dict[str, object], gave_up: int = 0
) -> ModelResult:
    """The conflict of the batch's items nothing can judge, naming the batch and them, with
    ``body`` (where all its items stand) and what the other items' summary says."""
    first = next(iter(done.unjudged.values()))
    extra = {k: v for k, v in body.items() if k not in ("status", "message")}
    extra["preview_id"] = next(iter(done.unjudged))
    extra["unjudged"] = list(done.unjudged)
    message = f"{len(done.unjudged)} item(s) of batch {batch.id}: {first.message}"
    rest = tuple(i for i in done.items if i.preview_id not in done.unjudged)
    if rest:
        others = _summary(batch, replace(done, items=rest), gave_up=gave_up)["message"]
        message = f"{message}. The other items: {others}"
    return failure(first.code, message, retryable=first.retryable, extra=extra)


def _resent(preview_id: str, done: Committed) -> bool:
    """Whether the session sends an ``unknown`` item again: not one it may no longer make,
    nor one answered for another change (each waits for the operator)."""
    return preview_id not in done.not_resent and preview_id not in done.mismatched


def _summary(batch: Batch, done: Committed, *, gave_up: int = 0) -> dict[str, object]:
    """Where a batch's items stand, in short: counts and preview ids by state; ``gave_up``,
    the settles that resent its ``unknown`` items before settling stopped resending them.
    An ``unknown`` item is undecided only while this session would resend it."""
    items = done.items
    by_state: dict[str, list[str]] = {}
    for item in items:
        by_state.setdefault(item.state, []).append(item.preview_id)
    counts = {state: len(ids) for state, ids in by_state.items()}
    unknown = counts.get("unknown", 0)
    unknown_ids = by_state.get("unknown", [])
    resent = 0 if gave_up else sum(_resent(i, done) for i in unknown_ids)
    mismatched = [i for i in unknown_ids if i in done.mismatched]
    unsure_count = unknown - len(mismatched)
    undecided = counts.get("approved", 0) + counts.get("sending", 0) + resent
    if counts.get("committed") == len(items):
        status = "committed"
    elif gave_up and unknown:
        status = "unknown"
    elif counts.get("waiting"):
        status = "waiting"
    elif undecided:
        status = "undecided"
    elif unknown:
        status = "unknown"
    else:
        status = "settled"
    # Not given up on, every unknown item is one this session does not resend: its own
    # note (below) says why and who settles it.
    unsure = (
        f"{unsure_count} item(s) may or may not have happened: {gave_up} sends each got no "
        "definite answer. Do not propose them again: the operator's reconcile checks the "
        "system of record and settles them; tell the user their outcome is unknown"
        if gave_up
        else f"{unsure_count} item(s) may or may not have happened; tell the user their "
        "outcome is unknown, and do not propose them again"
    )
    answered_for_another = (
        f"{len(mismatched)} item(s) were answered for another change: the system of record's "
        "answer under their key is not the approved change, so they are not recorded as "
        "committed and are never sent again. Tell the user their outcome is unknown; do not "
        "propose them again: an operator must look at the system of record"
    )
    messages = {
        "committed": "every item is committed, each once; do not propose them again",
        "unknown": (unsure if unsure_count else answered_for_another)
        + ("; some items still wait for a person" if counts.get("waiting") else ""),
        "waiting": "some items still wait for a person; tell the user",
        "undecided": f"{undecided} item(s) have no definite answer yet: the system may have "
        "made those it was sent. Resume this batch later (it sends them again with the same "
        "key, never twice) and tell the user; do not propose them again",
        "settled": "the batch is settled: the items that are not committed were denied, "
        "expired or failed; tell the user, and do not retry them without being asked",
    }
    body: dict[str, object] = {
        "status": status,
        "batch_id": batch.id,
        "counts": counts,
        "preview_ids": by_state,
        "message": messages[status],
    }
    notes = [messages[status]]
    if done.unsent:
        notes.append(
            f"the session's time ran out before {done.unsent} item(s) could be sent: nothing "
            "was sent for them; they are sent, once each, when the batch is resumed"
        )
    if done.refused:
        body["grant_refused"] = list(done.refused)
        first = next(iter(done.refused.values()))
        notes.append(
            f"{len(done.refused)} item(s) were denied: this session may no longer make them "
            f"({first.text}); nothing was sent for them"
        )
    if done.not_resent:
        body["grant_refused_unknown"] = list(done.not_resent)
        first = next(iter(done.not_resent.values()))
        notes.append(
            f"{len(done.not_resent)} item(s) may have happened: an earlier send got no "
            f"definite answer, and this session may no longer make them ({first.text}), so it "
            "does not send them again; the operator's reconcile settles them. Do not retry them"
        )
    if mismatched:
        body["mismatched"] = mismatched
        if unsure_count or status != "unknown":
            notes.append(answered_for_another)
    body["message"] = ". ".join(notes)
    return body
