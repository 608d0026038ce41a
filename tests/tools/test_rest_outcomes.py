"""What the REST adapter says happened: a write's outcome across its attempts, credentials
and headers refused before anything is sent, and every answer as a tool error."""

from __future__ import annotations

from pathlib import Path

import pytest

from airlock.tools import (
    Credential,
    DeniedError,
    InvalidInputError,
    RestAdapter,
    ToolError,
    UpstreamError,
    route_path,
)

from .loopback import Reply, Upstream

pytestmark = pytest.mark.anyio


def adapter(upstream: Upstream, **options: float) -> RestAdapter:
    settings: dict[str, float] = {"timeout": 2.0, "backoff": 0.01} | options
    return RestAdapter(upstream.base_url, credentials=["T"], **settings)  # type: ignore[arg-type]


# -- a write's outcome over its attempts -----------------------------------------------------

LATER = [
    pytest.param(409, {}, "conflict", id="409-key-used"),
    pytest.param(422, {}, "invalid_input", id="422-already-refunded"),
    pytest.param(400, {}, "invalid_input", id="400"),
    pytest.param(404, {}, "not_found", id="404"),
    pytest.param(401, {}, "denied", id="401"),
    pytest.param(429, {"retry-after": "3600"}, "rate_limited", id="429-long-wait"),
    pytest.param(302, {"location": "/refunds/re_1"}, "upstream", id="302"),
]


@pytest.mark.parametrize("first", [502, 503, 504])
@pytest.mark.parametrize(("then", "headers", "code"), LATER)
async def test_a_write_refused_after_an_undecided_attempt_stays_unknown(
    upstream: Upstream, first: int, then: int, headers: dict[str, str], code: str
) -> None:
    upstream.then(Reply(status=first), Reply(status=then, headers=headers))
    with pytest.raises(ToolError) as caught:
        await adapter(upstream).post(("refunds",), credential=None, body={}, idempotency_key="k1")
    assert caught.value.code == code
    assert caught.value.outcome == "unknown"  # the first attempt may have acted
    assert "earlier attempt" in (caught.value.detail or "")
    assert len(upstream.seen) == 2


@pytest.mark.parametrize(
    ("method", "first", "key"),
    [
        pytest.param("GET", 502, None, id="get-after-502"),  # a read never acted
        pytest.param("POST", 429, "k1", id="post-after-429"),  # a 429 is a definite no
    ],
)
async def test_a_refusal_after_a_definite_attempt_is_definite(
    upstream: Upstream, method: str, first: int, key: str | None
) -> None:
    upstream.then(Reply(status=first, headers={"retry-after": "0"}), Reply(status=409))
    with pytest.raises(ToolError) as caught:
        await adapter(upstream).request(
            method, ("refunds",), credential=None, body={}, idempotency_key=key
        )
    assert (caught.value.code, caught.value.outcome) == ("conflict", "error")
    assert len(upstream.seen) == 2


@pytest.mark.parametrize("status", [300, 301, 302, 303, 304, 307, 308])
@pytest.mark.parametrize(("method", "outcome"), [("POST", "unknown"), ("GET", "error")])
async def test_a_redirect_answered_to_a_write_leaves_its_outcome_unknown(
    upstream: Upstream, status: int, method: str, outcome: str
) -> None:
    upstream.then(Reply(status=status, headers={"location": "/refunds/re_1"}))
    with pytest.raises(UpstreamError) as caught:
        await adapter(upstream).request(
            method, ("refunds",), credential=None, body={}, idempotency_key="k1"
        )
    assert caught.value.outcome == outcome
    assert "redirect" in caught.value.message
    assert len(upstream.seen) == 1  # never resent, keyed or not


# -- credentials and headers refused before anything is sent -----------------------------

BAD_VALUES = [
    pytest.param(f"live_AAAA{c}SECRETSUFFIX_123456", id=f"{ord(c):#06x}")
    for c in ["\x00", "\x0b", "\x1b", "\x7f", "\t", " ", "\ufeff", "\u00e9", "\u2028", "\ud800"]
] + [
    pytest.param("\ufeffSECRETSUFFIX_123456", id="bom"),
    pytest.param("SECRETSUFFIX_" + "x" * 8_192, id="too-long"),
]


