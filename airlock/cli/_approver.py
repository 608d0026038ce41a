"""A person's decision on a preview, as the approval surfaces make it: approve (and, given the
tools, commit at once) or deny.

The approver's id comes from the surface's configuration (``--as``, the login name), never
from a run or a form field. Committing goes through the registry's write path with the
ledger's claim, so a harness committing the same preview at the same time cannot double it:
one of them sends, the other gets the stored receipt (or ``conflict`` while it is in flight).
A write holding ``Secret()`` values is sent by the process that prepared it, the only one
that has them: the approver approves it and leaves the commit to the session that asked.

An approver that commits judges each write first as a session that commits it would
(:class:`~airlock.harness.CommitAuthority`), by the policy's grant and rules now for the
principal who asked: a person's approval does not widen them. A write they no longer allow
is denied (by ``airlock:grant``, with the reason) and nothing is sent.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TypeVar

import anyio.to_thread

from airlock.harness import CommitAuthority
from airlock.policies import Policy, Principal, UsageError
from airlock.tools import (
    Approval,
    Batch,
    BatchItem,
    ConflictError,
    DeniedError,
    LedgerStore,
    Preview,
    Receipt,
    Registry,
    ToolError,
    WritePath,
    approve_batch,
    approve_preview,
    batch_items,
    deny_preview,
)

__all__ = ["Approved", "Approver", "off_loop"]

T = TypeVar("T")


async def off_loop(call: Callable[[], T]) -> T:
    """``call()`` on a worker thread. A ledger call waits up to its busy timeout while another
    process holds the ledger locked; on the event loop that wait would stop the whole server
    (every other request, and the deadlines of slow clients) with it. Not abandoned when the
    caller is cancelled: it ends within the busy timeout, and its change is then recorded."""
    return await anyio.to_thread.run_sync(call)


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
        policy: the policy whose grant and rules for the principal who asked each commit is
            judged by; required with ``writes``.

    Raises:
        UsageError: ``writes`` without ``policy``.
    """

    def __init__(
        self,
        name: str,
        ledger: LedgerStore,
        *,
        self_approval: bool = False,
        writes: WritePath | None = None,
        policy: Policy | None = None,
    ) -> None:
        if writes is not None and policy is None:
            raise UsageError(
                "an approver that commits judges each write by the policy's grant and rules "
                "for the principal who asked: give the policy (--policy FILE)"
            )
        self.name = name
        self.ledger = ledger
        self.self_approval = self_approval
        self.writes = writes
        self.policy = policy

    @classmethod
    def of_registry(
        cls,
        name: str,
        ledger: LedgerStore,
        *,
        self_approval: bool,
        registry: Registry | None,
        policy: Policy | None = None,
    ) -> Approver:
        """An approver that commits through ``registry``'s tools when it is given (it
        attaches a write path on ``ledger`` to it), judged by ``policy``.

        Raises:
            UsageError: ``registry`` without ``policy``.
        """
        writes = WritePath(registry, ledger) if registry is not None else None
        return cls(name, ledger, self_approval=self_approval, writes=writes, policy=policy)

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
            approval = await off_loop(
                partial(
                    approve_preview,
                    self.ledger,
                    preview_id,
                    approver=self.name,
                    now=time.time(),
                    fingerprint=fingerprint,
                    reason=reason,
                    self_approval=self.self_approval,
                )
            )
            return Approved(approval=approval)
        approval = await off_loop(
            partial(
                self.writes.approve,
                preview_id,
                approver=self.name,
                fingerprint=fingerprint,
                reason=reason,
                self_approval=self.self_approval,
            )
        )
        return await self.commit(approval)

    async def commit(self, approval: Approval) -> Approved:
        """Commit an approved preview once, for the principal who asked for it; or leave it
        to the session that asked (no receipt) when this process cannot send it: a read, or
        a write whose ``Secret()`` values only that session holds.

        Raises:
            DeniedError: the policy's grant or rules no longer allow it: it is denied now,
                and nothing was sent.
            ToolError: as :meth:`~airlock.tools.WritePath.commit`, except a commit in flight
                elsewhere, which answers ``in_flight``; ``conflict`` when its effects cannot
                be judged (it stays as it is).
        """
        assert self.writes is not None
        preview = await off_loop(partial(self.ledger.preview, approval.preview_id))
        assert preview is not None
        spec = self.writes.registry.get(preview.tool)
        if spec is not None and spec.write is None:
            return Approved(approval=approval)  # a read: the session that asked runs it
        if not self.writes.holds_secrets(preview):
            # Its Secret() values live only in the process that prepared it; a commit here
            # would fail the write that process can still send.
            return Approved(approval=approval)
        [refused] = await off_loop(partial(self._judge, [preview], preview.principal))
        if refused is not None:
            raise refused
        try:
            receipt = await self.writes.commit(preview.id, approval.fingerprint, preview.principal)
        except ConflictError:
            current = await off_loop(partial(self.ledger.preview, preview.id))
            if current is not None and current.state == "committed":
                # The session that asked committed it since it answered "in flight": its
                # receipt, replayed, not a conflict.
                receipt = await self.writes.commit(
                    preview.id, approval.fingerprint, preview.principal
                )
                return Approved(approval=approval, receipt=receipt)
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
        items = await off_loop(partial(self._approve_batch, batch_id, fingerprint, reason))
        committed = await self.commit_batch(batch_id)
        return items if committed is None else committed

    def _approve_batch(self, batch_id: str, fingerprint: str, reason: str) -> tuple[BatchItem, ...]:
        """The ledger's part of :meth:`approve_batch` (a worker thread's)."""
        batch = self.ledger.batch(batch_id)
        who = None if batch is None else batch.principal
        asked = () if who is None else (who.user_id, f"{who.user_id}@{who.tenant_id}")
        if not self.self_approval and self.name in asked:
            raise DeniedError(
                f"{self.name!r} proposed batch {batch_id!r} and cannot approve it; ask "
                "another person, or set self_approval = true in the policy"
            )
        return approve_batch(
            self.ledger,
            batch_id,
            approver=self.name,
            now=time.time(),
            fingerprint=fingerprint,
            reason=reason,
            self_approval=self.self_approval,
        )

    async def commit_batch(self, batch_id: str) -> tuple[BatchItem, ...] | None:
        """Commit every approved item of the batch once, for the principal whose program
        proposed it, and say where each item stands; ``None`` when it is left to the session
        that asked: this approver has no tools, or an item holds ``Secret()`` values that
        only that session has (it commits them all). An item the policy's grant or rules no
        longer allow is denied instead (one whose send got no definite answer is left to
        reconcile), and nothing is sent for it.

        Raises:
            ToolError: as :meth:`~airlock.tools.WritePath.commit_batch`; ``conflict`` when an
                item's effects cannot be judged (then nothing is sent).
        """
        if self.writes is None:
            return None
        judged = await off_loop(partial(self._judge_batch, batch_id))
        if judged is None:
            return None
        batch, to_send, held = judged
        if not held:
            return await self.writes.commit_batch(batch_id, batch.principal)
        for preview in to_send:  # those judged again and still allowed, as commit_batch would
            if preview.id not in held:
                with contextlib.suppress(ToolError):  # its state says how it ended
                    await self.writes.commit(preview.id, preview.fingerprint, batch.principal)
        return await off_loop(partial(batch_items, self.ledger, batch_id, now=time.time()))

    def _judge_batch(self, batch_id: str) -> tuple[Batch, list[Preview], set[str]] | None:
        """The ledger's part of :meth:`commit_batch` before it sends (a worker thread's): the
        batch, its items to send, and those the policy no longer allows (now denied); ``None``
        when it is left to the session that asked (or there is no such batch).

        Raises:
            ConflictError: as :meth:`_judge`.
        """
        assert self.writes is not None
        batch = self.ledger.batch(batch_id)
        if batch is None:
            return None
        previews = [p for p in map(self.ledger.preview, batch.items) if p is not None]
        to_send = [p for p in previews if p.state in ("approved", "unknown")]
        if not all(map(self.writes.holds_secrets, to_send)):
            return None
        refused = self._judge(previews, batch.principal)
        held = {p.id for p, why in zip(previews, refused, strict=True) if why is not None}
        return batch, to_send, held

    def _judge(self, previews: Sequence[Preview], principal: Principal) -> list[DeniedError | None]:
        """Each preview judged by the policy's grant and rules for ``principal`` now, as a
        session of it would judge it before a commit; one they no longer allow is denied
        (or, ``unknown``, left to reconcile), and its error says why.

        Raises:
            ConflictError: a preview's effects do not read back (nothing is denied).
        """
        assert self.writes is not None
        assert self.policy is not None  # (required with writes)
        authority = CommitAuthority(
            principal=principal,
            grant=self.policy.grant_for(principal),
            approvals=self.policy.approvals_for(principal),
        )
        out: list[DeniedError | None] = []
        for preview in previews:
            refusal = authority.refusal(self.writes, preview)
            if refusal is None:
                out.append(None)
                continue
            after = authority.refuse(self.writes, preview, refusal)
            if after.state not in ("denied", "unknown"):
                out.append(None)  # committed or in flight elsewhere: the commit says which
                continue
            out.append(
                DeniedError(
                    f"not committed: the policy no longer allows it ({refusal.text}); "
                    + (
                        "it is denied, and nothing was sent"
                        if after.state == "denied"
                        else "an earlier send may have acted, and it was not sent again: "
                        "airlock reconcile settles it"
                    ),
                    reason=refusal.reason,
                )
            )
        return out

    def deny(self, preview_id: str, *, reason: str) -> None:
        """Refuse the preview with ``reason``.

        Raises:
            ToolError: as :func:`~airlock.tools.deny_preview`.
        """
        if self.writes is not None:
            self.writes.deny(preview_id, approver=self.name, reason=reason)
            return
        deny_preview(self.ledger, preview_id, approver=self.name, reason=reason, now=time.time())
