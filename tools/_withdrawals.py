"""A proposal its program withdrew: letting go of its preview, and denying one nobody holds.

A program may cancel a proposal while the host prepares it (the bridge lets the prepare run
to its end). The proposal lets go of its preview (:mod:`airlock.tools._preview_holders`), and
the ledger denies it (:data:`WITHDRAWN`) once nobody holds it: no other proposal of the
program or of another program of the run, and no direct call of the model, of the same intent
(one preview for it); and only when a program's proposal stored it in this process (one
stored elsewhere is someone else's). Who holds what is known in this process only: a holder in
another process (a session resumed there) may still meet the preview denied, and is told it
was withdrawn (:meth:`Withdrawals.was_withdrawn`). A preview a person approved is never denied
by a withdrawal (:func:`withdraw_proposal`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from airlock.tools._batch_writes import BatchWrites
from airlock.tools._context import CallContext
from airlock.tools._errors import ConflictError
from airlock.tools._ledger import LedgerStore, StepStateError
from airlock.tools._preview import Preview, StepState
from airlock.tools._preview_holders import (
    denials_due,
    denied_at_last,
    deny_later,
    proposing_as,
    release,
)
from airlock.tools._sender import Sender

__all__ = ["PROPOSAL_FAILED", "WITHDRAWN", "Withdrawals", "withdraw_proposal"]

WITHDRAWN = "withdrawn by the program"
"""How a proposal its program withdrew is denied, in the ledger's history and the audit log."""
PROPOSAL_FAILED = "its proposal failed"
"""How a preview is denied whose proposal raised once it was stored (nobody was told of it)."""


def withdraw_proposal(
    ledger: LedgerStore, sender: Sender, preview_id: str, *, now: float, how: str = WITHDRAWN
) -> Preview | None:
    """Deny the preview of a proposal its program withdrew (:data:`WITHDRAWN`), waiting or
    approved by a rule: no one approves or commits it, and its key is free for the same
    intent again. Name only a preview nobody holds any more (see the module).

    One a person approved stays approved (a person's decision is not the program's to undo,
    and the preview may serve another proposal of the run); one already sent, settled or
    denied stays as it is. Returns the preview as it stands, ``None`` when there is none.
    """
    for _ in range(2):  # (a second look when it was approved meanwhile: by whom?)
        current = ledger.preview(preview_id)
        if current is None:
            return None
        approval = ledger.approval(preview_id)
        expect: set[StepState] = {"prepared"}
        if approval is not None and approval.kind == "policy":
            expect.add("approved")  # (an approval is never replaced: it stays the rule's)
        if current.state not in expect:
            return current
        try:
            preview = ledger.transition(
                preview_id,
                expect=expect,
                to="denied",
                at=now,
                actor="program",
                how=how,
                error=f"denied: {how}",
            )
        except KeyError:
            return None
        except StepStateError:
            continue
        sender.audit(preview, "authorize", "deny", preview.rule, "error", "denied", how)
        return preview
    return ledger.preview(preview_id)


class Withdrawals(BatchWrites):
    """The write path's methods for proposals from code that their program may withdraw."""

    def _forget_if_settled(self, preview_id: str) -> None:
        raise NotImplementedError  # WritePath's

    async def propose_held(
        self,
        name: str,
        args: Mapping[str, Any],
        ctx: CallContext,
        *,
        holder: object,
        unreleased: list[tuple[str, str | None]],
    ) -> Preview:
        """:meth:`propose_from_code` for the program ``holder`` (a token of its own): the
        preview it returns, stored or received, is held by this proposal until
        :meth:`withdraw` lets go of it. A proposal that raises lets go of what it stored or
        received (the program learns of none); what the ledger could not deny then goes in
        ``unreleased`` as ``(preview id, how)``, for the holder to :meth:`withdraw` again.

        Raises:
            ToolError: as :meth:`propose_from_code`.
        """
        with proposing_as(holder) as noted:
            try:
                return await self.propose_from_code(name, args, ctx)
            except BaseException:
                # The program was told of no preview: what this proposal stored or received
                # (before an error of the audit log or the ledger, say) it holds no more.
                for preview_id in noted:
                    try:
                        self.withdraw(preview_id, holder=holder, how=PROPOSAL_FAILED)
                    except Exception:  # (the ledger failed too: the holder tries again)
                        unreleased.append((preview_id, PROPOSAL_FAILED))
                raise

    def withdraw(
        self, preview_id: str, *, holder: object, how: str | None = None
    ) -> Preview | None:
        """A withdrawn proposal of ``holder`` lets go of its preview, which is denied (as
        ``how``, :data:`WITHDRAWN` by default) once nobody holds it (see the module), so it
        is never approved or committed; unless a person approved it (see
        :func:`withdraw_proposal`). Returns the preview denied, ``None`` when it was not.

        Raises:
            LedgerError: the ledger could not deny it; the hold stays, to try again (only
                then: the hold is gone whenever this returns).
        """
        denied: list[Preview | None] = []

        def deny() -> None:
            now = self.clock()
            denied.append(
                withdraw_proposal(
                    self.ledger, self._sender, preview_id, now=now, how=how or WITHDRAWN
                )
            )

        if not release(preview_id, holder, deny):  # another holder's too, or not ours to deny
            return None
        with contextlib.suppress(Exception):  # (the vault forgets its secret at expiry then)
            self._forget_if_settled(preview_id)
        return denied[0]

    def deny_later(self, unreleased: list[tuple[str, str | None]], *, holder: object) -> None:
        """The program ``holder`` ended, and the ledger could not record these denials (see
        :meth:`propose_held`): :meth:`settle_denials` records them before any commit here."""
        for preview_id, how in unreleased:
            deny_later(preview_id, holder, how)

    def settle_denials(self, preview_id: str) -> None:
        """Record the denials :meth:`deny_later` was given, before ``preview_id`` is
        committed.

        Raises:
            ConflictError: the ledger still cannot record ``preview_id``'s own denial (it
                is not committed).
        """
        for due_id, holder, how in denials_due():
            with contextlib.suppress(Exception):  # (tried again at the next commit)
                self.withdraw(due_id, holder=holder, how=how)
                denied_at_last(due_id)
        if any(due_id == preview_id for due_id, _, _ in denials_due()):
            raise ConflictError(
                "the program that proposed this change withdrew it, and the ledger has not "
                "recorded that yet; nothing was sent; do not commit it",
                outcome="error",
            )

    def was_withdrawn(self, preview_id: str) -> bool:
        """Whether the preview was denied by its program's withdrawal, or as its proposal
        failed (:meth:`withdraw`), not by a person: told by its history, which a person's
        reason cannot forge (a person's denial is recorded as ``denied by NAME: REASON``)."""
        history = self.ledger.history(preview_id)
        return (
            bool(history)
            and history[-1].to_state == "denied"
            and history[-1].how in (WITHDRAWN, PROPOSAL_FAILED)
        )
