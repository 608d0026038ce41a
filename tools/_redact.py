"""What the host records, made safe to record: credentials redacted, control characters
escaped.

Text that reaches a log or the audit store often comes from elsewhere: an upstream's error
body (which may echo the request's headers back, ``Authorization`` included), an exception's
message, a tool name or a log line a sandboxed program sent. Two rules apply to all of it:

- :func:`redact` replaces every credential value this process has handed out
  (:func:`remember_secret`, which :meth:`Credential.reveal` calls), also as an encoder
  escapes it (``\\/``, ``\\u002f``, ``\\u002B``, ``%2F``, escaped twice) and in base64,
  the value of every credential-carrying header or field (:data:`SECRET_HEADERS`, also
  under a vendor's prefix such as ``X-Goog-Api-Key``, in ``Name: value``, ``"name":
  "value"`` and ``name=value`` forms), a ``key=`` query parameter, every ``Bearer`` token
  and every PEM private key with :data:`REDACTED`;
- :func:`escape_controls` writes every character that is not printable (newlines, carriage
  returns, tabs, ``ESC`` and the other C0/C1 controls, Unicode line and paragraph separators,
  bidirectional overrides) or that a reader cannot see (Unicode's default-ignorable
  characters: zero-width ones, variation selectors, Hangul fillers...; a blank braille cell)
  as a visible escape, so a recorded line can neither forge another line, nor drive an
  operator's terminal, nor make two different names read the same.

:func:`airlock.tools.audit_event` applies both to every event it makes; the REST adapter
applies :func:`redact` to the upstream text it keeps.
"""

from __future__ import annotations

import os
import re
import threading
from binascii import b2a_base64
from collections import OrderedDict
from dataclasses import dataclass
from typing import Final

__all__ = [
    "REDACTED",
    "SECRET_HEADERS",
    "escape_controls",
    "redact",
    "redaction_reach",
    "remember_secret",
]

REDACTED: Final = "[redacted]"
SECRET_HEADERS: Final = (
    "authorization",
    "proxy-authorization",
    "cookie",
    "set-cookie",
    "x-api-key",
    "api-key",
    "x-auth-token",
    "x-access-token",
    "x-csrf-token",
    "x-amz-security-token",
    "private-token",
    "access-token",
    "refresh-token",
    "id-token",
    "client-secret",
    "password",
    "token",
    "secret",
    "auth-token",
    "session-token",
    "private-key",
    "secret-key",
    "secret-access-key",
)
"""Headers, and fields of the same names (``-``, ``_`` or nothing between the words:
``api_key=...``, ``"accessToken": ...``), whose values are credentials; also under any
prefix (``X-Goog-Api-Key``, ``X-Vault-Token``, ``aws_secret_access_key``)."""
_MIN_SECRET_CHARS: Final = 6
"""Shorter values are not replaced wherever they occur (they would hit ordinary text); the
header rules still cover them."""
_REMEMBERED: Final = 1024
_FORMS_EACH: Final = 3
"""What a remembered value is kept as: itself and its base64 forms (see :func:`_base64_of`)."""
_URL_SAFE: Final = str.maketrans("+/", "-_")
_LONGEST_ESCAPE: Final = 8
"""The most characters an escaped form spells one character with (``\\\\u002f``, a
``\\u`` escape encoded twice; ``\\U0001f600``'s five digits)."""
_RULE_REACH: Final = 64
"""How far before a cut a credential rule's match may start and still be recognized only
whole (a ``Bearer`` with spaces and the first three characters of its token)."""

