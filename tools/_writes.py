"""The write path: prepare → preview → approve → commit → receipt, on a durable ledger.

:class:`WritePath` attaches itself to a :class:`~airlock.tools.Registry`. A direct call of a
write tool is admitted as usual (:meth:`Registry.admit <airlock.tools.Registry.admit>`) and,
instead of running a handler, prepares the exact effect, authorizes it, and stores a
:class:`~airlock.tools.Preview`: :meth:`WritePath.preview_call` returns it, and a plain
:meth:`Registry.call` answers ``needs_approval`` with its id. An ``allow`` rule approves the
preview by policy on the spot (the harness may commit at once); ``ask`` leaves it for a
person (:meth:`WritePath.approve`, or ``airlock approvals approve``); ``deny`` refuses the
call.

:meth:`WritePath.commit` runs its checks in a fixed order, each failure stopping it::

    exists      same principal  fingerprint         receipt stored?    expiry
    not_found   denied          approval_mismatch   return it,         preview_expired
                                                    marked replayed
    ─► claim (approved/unknown → sending; else conflict / needs_approval / denied)
    ─► send once with the key ─► store the receipt and mark committed, in one transaction

A read the approval rules ask about takes the same path (:meth:`WritePath.call`): its preview
holds the validated arguments, a person approves it once, and :meth:`WritePath.run_read`
claims it like a commit, runs the read and stores its shaped result as the receipt (a read
that fails or is interrupted ends ``failed``: it changed nothing, so it is asked again).

Fields marked ``Secret()`` never reach the ledger in clear: a preview stores a seal in their
place and the value stays in this process's memory until the step is settled or expired
(:mod:`airlock.tools._sealed`). Commit hands the value back to ``commit``; a process that
does not hold it (another process, or after a restart) refuses the commit before sending
anything (``preview_expired``: call the tool again), and a resend by reconcile stays
``unknown`` until a ``lookup`` settles it.

Asking again for an intent that was already committed in the run returns its committed
preview (``Preview.state == "committed"``), recorded in the audit log as
``already_committed``; nothing is sent again.

The claim is a compare-and-set in the ledger (``approved``/``unknown`` → ``sending``), so of
many concurrent commits of one preview, in any number of processes, one sends; the others
answer ``conflict`` while it is in flight and the stored receipt afterwards. A send that
ends without a definite answer leaves the step ``unknown``; :meth:`WritePath.reconcile`
resolves it by querying the system of record or resending with the same key, never a new one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from airlock.policies import Principal, UsageError
from airlock.tools._admission import Admission
from airlock.tools._approvals import approve_preview, deny_preview, load_preview
from airlock.tools._commit_checks import checked_for_commit, claim_for_commit, refuse_lost_secret
from airlock.tools._context import CallContext
from airlock.tools._errors import (
    ConflictError,
    NeedsApprovalError,
    ToolError,
    UnknownToolError,
    UpstreamError,
)
from airlock.tools._json import JSONObject
from airlock.tools._ledger import LedgerStore, own_receipt
from airlock.tools._prepare import model_message
from airlock.tools._preview import Approval, Preview, Receipt, ResolvedBy
from airlock.tools._proposals import propose_read, propose_write
from airlock.tools._read_approvals import refuse_spent_run, run_claimed_read
from airlock.tools._reconcile import Resolution, resolve_all
from airlock.tools._registry import Registry
from airlock.tools._sealed import SealedSender, SecretVault, sealed_fields
from airlock.tools._spec import ToolSpec
from airlock.tools._step_events import approver_of
from airlock.tools._withdrawals import Withdrawals

__all__ = ["WritePath"]

_MAX_CLAIMS = 4


class WritePath(Withdrawals):
    """The write path of one registry, on one ledger (and of proposals from code, their
    batches and their withdrawal: :class:`~airlock.tools._batch_writes.BatchWrites`,
    :class:`~airlock.tools._withdrawals.Withdrawals`).

    Args:
        registry: the tools; the write path attaches itself so direct write calls reach it.
        ledger: where previews, approvals and receipts live (``SQLiteLedgerStore``).
        ttl: seconds a preview stays committable after it was prepared.
        lease_grace: seconds added to a tool's timeout for how long a claimed send may run
            before reconciliation treats its sender as gone.
        clock: wall-clock time in seconds (injectable for tests).

    Call :meth:`reconcile` at start-up, before committing anything, so that writes a crash
    left undecided are resolved first.
    """

    def __init__(
        self,
        registry: Registry,
        ledger: LedgerStore,
        *,
        ttl: float = 900.0,
        lease_grace: float = 30.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if ttl <= 0:
            raise ValueError(f"ttl must be positive, not {ttl!r}")
        self.registry = registry
        self.ledger = ledger
        self.ttl = ttl
        self.lease_grace = lease_grace
        self.clock = clock
        self._vault = SecretVault()
        self._sender = SealedSender(
            ledger, registry.audit, clock=clock, lease_grace=lease_grace, vault=self._vault
        )
        registry.attach_writes(self)

    # -- prepare (the registry calls this for a direct write call) -----------------------

    async def propose(self, admission: Admission, ctx: CallContext) -> Preview:
        """Prepare the effect of an admitted write call, check it against the grant and the
        approval rules, and store its preview (approved at once when a rule allows it); or,
        for an admitted read that waits for approval, store its preview. The call's final
        audit event says ``preview`` (``already_committed`` for an intent committed before).

        Raises:
            ToolError: ``prepare`` failed: its own error (``not_found``...), ``timeout``,
                or ``upstream`` for anything unexpected (prepare changes nothing, so the
                outcome is ``error``); ``denied`` when the grant or a rule refuses the
                prepared effect; ``conflict`` when the run id was reused by another principal.
        """
        self.settle_denials()  # (a withdrawn preview of this intent is denied first: a new one)
        if admission.spec.write is None:
            if not admission.needs_approval:
                raise UsageError(
                    f"{admission.spec.name} is a read that needs no approval; run it with "
                    "Registry.run"
                )
            return await propose_read(
                admission,
                ctx,
                ledger=self.ledger,
                vault=self._vault,
                ttl=self.ttl,
                clock=self.clock,
            )
        return await propose_write(
            admission,
            ctx,
            ledger=self.ledger,
            sender=self._sender,
            vault=self._vault,
            ttl=self.ttl,
            clock=self.clock,
        )

    def waiting(self, preview: Preview) -> ToolError:
        """What a caller that knows only answers and errors is told about ``preview``: its
        summary, id and what happens next, as ``needs_approval``; ``conflict`` for an intent
        already committed (nothing was sent again)."""
        if preview.state == "committed":
            return ConflictError(
                f"already committed: {preview.summary} (preview {preview.id}); it was not "
                "sent again",
                detail=f"key {preview.key}",
            )
        return NeedsApprovalError(
            model_message(preview, self.clock()), rule=preview.rule, preview_id=preview.id
        )

    async def call(
        self, name: str, args: Mapping[str, Any], ctx: CallContext
    ) -> JSONObject | Preview:
        """A direct call as a harness makes it: a read runs and its shaped result comes back;
        a write (or a read a rule asks about) comes back as its preview.

        Raises:
            ToolError: admission, the read or prepare refused or failed.
        """
        admission = self.registry.admit(name, args, ctx, approvable=True)
        if admission.spec.write is None and not admission.needs_approval:
            return await self.registry.run(admission, ctx)
        return await self.propose(admission, ctx)

    async def preview_call(self, name: str, args: Mapping[str, Any], ctx: CallContext) -> Preview:
        """Make a direct write call (admission, prepare, policy) and return its preview.

        What a harness does with a model's write call: it commits at once when
        :attr:`Preview.state` is ``approved``, or pauses for a person.

        Raises:
            ToolError: admission or prepare refused the call (``denied``, ``invalid_input``,
                ``not_found``...); ``unknown_tool`` when ``name`` is no write tool.
        """
        spec = self.registry.get(name)
        if spec is None or spec.write is None:
            raise UnknownToolError(name=name, detail="no write tool of that name")
        return await self.propose(self.registry.admit(name, args, ctx), ctx)

    def holds_secrets(self, preview: Preview) -> bool:
        """Whether this process holds the values of ``preview``'s sealed fields, so that
        :meth:`commit` can send it (true when its tool seals nothing). Only the process that
        prepared a preview holds them: another one (an approval page) leaves it to that one."""
        spec = self.registry.get(preview.tool)
        fields = frozenset[str]() if spec is None else sealed_fields(spec)
        return not fields or self._vault.unseal(preview.id, preview.effect, fields) is not None

    def receipt(self, preview: Preview) -> Receipt | None:
        """The receipt stored for ``preview``'s key, if it was committed (not another
        preview's of the same intent, which may hold the key a denied one freed)."""
        return own_receipt(self.ledger, preview)

    # -- approval ------------------------------------------------------------------------

    def approve(
        self,
        preview_id: str,
        *,
        approver: str,
        fingerprint: str | None = None,
        reason: str = "",
        self_approval: bool = False,
    ) -> Approval:
        """A person approves the preview (see :func:`~airlock.tools.approve_preview`);
        ``self_approval`` is the policy's setting.

        Raises:
            ToolError: as :func:`~airlock.tools.approve_preview`; ``conflict`` when its
                program withdrew it and the ledger has not recorded that yet.
        """
        self.settle_denials(preview_id)  # (withdrawn ones a program could not deny)
        approval = approve_preview(
            self.ledger,
            preview_id,
            approver=approver,
            now=self.clock(),
            fingerprint=fingerprint,
            reason=reason,
            self_approval=self_approval,
        )
        preview = load_preview(self.ledger, preview_id)
        self._sender.audit(
            preview,
            "authorize",
            "allow",
            approval.rule,
            "ok",
            None,
            f"approved by {approver}",
            approver=approver_of(approval),
        )
        return approval

    def deny(self, preview_id: str, *, approver: str, reason: str) -> Preview:
        """A person refuses the preview (see :func:`~airlock.tools.deny_preview`).

        Raises:
            ToolError: as :func:`~airlock.tools.deny_preview`.
        """
        preview = deny_preview(
            self.ledger, preview_id, approver=approver, reason=reason, now=self.clock()
        )
        self._sender.audit(
            preview,
            "authorize",
            "deny",
            preview.rule,
            "error",
            "denied",
            reason[:200],
            approver=approver,
        )
        return preview

    # -- commit --------------------------------------------------------------------------

    async def commit(
        self, preview_id: str, approved_fingerprint: str, session: Principal
    ) -> Receipt:
        """Send an approved preview once, with its idempotency key, and return the receipt.

        ``session`` is the principal of the session committing; the run cannot name another.

        Raises:
            NotFoundError: no such preview.
            DeniedError: the preview belongs to another principal, or a person denied it.
            ApprovalMismatchError: ``approved_fingerprint`` is not the preview's, or the
                stored effect or approval no longer match it.
            PreviewExpiredError: past its expiry with no receipt stored (outcome ``unknown``
                when an earlier send may have acted: reconcile resolves it).
            NeedsApprovalError: nobody approved it yet.
            ConflictError: another commit of it is in flight (retryable, outcome
                ``unknown``: ask again shortly), or the step failed before; or the system
                answered for another change under its key (outcome ``unknown``: the step is
                ``unknown`` for an operator to look at).
            AmbiguousWriteError: the send ended without a definite answer, or the system
                refused a resend; the step is ``unknown``. Commit again (it resends with the
                same key) or reconcile.
            UpstreamError: nothing was sent (the host was busy); the step is as it was.
            ToolError: the system of record refused (the tool's error, outcome ``error``).
        """
        self.settle_denials(preview_id)  # (withdrawn ones a program could not deny)
        checked = checked_for_commit(
            self.ledger, self._vault, preview_id, approved_fingerprint, session, now=self.clock()
        )
        if isinstance(checked, Receipt):
            return checked
        preview, approval = checked
        spec = self._spec(preview)
        if spec.write is None:
            raise UsageError(f"preview {preview.id!r} is a read's; run it with run_read")
        refuse_lost_secret(self.ledger, self._vault, spec, preview, now=self.clock())
        for _ in range(_MAX_CLAIMS):
            claimed = claim_for_commit(self._sender, spec, preview, approval, now=self.clock())
            if isinstance(claimed, Receipt):
                return claimed
            if claimed is not None:
                resolved_by: ResolvedBy = "send" if claimed.attempts == 1 else "resend"
                try:
                    return await self._sender.send(
                        spec, claimed, resolved_by=resolved_by, actor="commit"
                    )
                finally:
                    self._forget_if_settled(claimed.id)
            preview = load_preview(self.ledger, preview_id)  # lost a race; look again
            approval = self.ledger.approval(preview.id)
        raise ConflictError(f"preview {preview_id!r} keeps changing; try the commit again")

    async def run_read(
        self, preview_id: str, approved_fingerprint: str, ctx: CallContext
    ) -> Receipt:
        """Run an approved read once and return its receipt: the shaped result, stored under
        the preview's key, so that asking again returns the same result without running it.

        ``ctx`` is the call context of the session's principal (its grant and deadline); the
        checks are those of :meth:`commit`, in the same order.

        Raises:
            ToolError: as :meth:`commit`; ``timeout`` when ``ctx``'s run has no time left
                (the read is still approved); the read's own error (``not_found``,
                ``timeout``, ``denied``...), after which the step is ``failed``.
        """
        self.settle_denials(preview_id)
        checked = checked_for_commit(
            self.ledger,
            self._vault,
            preview_id,
            approved_fingerprint,
            ctx.principal,
            now=self.clock(),
        )
        if isinstance(checked, Receipt):
            return checked
        preview, approval = checked
        spec = self._spec(preview, read=True)
        refuse_lost_secret(self.ledger, self._vault, spec, preview, now=self.clock())
        refuse_spent_run(ctx)  # before the claim: a read that cannot run stays approved
        for _ in range(_MAX_CLAIMS):
            claimed = claim_for_commit(self._sender, spec, preview, approval, now=self.clock())
            if isinstance(claimed, Receipt):
                return claimed
            if claimed is not None:
                try:
                    return await run_claimed_read(
                        self._sender, self.registry, self._vault, spec, claimed, ctx
                    )
                finally:  # (one that never ran is approved again: its secrets are kept)
                    self._forget_if_settled(claimed.id)
            preview = load_preview(self.ledger, preview_id)
            approval = self.ledger.approval(preview.id)
        raise ConflictError(f"preview {preview_id!r} keeps changing; try again")

    # -- reconcile -----------------------------------------------------------------------

    async def reconcile(self) -> list[Resolution]:
        """Resolve every ``unknown`` step and every ``sending`` step whose sender is gone.

        Each is claimed like a commit (so two reconcilers never both act), then the system
        of record is queried (when the tool declares ``lookup``) or the same key is resent.
        Never a fresh write; how each was resolved is recorded in the ledger. A step whose
        ledger row does not read back is skipped, reported ``unresolved``.
        """
        return await resolve_all(self._sender, self.registry, settled=self._forget_if_settled)

    def _forget_if_settled(self, preview_id: str) -> None:
        self._sender.forget_if_settled(preview_id)

    def _spec(self, preview: Preview, *, read: bool = False) -> ToolSpec:
        spec = self.registry.get(preview.tool)
        if spec is None or (spec.write is None) != read:
            kind = "read" if read else "write"
            raise UpstreamError(
                "the tool of this change is not available here",
                detail=f"tool {preview.tool!r} is not a registered {kind} tool",
            )
        return spec
