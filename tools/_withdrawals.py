"""A proposal its program withdrew: letting go of its preview, and denying one nobody holds.

A program may cancel a proposal while the host prepares it (the bridge lets the prepare run
to its end). The proposal lets go of its preview (:mod:`airlock.tools._preview_holders`), and
the ledger denies it (:data:`WITHDRAWN`) once nobody holds it: no other proposal of the
program or of another program of the run, and no direct call of the model, of the same intent
(one preview for it); and only when a program's proposal stored it in this process (one
stored elsewhere is someone else's). Who holds what is known in this process only: a holder in
another process (a session resumed there) may still meet the preview denied, and is told it
was withdrawn (:meth:`Withdrawals.was_withdrawn`). A preview a person approved before the
withdrawal that freed it is never denied by it (:func:`withdraw_proposal`). Until a denial is
recorded (its program lets go once none of its proposals is being prepared; the ledger may
fail to record it), the preview is neither approved nor committed in this process
(:meth:`Withdrawals.settle_denials`), nor handed to a later proposal of the same intent, which
meets ``conflict`` instead: every proposal (:meth:`WritePath.propose`) records due denials
first, so it gets a new preview as soon as the ledger records them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection, Mapping
from typing import Any

from airlock.tools._batch_writes import BatchWrites
from airlock.tools._context import CallContext
from airlock.tools._errors import ConflictError
from airlock.tools._ledger import LedgerStore, StepStateError
from airlock.tools._preview import LIVE_STATES, Preview, StepState
from airlock.tools._preview_holders import (
    StillSending,
    proposing_as,
    release,
    settle,
    undecided,
    withdrawing,
)
from airlock.tools._sender import Sender

__all__ = ["PROPOSAL_FAILED", "WITHDRAWN", "Withdrawals", "withdraw_proposal"]

WITHDRAWN = "withdrawn by the program"
"""How a proposal its program withdrew is denied, in the ledger's history and the audit log."""
PROPOSAL_FAILED = "its proposal failed"
"""How a preview is denied whose proposal raised once it was stored (nobody was told of it)."""


def withdraw_proposal(
    ledger: LedgerStore,
    sender: Sender,
    preview_id: str,
    *,
    now: float,
    how: str = WITHDRAWN,
    since: float | None = None,
    tried: Collection[float] = (),
) -> Preview | None:
    """Deny the preview of a proposal its program withdrew (:data:`WITHDRAWN`) at ``since``
    (default: now), waiting or approved by a rule: no one approves or commits it, and its key
    is free for the same intent again. Name only a preview nobody holds any more (see the
    module).

    One a person approved before the withdrawal stays approved (a person's decision is not
    the program's to undo, and the preview may serve another proposal of the run); one a
    person approved since (while the denial could not be recorded) is denied all the same;
    one already sent, settled or denied stays as it is. ``tried``: when earlier tries of
    this denial were made, each of which raised: one the ledger stored all the same (its
    answer was lost) is audited now. Returns the preview as it stands, ``None`` when there
    is none.

    Raises:
        StillSending: it is being sent: the denial stays due until the send ends, settled
            (then it stands as it is) or given back, approved again (then it is denied).
    """
    since = now if since is None else since
    for _ in range(2):  # (a second look when it was approved meanwhile: by whom?)
        current = ledger.preview(preview_id)
        if current is None:
            return None
        if current.state == "denied" and _denied_by(current, how, tried):
            sender.audit(current, "authorize", "deny", current.rule, "error", "denied", how)
            return current
        if current.state == "sending":  # (a send that never started is approved again)
            raise StillSending(
                "the withdrawn preview is being sent; it is denied unless that send happens",
                detail=f"{preview_id} is sending",
            )
        approval = ledger.approval(preview_id)
        expect: set[StepState] = {"prepared"}
        if approval is not None and (approval.kind == "policy" or approval.at >= since):
            expect.add("approved")  # (a rule's, or a person's too late: it goes with it)
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


def _denied_by(preview: Preview, how: str, tried: Collection[float]) -> bool:
    """Whether ``preview`` was denied as ``how`` by one of the tries made at ``tried``."""
    return preview.updated in tried and preview.error == f"denied: {how}"


