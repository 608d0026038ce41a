"""How a ``Secret()`` value may be spelled in an exception's text, and that text without it.

A library quotes what it was given as its encoder wrote it: a URL (``%2F``, ``+`` for a
space), a JSON body (escaped once, or twice when it was itself a string in JSON), a bytes
``repr`` (``b'p\\xc3\\xa4ss'``), ``unicode_escape``, or base64 (an ``Authorization:
Basic`` header, a token). :func:`secret_forms` spells each value in all of those, and
:func:`without_forms` replaces every one of them with :data:`~airlock.tools._redact.REDACTED`.

Base64 packs three bytes in four characters, so a value inside a larger blob (``user:pass``)
is spelled one of three ways, by where it starts; each is matched by the characters that
stand for the value's bytes alone, and the one or two characters at each end that mix its
first or last bits with its neighbours' stay. Not covered: base64 broken into lines (MIME),
hex, other encoders' escapes (percent-encoding with lower-case digits, HTML entities),
compressed or encrypted text, and a value a validator changed (admission withholds such an
exception's text whole, see :class:`~airlock.tools._admission.CallTrail`).
"""

from __future__ import annotations

from binascii import b2a_base64
from collections.abc import Collection
from json.encoder import encode_basestring, encode_basestring_ascii  # (json.dumps' own, in C)
from typing import Final
from urllib.parse import quote

from airlock.tools._redact import REDACTED

__all__ = ["secret_forms", "without_forms"]

_PLAIN: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.~")
"""Characters every encoder here writes as themselves: a value of them (most values) has
only its base64 forms besides itself, three encodings instead of a dozen."""
_URL_SAFE: Final = str.maketrans("+/", "-_")
_SHORTEST_BASE64: Final = 4
"""Shorter base64 pieces (of a value of one or two bytes) would hit ordinary text."""
_GRAM: Final = 4
_FEW: Final = 64
"""Up to this many forms, each is looked for in the whole text; past it, only those whose
first :data:`_GRAM` characters the text holds (9,999 values spell tens of thousands of
forms, and a look for each costs more than reading the text's every :data:`_GRAM`
characters once)."""


def secret_forms(secrets: Collection[str]) -> list[str]:
    """Each of ``secrets`` in each of its forms (see the module), longest first: a value
    inside another is replaced after it."""
    forms: set[str] = set()
    for value in secrets:
        if not value:
            continue
        forms.add(value)
        if not _PLAIN.issuperset(value):
            forms.update(_escaped(value))
        forms.update(_base64(value.encode("utf-8", "surrogatepass")))
    forms.discard("")
    return sorted(forms, key=len, reverse=True)


def _escaped(value: str) -> tuple[str, ...]:
    data = value.encode("utf-8", "surrogatepass")  # (a lone surrogate raises nothing)
    ascii_json = encode_basestring_ascii(value)[1:-1]
    quoted = quote(data, safe="")
    return (
        repr(value)[1:-1],
        ascii_json,
        encode_basestring(value)[1:-1],
        encode_basestring_ascii(ascii_json)[1:-1],  # a JSON text that is itself a JSON string
        value.encode("unicode_escape").decode("ascii"),
        repr(data)[2:-1],
        quoted,
        # (Each `%` of `quoted` starts an escape: a `%20` in the value is `%2520` there.)
        quoted.replace("%2F", "/"),  # a path: `/` kept
        quoted.replace("%20", "+"),  # a form or a query: a space as `+`
    )


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


def without_forms(text: str, forms: list[str]) -> str:
    """``text`` with each of ``forms`` (longest first, as :func:`secret_forms` lists them)
    replaced by :data:`REDACTED`, in that order."""
    if len(forms) > _FEW:
        grams = {text[i : i + _GRAM] for i in range(len(text) - _GRAM + 1)}
        forms = [form for form in forms if len(form) < _GRAM or form[:_GRAM] in grams]
    for form in forms:
        text = text.replace(form, REDACTED)
    return text
