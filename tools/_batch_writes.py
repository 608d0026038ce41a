"""Proposals from code and their batches, as part of the write path.

A program never commits. It may *propose* a write tool whose contract says ``proposable=True``
and whose name the run's grant lists in ``propose``: :meth:`BatchWrites.propose_from_code`
admits the proposal as a call from code (look-up finds only proposable write tools; every
other name is ``unknown_tool``), then prepares, authorizes and stores its preview exactly as
for a direct call, so its amount and target come from the system of record. When the program
ends, :meth:`BatchWrites.store_batch` makes the run's proposals one batch; a person approves
it with one fingerprint (:meth:`BatchWrites.approve_batch`) or item by item, and
:meth:`BatchWrites.commit_batch` commits each approved item once, with its own key and
receipt. :class:`~airlock.tools.WritePath` has these methods.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from airlock.policies import Principal, UsageError
from airlock.tools._admission import Admission
from airlock.tools._batch_records import Batch, BatchItem
from airlock.tools._batches import approve_batch, item_of, load_batch, new_batch
from airlock.tools._context import CallContext
from airlock.tools._errors import DeniedError, NotFoundError, ToolError
from airlock.tools._ledger import LedgerStore
from airlock.tools._preview import Preview, Receipt
from airlock.tools._registry import Registry
from airlock.tools._sealed import SealedSender

__all__ = ["BatchWrites"]

_COMMITS_AT_ONCE: Final = 8
"""Items of one batch committed concurrently (each still sends once, with its own key)."""


class BatchWrites:
    """The write path's methods for proposals from code and their batches."""

    registry: Registry
    ledger: LedgerStore
    clock: Callable[[], float]
    _sender: SealedSender

    async def propose(self, admission: Admission, ctx: CallContext) -> Preview:
        raise NotImplementedError  # WritePath's

    async def commit(
        self, preview_id: str, approved_fingerprint: str, session: Principal
    ) -> Receipt:
        raise NotImplementedError  # WritePath's

    def settle_denials(self, *preview_ids: str) -> None:
        raise NotImplementedError  # Withdrawals'

    async def propose_from_code(
        self, name: str, args: Mapping[str, Any], ctx: CallContext
    ) -> Preview:
        """A program's proposal of the write ``name``: admitted, prepared, authorized and
        stored as a preview, never committed. The call's audit event says ``preview``.

        Raises:
            UnknownToolError: ``name`` is no write tool proposable from code (a read tool, a
                write tool whose contract does not allow it, one hidden from the principal,
                or no tool at all: the same answer for each).
            DeniedError: the run's grant does not list ``name`` in ``propose``, or it or an
                approval rule refuses the prepared effect.
            ToolError: as :meth:`WritePath.propose`.
            UsageError: ``ctx`` is not a call from code.
        """
        if ctx.caller != "code":
            raise UsageError("proposals come from code; a direct call uses WritePath.call")
        admission = self.registry.admit(name, args, ctx, proposal=True)
        if not ctx.grant.allows_proposal(admission.spec.name):
            with admission.trail.recording():
                raise DeniedError(
                    f"this run's policy does not let programs propose {admission.spec.name}; "
                    "return what should change as the program's value and call the tool "
                    "directly",
                    reason="policy",
                    detail="the grant's propose list does not match the tool",
                )
        return await self.propose(admission, ctx)

    def store_batch(self, previews: Sequence[Preview]) -> Batch:
        """Store the previews one program proposed, in order, as one batch; a preview given
        twice (the same intent proposed twice is one preview) is held once, where it came
        first.

        Raises:
            ValueError: no previews, or previews of several runs or principals.
        """
        # Two items of one preview would be committed at once, and one reported ``sending``.
        once: dict[str, Preview] = {}
        for preview in previews:
            once.setdefault(preview.id, preview)
        batch = new_batch(list(once.values()), now=self.clock())
        self.ledger.add_batch(batch)
        return batch

    def approve_batch(
        self,
        batch_id: str,
        *,
        approver: str,
        fingerprint: str,
        reason: str = "",
        self_approval: bool = False,
    ) -> tuple[BatchItem, ...]:
        """A person approves every waiting item of the batch with its one fingerprint (see
        :func:`~airlock.tools.approve_batch`); ``self_approval`` is the policy's setting.
        Each approval this call recorded is audited in the approver's name (not one another
        person recorded meanwhile).

        Raises:
            ToolError: as :func:`~airlock.tools.approve_batch`; ``conflict`` when an item's
                program withdrew it and the ledger has not recorded that yet.
        """
        self.settle_denials(*(preview.id for preview in load_batch(self.ledger, batch_id)[1]))
        items = approve_batch(
            self.ledger,
            batch_id,
            approver=approver,
            now=self.clock(),
            fingerprint=fingerprint,
            reason=reason,
            self_approval=self_approval,
        )
        for item in items:
            preview = self.ledger.preview(item.preview_id) if item.approved_now else None
            if preview is not None:
                self._sender.audit(
                    preview,
                    "authorize",
                    "allow",
                    preview.rule,
                    "ok",
                    None,
                    f"approved by {approver} in batch {batch_id}",
                    approver=approver,
                )
        return items

    async def commit_batch(self, batch_id: str, session: Principal) -> tuple[BatchItem, ...]:
        """Commit every approved item of the batch once, each with its own idempotency key
        and receipt, and say where each item stands (``committed`` with its receipt,
        ``waiting``, ``denied``, ``expired``, ``unknown`` after a lost answer...).

        Committing again returns the same receipts; nothing is sent twice.

        Raises:
            NotFoundError: no such batch, or one of another principal.
            ApprovalMismatchError: the batch's items changed behind the write path's back.
        """
        batch, previews = load_batch(self.ledger, batch_id)
        who = (batch.principal.user_id, batch.principal.tenant_id)
        if who != (session.user_id, session.tenant_id):
            raise NotFoundError(
                f"no batch {batch_id[:64]!r} of this principal",
                detail=f"batch {batch_id!r} belongs to {who[0]}@{who[1]}",
            )
        gate = asyncio.Semaphore(_COMMITS_AT_ONCE)

        async def settle(preview: Preview) -> BatchItem:
            async with gate:
                if preview.state in ("approved", "unknown"):
                    # The item's state says how it ended (unknown, expired, failed).
                    with contextlib.suppress(ToolError):
                        await self.commit(preview.id, preview.fingerprint, session)
                current = self.ledger.preview(preview.id) or preview
                return item_of(self.ledger, current, now=self.clock())

        return tuple(await asyncio.gather(*(settle(p) for p in previews)))
