"""What a failed call or write step records about how it ended, without the values it must
not keep.

An exception raised by a tool's code often echoes what it was given: ``int(pin)`` says
``invalid literal for int() with base 10: '...'``, a ``commit`` says
``Transfer(account='acc_1', password='...')``. The audit log keeps that text, and the ledger
keeps a step's (its error, how it moved). The clear values of the fields marked ``Secret()``
(a call's arguments, a step's effect) are known only to whoever holds the call or the step
(the ledger has a step's seal), so that code replaces them with
:data:`~airlock.tools._redact.REDACTED` before the text is kept: :func:`failure_detail` for
an exception a handler, a ``prepare`` or an admission step raised,
:func:`without_secrets` for a send's ending. Credentials (credential headers and fields,
``Bearer`` tokens, every revealed credential's value) are redacted with the audit log's own
:func:`~airlock.tools._redact.redact`: by :func:`failure_detail` and :func:`failure_trace`
before they cut or log anything, and where a step's text is stored, by the ledger
(:func:`~airlock.tools._ledger_rows.ledger_text`) and by the audit log
(:func:`~airlock.tools.audit_event`).
"""

from __future__ import annotations

import traceback
from collections.abc import Collection, Mapping
from typing import Final, Protocol

import pydantic_core
from pydantic import BaseModel, ValidationError

from airlock.tools._arguments import secret_fields_of
from airlock.tools._redact import REDACTED, escape_controls, redact, redaction_reach
from airlock.tools._secret_forms import MOST_SECRET_CHARS, SecretForms, secret_forms, without_forms
from airlock.tools._write_contract import WriteContract

__all__ = [
    "DETAIL_CHARS",
    "TOO_MANY",
    "WITHHELD",
    "SecretForms",
    "Secrets",
    "argument_secrets",
    "error_detail",
    "failure_detail",
    "failure_forms",
    "failure_trace",
    "kept_text",
    "secret_forms",
    "secret_values",
    "storable",
    "without_secrets",
]

DETAIL_CHARS: Final = 500
"""The most of an exception's text the audit log keeps."""
_MOST_VALUES: Final = 10_000
"""How many values :func:`argument_secrets` looks at, at most (arguments a caller built may
hold themselves)."""


def secret_values(contract: WriteContract, effect: Mapping[str, object]) -> tuple[str, ...]:
    """The values of ``effect``'s fields marked ``Secret()``: clear in a step being sent,
    seals (harmless) in one read back from the ledger."""
    values = (effect.get(name) for name in sorted(secret_fields_of(contract.effect_model)))
    return tuple(value for value in values if isinstance(value, str) and value)


Secrets = Collection[str] | SecretForms
"""A call's ``Secret()`` values, or the forms :func:`secret_forms` made of them (made once,
for every text of one failure)."""


def _forms_of(secrets: Secrets) -> SecretForms:
    return secrets if isinstance(secrets, SecretForms) else secret_forms(secrets)


def without_secrets(text: str, secrets: Secrets) -> str:
    """``text`` with each of ``secrets`` replaced by :data:`REDACTED`, as written and as an
    encoder would spell it (:func:`~airlock.tools._secret_forms.secret_forms`: ``repr``,
    JSON, URL-quoted, base64...); :data:`TOO_MANY` if they are too many to look for (or
    the text too long for as many as they spell, see :data:`_LONG_TEXT`). Every
    value is replaced, however short: its tool's author marked it secret, and a garbled
    diagnostic costs less than a leaked one."""
    forms = _forms_of(secrets)
    if forms.withheld or (len(forms.forms) > _FEW_FORMS and len(text) > _LONG_TEXT):
        return TOO_MANY
    cleaned = without_forms(text, forms.forms)
    return TOO_MANY if cleaned is None else cleaned


_FEW_FORMS: Final = 64
_LONG_TEXT: Final = 64 * 1024
"""A text :func:`without_secrets` cleans whole of more forms than :data:`_FEW_FORMS`, at
most: every form found in it is a pass over all of it (a megabyte and 9,999 values of
three letters, each found there: 22 s)."""


class _Trail(Protocol):
    def secret_forms(self, also: tuple[str, ...] = ()) -> SecretForms: ...


def failure_forms(
    values: Mapping[str, object], fields: Collection[str], trail: _Trail | None
) -> SecretForms:
    """The forms of the ``Secret()`` values among ``values`` (a call's validated arguments,
    ``fields`` marked so), with those ``trail`` (its audit trail) holds as sent: made once
    per failure, the trail keeping them for what it records."""
    secrets = argument_secrets(values, fields)
    return secret_forms(secrets) if trail is None else trail.secret_forms(secrets)


