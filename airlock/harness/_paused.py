"""The approval pause: a session's writes that wait for a person, and finishing them.

A write call whose preview waits answers ``needs_approval`` (:meth:`PausedWrites.paused`);
:meth:`PausedWrites.finish` commits it once approved, with the fingerprint the session was
shown, one commit per preview at a time, and the same receipt on every later call. A read
the approval rules ask about pauses the same way; once approved, ``finish`` runs it and
returns its result. Asking again for an intent already committed answers
``already_committed`` with its receipt (:meth:`PausedWrites.already`). Pending writes live in
the ledger under the run id, so another process can :meth:`restore` them.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final

import anyio

from airlock.harness._commit_authority import CommitAuthority, denied_answer, refused_answer
from airlock.harness._model_tools import ModelResult
from airlock.harness._results import byte_size, compact, failure, success
from airlock.harness._settle_turn import SettleTurn
from airlock.policies import Principal
from airlock.tools import (
    CallContext,
    DeniedError,
    LedgerError,
    LedgerStore,
    NeedsApprovalError,
    NotFoundError,
    Preview,
    Receipt,
    ReceiptMismatchError,
    StepState,
    ToolError,
    WritePath,
)

__all__ = ["PausedWrites", "PendingWrite"]

_log = logging.getLogger("airlock.harness")
_WAITING: Final[frozenset[StepState]] = frozenset({"prepared", "approved", "sending", "unknown"})
"""States of a write the session still has to finish (commit, or learn it was denied)."""
_SENDS: Final[frozenset[StepState]] = frozenset({"approved", "sending", "unknown"})
"""States of a write that finishing may send (or resend: ``sending`` left by its sender)."""
UNKNOWN_TRIES: Final = 3
"""Settles that resend a write whose send got no definite answer (state ``unknown``), with
its key, before the session stops: the model is told the outcome is unknown, and nothing
waits on it any more (``airlock reconcile`` settles it against the system of record)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PendingWrite:
    """A write of this session that paused for approval and has no final answer yet."""

    preview_id: str
    fingerprint: str
    """The fingerprint the session was shown; the commit must present the same one."""
    tool: str
    summary: str

    @classmethod
    def of(cls, preview: Preview) -> PendingWrite:
        """The pending write of ``preview``, bound to the fingerprint it has now."""
        return cls(
            preview_id=preview.id,
            fingerprint=preview.fingerprint,
            tool=preview.tool,
            summary=preview.summary,
        )