_HEADER_NAMES = "|".join(re.escape(h).replace("\\-", "[-_]?") for h in SECRET_HEADERS)
# `Name: value`, `"name": "value"`, `'name': 'value'`, `name=value`. A name is one of
# SECRET_HEADERS right before its separator, whatever precedes it (`X-Goog-Api-Key`,
# `githubToken`; not `token_count`), or `key` as a query parameter (`?key=`; elsewhere `key`
# names too much: `monkey=3`, sort keys). A quoted value runs to its closing quote, escaped
# quotes included (`"hun\"ter2"`); a bare one to the end of its line (also an escaped one),
# a quote, or the end of its object or query field, across any other escape (`\x32`, `\\`,
# `\"`) and across the marker of a remembered value already replaced in it (its `]` ends
# nothing: `Cookie: sid=[redacted]; refresh=...`).
# When in doubt, more is redacted rather than less. Linear time: no repetition here can
# split the same text in two ways.
_HEADER_VALUE: Final = re.compile(
    rf"(?i)(?P<name>(?<=[?&])key|{_HEADER_NAMES})"
    r"(?P<sep>[\"']?\s*[:=]\s*)"
    r"(?:(?P<quote>[\"'])(?:[^\"'\\\r\n]|\\.|(?!(?P=quote))[\"'])*"
    rf"|(?:[^\"'\r\n}}\]&\\<>]|\\[^nr\r\n]|(?<={re.escape(REDACTED[:-1])})\])+)"
)
# A token's characters, also as a JSON encoder may escape them: PHP writes `/` as `\/`, .NET
# `+` as `\u002B`, and a body encoded twice doubles the backslashes. The backslashes are taken
# possessively, so an escape that is not one of these (`\"`) ends the token in linear time.
# A remembered value replaced inside a token leaves its marker there, and the token runs
# across it (the marker's brackets are no token character: each text still splits one way).
_TOKEN_CHAR = r"(?:[A-Za-z0-9._~+/=-]|\\++(?:/|u00(?:2[bdef]|3d|5f|7e)))"
_MARKER = re.escape(REDACTED)
_BEARER: Final = re.compile(
    rf"(?i)\bbearer\s+(?:{_TOKEN_CHAR}{{4}}|{_MARKER})(?:{_TOKEN_CHAR}|{_MARKER})*"
)
# A PEM private key, wherever it appears: its body has no `-`, so it ends at the END line.
_PEM_KEY: Final = re.compile(
    r"-----BEGIN [A-Z ]{0,40}PRIVATE KEY-----[^-]*(?:-----END [A-Z ]{0,40}PRIVATE KEY-----)?"
)
_NAMED_ESCAPES: Final = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
# What str.isprintable() lets through that a reader still cannot see, so that two payees
# differing by one of them would print the same: Unicode's Default_Ignorable_Code_Point
# (DerivedCoreProperties.txt; the Cf and unassigned ones among them are not printable
# anyway, the grapheme joiner, Hangul fillers, Khmer inherent vowels and variation selectors
# are) and U+2800 BRAILLE PATTERN BLANK.
_UNSEEN: Final = re.compile(
    "[\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e"
    "\u2060-\u206f\u2800\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufff8"
    "\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff]"
)

_secrets: OrderedDict[str, _EscapedForm | None] = OrderedDict()
_secrets_lock = threading.Lock()


def _reset_in_child() -> None:
    # A thread of the parent may have held the lock when another forked: in the child that
    # thread is gone and the lock would stay held, so every redact() would block for ever.
    global _secrets_lock
    _secrets_lock = threading.Lock()


os.register_at_fork(after_in_child=_reset_in_child)


@dataclass(frozen=True)
class _EscapedForm:
    """A remembered value as an encoder may write it: each character but an ASCII letter or
    digit also as a backslash escape (``\\/``), a ``\\uXXXX`` escape in either case
    (``\\u002f``, ``\\u002B``), either of those escaped again (``\\\\/``), or ``%XX`` (also
    encoded twice: ``%252F``)."""

    pattern: re.Pattern[str]
    anchor: str
    """The value's longest run of letters and digits, which every form holds as it is: text
    without it is not searched."""
    reach: int
    """The most characters one of its forms spans (see :func:`redaction_reach`)."""

    @classmethod
    def of(cls, value: str) -> _EscapedForm | None:
        """``None`` for a value of letters and digits only: it has no other form."""
        if value.isascii() and value.isalnum():
            return None
        # Its first character starts no match inside a run of backslashes: where the run
        # starts, its backslashes are taken whole, and a start at each of the rest would
        # take them again (a text of backslashes would cost their number squared).
        pattern = _char_forms(value[0], first=True) + "".join(map(_char_forms, value[1:]))
        anchor = max(re.split(r"[^A-Za-z0-9]+", value), key=len)
        reach = sum(1 if c.isascii() and c.isalnum() else _LONGEST_ESCAPE for c in value)
        return cls(re.compile(pattern), anchor, reach)

    def sub(self, text: str) -> str:
        return self.pattern.sub(REDACTED, text) if self.anchor in text else text


def _char_forms(char: str, *, first: bool = False) -> str:
    """A pattern for ``char`` in each of its forms (see :class:`_EscapedForm`); ``first``,
    its escapes only where a run of backslashes starts."""
    if char.isascii() and char.isalnum():
        return char
    code = ord(char)
    hexa = _hex_any_case(code, 4)
    # The backslashes are taken possessively: a long run of them is one pass, not one a start.
    run = r"(?<!\\)\\++" if first else r"\\++"
    if char == "\\":  # escaped, it is only more backslashes
        forms = [rf"{run}(?:u{hexa})?"]
    else:
        forms = [re.escape(char), rf"{run}(?:{re.escape(char)}|u{hexa})"]
    if code < 0x80:  # `%2F`, and `%252F` (a URL in a URL: encoded twice)
        forms.append(f"%(?:25)?{_hex_any_case(code, 2)}")
    return f"(?:{'|'.join(forms)})"