def storable(text: str) -> str:
    """``text`` with every lone surrogate spelled as its escape (``\\ud800``): an exception's
    text may hold one (echoing what a system answered), and neither SQLite nor PostgreSQL
    takes text that is not valid UTF-8, so the record of a send's ending would be lost."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def argument_secrets(arguments: object, fields: Collection[str]) -> tuple[str, ...]:
    """The values of ``arguments``' fields named in ``fields`` (a tool's ``Secret()`` ones),
    as text, every string and number inside them included: ``arguments`` is the validated
    model, the arguments by name (validated, or as sent), or anything else a caller sent
    (then there are none)."""
    if not fields:
        return ()
    if isinstance(arguments, BaseModel):
        found: list[object] = [getattr(arguments, name, None) for name in sorted(fields)]
    elif isinstance(arguments, Mapping):
        found = [arguments.get(name) for name in sorted(fields) if name in arguments]
    else:
        return ()
    texts: list[str] = []
    seen = 0
    while found and seen < _MOST_VALUES:
        value = found.pop()
        seen += 1
        reveal = getattr(value, "get_secret_value", None)  # pydantic's SecretStr, SecretBytes
        if callable(reveal):
            value = reveal()
        if isinstance(value, str):
            texts.append(value)
        elif isinstance(value, bytes):
            texts += (value.decode("utf-8", "replace"), repr(value)[2:-1])
        elif value is None or isinstance(value, bool):
            continue  # (`True` would be replaced in every text)
        elif isinstance(value, int | float):
            try:
                texts.append(str(value))
            except ValueError:  # an int of more digits than Python writes (4,300)
                texts.append(_UNSPELLABLE)
        elif isinstance(value, Mapping):
            found.extend(value.values())
        elif isinstance(value, list | tuple | set | frozenset):
            found.extend(value)
        elif isinstance(value, BaseModel):  # its fields as they are (a SecretStr revealed)
            found += (*value.__dict__.values(), *(value.__pydantic_extra__ or {}).values())
        else:  # a UUID, a Decimal, a date, an address, an enum...: as it spells itself
            texts += _spellings(value, found)
    return tuple(text for text in texts if text)


def _spellings(value: object, found: list[object]) -> list[str]:
    """``value`` as ``str()``, ``repr()`` and its JSON form spell it (a container's JSON
    form is put in ``found``, to be looked at in turn)."""
    spelled: list[str] = []
    for spell in (str, repr, pydantic_core.to_jsonable_python):
        try:
            said = spell(value)
        except Exception:  # (a value that cannot say itself there cannot be quoted there)
            continue
        if isinstance(said, str):
            spelled.append(said)
        elif isinstance(said, dict | list):
            found.append(said)
    return spelled


_UNSPELLABLE: Final = "\0" * (MOST_SECRET_CHARS + 1)
"""Stands for a value with no text of its own (an int Python will not write in decimal):
more than the forms of a call's values may spell, so a text that may quote it is withheld
(:data:`TOO_MANY`)."""


def failure_detail(exc: BaseException, secrets: Secrets, *, withheld: bool = False) -> str:
    """What the audit log keeps of ``exc``, an exception a tool's code raised (not a
    :class:`~airlock.tools.ToolError`, whose detail its author wrote): its type and text,
    as :func:`kept_text` keeps them; ``withheld``, its type alone (see :data:`WITHHELD`),
    and so too when ``secrets`` are too many to look for (:data:`TOO_MANY`)."""
    forms, kind = _forms_of(secrets), type(exc).__name__
    said = f"{kind}: {_text_of(exc, withheld, forms)}"
    kept = said if forms.withheld else kept_text(said, forms)
    return f"{kind}: {TOO_MANY}" if kept == TOO_MANY else kept


def kept_text(text: str, secrets: Secrets) -> str:
    """``text`` without ``secrets`` (the call's ``Secret()`` values, :func:`argument_secrets`),
    its credentials redacted, then cut to :data:`DETAIL_CHARS` characters; :data:`TOO_MANY`
    if the values are too many to look for. In that order: text cut first could keep the
    start of a credential that the cut leaves unrecognizable."""
    forms = _forms_of(secrets)
    return TOO_MANY if forms.withheld else _cleaned_head(text, forms.forms, DETAIL_CHARS)[0]


def error_detail(
    detail: str, secrets: Secrets, *, cause: BaseException | None = None, withheld: bool = False
) -> str:
    """A :class:`~airlock.tools.ToolError`'s detail (its author wrote it, and it may quote
    the call's arguments) as the audit log keeps it: as :func:`kept_text` keeps a text, but
    cut to its first :data:`_TRACE_CHARS` characters (marked ``[cut]``), and whole when there
    is no value to look for; ``withheld``, :data:`WITHHELD`. Where ``secrets`` are too many to
    look for, :data:`TOO_MANY`; but the detail :func:`failure_detail` made then of the
    error's ``cause`` (its type, and that mark) is kept as it is."""
    forms = _forms_of(secrets)
    if forms.withheld:
        made = None if cause is None else f"{type(cause).__name__}: {TOO_MANY}"
        return detail if detail == made else TOO_MANY
    if withheld:
        return WITHHELD
    if not forms.forms:
        return redact(detail)
    kept, more = _cleaned_head(detail, forms.forms, _TRACE_CHARS)
    return f"{kept}{_CUT}" if more else kept


def _cleaned_head(text: str, forms: list[str], keep: int) -> tuple[str, bool]:
    """The first ``keep`` characters of ``text`` without ``forms`` and redacted, as cleaning
    the whole text would leave them, and whether more of it followed; but only as much of
    the text is cleaned as they need (an exception may quote a megabyte argument, and the
    event loop waits while its text is cleaned).

    A piece of a secret that the first cut leaves unrecognizable lies in the last ``reach``
    characters cleaned. Cleaning makes each character at most ``len(REDACTED) + 1`` (a
    quoted field's opening quote becomes itself and the marker), so once the cleaned text
    is that many times ``reach`` past ``keep``, no such piece is among what is kept.
    Otherwise (what was cleaned shrank: long secrets, a header running to the end of a long
    line), twice as much is cleaned."""
    reach = (len(forms[0]) if forms else 0) + redaction_reach()
    enough = keep + (len(REDACTED) + 1) * reach
    end = enough + reach
    while True:
        found = without_forms(text[:end], forms)
        if found is None:  # (too long a read: the text is withheld, see TOO_MANY)
            return TOO_MANY, False
        cleaned = redact(found)
        if end >= len(text) or len(cleaned) >= enough:
            return cleaned[:keep], len(cleaned) > keep or end < len(text)
        end *= 2


def failure_trace(exc: BaseException, secrets: Secrets, *, withheld: bool = False) -> str:
    """``exc``'s traceback for the operator log, with the exceptions it chained, without
    ``secrets`` and with credentials redacted. Its frames show file names and source lines,
    never values; the text of each exception (and its notes) may echo the call's arguments,
    so all of it is cleaned, each exception's text cut to its first :data:`_TRACE_CHARS`
    characters as :func:`kept_text` cuts (marked ``[cut]``) and written on one line (its
    line breaks and control characters escaped), and a validation error's text is written
    without its inputs (pydantic shortens a long one, which would hide it from the
    cleaning); ``withheld``, each exception's text and notes are left out (its frames
    are kept), and so too when ``secrets`` are too many to look for."""
    chain: list[BaseException] = []
    link: BaseException | None = exc
    while link is not None and len(chain) < _MOST_CHAINED:
        chain.append(link)
        link = link.__cause__ or (None if link.__suppress_context__ else link.__context__)
    cleaning = _forms_of(secrets)
    withheld = withheld or cleaning.withheld
    forms = cleaning.forms
    parts: list[str] = []
    for later, link in zip([None, *chain], chain, strict=False):
        if later is not None:
            parts.append(_CAUSED if later.__cause__ is link else _DURING)
        listed = "".join(traceback.format_tb(link.__traceback__))
        frames = redact(without_forms(listed, forms) or "")  # (source lines: never values)
        notes = None if withheld else getattr(link, "__notes__", None)
        told = "".join(f"\n{note}" for note in notes) if isinstance(notes, list) else ""
        said, more = _cleaned_head(
            f"{type(link).__name__}: {_text_of(link, withheld, cleaning)}{told}",
            forms,
            _TRACE_CHARS,
        )
        said = f"{type(link).__name__}: {TOO_MANY}" if said == TOO_MANY else said
        head = "Traceback (most recent call last):\n" if frames else ""
        # Escaped once cleaned (a secret is matched as it was written): the text and notes
        # on one line, which nothing they say can break into a forged log line.
        frames = escape_controls(frames, keep=_LINES)
        parts.append(f"{head}{frames}{escape_controls(said)}{_CUT if more else ''}")
    return "\n".join(reversed(parts))


_TRACE_CHARS: Final = 16 * 1024
"""The most of each exception's text (and notes) the operator log keeps."""
_CUT: Final = " ... [cut]"
_LINES: Final = frozenset("\n")
_MOST_CHAINED: Final = 8
_CAUSED: Final = "\nThe above exception was the direct cause of the following exception:\n"
_DURING: Final = "\nDuring handling of the above exception, another exception occurred:\n"


WITHHELD: Final = "[text withheld: this tool has secret fields]"
"""An exception's text, where it may quote a ``Secret()`` value in a form its call's
values do not spell: one a validator raised after validation changed the value (stripped
it, lower-cased it) is kept as its type alone."""
TOO_MANY: Final = "[text withheld: too many secret values to look for]"
"""A text that may quote a call's ``Secret()`` values when they spell more than
:data:`~airlock.tools._secret_forms.MOST_SECRET_CHARS` characters, or a long text when
they spell many forms: not cleaned (the event loop would wait seconds) but left out whole."""


def _text_of(exc: BaseException, withheld: bool = False, forms: SecretForms | None = None) -> str:
    """``str(exc)``, but a validation error's without the values it was given, and a text
    even when ``__str__`` fails (the record of the failure must not be lost);
    :data:`WITHHELD` if ``withheld``, :data:`TOO_MANY` if ``forms`` are."""
    if forms is not None and forms.withheld:
        return TOO_MANY
    if withheld:
        return WITHHELD
    if isinstance(exc, ValidationError):
        issues = exc.errors(include_url=False, include_input=False, include_context=False)
        said = "; ".join(f"{'.'.join(map(str, i['loc'])) or '-'}: {i['msg']}" for i in issues)
        return f"{exc.error_count()} validation error(s) for {exc.title}: {said}"
    try:
        return str(exc)
    except Exception:
        return "<its text could not be made>"
