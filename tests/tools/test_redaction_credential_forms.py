"""A remembered credential is redacted in the forms an upstream's echo or a library's
message spells it (URL-encoded twice, base64), and a credential field's bare value is
redacted across the backslash escapes in it."""

from __future__ import annotations

import base64
import json
import re
import time
from collections.abc import Callable
from urllib.parse import quote

import pytest

from airlock.tools._redact import REDACTED, redact, remember_secret

TOKEN = 'sk_live_Ab/Cd+Ef=Gh"Ij'


def _lower_hex(text: str) -> str:
    return re.sub("%[0-9A-F]{2}", lambda m: m[0].lower(), text)


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


# name: (the text, from the credential; what of it must not be kept)
FORMS: dict[str, tuple[Callable[[str], str], Callable[[str], str]]] = {
    "as written": (lambda t: f"got {t}", lambda t: t),
    "json in json": (lambda t: json.dumps(json.dumps({"t": t})), lambda t: t[8:]),
    "url-encoded": (lambda t: f"?t={quote(t, safe='')}", lambda t: quote(t, safe="")),
    "url-encoded twice": (
        lambda t: f"next=%2Fcb%3Ft%3D{quote(quote(t, safe=''), safe='')}",
        lambda t: quote(quote(t, safe=""), safe="")[8:],
    ),
    "url-encoded twice, lower-case digits": (
        lambda t: _lower_hex(quote(quote(t, safe=""), safe="")),
        lambda t: _lower_hex(quote(quote(t, safe=""), safe=""))[8:],
    ),
    "base64": (lambda t: f"token {_b64(t)} refused", _b64),
    "base64, unpadded": (lambda t: f"x={_b64(t).rstrip('=')}", lambda t: _b64(t).rstrip("=")),
    "base64, url-safe": (
        lambda t: base64.urlsafe_b64encode(t.encode()).decode(),
        lambda t: base64.urlsafe_b64encode(t.encode()).decode().rstrip("="),
    ),
    "bytes repr": (lambda t: repr(t.encode()), lambda t: t),
}


@pytest.mark.parametrize("form", FORMS)
def test_a_remembered_credential_is_redacted_in_each_form(form: str) -> None:
    remember_secret(TOKEN)
    said, hidden = FORMS[form]
    cleaned = redact(said(TOKEN))
    assert hidden(TOKEN) not in cleaned
    assert REDACTED in cleaned


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("password=hunter\\x32more", "more"),
        ("password=hunter\\\\more and", "more"),
        ('{"error": "token=abc\\u0041def"}', "def"),
        ("secret=abc\\tdef", "def"),
        ("api_key=ab\\/cd\\/ef", "ef"),
    ],
)
def test_a_bare_credential_value_is_redacted_across_its_escapes(text: str, kept: str) -> None:
    cleaned = redact(text)
    assert kept not in cleaned, cleaned
    assert REDACTED in cleaned


@pytest.mark.parametrize(
    ("text", "cleaned"),
    [
        ("password=hunter2\\nnext line", "password=[redacted]\\nnext line"),
        ("password=hunter2\\r\\nnext", "password=[redacted]\\r\\nnext"),
        ('{"a": "token=abc", "b": "def"}', '{"a": "token=[redacted]", "b": "def"}'),
    ],
)
def test_a_bare_credential_value_still_ends_at_an_escaped_line_break(
    text: str, cleaned: str
) -> None:
    assert redact(text) == cleaned


# name: (a remembered value whose first character is not a letter or digit; filler text)
SLOW: dict[str, tuple[str, str]] = {
    "slash first, a run of backslashes": ("/s3cr3t-value/", "\\"),
    "backslash first, a run of backslashes": ("\\s3cr3t-value2", "\\"),
    "plus first, backslash pairs": ("+s3cr3t-value3", "\\\\"),
}


@pytest.mark.parametrize("case", SLOW)
def test_a_remembered_credential_is_looked_for_in_one_pass_of_a_run_of_backslashes(
    case: str,
) -> None:
    value, filler = SLOW[case]
    remember_secret(value)
    text = "s3cr3t " + filler * (200_000 // len(filler))
    started = time.perf_counter()
    assert redact(text) == text
    # Each place in the run used to start a match that took the rest of it: 7 s for these
    # 200,000 backslashes, minutes for a megabyte.
    assert time.perf_counter() - started < 0.5
    escaped = "\\" * 3 + value.replace("-", "\\u002d")  # escaped: still found whole
    assert redact(f"a {escaped} b") == f"a {REDACTED} b"
