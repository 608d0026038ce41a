"""How a ``Secret()`` value may be spelled in an exception's text, and that text without it.

A library quotes what it was given as its encoder wrote it: a URL (``%2F`` or ``%2f``, ``/``
kept or not, ``+`` for a space), a JSON body (escaped once, or twice when it was itself a
string in JSON; each time with its non-ASCII characters escaped or not, and ``/`` as
``\\/`` or not), a bytes ``repr`` (``b'p\\xc3\\xa4ss'``), ``unicode_escape``, or base64
(an ``Authorization: Basic`` header, a token). :func:`secret_forms` spells each value in all
of those, and :func:`without_forms` replaces every one of them with
:data:`~airlock.tools._redact.REDACTED`.

Base64 packs three bytes in four characters, so a value inside a larger blob (``user:pass``)
is spelled one of three ways, by where it starts; each is matched by the characters that
stand for the value's bytes alone, and the one or two characters at each end that mix its
first or last bits with its neighbours' stay. Not covered: base64 broken into lines (MIME)
or of another encoding than UTF-8 (UTF-16); hex; a URL quoted from another encoding than
UTF-8 (Latin-1); HTML entities; compressed or encrypted text; and a value a validator
changed (admission withholds such an exception's text whole, see
:class:`~airlock.tools._admission.CallTrail`). Values too many to look for are not looked
for: a text that may quote them is withheld whole (:class:`SecretForms`).
"""

from __future__ import annotations

import re
from binascii import b2a_base64
from collections.abc import Collection
from dataclasses import dataclass
from json.encoder import encode_basestring, encode_basestring_ascii  # (json.dumps' own, in C)
from typing import Final
from urllib.parse import quote

from airlock.tools._redact import REDACTED

__all__ = [
    "MOST_FORM_CHARS",
    "MOST_READ",
    "MOST_SECRET_CHARS",
    "SecretForms",
    "secret_forms",
    "without_forms",
]

_PLAIN: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.~")
"""Characters every encoder here writes as themselves: a value of them (most values) has
only its base64 forms besides itself, three encodings instead of a dozen."""
_URL_SAFE: Final = str.maketrans("+/", "-_")
_SHORTEST_BASE64: Final = 4
"""Shorter base64 pieces (of a value of one or two bytes) would hit ordinary text."""
_GRAM: Final = 4
_FEW: Final = 64
"""Up to this many forms, each is looked for in the whole text; past it, only those whose
first :data:`_GRAM` characters (a shorter one: all of it) the text holds (values spell
thousands of forms, and a look for each costs more than reading the text's every run of
up to :data:`_GRAM` characters once)."""


@dataclass(frozen=True, slots=True)
class SecretForms:
    """What :func:`secret_forms` made of a call's values, once per failure: every text of
    it is cleaned with the same forms (its trace, its detail, its error's)."""

    forms: list[str]
    """Each value in each of its forms, longest first: a value inside another is replaced
    after it."""
    withheld: bool = False
    """The values are too many to look for (:data:`MOST_SECRET_CHARS`, :data:`MOST_FORM_CHARS`):
    ``forms`` is empty, and a text that may quote them is left out whole, never cleaned (the
    event loop would wait seconds, and what was left out leaks nothing)."""


MOST_SECRET_CHARS: Final = 64 * 1024
"""The most characters a call's values may hold in all to be looked for. A program chooses
its arguments (9,999 values of 64 characters are 640,000); what one person types (PINs,
keys, a token) is far less."""
MOST_FORM_CHARS: Final = 512 * 1024
"""The most characters their forms may spell in all (escapes make a value longer)."""


MOST_READ: Final = 1 << 27
"""The most characters :func:`without_forms` reads to replace the forms a text holds (a
tenth of a second, about): a megabyte holds thousands of values of three letters."""


