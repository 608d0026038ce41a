"""What a write step records about how a send ended, without the values it must not keep.

An exception raised by a tool's ``commit`` often echoes the request it was sending
(``Transfer(account='acc_1', password='...')``), and the ledger keeps that text (a step's
error, how it moved) as the audit log does. The clear value of every effect field marked
``Secret()`` is known only to the sender holding it (the ledger has its seal), so the sender
replaces it with :data:`~airlock.tools._redact.REDACTED` before the text reaches either.
Credentials (credential headers and fields, ``Bearer`` tokens, every revealed credential's
value) are redacted where the text is stored, with the audit log's own
:func:`~airlock.tools._redact.redact`: by the ledger
(:func:`~airlock.tools._ledger_rows.ledger_text`) and by the audit log
(:func:`~airlock.tools.audit_event`).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping

from airlock.tools._arguments import secret_fields_of
from airlock.tools._redact import REDACTED
from airlock.tools._write_contract import WriteContract

__all__ = ["secret_values", "storable", "without_secrets"]


def secret_values(contract: WriteContract, effect: Mapping[str, object]) -> tuple[str, ...]:
    """The values of ``effect``'s fields marked ``Secret()``: clear in a step being sent,
    seals (harmless) in one read back from the ledger."""
    values = (effect.get(name) for name in sorted(secret_fields_of(contract.effect_model)))
    return tuple(value for value in values if isinstance(value, str) and value)


def without_secrets(text: str, secrets: Collection[str]) -> str:
    """``text`` with each of ``secrets`` replaced by :data:`REDACTED`, as written and as a
    ``repr`` or JSON string would spell it. Every value is replaced, however short: its
    tool's author marked it secret, and a garbled diagnostic costs less than a leaked one."""
    forms = {
        form
        for value in secrets
        for form in (value, repr(value)[1:-1], json.dumps(value)[1:-1])
        if form
    }
    for form in sorted(forms, key=len, reverse=True):  # longest first: a value inside another
        text = text.replace(form, REDACTED)
    return text


def storable(text: str) -> str:
    """``text`` with every lone surrogate spelled as its escape (``\\ud800``): an exception's
    text may hold one (echoing what a system answered), and neither SQLite nor PostgreSQL
    takes text that is not valid UTF-8, so the record of a send's ending would be lost."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")
