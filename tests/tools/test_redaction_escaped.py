"""A credential an upstream echoes escaped, as its JSON encoder writes it, is redacted whole:
PHP's ``\\/``, ``\\u002f``, .NET's ``\\u002B``, a body encoded twice, a percent-encoded copy."""

from __future__ import annotations

import json
import re
import time

import pytest

from airlock.tools import Credential, RestAdapter, ToolError, redact
from airlock.tools._redact import REDACTED, remember_secret

from .loopback import Reply, Upstream

pytestmark = pytest.mark.anyio

SECRET = "AbCd1234/efGH5678+ijKL9012/mnOP=="
remember_secret(SECRET)


def _pieces(secret: str) -> list[str]:
    """Runs of letters and digits long enough that finding one means part of it survived."""
    return [p for p in re.split(r"[^A-Za-z0-9]+", secret) if len(p) >= 4]


def _hex_escaped(secret: str, *, upper: bool) -> str:
    """Every character that is not a letter or digit as ``\\u00XX`` (what .NET writes)."""
    form = "\\u{:04X}" if upper else "\\u{:04x}"
    return "".join(c if c.isalnum() else form.format(ord(c)) for c in secret)


# (form, how an upstream wrote the secret)
ECHO_FORMS = [
    ("raw", SECRET),
    ("json.dumps", json.dumps(SECRET)[1:-1]),
    ("php slash", SECRET.replace("/", "\\/")),
    ("unicode slash lower", SECRET.replace("/", "\\u002f")),
    ("unicode slash upper", SECRET.replace("/", "\\u002F")),
    (".NET plus", SECRET.replace("+", "\\u002B")),
    ("every symbol as \\u00xx", _hex_escaped(SECRET, upper=False)),
    ("every symbol as \\u00XX", _hex_escaped(SECRET, upper=True)),
    ("php inside json again", json.dumps(SECRET.replace("/", "\\/"))[1:-1]),
    ("mixed slash forms", SECRET.replace("/", "\\/", 1).replace("/", "\\u002f", 1)),
    ("percent-encoded", SECRET.replace("/", "%2F").replace("+", "%2B").replace("=", "%3D")),
]


@pytest.mark.parametrize(("form", "echoed"), ECHO_FORMS, ids=[f[0] for f in ECHO_FORMS])
@pytest.mark.parametrize(
    "around",
    [
        '{{"error":"invalid token","received":"{}"}}',
        "got {} back",
        '{{"received":"Bearer {}"}}',
    ],
)
def test_a_remembered_credential_echoed_escaped_is_redacted_whole(
    form: str, echoed: str, around: str
) -> None:
    redacted = redact(around.format(echoed))
    assert REDACTED in redacted
    assert [p for p in _pieces(SECRET) if p in redacted] == [], redacted


# Bearer tokens never remembered here (another process's, or an old one): the rule alone.
BEARER_FORMS = [
    ("php slash", 'Bearer xY12\\/zW34+uV56\\/tS78"', 'Bearer [redacted]"'),
    ("unicode slash", "Bearer xY12\\u002fzW34\\u002FtS78 next", "Bearer [redacted] next"),
    (".NET plus", "bearer xY12\\u002BzW34 next", "Bearer [redacted] next"),
    ("an escaped quote ends it", 'Bearer xY12zW34\\" next', 'Bearer [redacted]\\" next'),
]


@pytest.mark.parametrize(
    ("form", "text", "expected"), BEARER_FORMS, ids=[f[0] for f in BEARER_FORMS]
)
def test_a_bearer_token_echoed_escaped_is_redacted_whole(
    form: str, text: str, expected: str
) -> None:
    assert redact(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "a\\/b and c\\u002fd",  # escapes with no credential near them
        "AbCd1234 alone",  # a piece of a credential is not the credential
        '{"path": "AbCd1234\\/other"}',
    ],
)
def test_escapes_without_a_credential_are_kept(text: str) -> None:
    assert redact(text) == text


def test_a_credential_with_no_symbols_has_no_escaped_form_to_miss() -> None:
    remember_secret("plainTokenAlnum123")
    assert redact('{"t":"plainTokenAlnum123"}') == '{"t":"[redacted]"}'


# Inputs that would take the escaped forms quadratic time if their backslashes backtracked.
ADVERSARIAL = {
    "a credential's start, then backslashes": "AbCd1234" + "\\" * 1_000_000,
    "starts, each with one backslash": "AbCd1234\\" * 100_000,
    "a bearer token of backslashes": "Bearer ab" + "\\" * 1_000_000,
    "bearer escapes cut short": "Bearer " + "\\u00" * 200_000,
    "percent signs": "AbCd1234" + "%" * 1_000_000,
    "a bearer token of markers": "Bearer ab" + REDACTED * 100_000,
    "a header value of markers cut short": "password=" + REDACTED[:-1] * 100_000,
}


@pytest.mark.parametrize("text", ADVERSARIAL.values(), ids=ADVERSARIAL.keys())
def test_escaped_forms_take_linear_time(text: str) -> None:
    started = time.perf_counter()
    redact(text)
    assert time.perf_counter() - started < 5  # (the bound of test_redaction's linear cases)


async def test_an_upstream_echoing_the_token_php_style_keeps_none_of_it(
    upstream: Upstream,
) -> None:
    token = "QrSt1234/uvWX5678+yzAB9012/cdEF"
    echoed = ("Bearer " + token).replace("/", "\\/")
    upstream.then(Reply(status=401, body=b'{"error":"bad","received":"' + echoed.encode() + b'"}'))
    cred = Credential.from_value(token, name="TOK")
    api = RestAdapter(upstream.base_url, credentials=[cred], max_attempts=1)
    with pytest.raises(ToolError) as caught:
        await api.get(("x",), credential=cred)
    detail = caught.value.detail or ""
    assert "received" in detail  # the body was kept for the operator...
    assert [p for p in _pieces(token) if p in detail] == [], detail  # ...without the token
