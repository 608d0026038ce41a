"""A proposal its program withdrew: which preview it stored itself, and denying that one.

A program may cancel a proposal while the host prepares it (the bridge lets the prepare run
to its end). Its preview is then denied in the ledger (:data:`WITHDRAWN`), but only when the
proposal stored it: :meth:`Withdrawals.propose_own` says so, as :func:`stored_fresh` saw it
stored. One it received instead (the live preview of the same intent in the run, stored
first by another program of the run or by the model's direct call) is someone else's, and
when it was stored says nothing reliable (a wall clock may stand still or step back). Nor is
one the proposal stored that another holder received after it (:func:`note_received`: the
model's direct call, or another program of the run, proposing the same intent): it is theirs
too, and stays for them. A preview a person approved is never denied by a withdrawal
(:func:`withdraw_proposal`). Who received what is known in this process only: a holder in
another process (a session resumed there) may still meet the preview denied, and is told it
was withdrawn (:meth:`Withdrawals.was_withdrawn`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from typing import Any, Final, NamedTuple

from airlock.tools._batch_writes import BatchWrites
from airlock.tools._context import CallContext
from airlock.tools._ledger import LedgerStore, StepStateError
from airlock.tools._preview import Preview, StepState
from airlock.tools._sender import Sender

__all__ = [
    "WITHDRAWN",
    "Withdrawals",
    "note_received",
    "note_stored",
    "stored_fresh",
    "withdraw_proposal",
]

WITHDRAWN = "withdrawn by the program"
"""How a proposal its program withdrew is denied, in the ledger's history and the audit log."""

_stored: ContextVar[set[str] | None] = ContextVar("airlock_stored_previews", default=None)
_holder: ContextVar[object | None] = ContextVar("airlock_preview_holder", default=None)
"""Who proposes in this task: a program's session (:meth:`Withdrawals.propose_own`), or
``None`` (the model's direct call, anything else)."""


class _Stored(NamedTuple):
    until: float
    """When the preview expires: forgotten after."""
    storer: object | None
    shared: bool
    """Another holder received it since it was stored."""


_previews: dict[str, _Stored] = {}
"""Previews stored in this process, by id: who stored them, and whether another received
them since. Entries go once their previews expire."""
_FORGET_AT: Final = 4096
"""Entries past which the expired ones are forgotten, at the next one noted."""


@contextlib.contextmanager
def stored_fresh() -> Iterator[set[str]]:
    """The ids of the previews stored new (:func:`note_stored`) by the calls made within it
    in this task: each call's own, not the live one of the same intent that it received.
    A context variable, so that concurrent tasks each see only their own."""
    stored: set[str] = set()
    token = _stored.set(stored)
    try:
        yield stored
    finally:
        _stored.reset(token)


def note_stored(preview_id: str, *, until: float, now: float) -> None:
    """Record that this task stored the preview ``preview_id`` new (see :func:`stored_fresh`),
    one that expires at ``until``."""
    stored = _stored.get()
    if stored is not None:
        stored.add(preview_id)
    _note(preview_id, _Stored(until, _holder.get(), shared=False), now)


def note_received(preview_id: str, *, until: float, now: float) -> None:
    """Record that this task received the live preview ``preview_id`` of the same intent,
    stored before: unless its storer received it again, it is shared now, and a withdrawal
    of the proposal that stored it leaves it (see the module)."""
    known = _previews.get(preview_id)
    if known is None or known.storer is not _holder.get():
        _note(preview_id, _Stored(until, None if known is None else known.storer, True), now)


def _note(preview_id: str, entry: _Stored, now: float) -> None:
    if len(_previews) >= _FORGET_AT:
        for gone in [key for key, old in _previews.items() if old.until < now]:
            del _previews[gone]
    _previews[preview_id] = entry


def withdraw_proposal(
    ledger: LedgerStore, sender: Sender, preview_id: str, *, now: float
) -> Preview | None:
    """Deny the preview of a proposal its program withdrew (:data:`WITHDRAWN`), waiting or
    approved by a rule: no one approves or commits it, and its key is free for the same
    intent again. Name only a preview the proposal stored itself (:func:`stored_fresh`).

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
                how=WITHDRAWN,
                error=f"denied: {WITHDRAWN}",
            )
        except KeyError:
            return None
        except StepStateError:
            continue
        sender.audit(preview, "authorize", "deny", preview.rule, "error", "denied", WITHDRAWN)
        return preview
    return ledger.preview(preview_id)


class Withdrawals(BatchWrites):
    """The write path's methods for proposals from code that their program may withdraw."""

    def _forget_if_settled(self, preview_id: str) -> None:
        raise NotImplementedError  # WritePath's

    async def propose_own(
        self, name: str, args: Mapping[str, Any], ctx: CallContext, *, holder: object = None
    ) -> tuple[Preview, bool]:
        """:meth:`propose_from_code`, and whether this call stored the preview it returns
        (``False``: it received the live preview of the same intent in the run, stored
        before by another call, which a withdrawal of this one must leave alone). ``holder``
        is the program proposing (its session): its proposals of one intent share a preview
        that its withdrawals may deny; another holder's receiving it keeps it.

        Raises:
            ToolError: as :meth:`propose_from_code`.
        """
        token = _holder.set(holder)
        try:
            with stored_fresh() as stored:
                preview = await self.propose_from_code(name, args, ctx)
        finally:
            _holder.reset(token)
        return preview, preview.id in stored

    def withdraw(self, preview_id: str) -> Preview | None:
        """Deny the preview of a proposal its program withdrew, one the proposal stored
        itself (:meth:`propose_own`), so it is never approved or committed; unless another
        holder received it since (:func:`note_received`) or a person approved it (see
        :func:`withdraw_proposal`). Returns it as it stands."""
        known = _previews.get(preview_id)
        if known is not None and known.shared:  # another holder's too: theirs to keep
            return self.ledger.preview(preview_id)
        withdrawn = withdraw_proposal(self.ledger, self._sender, preview_id, now=self.clock())
        self._forget_if_settled(preview_id)
        return withdrawn

    def was_withdrawn(self, preview_id: str) -> bool:
        """Whether the preview was denied by its program's withdrawal (:meth:`withdraw`), not
        by a person: told by its history, which a person's reason cannot forge (a person's
        denial is recorded as ``denied by NAME: REASON``)."""
        history = self.ledger.history(preview_id)
        return bool(history) and history[-1].to_state == "denied" and history[-1].how == WITHDRAWN
