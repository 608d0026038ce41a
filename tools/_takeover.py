"""A send whose step another process took over meanwhile: which receipt settles it.

A sender's lease is wall-clock time, so a reconcile elsewhere (another host, a clock that
jumped) may take a step over while its first send still waits for the answer. When that answer
comes, checked against the approved effect, it is the receipt of the one change the key made:
the receipt the other process stored stands; if it stored none, this one is stored, by the
same compare-and-set as every transition, so a key never holds two receipts.
"""

from __future__ import annotations

import dataclasses

from airlock.tools._ledger import LedgerStore, StepStateError, own_receipt
from airlock.tools._preview import Preview, Receipt
from airlock.tools._receipt_check import MISMATCH_ERROR

__all__ = ["settle_taken_over"]

# A step taken over can move again while its first sender stores its receipt (a reconcile
# claims it, then marks it unknown); a few looks settle it, or the conflict stands.
_TRIES = 3


def settle_taken_over(
    ledger: LedgerStore, claimed: Preview, current: Preview, receipt: Receipt, *, actor: str
) -> Receipt | None:
    """The receipt that settles ``claimed`` (now ``current`` in the ledger): the one another
    process stored, replayed; else ``receipt``, stored now with the step ``committed`` if
    the step is ``unknown`` or ``sending`` (a resend or query of the same key) and holds
    none; ``None`` when it ended otherwise, or reconcile found another change's answer under
    its key (an operator must look at it, not this answer).

    Raises:
        LedgerError: the ledger could not be read or written.
    """
    for _ in range(_TRIES):
        stored = own_receipt(ledger, claimed)
        if stored is not None:
            return dataclasses.replace(stored, replayed=True)
        mismatch = (current.error or "").startswith(MISMATCH_ERROR)
        if current.state not in ("unknown", "sending") or mismatch:
            return None
        try:
            ledger.transition(
                claimed.id,
                expect={current.state},
                expect_attempts=current.attempts,
                to="committed",
                at=receipt.stored_at,
                actor=actor,
                how="sent; its receipt came in after reconcile took it over",
                receipt=receipt,
            )
        except StepStateError as moved:  # moved again meanwhile: look again
            current = moved.preview
        else:
            return receipt
    return None
