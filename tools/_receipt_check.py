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
"""

from __future__ import annotations

from collections.abc import Mapping

from airlock.tools._arguments import secret_fields_of
from airlock.tools._write_contract import WriteContract

__all__ = ["MISMATCH_HOW", "receipt_mismatch"]

MISMATCH_HOW = "answer not stored as its receipt"
"""How the ledger's history begins a step's ``unknown`` mark for an answer that
:func:`receipt_mismatch` refused (its key answers for another change): a claim clears the
step's error, the history keeps it."""

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


def _same(answer: object, approved: object) -> bool:
    # JSON on both sides; a bool is no number here (True == 1 in Python).
    if isinstance(answer, bool) or isinstance(approved, bool):
        return answer is approved
    return answer == approved


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
