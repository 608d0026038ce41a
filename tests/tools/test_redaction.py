"""Nothing secret or forged reaches what the host records: credentials are redacted and
control characters escaped, wherever the text came from.

The end-to-end cases run a real registry over a REST adapter whose upstream echoes the
request (headers included) in its error bodies, and read the audit store back from disk.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Annotated

import httpx
import pytest
from pydantic import BaseModel, Field

from airlock.policies import Grant, Principal, read
from airlock.tools import (
    AuditLog,
    CallContext,
    Credential,
    Registry,
    RunAuthority,
    SQLiteAuditStore,
    ToolError,
    _redact,
    audit_event,
    error_for_status,
    escape_controls,
    redact,
)
from airlock.tools._redact import REDACTED, SECRET_HEADERS, remember_secret
from tests.tools.forked_child import child_exit_code

pytestmark = pytest.mark.anyio
TOKEN = "tok_echoed_back_7f3a9c21"
CRED = Credential.from_value(TOKEN, name="ECHO_TOKEN")
ALICE = Principal(user_id="alice", tenant_id="acme", scopes=frozenset({"echo.read"}))
GRANT = Grant(scopes=frozenset({"echo.read"}), effects=(read("echo:**"),))


# -- redact: one row per header and per form a credential is written in -------------------


def _header_forms(header: str) -> list[str]:
    """A header's credential as an upstream might echo it: raw, in JSON, as a Python repr,
    in a query string, with the name in another case or with ``_`` for ``-``."""
    value = "s3cr3t-" + header.replace("-", "")
    name = header.title()
    return [
        f"HTTP/1.1 400\r\n{name}: {value}\r\nAccept: */*",
        json.dumps({"headers": {header: value, "accept": "*/*"}}),
        repr({name: value}),
        f"GET /x?{header.replace('-', '_')}={value}&page=2",
        f"{header.upper()}={value}",
        repr(f"line one\r\n{name}: {value}\r\n"),  # a body kept as repr: escaped newlines
    ]


HEADER_CASES = [(h, text) for h in SECRET_HEADERS for text in _header_forms(h)]


@pytest.mark.parametrize(("header", "text"), HEADER_CASES)
def test_every_credential_header_is_redacted_in_every_form(header: str, text: str) -> None:
    secret = "s3cr3t-" + header.replace("-", "")
    redacted = redact(text)
    assert secret not in redacted
    assert REDACTED in redacted
    # The operator still sees which header it was, and what came around it.
    assert header.replace("-", "") in re.sub(r"[-_]", "", redacted.lower())
    for around in ("*/*", "page=2", "line one"):
        assert (around in text) == (around in redacted)


@pytest.mark.parametrize(
    "text",
    [
        "Authorization: Bearer eyJhbGciOi.payload.sig",
        "upstream said: bearer abc123def456 was refused",
        '{"error": "invalid token", "token_type": "Bearer", "got": "Bearer zzzz9999"}',
    ],
)
def test_bearer_tokens_are_redacted_anywhere(text: str) -> None:
    redacted = redact(text)
    assert re.search(r"(?i)bearer\s+(?!\[redacted\])\w", redacted) is None, redacted


def test_a_remembered_credential_value_is_redacted_wherever_it_appears() -> None:
    value = "tok_remembered_19e0c4"
    remember_secret(value)
    text = f"echo: {value}; again {value}{value}; user-agent: x"
    assert value not in redact(text)
    assert redact(text).count(REDACTED) == 3
    assert "user-agent: x" in redact(text)


def test_revealing_a_credential_remembers_it() -> None:
    value = "tok_revealed_only_8b1d"
    assert value in redact(f"note {value}")
    assert Credential.from_value(value, name="REVEALED").reveal() == value
    assert value not in redact(f"note {value}")


# (case, text an upstream or exception wrote, what is recorded): each credential whole.
SECRET_CASES = [
    ("vendor api key header", "X-Goog-Api-Key: AIzaSyD-1234", "X-Goog-Api-Key: [redacted]"),
    (
        "vendor access token header",
        "X-Shopify-Access-Token: shpat_1234\r\nAccept: */*",
        "X-Shopify-Access-Token: [redacted]\r\nAccept: */*",
    ),
    ("vendor token header", "X-Vault-Token: hvs.ABCDEF", "X-Vault-Token: [redacted]"),
    ("github token header", "x-github-token: ghp_ABCDEF", "x-github-token: [redacted]"),
    ("json token", '{"token": "tok_98765", "n": 1}', '{"token": "[redacted]", "n": 1}'),
    ("json secret", '{"secret": "whsec_98765"}', '{"secret": "[redacted]"}'),
    ("query apikey", "GET /v1/c?apikey=k_1&page=2", "GET /v1/c?apikey=[redacted]&page=2"),
    ("query key", "GET /v1/x?key=AIza-1", "GET /v1/x?key=[redacted]"),
    ("query key after another", "GET /x?a=1&key=AIza-1", "GET /x?a=1&key=[redacted]"),
    (
        "json value with an escaped quote",
        '{"password": "hun\\"ter2-s3cr3t", "user": "bob"}',
        '{"password": "[redacted]", "user": "bob"}',
    ),
    (
        "repr value with an escaped quote",
        "{'secret': 'it\\'s-s3cr3t', 'n': 1}",
        "{'secret': '[redacted]', 'n': 1}",
    ),
    (
        "a quote of the other kind inside",
        '{"password": "a\'b}c&d"}',
        '{"password": "[redacted]"}',
    ),
    ("camelCase private key", '{"privateKey": "MIIEv-s3cr3t"}', '{"privateKey": "[redacted]"}'),
    ("camelCase vendor token", "githubToken=ghp_1 next", "githubToken=[redacted]"),
    (
        "aws secret access key",
        "aws_secret_access_key=wJalrXUtnFEMI/K7MDENG",
        "aws_secret_access_key=[redacted]",
    ),
    ("stripe secret key", "STRIPE_SECRET_KEY=sk_live_1&x=1", "STRIPE_SECRET_KEY=[redacted]&x=1"),
    (
        "header quoted inside a JSON string",
        '{"detail": "password: \\"abc\\" rejected"}',
        '{"detail": "password: [redacted]"}',
    ),
    (
        "PEM private key",
        "got -----BEGIN RSA PRIVATE KEY-----\\nMIIEv\\n-----END RSA PRIVATE KEY----- back",
        "got [redacted] back",
    ),
]


@pytest.mark.parametrize(
    ("case", "text", "expected"), SECRET_CASES, ids=[c[0] for c in SECRET_CASES]
)
def test_a_credential_in_a_common_format_is_redacted_whole(
    case: str, text: str, expected: str
) -> None:
    assert redact(text) == expected


# Words that hold a credential's name, or fields that count or describe credentials.
ORDINARY = [
    "monkey=3",
    "token_count=5",
    '{"max_tokens": 100, "tokens": 7}',
    '{"token_type": "Bearer"}',
    "keyboard: us",
    "a key=value pair",
    '{"key": "invoices/2024.pdf"}',
    "GET /x?monkey=1&keyboard=us&page=2",
    "the secretary: Bob",
    "secrets: 3",
    "aws_access_key_id=AKIA1234",
    "invalid token",
]


@pytest.mark.parametrize("text", ORDINARY)
def test_words_that_only_look_like_credential_names_are_kept(text: str) -> None:
    assert redact(text) == text


# Inputs that would take a backtracking pattern quadratic (or exponential) time.
ADVERSARIAL = {
    "one long word": "a" * 1_000_000,
    "hyphenated word": "a-" * 500_000,
    "names without separator": "x-api-key" * 110_000,
    "unclosed quoted value of backslashes": 'password: "' + "\\" * 1_000_000,
    "bare value of escaped quotes": "token: " + '\\"' * 500_000,
    "name then spaces": "password:" + " " * 1_000_000,
    "separators only": "password=" * 110_000,
    "query keys": "?key" * 250_000,
    "PEM with no end": "-----BEGIN PRIVATE KEY-----" + "A" * 1_000_000,
    "PEM begins": "-----BEGIN " * 90_000,
}


@pytest.mark.parametrize("text", ADVERSARIAL.values(), ids=ADVERSARIAL.keys())
def test_redaction_takes_linear_time(text: str) -> None:
    started = time.perf_counter()
    redact(text)
    assert time.perf_counter() - started < 5  # about 0.5 s; a backtracking pattern takes hours


def test_redaction_works_in_a_child_forked_while_the_lock_was_held() -> None:
    # Another thread of the parent was inside remember_secret() when a thread forked: in the
    # child that thread is gone, and the lock it held must not stay held.
    with _redact._secrets_lock:
        pid = os.fork()
        if pid == 0:  # the child: report by exit status, never return into pytest
            try:
                remember_secret("tok_in_the_child_3c9e")
                os._exit(0 if redact("x tok_in_the_child_3c9e") == f"x {REDACTED}" else 1)
            finally:
                os._exit(2)
    assert (
        child_exit_code(pid, hung="redact() in the forked child blocked on the inherited lock") == 0
    )


def test_ordinary_text_is_left_alone() -> None:
    for text in (
        'GET /v1/invoices/inv_1 -> 404; body \'{"error":"not found"}\'',
        "credential 'BILLING_TOKEN' is missing or malformed",
        "the tool failed (ValueError)",
        "",
    ):
        assert redact(text) == text


# -- escape_controls: every way to forge a line or drive a terminal ------------------------

CONTROL_CASES = [
    ("newline", "x\nFAKE LINE", "x\\nFAKE LINE"),
    ("carriage_return", "ok\rFORGED", "ok\\rFORGED"),
    ("terminal_colour", "x\x1b[31mred", "x\\x1b[31mred"),
    ("osc_title", "\x1b]0;owned\x07", "\\x1b]0;owned\\x07"),
    ("tab", "a\tb", "a\\tb"),
    ("nul", "a\x00b", "a\\x00b"),
    ("c1_csi", "a\x9b31mb", "a\\x9b31mb"),
    ("delete", "a\x7fb", "a\\x7fb"),
    ("line_separator", "a\u2028b", "a\\u2028b"),
    ("paragraph_separator", "a\u2029b", "a\\u2029b"),
    ("bidi_override", "a\u202eb", "a\\u202eb"),
    ("next_line", "a\x85b", "a\\x85b"),
    ("zero_width_and_joiners", "a\u200b\u200c\u200d\u2060b", "a\\u200b\\u200c\\u200d\\u2060b"),
    ("bidi_marks_and_isolates", "a\u200e\u061c\u2066b", "a\\u200e\\u061c\\u2066b"),
    # str.isprintable() counts these as printable; a reader sees nothing of them.
    ("grapheme_joiner", "a\u034fb", "a\\u034fb"),
    ("hangul_fillers", "a\u115f\u1160\u3164\uffa0b", "a\\u115f\\u1160\\u3164\\uffa0b"),
    ("khmer_inherent_vowels", "a\u17b4\u17b5b", "a\\u17b4\\u17b5b"),
    ("mongolian_selectors", "a\u180b\u180fb", "a\\u180b\\u180fb"),
    ("variation_selectors", "a\ufe00\ufe0fb", "a\\ufe00\\ufe0fb"),
    ("variation_selector_supplement", "a\U000e0100b", "a\\U000e0100b"),
    ("unassigned_tag_plane", "a\U000e0fffb", "a\\U000e0fffb"),
    ("blank_braille_cell", "a\u2800b", "a\\u2800b"),
    ("printable_kept", "é ü — 名前 ok", "é ü — 名前 ok"),
    ("visible_symbols_kept", "ok ✔ ⠁", "ok ✔ ⠁"),
]


@pytest.mark.parametrize(
    ("name", "text", "expected"), CONTROL_CASES, ids=[c[0] for c in CONTROL_CASES]
)
def test_control_characters_are_escaped(name: str, text: str, expected: str) -> None:
    escaped = escape_controls(text)
    assert escaped == expected
    assert escaped.isprintable()


def test_the_audit_factory_redacts_and_escapes() -> None:
    remember_secret(TOKEN)
    ctx = RunAuthority(principal=ALICE, grant=GRANT).context("code", "c1")
    event = audit_event(
        ctx,
        "echo_thing_get\n2026-01-01 INFO forged\x1b[2J",
        stage="execute",
        decision="allow",
        rule="default",
        outcome="error",
        code="upstream",
        effects=["read(echo:thing/a\nb)"],
        detail=f"GET /t -> 500; body 'Authorization: Bearer {TOKEN}\nX-Api-Key: k-1'",
    )
    assert event.tool == "echo_thing_get\\n2026-01-01 INFO forged\\x1b[2J"
    assert event.effects == ("read(echo:thing/a\\nb)",)
    assert event.detail is not None
    assert TOKEN not in event.detail
    assert "k-1" not in event.detail
    assert event.detail.isprintable()


# Characters str.isprintable() lets through that a reader cannot see: every field of an
# audit event shows them as escapes, not only the detail. (effects: one, or several.)
UNSEEN_IN_FIELDS = [
    ("hangul_filler", "\u3164", "\\u3164"),
    ("variation_selector", "\ufe0f", "\\ufe0f"),
    ("grapheme_joiner", "\u034f", "\\u034f"),
    ("blank_braille_cell", "\u2800", "\\u2800"),
    ("variation_selector_supplement", "\U000e0100", "\\U000e0100"),
]


@pytest.mark.parametrize("effects", [1, 2], ids=["one_effect", "two_effects"])
@pytest.mark.parametrize(
    ("name", "char", "shown"), UNSEEN_IN_FIELDS, ids=[c[0] for c in UNSEEN_IN_FIELDS]
)
def test_the_audit_factory_escapes_what_a_reader_cannot_see_in_every_field(
    name: str, char: str, shown: str, effects: int
) -> None:
    ctx = RunAuthority(principal=ALICE, grant=GRANT).context("code", "c1")
    event = audit_event(
        ctx,
        f"echo_get{char}",
        stage="execute",
        decision="allow",
        rule=f"r{char}",
        outcome="ok",
        effects=[f"read(echo:thing/al{char}ice)"] * effects,
        detail=f"to al{char}ice",
    )
    assert event.tool == f"echo_get{shown}"
    assert event.rule == f"r{shown}"
    assert event.effects == (f"read(echo:thing/al{shown}ice)",) * effects
    assert event.detail == f"to al{shown}ice"


# The fast path for clean text must give what the character-by-character one gives.
@pytest.mark.parametrize(
    "text",
    ["plain ascii 402: card_declined", "", "é ü — 名前 ok", "ok ✔ ⠁", "a\u3164b", "a\nb\u200b"],
)
def test_clean_text_is_escaped_as_each_character_would_be(text: str) -> None:
    from airlock.tools._redact import _escape

    assert escape_controls(text) == "".join(map(_escape, text))


# -- end to end: an upstream that echoes the request, the audit store read back ------------


class Thing(BaseModel):
    thing_id: str


def _echo(request: httpx.Request) -> httpx.Response:
    """An upstream that answers every request with an error whose body is the request."""
    echoed = {"headers": dict(sorted(request.headers.items())), "url": str(request.url)}
    status = int(request.url.params.get("status", "500"))
    raw = "".join(f"{k}: {v}\r\n" for k, v in request.headers.items())
    body = json.dumps(echoed) if status != 502 else raw
    return httpx.Response(status, content=body.encode())


def _registry(tmp_path: Path) -> Registry:
    from airlock.tools import RestAdapter

    api = RestAdapter(
        "http://echo.test/v1",
        credentials=[CRED],
        transport=httpx.MockTransport(_echo),
        max_attempts=1,
    )
    registry = Registry(audit=AuditLog(SQLiteAuditStore(tmp_path / "audit.db")))

    @registry.tool(effects=[read("echo:thing/{thing_id}")], scope="echo.read",
                   callers={"direct", "code"}, destinations=api.destinations,
                   credentials=api.credentials)  # fmt: skip
    async def echo_thing_get(
        ctx: CallContext,
        thing_id: Annotated[str, Field(pattern=r"^t_[0-9]{1,4}$", max_length=6)],
        status: Annotated[int, Field(ge=400, le=599)],
    ) -> Thing:
        """Fetch a thing from the echoing upstream. Use it to test redaction.
        It does not return anything else."""
        data = await api.get(
            ["things", thing_id], credential=CRED, params={"status": status}, deadline=ctx.deadline
        )
        return Thing.model_validate(data)

    return registry


@pytest.mark.parametrize("status", [400, 401, 404, 409, 429, 500, 502, 503])
async def test_an_upstream_echoing_the_request_leaves_no_credential_in_the_audit_store(
    tmp_path: Path, status: int
) -> None:
    registry = _registry(tmp_path)
    authority = RunAuthority(principal=ALICE, grant=GRANT)
    with pytest.raises(ToolError):
        await registry.call(
            "echo_thing_get", {"thing_id": "t_1", "status": status}, authority.context("code", "c1")
        )
    registry.audit.close()
    # Read back from disk, as `airlock audit` would.
    store = SQLiteAuditStore(tmp_path / "audit.db", readonly=True)
    try:
        events = store.query(run_id=authority.run_id)
    finally:
        store.close()
    assert events, "the call was not recorded"
    details = " ".join(e.detail or "" for e in events)
    assert "body" in details  # the upstream's answer was kept for the operator...
    assert TOKEN not in details  # ...without the credential it echoed
    raw = (tmp_path / "audit.db").read_bytes()
    for wal in tmp_path.glob("audit.db*"):
        raw += wal.read_bytes()
    assert TOKEN.encode() not in raw


def test_error_for_status_redacts_whatever_detail_it_is_given() -> None:
    error = error_for_status(
        500, method="GET", detail="GET /x -> 500; body 'Proxy-Authorization: Basic dXNlcjpwdw=='"
    )
    assert error.detail is not None
    assert "dXNlcjpwdw==" not in error.detail
