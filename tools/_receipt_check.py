"""Whether an answer under a step's key is a receipt of the effect that was approved.

The system of record answers by key: a lookup returns what it holds under the key, and a
resend the answer it gave the first request with the key. When the key was used for another
request (an earlier preview of the same intent, wrongly settled as failed; a request made by
hand), that answer is another change's receipt, and stored as this step's it would say that
the approved effect was committed when it was never sent. So the answer is compared with the
approved effect on the fields both hold (``invoice_id``, ``amount_minor``...), which is what
a write contract lets the write path compare without knowing the tool; fields marked
``Secret()`` are left out (the ledger holds their seals). A tool whose receipt shares no
field with its effect is not checked.

A key that once answered for another change is never sent again (:func:`mismatch_of`): the
same key fetches the same answer, or, once the system has forgotten the key, commits a change
nobody looked at (the other change may be this very intent, sent before under another step).
A commit refuses such a step; reconcile may query it, not resend it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from airlock.tools._arguments import secret_fields_of
from airlock.tools._in_flight import mismatched_here
from airlock.tools._write_contract import WriteContract

if TYPE_CHECKING:
    from airlock.tools._ledger import LedgerStore
    from airlock.tools._preview import Preview

__all__ = ["MISMATCH_ERROR", "MISMATCH_HOW", "mismatch_of", "receipt_mismatch"]

MISMATCH_HOW = "answer not stored as its receipt"
"""How the ledger's history begins a step's ``unknown`` mark for an answer that
:func:`receipt_mismatch` refused (its key answers for another change): a claim clears the
step's error, the history keeps it."""
MISMATCH_ERROR = "receipt_mismatch: "
"""How a step's ``error`` begins while its key answers for another change."""

_SHOWN = 5


def receipt_mismatch(
    contract: WriteContract, effect: Mapping[str, object], answer: Mapping[str, object]
) -> str | None:
    """How ``answer`` (a shaped receipt) differs from the approved ``effect`` (its JSON form)
    on the fields both hold, as a sentence naming each field and both values; ``None`` when
    they agree."""
    secret = secret_fields_of(contract.effect_model)
    differ = sorted(
        name
        for name in answer.keys() & effect.keys()
        if name not in secret and not _same(answer[name], effect[name])
    )
    if not differ:
        return None
    shown = "; ".join(
        f"{name} is {_short(answer[name])} (approved: {_short(effect[name])})"
        for name in differ[:_SHOWN]
    )
    more = f"; and {len(differ) - _SHOWN} more" if len(differ) > _SHOWN else ""
    return f"the answer under its key is not a receipt of its approved effect: {shown}{more}"


def mismatch_of(ledger: LedgerStore, preview: Preview) -> str | None:
    """The ``error`` that says ``preview``'s key answered for another change, once it did: its
    step's error says so, or its history does (a claim clears the error), or this process saw
    it and the ledger refused to record it. ``None`` when its key never did."""
    if (preview.error or "").startswith(MISMATCH_ERROR):
        return preview.error
    if mismatched_here(preview.id):
        return f"{MISMATCH_ERROR}its key answered for another change (the ledger refused the mark)"
    for event in reversed(ledger.history(preview.id)):
        if event.how.startswith(MISMATCH_HOW):
            return f"{MISMATCH_ERROR}{event.how[len(MISMATCH_HOW) :].lstrip(', ')}"[:200]
    return None


def _same(answer: object, approved: object) -> bool:
    # JSON on both sides; a bool is no number here (True == 1 in Python).
    if isinstance(answer, bool) or isinstance(approved, bool):
        return answer is approved
    return answer == approved


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
