"""A credential header whose value holds a remembered credential is redacted whole: the
remembered value is replaced first (so that no rule stops inside one of its escaped forms),
and the header's rule then runs across the marker to the value's end, over whatever other
secret material the header carries after it."""

from __future__ import annotations

import pytest

from airlock.tools import redact
from airlock.tools._redact import REDACTED, remember_secret

REMEMBERED = "sess_4f9a8b7c6d5e"
ESCAPED = "AbCd1234/efGH5678+ijKL9012/mnOP=="
AFTER = ("9b1c77aa01fe", "rt_Q2hhbmdlTWU", "ZXh0cmFfc2VjcmV0X3BhcnQ", "ak_second_key_9911")
remember_secret(REMEMBERED)
remember_secret(ESCAPED)
PERCENT = ESCAPED.replace("/", "%2F").replace("+", "%2B").replace("=", "%3D")

# (case, text, what it must become)
CASES = [
    (
        "cookie",
        f"said: Cookie: sid={REMEMBERED}; csrf_state=9b1c77aa01fe; refresh=rt_Q2hhbmdlTWU",
        f"said: Cookie: {REDACTED}",
    ),
    (
        "set-cookie",
        f"Set-Cookie: sid={REMEMBERED}; refresh=rt_Q2hhbmdlTWU; Path=/\r\nAccept: */*",
        f"Set-Cookie: {REDACTED}\r\nAccept: */*",
    ),
    (
        "authorization basic",
        f"echo: Authorization: Basic {REMEMBERED} ZXh0cmFfc2VjcmV0X3BhcnQ=",
        f"echo: Authorization: {REDACTED}",
    ),
    (
        "authorization bearer",
        f"Authorization: Bearer {REMEMBERED}.ZXh0cmFfc2VjcmV0X3BhcnQ\nnext",
        f"Authorization: {REDACTED}\nnext",
    ),
    (
        "proxy-authorization",
        f"Proxy-Authorization: Basic {REMEMBERED}:rt_Q2hhbmdlTWU",
        f"Proxy-Authorization: {REDACTED}",
    ),
    (
        "x-api-key",
        f"x-api-key: {REMEMBERED},ak_second_key_9911",
        f"x-api-key: {REDACTED}",
    ),
    (
        "vendor api key",
        f"X-Goog-Api-Key: {REMEMBERED}ak_second_key_9911 <end>",
        f"X-Goog-Api-Key: {REDACTED}<end>",
    ),
    (
        "field name=value",
        f"client_secret={REMEMBERED}-ak_second_key_9911&page=2",
        f"client_secret={REDACTED}&page=2",
    ),
    (
        "query key=",
        f"GET /x?key={REMEMBERED}ak_second_key_9911&page=2",
        f"GET /x?key={REDACTED}&page=2",
    ),
    (
        "quoted json field",
        f'{{"password": "{REMEMBERED} rt_Q2hhbmdlTWU", "page": 2}}',
        f'{{"password": "{REDACTED}", "page": 2}}',
    ),
    (
        "percent-encoded remembered value in a header",
        f"x-api-key: {PERCENT}ak_second_key_9911",
        f"x-api-key: {REDACTED}",
    ),
    (
        "bearer token outside a header",
        f'{{"received":"Bearer {REMEMBERED}.ZXh0cmFfc2VjcmV0X3BhcnQ"}}',
        f'{{"received":"Bearer {REDACTED}"}}',
    ),
    (
        "bearer token escaped, then more of it",
        f"got Bearer {ESCAPED.replace('/', chr(92) + '/')}.rt_Q2hhbmdlTWU next",
        f"got Bearer {REDACTED} next",
    ),
    (
        "bearer token with the remembered value after its start",
        f"got bearer ak_second_key_9911{REMEMBERED}9b1c77aa01fe next",
        f"got Bearer {REDACTED} next",
    ),
    (
        "remembered value twice in a cookie",
        f"Cookie: a={REMEMBERED}; b=9b1c77aa01fe; c={REMEMBERED}; d=rt_Q2hhbmdlTWU",
        f"Cookie: {REDACTED}",
    ),
]


@pytest.mark.parametrize(("case", "text", "expected"), CASES, ids=[c[0] for c in CASES])
def test_a_header_holding_a_remembered_credential_is_redacted_to_its_end(
    case: str, text: str, expected: str
) -> None:
    redacted = redact(text)
    assert redacted == expected
    assert [piece for piece in AFTER if piece in redacted] == []


@pytest.mark.parametrize(
    "text",
    [
        "the list [redacted] and [x]",  # a marker outside any header is text like any other
        "items=[1, 2]",  # a bracket still ends nothing it did not end before
    ],
)
def test_text_without_a_credential_is_kept(text: str) -> None:
    assert redact(text) == text