def secret_forms(secrets: Collection[str]) -> SecretForms:
    """Each of ``secrets`` in each of its forms (see the module), longest first; withheld
    once they hold more than :data:`MOST_SECRET_CHARS` characters or their forms spell more
    than :data:`MOST_FORM_CHARS`, and made no further."""
    forms: set[str] = set()
    seen: set[str] = set()
    held = spelled = 0
    for value in secrets:
        if not value or value in seen:
            continue
        seen.add(value)
        held += len(value)
        if held > MOST_SECRET_CHARS:  # (before its forms are made: it may be huge)
            return SecretForms([], withheld=True)
        made = {value}
        if not _PLAIN.issuperset(value):
            made.update(_escaped(value))
        made.update(_base64(value.encode("utf-8", "surrogatepass")))
        made -= forms
        made.discard("")
        spelled += sum(map(len, made))
        if spelled > MOST_FORM_CHARS:
            return SecretForms([], withheld=True)
        forms |= made
    return SecretForms(sorted(forms, key=len, reverse=True))


def _escaped(value: str) -> set[str]:
    data = value.encode("utf-8", "surrogatepass")  # (a lone surrogate raises nothing)
    forms = {repr(value)[1:-1], value.encode("unicode_escape").decode("ascii"), repr(data)[2:-1]}
    # JSON, once and twice (a JSON text that is itself a JSON string), each layer with or
    # without its non-ASCII characters escaped, and with `/` as `\/` (PHP's, some others').
    once = _json_forms(value)
    forms |= once
    for inner in once:
        forms |= _json_forms(inner)
    quoted = quote(data, safe="")
    # (Each `%` of `quoted` starts an escape: a `%20` in the value is `%2520` there.)
    path = quoted.replace("%2F", "/")  # a path: `/` kept
    urls = {quoted, path, quoted.replace("%20", "+"), path.replace("%20", "+")}
    forms |= urls
    forms.update(_LOWER_ESCAPE.sub(_lower, url) for url in urls)  # `%2f`, as some write it
    return forms


def _json_forms(value: str) -> set[str]:
    forms = {encode_basestring_ascii(value)[1:-1], encode_basestring(value)[1:-1]}
    return forms | {form.replace("/", "\\/") for form in forms}


_LOWER_ESCAPE: Final = re.compile("%[0-9A-F]{2}")


def _lower(match: re.Match[str]) -> str:
    return match.group().lower()


def _base64(data: bytes) -> list[str]:
    """``data`` in base64 (standard and URL-safe), whole, and as it shows in a larger blob
    where it starts at each of the three positions in a group of three bytes: the characters
    made of its bits alone (character i holds bits 6i to 6i+6)."""
    bits = 8 * len(data)
    whole = b2a_base64(data, newline=False).decode("ascii")
    one = b2a_base64(b"\0" + data, newline=False).decode("ascii")
    two = b2a_base64(b"\0\0" + data, newline=False).decode("ascii")
    forms = [whole, whole[: bits // 6], one[2 : (bits + 8) // 6], two[3 : (bits + 16) // 6]]
    if "+" in whole or "/" in whole or "+" in one or "/" in one or "+" in two or "/" in two:
        forms += [form.translate(_URL_SAFE) for form in forms]
    return [form for form in forms if len(form) >= _SHORTEST_BASE64]


def without_forms(text: str, forms: list[str]) -> str | None:
    """``text`` with each of ``forms`` (longest first, as :func:`secret_forms` lists them)
    replaced by :data:`REDACTED`, in that order; ``None`` if that would read more than
    :data:`MOST_READ` characters (each form found is a pass over the text)."""
    if len(forms) > _FEW:
        # The marker a replacement writes is read as if it were in the text: a form inside
        # it is replaced there whatever part of the text was read.
        seen = f"{text}\0{REDACTED}"
        sizes = {min(len(form), _GRAM) for form in forms}
        grams = {n: {seen[i : i + n] for i in range(len(seen) - n + 1)} for n in sizes}
        forms = [form for form in forms if form[:_GRAM] in grams[min(len(form), _GRAM)]]
    if len(forms) * len(text) > MOST_READ:
        return None
    for form in forms:
        text = text.replace(form, REDACTED)
    return text