def _hex_any_case(code: int, digits: int) -> str:
    return "".join(f"[{d}{d.upper()}]" if d.isalpha() else d for d in f"{code:0{digits}x}")


def remember_secret(value: str) -> None:
    """Remember a credential value so that :func:`redact` replaces it wherever it appears,
    also as a JSON encoder or a URL may escape it, and in base64 (the most recent
    :data:`_REMEMBERED` values are kept; values under :data:`_MIN_SECRET_CHARS` characters
    are left to the header rules)."""
    if len(value) < _MIN_SECRET_CHARS:
        return
    for form in (value, *_base64_of(value)):
        _remember(form)


def _base64_of(value: str) -> set[str]:
    """``value`` in base64, standard and URL-safe, without its padding (a token format may
    drop it, and what is left after the marker, ``==``, says nothing). Inside a larger blob
    (``user:password`` in a ``Basic`` header) it is spelled otherwise, and not matched."""
    encoded = b2a_base64(value.encode("utf-8", "surrogatepass"), newline=False)
    standard = encoded.decode("ascii").rstrip("=")
    return {standard, standard.translate(_URL_SAFE)}


def _remember(value: str) -> None:
    with _secrets_lock:
        if value in _secrets:
            _secrets.move_to_end(value)
            return
    form = _EscapedForm.of(value)  # (compiled once per value, outside the lock)
    with _secrets_lock:
        _secrets[value] = form
        _secrets.move_to_end(value)
        while len(_secrets) > _REMEMBERED * _FORMS_EACH:
            _secrets.popitem(last=False)


def redaction_reach() -> int:
    """How many characters a credential :func:`redact` replaces spans, at most: a remembered
    value in any of its forms (but one escaped with more backslashes than a value encoded
    twice has), or the start of a rule's match. Text cut that far past the end of what is
    kept holds no piece of one there that cleaning the text whole would have replaced."""
    with _secrets_lock:
        longest = max(
            (len(value) if form is None else form.reach for value, form in _secrets.items()),
            default=0,
        )
    return max(longest, _RULE_REACH)


def redact(text: str) -> str:
    """``text`` with every credential header's or field's value, every ``Bearer`` token and
    every remembered credential value, also escaped (``\\/``, ``\\u002f``, ``%2F``),
    replaced by :data:`REDACTED`."""
    if not text:
        return text
    with _secrets_lock:
        secrets = [s for s in _secrets if s in text]
        # An escaped copy needs a backslash or a percent sign; most text has neither.
        escapable = "\\" in text or "%" in text
        forms = [(s, f) for s, f in _secrets.items() if f is not None] if escapable else []
    # Remembered values first, each whole: a rule below that stops inside one (a Bearer
    # token at a `%2F`) would leave the rest in a form no longer recognizable as it.
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    for _, form in sorted(forms, key=lambda pair: len(pair[0]), reverse=True):
        text = form.sub(text)
    text = _HEADER_VALUE.sub(lambda m: f"{m['name']}{m['sep']}{m['quote'] or ''}{REDACTED}", text)
    text = _BEARER.sub(f"Bearer {REDACTED}", text)
    return _PEM_KEY.sub(REDACTED, text)


def escape_controls(text: str, *, keep: frozenset[str] = frozenset()) -> str:
    """``text`` on one line: every character that is not printable, or that a reader cannot
    see (default-ignorable, blank), is written as an escape (``\\n``, ``\\x1b``,
    ``\\u2028``, ``\\u034f``...), so it can neither start a line, nor reach a terminal as a
    control sequence, nor pass unseen; but those in ``keep`` (a block of several lines keeps
    ``\\n`` and ``\\t``)."""
    # ASCII has no character _UNSEEN matches: most text is cleared by two C calls.
    if text.isprintable() and (text.isascii() or _UNSEEN.search(text) is None):
        return text
    return "".join(c if c in keep else _escape(c) for c in text)


def _escape(char: str) -> str:
    if char.isprintable() and _UNSEEN.match(char) is None:
        return char
    named = _NAMED_ESCAPES.get(char)
    if named is not None:
        return named
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"