class _Denial:
    """The denial of one withdrawn preview (:data:`~airlock.tools._preview_holders.Denial`),
    tried until the ledger records it; :attr:`preview`: as the latest try left it. Once a try
    of it returned, a later call (the holders' tables lost that outcome to an interrupt, say)
    answers the same, auditing nothing again."""

    __slots__ = (
        "_clock",
        "_how",
        "_ledger",
        "_sender",
        "_stands",
        "_tried",
        "preview",
        "preview_id",
    )

    def __init__(
        self,
        ledger: LedgerStore,
        sender: Sender,
        clock: Callable[[], float],
        preview_id: str,
        how: str,
    ) -> None:
        self._ledger, self._sender, self._clock = ledger, sender, clock
        self.preview_id, self._how = preview_id, how
        self._tried: list[float] = []
        self._stands: bool | None = None
        self.preview: Preview | None = None

    def __call__(self, since: float) -> bool:
        if self._stands is not None:
            return self._stands
        now = self._clock()
        tried = tuple(self._tried)
        self._tried.append(now)
        self.preview = withdraw_proposal(
            self._ledger,
            self._sender,
            self.preview_id,
            now=now,
            how=self._how,
            since=since,
            tried=tried,
        )
        self._stands = self.preview is not None and self.preview.state in LIVE_STATES
        return self._stands


class Withdrawals(BatchWrites):
    """The write path's methods for proposals from code that their program may withdraw."""

    def _forget_if_settled(self, preview_id: str) -> None:
        raise NotImplementedError  # WritePath's

    async def propose_held(
        self, name: str, args: Mapping[str, Any], ctx: CallContext, *, holder: object
    ) -> Preview:
        """:meth:`propose_from_code` for the program ``holder`` (a token of its own): the
        preview it returns, stored or received, is held by this proposal until
        :meth:`withdraw` lets go of it. A proposal that raises lets go of what it stored or
        received (the program learns of none), denied as :data:`PROPOSAL_FAILED`.

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
                    with contextlib.suppress(Exception):  # (then denied before any approval)
                        self.withdraw(preview_id, holder=holder, how=PROPOSAL_FAILED)
                raise

    def withdrawing(self, preview_id: str, *, holder: object) -> None:
        """A proposal of the program ``holder`` of ``preview_id`` was withdrawn; it lets go
        (:meth:`withdraw` with ``withdrawn_at``) once no proposal of it is being prepared.
        Until then a preview that would be freed is neither approved nor committed here."""
        withdrawing(preview_id, holder)

    def withdraw(
        self,
        preview_id: str,
        *,
        holder: object,
        how: str | None = None,
        withdrawn_at: float | None = None,
    ) -> Preview | None:
        """A withdrawn proposal of ``holder`` lets go of its preview, which is denied (as
        ``how``, :data:`WITHDRAWN` by default) once nobody holds it (see the module), so it
        is never approved or committed; unless a person approved it before the latest
        withdrawal of a proposal that held it (this one's: ``withdrawn_at``, as
        :meth:`withdrawing` announced it; default: now). A denial the ledger cannot record
        (it raises) is due: until it is recorded (:meth:`settle_denials`) the preview is
        neither approved nor committed here, nor handed to a later proposal of the same
        intent. Returns the preview as the denial left it, ``None`` when it was not freed
        or the ledger holds no such preview.

        Raises:
            LedgerError: the ledger could not deny it (the denial is due).
            StillSending: it is being sent (the denial is due until that send ends).
        """
        at = self.clock() if withdrawn_at is None else withdrawn_at
        denial = _Denial(self.ledger, self._sender, self.clock, preview_id, how or WITHDRAWN)
        freed = release(
            preview_id,
            holder,
            denial,
            ledger=self.ledger,
            at=at,
            pending=withdrawn_at is not None,
        )
        if not freed:  # another holder's too, or not ours to deny
            return None
        with contextlib.suppress(Exception):  # (the vault forgets its secret at expiry then)
            self._forget_if_settled(preview_id)
        return denial.preview

    def settle_denials(self, *preview_ids: str) -> None:
        """Record the denials this ledger could not record before (:meth:`withdraw`), before
        any of ``preview_ids`` is approved or committed (outside the lock of the holders'
        tables: one that another thread is trying is left to it); forget those (of any
        ledger) whose previews expired by their own write path's clock, which nobody
        approves or commits.

        Raises:
            ConflictError: one of ``preview_ids`` is still to be denied: the ledger cannot
                record it yet, or its program has not let go of it yet.
        """
        settle(self.ledger)
        if preview_ids and undecided(preview_ids):
            raise ConflictError(
                "the program that proposed this change withdrew it, and that is not recorded "
                "yet; until it is, the change is neither approved nor sent (and then it is "
                "denied); nothing was sent",
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
