"""A person's decision on a preview, as the approval surfaces make it: approve (and, given the
tools, commit at once) or deny.

The approver's id comes from the surface's configuration (``--as``, the login name), never
from a run or a form field. Committing goes through the registry's write path with the
ledger's claim, so a harness committing the same preview at the same time cannot double it:
one of them sends, the other gets the stored receipt (or ``conflict`` while it is in flight).
A write holding ``Secret()`` values is sent by the process that prepared it, the only one
that has them: the approver approves it and leaves the commit to the session that asked.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from airlock.tools import (
    Approval,
    BatchItem,
    ConflictError,
    DeniedError,
    LedgerStore,
    Receipt,
    Registry,
    WritePath,
    approve_batch,
    approve_preview,
    deny_preview,
)

__all__ = ["Approved", "Approver"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Approved:
    """An approval, and the receipt when it was committed here."""

    approval: Approval
    receipt: Receipt | None = None
    in_flight: bool = False
    """Another process (a harness) is sending it right now; its receipt will follow."""


class Approver:
    """One person deciding on previews of one ledger.

    Args:
        name: the person's id, from configuration.
        ledger: the ledger the previews are in.
        self_approval: the policy's setting: may a requester approve their own change.
        writes: the tools' write path on ``ledger``; given, an approval is committed at once.
    """

    def __init__(
        self,
        name: str,
        ledger: LedgerStore,
        *,
        self_approval: bool = False,
        writes: WritePath | None = None,
    ) -> None:
        self.name = name
        self.ledger = ledger
        self.self_approval = self_approval
        self.writes = writes

    @classmethod
    def of_registry(
        cls, name: str, ledger: LedgerStore, *, self_approval: bool, registry: Registry | None
    ) -> Approver:
        """An approver that commits through ``registry``'s tools when it is given (it
        attaches a write path on ``ledger`` to it)."""
        writes = WritePath(registry, ledger) if registry is not None else None
        return cls(name, ledger, self_approval=self_approval, writes=writes)

    @property
    def commits(self) -> bool:
        """Whether approvals are committed here (the tools were given)."""
        return self.writes is not None

    async def approve(self, preview_id: str, *, fingerprint: str, reason: str = "") -> Approved:
        """Approve the preview's ``fingerprint`` and, when this approver has the tools,
        commit it once.

        Raises:
            ToolError: as :func:`~airlock.tools.approve_preview`; the commit's error
                (the approval stays recorded, and a harness may still commit it).
        """
        if self.writes is None:
            approval = approve_preview(
                self.ledger,
                preview_id,
                approver=self.name,
                now=time.time(),
                fingerprint=fingerprint,
                reason=reason,
                self_approval=self.self_approval,
            )
            return Approved(approval=approval)
        approval = self.writes.approve(
            preview_id,
            approver=self.name,
            fingerprint=fingerprint,
            reason=reason,
            self_approval=self.self_approval,
        )
        return await self.commit(approval)

    async def commit(self, approval: Approval) -> Approved:
        """Commit an approved preview once, for the principal who asked for it; or leave it
        to the session that asked (no receipt) when this process cannot send it: a read, or
        a write whose ``Secret()`` values only that session holds.

        Raises:
            ToolError: as :meth:`~airlock.tools.WritePath.commit`, except a commit in flight
                elsewhere, which answers ``in_flight``.
        """
        assert self.writes is not None
        preview = self.ledger.preview(approval.preview_id)
        assert preview is not None
        spec = self.writes.registry.get(preview.tool)
        if spec is not None and spec.write is None:
            return Approved(approval=approval)  # a read: the session that asked runs it
        if not self.writes.holds_secrets(preview):
            # Its Secret() values live only in the process that prepared it; a commit here
            # would fail the write that process can still send.
            return Approved(approval=approval)
        try:
            receipt = await self.writes.commit(preview.id, approval.fingerprint, preview.principal)
        except ConflictError:
            current = self.ledger.preview(preview.id)
            if current is None or current.state != "sending":
                raise
            return Approved(approval=approval, in_flight=True)
        return Approved(approval=approval, receipt=receipt)

    async def approve_batch(
        self, batch_id: str, *, fingerprint: str, reason: str = ""
    ) -> tuple[BatchItem, ...]:
        """Approve every waiting item of a batch with the batch's ``fingerprint`` and, when
        this approver has the tools, commit them (each once); where each item stands.

        Raises:
            ToolError: as :func:`~airlock.tools.approve_batch`; ``denied`` when the approver
                is the principal whose program proposed the batch and self-approval is off.
        """
        batch = self.ledger.batch(batch_id)
        who = None if batch is None else batch.principal
        asked = () if who is None else (who.user_id, f"{who.user_id}@{who.tenant_id}")
        if not self.self_approval and self.name in asked:
            raise DeniedError(
                f"{self.name!r} proposed batch {batch_id!r} and cannot approve it; ask "
                "another person, or set self_approval = true in the policy"
            )
        items = approve_batch(
            self.ledger,
            batch_id,
            approver=self.name,
            now=time.time(),
            fingerprint=fingerprint,
            reason=reason,
            self_approval=self.self_approval,
        )
        committed = await self.commit_batch(batch_id)
        return items if committed is None else committed

    async def commit_batch(self, batch_id: str) -> tuple[BatchItem, ...] | None:
        """Commit every approved item of the batch once, for the principal whose program
        proposed it, and say where each item stands; ``None`` when it is left to the session
        that asked: this approver has no tools, or an item holds ``Secret()`` values that
        only that session has (it commits them all).

        Raises:
            ToolError: as :meth:`~airlock.tools.WritePath.commit_batch`.
        """
        batch = self.ledger.batch(batch_id)
        if self.writes is None or batch is None:
            return None
        previews = [p for p in map(self.ledger.preview, batch.items) if p is not None]
        to_send = [p for p in previews if p.state in ("approved", "unknown")]
        if not all(map(self.writes.holds_secrets, to_send)):
            return None
        return await self.writes.commit_batch(batch_id, batch.principal)

    def deny(self, preview_id: str, *, reason: str) -> None:
        """Refuse the preview with ``reason``.

        Raises:
            ToolError: as :func:`~airlock.tools.deny_preview`.
        """
        if self.writes is not None:
            self.writes.deny(preview_id, approver=self.name, reason=reason)
            return
        deny_preview(self.ledger, preview_id, approver=self.name, reason=reason, now=time.time())