class PausedWrites:
    """The writes of one run and principal that wait for approval or commit, oldest first."""

    def __init__(
        self,
        writes: WritePath | None,
        principal: Principal,
        run_id: str,
        *,
        authority: CommitAuthority,
        context: Callable[[str], CallContext] | None = None,
    ) -> None:
        self._writes = writes
        self.principal = principal
        self.run_id = run_id
        self._authority = authority
        """What each commit is judged by again: the session's authority now."""
        self._context = context
        """Makes the call context an approved read runs in, from a call id."""
        self._pending: dict[str, PendingWrite] = {}
        self._locks: dict[str, anyio.Lock] = {}
        self._settling = SettleTurn()
        self._unknown_tries: dict[str, int] = {}
        """Settles that found each write still ``unknown`` after trying to resend it."""
        self._untold: list[ModelResult] = []
        """Outcomes of writes settled since the model's last answer."""
        self.listeners: list[Callable[[list[ModelResult]], Awaitable[None]]] = []
        """Told the outcomes of every settle that found some (a server's notifications)."""

    def hold(self, preview: Preview) -> None:
        """Keep ``preview`` as pending, bound to the fingerprint it has now."""
        self._pending.setdefault(preview.id, PendingWrite.of(preview))

    def waiting(self) -> list[PendingWrite]:
        """The pending writes, oldest first."""
        return list(self._pending.values())

    async def finish(self, preview_id: str) -> ModelResult:
        """Commit the paused write once it is approved; its receipt, ``denied``, or
        ``needs_approval`` again while it waits. A write the session's authority no longer
        allows (:class:`CommitAuthority`) is denied instead, and nothing is sent.

        Raises:
            ToolError: the commit failed (``preview_expired``, ``ambiguous_write``...), or
                ``not_found`` for a preview of another run or principal.
        """
        preview = self.own(preview_id)
        if self._writes is None:
            raise DeniedError("writes are not enabled in this deployment; do not retry")
        pending = self._pending.get(preview.id)
        fingerprint = pending.fingerprint if pending is not None else preview.fingerprint
        lock = self._locks.setdefault(preview.id, anyio.Lock())
        async with lock:  # one commit per preview at a time in this session
            refused = self._refused(self.own(preview_id))
            if refused is not None:
                return refused
            try:
                receipt = await self._commit(preview, fingerprint)
            except NeedsApprovalError:
                return self.paused(self.own(preview_id))
            except DeniedError:
                current = self.own(preview_id)
                if current.state != "denied":
                    raise
                self._pending.pop(preview.id, None)
                return denied_answer(current, withdrawn=self._writes.was_withdrawn(preview.id))
            except ToolError as exc:
                try:  # a ledger that fails to say (closed at shutdown) must not hide exc
                    state = self.own(preview_id).state
                except LedgerError:
                    raise exc  # noqa: B904 (exc keeps its cause; this failure is its context)
                expired = exc.code == "preview_expired" and exc.outcome == "error"
                # A receipt mismatch is final: no commit resends it, an operator looks at it.
                if expired or state not in _WAITING or isinstance(exc, ReceiptMismatchError):
                    self._pending.pop(preview.id, None)  # final: nothing left to resume
                raise
        self._pending.pop(preview.id, None)
        if receipt.replayed:
            _log.info("run %s: receipt of %s returned again", self.run_id, preview.id)
        status = "done" if self._is_read(preview.tool) else "committed"
        return success(self._receipt_body(status, preview, receipt))

    def _refused(self, preview: Preview) -> ModelResult | None:
        """The answer for a write the session may no longer make, denied meanwhile (or
        ``unknown``, left to reconcile); ``None`` to go on with the commit."""
        assert self._writes is not None
        refusal = self._authority.refusal(self._writes, preview)
        if refusal is None:
            return None
        after = self._authority.refuse(self._writes, preview, refusal)
        if after.state not in ("denied", "unknown"):
            return None  # committed or in flight elsewhere meanwhile: the commit says which
        self._pending.pop(preview.id, None)
        return refused_answer(after, refusal)

    async def _commit(self, preview: Preview, fingerprint: str) -> Receipt:
        assert self._writes is not None
        spec = self._writes.registry.get(preview.tool)
        if spec is not None and spec.write is None:  # an approved read: run it now
            if self._context is None:
                raise DeniedError("approved reads cannot run in this session; do not retry")
            ctx = self._context(f"{self.run_id}:{preview.id}")
            return await self._writes.run_read(preview.id, fingerprint, ctx)
        return await self._writes.commit(preview.id, fingerprint, self.principal)

    async def settle(
        self,
        *,
        also: Callable[[list[ModelResult]], Awaitable[None]] | None = None,
        now: float | None = None,
        until: float | None = None,
    ) -> list[ModelResult]:
        """Finish every pending write a person (or another process) decided meanwhile:
        commit the approved ones once, and answer for the denied, expired and already
        committed ones; writes still waiting, or in flight elsewhere, stay pending. ``also``
        settles more (a session's batches) under the same lock, adding its answers to the
        list it is given.

        ``until`` (on the :func:`time.monotonic` clock: a call's deadline) bounds it: no
        send starts after it, and the writes not sent stay pending for a later settle; a
        send in progress is never cancelled. A settle already running (the watcher's) is
        waited for until then at most, and then this one settles nothing.

        The answers, in the order the writes were paused, are what the model is told on its
        next turn. Never raises for tool errors: a failed commit is answered with its code.

        Raises:
            LedgerError: the ledger cannot be used; the answers found before are kept for
                the model's next turn (a write committed before the ledger failed is told).
        """
        ledger = self._ledger()
        if ledger is None:
            return []
        at = time.time() if now is None else now
        answers: list[ModelResult] = []
        async with self._settling.within(until) as held:
            if not held:
                return []
            try:
                for pending in self.waiting():
                    answer = await self._settle_one(ledger, pending, at, until)
                    if answer is not None:
                        answers.append(answer)
                if also is not None:
                    await also(answers)
            finally:
                self._untold.extend(answers)
        for listener in self.listeners if answers else ():
            try:
                await listener(answers)
            except Exception:  # a client gone away must not undo a commit that happened
                _log.exception("run %s: telling a listener of settled writes failed", self.run_id)
        return answers

    async def watch(self, settle: Callable[[], Awaitable[object]], *, interval: float) -> None:
        """Call ``settle`` every ``interval`` seconds until cancelled; an error is logged,
        never raised (a server must outlive a bad moment of its ledger: the next call says)."""
        while True:
            await anyio.sleep(interval)
            try:
                await settle()
            except Exception:
                _log.exception("run %s: settling approved writes failed", self.run_id)

    def take_untold(self) -> list[ModelResult]:
        """The outcomes :meth:`settle` found that the model was not told yet; forgets them."""
        untold, self._untold = self._untold, []
        return untold

    def with_settled(self, result: ModelResult, *, cap: int) -> ModelResult:
        """``result`` with the untold outcomes under ``settled_writes``, which it then
        forgets; ``result`` as it is (the outcomes kept for a later answer) when it is no
        JSON object or the outcomes would take it over ``cap`` bytes."""
        if not self._untold:
            return result
        body = json.loads(result.content)
        if not isinstance(body, dict):
            return result
        body["settled_writes"] = [json.loads(answer.content) for answer in self._untold]
        told = compact(body)
        if byte_size(told) > cap:
            return result
        self._untold = []
        return result.model_copy(update={"content": told})

    async def _settle_one(
        self, ledger: LedgerStore, pending: PendingWrite, at: float, until: float | None
    ) -> ModelResult | None:
        if pending.preview_id not in self._pending:
            return None  # resumed meanwhile: whoever resumed it has its answer
        current = ledger.preview(pending.preview_id)
        if current is None or (current.state == "prepared" and not current.expired(at)):
            return None
        if current.state in _SENDS and until is not None and time.monotonic() >= until:
            return None  # the time is up: no send starts; a later settle sends it
        try:
            result = await self.finish(pending.preview_id)
        except ToolError as exc:
            if pending.preview_id not in self._pending:  # final (unknown: a receipt mismatch)
                told = {"outcome": "unknown"} if exc.outcome == "unknown" else {}
                told["preview_id"] = pending.preview_id
                return failure(exc.code, exc.message, retryable=exc.retryable, extra=told)
            after = ledger.preview(pending.preview_id)
            if after is None or after.state != "unknown":
                return None  # in flight elsewhere, or worth another try: not final yet
            return self._still_unknown(pending)
        self._unknown_tries.pop(pending.preview_id, None)
        return None if result.code == "needs_approval" else result

    def _still_unknown(self, pending: PendingWrite) -> ModelResult | None:
        """A resend that got no definite answer either: try again on a later settle, up to
        :data:`UNKNOWN_TRIES`; then tell the model, and wait on it no more (a loop that
        waits for the pending writes would otherwise resend for ever, the model never told)."""
        tries = self._unknown_tries.get(pending.preview_id, 0) + 1
        if tries < UNKNOWN_TRIES:
            self._unknown_tries[pending.preview_id] = tries
            return None
        self._unknown_tries.pop(pending.preview_id, None)
        self._pending.pop(pending.preview_id, None)
        _log.warning(
            "run %s: the outcome of %s is unknown after %d sends; reconcile settles it",
            self.run_id,
            pending.preview_id,
            tries,
        )
        return failure(
            "ambiguous_write",
            f"this change may or may not have happened: {tries} sends got no definite "
            "answer. Do not call the tool again for it: the operator's reconcile checks the "
            "system of record and settles it; tell the user its outcome is unknown",
            preview_id=pending.preview_id,
            tool=pending.tool,
            summary=pending.summary,
            outcome="unknown",
        )

    def already(self, preview: Preview) -> ModelResult:
        """The answer to asking again for an intent that was already committed in this run:
        ``already_committed`` with its receipt; nothing was sent again."""
        receipt = self._writes.receipt(preview) if self._writes is not None else None
        self._pending.pop(preview.id, None)
        body = self._receipt_body("already_committed", preview, receipt)
        body["message"] = (
            f"already committed (preview {preview.id}); it was not sent again. Do not call "
            "the tool again for it"
        )
        return success(body, code="already_committed")

    def _receipt_body(
        self, status: str, preview: Preview, receipt: Receipt | None
    ) -> dict[str, object]:
        body: dict[str, object] = {
            "status": status,
            "preview_id": preview.id,
            "tool": preview.tool,
            "summary": preview.summary,
        }
        if receipt is not None:
            # Sorted, so a receipt read back from the ledger reads exactly like the first.
            data = json.loads(json.dumps(receipt.data, sort_keys=True))
            is_read = self._writes is not None and self._is_read(preview.tool)
            body["result" if is_read else "receipt"] = data
        return body

    def _is_read(self, tool: str) -> bool:
        assert self._writes is not None
        spec = self._writes.registry.get(tool)
        return spec is not None and spec.write is None

    def own(self, preview_id: str) -> Preview:
        """The preview, if it belongs to this run and principal.

        Raises:
            NotFoundError: no such preview, or one of another run or principal.
        """
        ledger = self._ledger()
        preview = ledger.preview(preview_id) if ledger is not None else None
        if preview is None or preview.run_id != self.run_id or not self._mine(preview):
            raise NotFoundError(
                f"no write {preview_id[:64]!r} in this session; resume one it paused",
                detail=f"preview {preview_id[:64]!r} missing or of another run or principal",
            )
        return preview

    def _mine(self, preview: Preview) -> bool:
        """Whether ``preview`` is of this session's principal (its user and tenant)."""
        theirs, mine = preview.principal, self.principal
        return (theirs.user_id, theirs.tenant_id) == (mine.user_id, mine.tenant_id)

    def _ledger(self) -> LedgerStore | None:
        return None if self._writes is None else self._writes.ledger

    def paused(self, preview: Preview) -> ModelResult:
        """What the model is told about a write that waits for a person."""
        minutes = max(0, round((preview.expires - time.time()) / 60))
        return success(
            {
                "status": "needs_approval",
                "preview_id": preview.id,
                "fingerprint": preview.fingerprint,
                "tool": preview.tool,
                "summary": preview.summary,
                "effects": list(preview.effects),
                "expires_in_min": minutes,
                "message": f"this {'call' if self._is_read(preview.tool) else 'change'} waits "
                "for a person to approve it; tell the user, and do not call the tool again "
                "for it",
            },
            code="needs_approval",
        )

    def restore(self) -> list[PendingWrite]:
        """Load this run's unfinished writes from the ledger (another process may have
        paused them); the pending writes, oldest first."""
        ledger = self._ledger()
        if ledger is None:
            return []
        found = ledger.previews(states=_WAITING, run_id=self.run_id, limit=10_000)
        for preview in reversed(found):  # the ledger answers newest first
            if self._mine(preview):
                self._pending.setdefault(preview.id, PendingWrite.of(preview))
        return self.waiting()