@pytest.mark.parametrize("value", BAD_VALUES)
@pytest.mark.parametrize("method", ["GET", "POST"])
async def test_a_malformed_credential_is_refused_unseen(
    upstream: Upstream, value: str, method: str
) -> None:
    with pytest.raises(DeniedError) as caught:
        await adapter(upstream).request(
            method,
            ("x",),
            credential=Credential.from_value(value, name="T"),
            body={},
            idempotency_key="k",
        )
    assert caught.value.outcome == "error"
    assert "malformed" in (caught.value.detail or "")
    assert "SECRETSUFFIX" not in f"{caught.value} {caught.value.detail}"
    assert upstream.seen == []


def test_every_visible_ascii_character_is_a_credential_character() -> None:
    value = "".join(chr(c) for c in range(0x21, 0x7F))
    assert Credential.from_value(value, name="T").reveal() == value


async def test_a_secrets_file_saved_with_a_byte_order_mark_is_named_as_such(
    upstream: Upstream, tmp_path: Path
) -> None:
    secret = tmp_path / "token"
    secret.write_text("s3cr3t-token-value-123\n", encoding="utf-8-sig")
    with pytest.raises(DeniedError) as caught:
        await adapter(upstream).get(("x",), credential=Credential.from_file(secret, name="T"))
    assert "byte-order mark" in (caught.value.detail or "")
    assert "s3cr3t" not in f"{caught.value} {caught.value.detail}"
    assert upstream.seen == []


@pytest.mark.parametrize("key", ["k\x0bSECRETSUFFIX", "k\x00SECRETSUFFIX", "k\u00e9SECRETSUFFIX"])
async def test_a_header_the_http_library_refuses_sends_nothing(
    upstream: Upstream, key: str
) -> None:
    with pytest.raises(UpstreamError) as caught:
        await adapter(upstream).post(("x",), credential=None, body={}, idempotency_key=key)
    assert caught.value.outcome == "error"  # nothing was sent: definite, not ambiguous
    assert "SECRETSUFFIX" not in f"{caught.value} {caught.value.detail}"
    assert upstream.seen == []


# -- every answer is a tool error ------------------------------------------------------------

ANSWERS = [
    pytest.param(Reply(body=b"[" * 100_000), "upstream", id="deep-array"),
    pytest.param(Reply(body=b'{"a":' * 100_000), "upstream", id="deep-object"),
    pytest.param(Reply(body=b'{"x": NaN}'), "upstream", id="nan"),
    pytest.param(Reply(body=b'{"x": -Infinity}'), "upstream", id="infinity"),
    pytest.param(Reply(body=b'{"x": 1e999}'), "upstream", id="overflow"),
    pytest.param(Reply(status=404, headers={"location": "http://[::1"}), "not_found", id="404"),
    pytest.param(Reply(status=300, headers={"location": "http://[::1"}), "upstream", id="300"),
    pytest.param(Reply(status=503, headers={"location": "http://[::1"}), "upstream", id="503"),
    pytest.param(Reply(status=409, headers={"location": "http://[::1"}), "conflict", id="409"),
]


@pytest.mark.parametrize(("reply", "code"), ANSWERS)
@pytest.mark.parametrize("method", ["GET", "POST"])
async def test_every_answer_is_a_tool_error(
    upstream: Upstream, reply: Reply, code: str, method: str
) -> None:
    upstream.then(reply)
    with pytest.raises(ToolError) as caught:
        await adapter(upstream, max_attempts=1).request(
            method, ("x",), credential=None, body={}, idempotency_key="k"
        )
    assert caught.value.code == code


@pytest.mark.parametrize(
    ("location", "named"),
    [
        ("//evil.example/steal", "evil.example"),
        ("http://other.example/x", "other.example"),
        ("/v1/elsewhere", "127.0.0.1"),
        ("elsewhere", "127.0.0.1"),
        ("http://[::1", "(a malformed URL)"),
    ],
)
async def test_the_log_names_the_host_a_location_points_to(
    upstream: Upstream, location: str, named: str
) -> None:
    upstream.then(Reply(status=404, headers={"location": location}))
    with pytest.raises(ToolError) as caught:
        await adapter(upstream, max_attempts=1).get(("x",), credential=None)
    assert f"redirect to {named} refused" in (caught.value.detail or "")


@pytest.mark.parametrize("value", ["\ud800", "a\udfffb"])
async def test_a_value_that_cannot_be_encoded_is_invalid_input(
    upstream: Upstream, value: str
) -> None:
    with pytest.raises(InvalidInputError):
        route_path("items", value)
    with pytest.raises(InvalidInputError):
        await adapter(upstream).get(("items", value), credential=None)
    with pytest.raises(InvalidInputError):
        await adapter(upstream).get(("items",), credential=None, params={"q": value})
    assert upstream.seen == []
