"""The REST adapter against real HTTP servers on loopback: one test (or table) per rule."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from airlock.tools import (
    ERROR_CODES,
    AmbiguousWriteError,
    ConflictError,
    Credential,
    DeniedError,
    InvalidInputError,
    LimitExceededError,
    NotFoundError,
    RateLimitedError,
    RestAdapter,
    ResultTooLargeError,
    ToolError,
    ToolTimeoutError,
    UpstreamError,
    error_for_status,
    route_path,
)
from airlock.tools._rest_errors import parse_retry_after
from airlock.tools._rest_paths import (
    CONTROL_CHARACTERS,
    DOT_SEGMENTS,
    MAX_SEGMENT,
    origin_of,
)

from .loopback import Reply, Upstream, serve

pytestmark = pytest.mark.anyio
TOKEN = "tok_secret_value_123"
CRED = Credential.from_value(TOKEN, name="UPSTREAM_TOKEN")


@pytest.fixture(scope="module")
def _elsewhere() -> Iterator[Upstream]:
    with serve(Upstream()) as up:
        yield up


@pytest.fixture
def elsewhere(_elsewhere: Upstream) -> Upstream:
    _elsewhere.script.clear()
    _elsewhere.seen.clear()
    return _elsewhere


def adapter(
    upstream: Upstream, *, credentials: Sequence[str | Credential] = (CRED,), **options: float
) -> RestAdapter:
    settings: dict[str, float] = {"timeout": 2.0, "backoff": 0.01} | options
    url = upstream.base_url + "/v1"
    return RestAdapter(url, credentials=credentials, **settings)  # type: ignore[arg-type]


# -- status mapping, in one place ----------------------------------------------------------

EXPECTED = {
    400: InvalidInputError,
    422: InvalidInputError,
    401: DeniedError,
    403: DeniedError,
    404: NotFoundError,
    410: NotFoundError,
    409: ConflictError,
    412: ConflictError,
    429: RateLimitedError,
}


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_every_error_status_maps_to_one_stable_code(method: str) -> None:
    for status in [*range(100, 200), *range(300, 600)]:
        error = error_for_status(status, method=method, detail="d")
        assert error.code in ERROR_CODES
        expected = EXPECTED.get(status, UpstreamError)
        assert type(error) is expected, status
        # a write's 5xx or 3xx (a 303 "created, see over there") may have acted; every
        # other answer is a definite refusal
        unknown = method == "POST" and (status >= 500 or 300 <= status <= 399)
        assert error.outcome == ("unknown" if unknown else "error"), status
    for status in (200, 204, 299, 99, 600):
        with pytest.raises(ValueError, match="not an HTTP error status"):
            error_for_status(status, method=method, detail="d")


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (400, "invalid_input"),
        (422, "invalid_input"),
        (401, "denied"),
        (403, "denied"),
        (404, "not_found"),
        (409, "conflict"),
        (429, "rate_limited"),
        (500, "upstream"),
        (501, "upstream"),
        (418, "upstream"),
    ],
)
async def test_statuses_from_a_real_server(upstream: Upstream, status: int, code: str) -> None:
    upstream.then(Reply(status=status, body={"error": "secret internals"}))
    with pytest.raises(ToolError) as failure:
        await adapter(upstream, max_attempts=1).get(("invoices", "inv_1"), credential=CRED)
    assert failure.value.code == code
    assert "secret internals" not in failure.value.message  # the body goes to the log only
    assert "secret internals" in (failure.value.detail or "")


def test_retry_after_is_read_as_seconds_or_a_date() -> None:
    assert parse_retry_after("2") == 2.0
    assert parse_retry_after("0.5") == 0.5
    assert parse_retry_after("-3") == 0.0
    assert parse_retry_after("soon") is None
    assert parse_retry_after(None) is None
    date = parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470.0)
    assert date == 10.0


# -- credential and redirects ------------------------------------------------------------


async def test_the_token_is_sent_as_bearer_and_never_shown(upstream: Upstream) -> None:
    rest = adapter(upstream)
    assert await rest.get(("invoices", "inv_1"), credential=CRED) == {
        "raw_path": "/v1/invoices/inv_1"
    }
    assert upstream.seen[0].headers["authorization"] == f"Bearer {TOKEN}"
    upstream.then(Reply(status=500))
    with pytest.raises(ToolError) as failure:
        await adapter(upstream, max_attempts=1).get(("x",), credential=CRED)
    for text in (repr(CRED), str(CRED), repr(rest), str(failure.value), failure.value.detail):
        assert TOKEN not in (text or "")
    assert repr(CRED) == "Credential('UPSTREAM_TOKEN')"


async def test_credentials_come_from_the_environment_or_a_file(
    upstream: Upstream, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REST_TEST_TOKEN", "from-env")
    secret = tmp_path / "token"
    secret.write_text("from-file\n")
    api = adapter(upstream, credentials=["REST_TEST_TOKEN", "F", "REST_TEST_UNSET", "M"])
    await api.get(("a",), credential=Credential.from_env("REST_TEST_TOKEN"))
    await api.get(("a",), credential=Credential.from_file(secret, name="F"))
    assert [s.headers["authorization"] for s in upstream.seen] == [
        "Bearer from-env",
        "Bearer from-file",
    ]
    with pytest.raises(DeniedError):
        await api.get(("a",), credential=Credential.from_env("REST_TEST_UNSET"))
    with pytest.raises(DeniedError):
        await api.get(("a",), credential=Credential.from_file(tmp_path / "missing", name="M"))
    assert len(upstream.seen) == 2  # nothing sent without a credential


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
async def test_a_redirect_to_another_host_is_refused_and_gets_no_token(
    upstream: Upstream, elsewhere: Upstream, status: int
) -> None:
    upstream.then(Reply(status=status, headers={"Location": f"{elsewhere.base_url}/steal"}))
    with pytest.raises(UpstreamError) as refused:
        await adapter(upstream).get(("invoices", "inv_1"), credential=CRED)
    assert "redirect" in refused.value.message
    assert "refused" in (refused.value.detail or "")
    assert len(upstream.seen) == 1  # not retried either
    assert elsewhere.seen == []  # the other host never heard from us, token or not


# -- byte cap ------------------------------------------------------------------------------


@pytest.mark.parametrize("chunks", [1, 8])
async def test_a_body_over_the_cap_is_result_too_large(upstream: Upstream, chunks: int) -> None:
    big = b'{"data": "' + b"x" * 5_000 + b'"}'
    upstream.then(Reply(body=big, chunks=chunks))
    with pytest.raises(ResultTooLargeError) as refused:
        await adapter(upstream, max_response_bytes=1_000).get(("a",), credential=CRED)
    assert refused.value.limit_bytes == 1_000
    assert refused.value.size_bytes > 1_000
    assert refused.value.outcome == "error"
    upstream.then(Reply(body=big, chunks=chunks))
    with pytest.raises(ResultTooLargeError) as posted:
        await adapter(upstream, max_response_bytes=1_000).post(
            ("a",), credential=CRED, body={}, idempotency_key="k"
        )
    assert posted.value.outcome == "unknown"  # the write may have happened
    upstream.then(Reply(body=big, chunks=chunks))
    result = await adapter(upstream, max_response_bytes=6_000).get(("a",), credential=CRED)
    assert len(str(result["data"])) == 5_000


async def test_a_body_that_is_not_a_json_object_is_upstream(upstream: Upstream) -> None:
    for body in (b"<html>", b"[1, 2]"):
        upstream.then(Reply(body=body))
        with pytest.raises(UpstreamError):
            await adapter(upstream).get(("a",), credential=CRED)
    upstream.then(Reply(body=b"not gzip", headers={"Content-Encoding": "gzip"}))
    with pytest.raises(UpstreamError) as undecodable:
        await adapter(upstream).get(("a",), credential=CRED)
    assert "content-encoding 'gzip'" in (undecodable.value.detail or "")


# -- path escaping ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("segment", "raw"),
    [
        ("inv_1", "inv_1"),
        ("../admin", "..%2Fadmin"),
        ("..%2Fadmin", "..%252Fadmin"),
        ("a/b?x=1", "a%2Fb%3Fx%3D1"),
        ("a#frag", "a%23frag"),
        ("inv 1", "inv%201"),
        ("%41", "%2541"),
        ("é", "%C3%A9"),
        ("...", "..."),
    ],
)
async def test_an_id_cannot_change_the_route(upstream: Upstream, segment: str, raw: str) -> None:
    await adapter(upstream).get(("invoices", segment), credential=CRED)
    [seen] = upstream.seen
    assert seen.raw_path == f"/v1/invoices/{raw}"
    assert seen.query == ""
    assert route_path("invoices", segment) == f"/invoices/{raw}"


@pytest.mark.parametrize("segment", ["..", ".", "%2e%2e", "%2E", ".%2e", "", "a\nb", "x" * 201])
async def test_segments_a_url_parser_would_collapse_are_refused(
    upstream: Upstream, segment: str
) -> None:
    with pytest.raises(InvalidInputError):
        await adapter(upstream).get(("invoices", segment), credential=CRED)
    assert upstream.seen == []


def _spellings(segment: str) -> list[str]:
    """``segment`` with each character as given, ``%2e`` or ``%2E``: every way to write it."""
    forms = [""]
    for char in segment:
        encoded = f"%{ord(char):02x}"
        forms = [f + c for f in forms for c in (char, encoded, encoded.upper())]
    return sorted(set(forms))


REFUSED_SEGMENTS = (
    [pytest.param(s, id=f"dot:{s}") for dot in sorted(DOT_SEGMENTS) for s in _spellings(dot)]
    + [pytest.param(f"inv{c}1", id=f"control:{ord(c):#04x}") for c in sorted(CONTROL_CHARACTERS)]
    + [pytest.param("", id="empty"), pytest.param("x" * (MAX_SEGMENT + 1), id="too-long")]
)


@pytest.mark.parametrize("segment", REFUSED_SEGMENTS)
def test_every_path_rule_refuses_before_sending(segment: str) -> None:
    with pytest.raises(InvalidInputError) as refused:
        route_path("invoices", segment)
    assert refused.value.code == "invalid_input"
    assert "is not a valid id" in refused.value.message


@pytest.mark.parametrize(
    "segment", ["x" * MAX_SEGMENT, "...", "a.b", "%2e%2e%2e", "inv\u00a01", "inv~1"]
)
def test_segments_just_inside_the_rules_pass(segment: str) -> None:
    assert route_path("invoices", segment).count("/") == 2


def test_destinations_are_origins() -> None:
    assert RestAdapter("http://127.0.0.1:8080/v1").destinations == ("http://127.0.0.1:8080",)
    assert origin_of("https://API.example.com/v1") == "https://api.example.com:443"
    assert origin_of("http://[::1]/") == "http://[::1]:80"
    for bad in ("ftp://x", "http://u:p@x", "http://x?q=1", "/relative", "http://x#f"):
        with pytest.raises(ValueError, match="must be http"):
            origin_of(bad)


def test_credentials_lists_declared_names_sorted_and_refuses_a_malformed_name() -> None:
    declared = RestAdapter("http://127.0.0.1:8080/v1", credentials=[CRED, "A_TOKEN", CRED])
    assert declared.credentials == ("A_TOKEN", "UPSTREAM_TOKEN")
    assert TOKEN not in repr(declared.credentials)
    assert RestAdapter("http://127.0.0.1:8080/v1").credentials == ()
    for bad in ("", "has space", "line\nbreak", "x" * 129):
        with pytest.raises(ValueError, match="credential name"):
            RestAdapter("http://127.0.0.1:8080/v1", credentials=[bad])


async def test_a_credential_the_adapter_does_not_declare_is_never_sent(upstream: Upstream) -> None:
    declared = RestAdapter(upstream.base_url + "/v1", credentials=["OTHER_TOKEN"])
    with pytest.raises(DeniedError) as info:
        await declared.get(("a",), credential=CRED)
    assert upstream.seen == []
    assert "UPSTREAM_TOKEN" in (info.value.detail or "")
    assert TOKEN not in f"{info.value} {info.value.detail}"
    allowed = RestAdapter(upstream.base_url + "/v1", credentials=[CRED])
    assert await allowed.get(("a",), credential=CRED) == {"raw_path": "/v1/a"}


# -- retries within the deadline -----------------------------------------------------------


async def test_429_is_retried_after_retry_after(upstream: Upstream) -> None:
    upstream.then(Reply(status=429, headers={"Retry-After": "0.2"}))
    started = time.monotonic()
    assert await adapter(upstream).get(("a",), credential=CRED) == {"raw_path": "/v1/a"}
    assert time.monotonic() - started >= 0.2
    assert len(upstream.seen) == 2


async def test_429_whose_wait_passes_the_deadline_is_answered_at_once(upstream: Upstream) -> None:
    upstream.then(Reply(status=429, headers={"Retry-After": "5"}))
    started = time.monotonic()
    with pytest.raises(RateLimitedError) as limited:
        await adapter(upstream).get(("a",), credential=CRED, deadline=time.monotonic() + 1)
    assert time.monotonic() - started < 0.5
    assert limited.value.retry_after == 5.0
    assert len(upstream.seen) == 1


@pytest.mark.parametrize("status", [502, 503, 504])
async def test_gateway_errors_are_retried_for_get(upstream: Upstream, status: int) -> None:
    upstream.then(Reply(status=status), Reply(status=status))
    assert await adapter(upstream).get(("a",), credential=CRED) == {"raw_path": "/v1/a"}
    assert len(upstream.seen) == 3


async def test_retries_stop_after_max_attempts(upstream: Upstream) -> None:
    upstream.then(*[Reply(status=503)] * 5)
    with pytest.raises(UpstreamError) as failed:
        await adapter(upstream, max_attempts=3).get(("a",), credential=CRED)
    assert failed.value.outcome == "error"
    assert len(upstream.seen) == 3


async def test_500_is_not_retried(upstream: Upstream) -> None:
    upstream.then(Reply(status=500))
    with pytest.raises(UpstreamError):
        await adapter(upstream).get(("a",), credential=CRED)
    assert len(upstream.seen) == 1


async def test_a_keyed_write_is_retried_with_the_same_key(upstream: Upstream) -> None:
    upstream.then(Reply(status=503), Reply(status=429, headers={"Retry-After": "0"}))
    answer = await adapter(upstream).post(
        ("refunds",), credential=CRED, body={"amount_minor": 5}, idempotency_key="ik_1"
    )
    assert answer == {"raw_path": "/v1/refunds"}
    assert [s.headers["idempotency-key"] for s in upstream.seen] == ["ik_1"] * 3
    assert {s.body for s in upstream.seen} == {b'{"amount_minor":5}'}


async def test_an_unkeyed_write_is_sent_once(upstream: Upstream) -> None:
    upstream.then(Reply(status=503))
    with pytest.raises(UpstreamError) as failed:
        await adapter(upstream).post(("refunds",), credential=CRED, body={}, idempotency_key=None)
    assert failed.value.outcome == "unknown"
    assert len(upstream.seen) == 1
    assert "idempotency-key" not in upstream.seen[0].headers


# -- timeouts and lost answers -------------------------------------------------------------


async def test_a_get_that_times_out_is_timeout(upstream: Upstream) -> None:
    upstream.then(Reply(delay=1.0))
    started = time.monotonic()
    with pytest.raises(ToolTimeoutError):
        await adapter(upstream, timeout=0.2).get(("a",), credential=CRED)
    assert time.monotonic() - started < 0.8
    assert len(upstream.seen) == 1


async def test_the_deadline_shortens_the_timeout(upstream: Upstream) -> None:
    upstream.then(Reply(delay=1.0))
    started = time.monotonic()
    with pytest.raises(ToolTimeoutError):
        await adapter(upstream, timeout=5).get(
            ("a",), credential=CRED, deadline=time.monotonic() + 0.2
        )
    assert time.monotonic() - started < 0.8
    with pytest.raises(ToolTimeoutError) as spent:
        await adapter(upstream).get(("a",), credential=CRED, deadline=time.monotonic() - 1)
    assert spent.value.outcome == "error"
    assert len(upstream.seen) == 1  # nothing sent once the budget is spent


async def test_a_post_that_times_out_is_ambiguous_and_resent_only_with_its_key(
    upstream: Upstream,
) -> None:
    upstream.then(Reply(delay=1.0))
    rest = adapter(upstream, timeout=0.2)
    with pytest.raises(AmbiguousWriteError) as ambiguous:
        await rest.post(("refunds",), credential=CRED, body={"n": 1}, idempotency_key="ik_t")
    assert ambiguous.value.idempotency_key == "ik_t"
    assert ambiguous.value.outcome == "unknown"
    assert len(upstream.seen) == 1  # a timed-out write is never resent by the adapter
    await rest.post(("refunds",), credential=CRED, body={"n": 1}, idempotency_key="ik_t")
    assert [s.headers["idempotency-key"] for s in upstream.seen] == ["ik_t", "ik_t"]


async def test_a_cut_connection_is_upstream_for_get_and_ambiguous_for_post(
    upstream: Upstream,
) -> None:
    upstream.then(Reply(cut=True), Reply(cut=True))
    with pytest.raises(UpstreamError):
        await adapter(upstream, max_attempts=2).get(("a",), credential=CRED)
    assert len(upstream.seen) == 2  # a safe method is retried
    upstream.then(Reply(cut=True))
    with pytest.raises(AmbiguousWriteError) as lost:
        await adapter(upstream).post(("r",), credential=CRED, body={}, idempotency_key="ik_c")
    assert lost.value.idempotency_key == "ik_c"
    assert len(upstream.seen) == 3


async def test_a_refused_connection_is_upstream_and_retried() -> None:
    rest = RestAdapter("http://127.0.0.1:9/v1", credentials=[CRED], backoff=0.01, max_attempts=2)
    with pytest.raises(UpstreamError) as refused:
        await rest.post(("r",), credential=CRED, body={}, idempotency_key=None)
    assert refused.value.outcome == "error"  # nothing was sent


# -- pagination ------------------------------------------------------------------------------


async def test_pagination_follows_the_cursor(upstream: Upstream) -> None:
    upstream.then(
        Reply(body={"data": [1, 2], "next_cursor": "c1"}),
        Reply(body={"data": [3], "next_cursor": "c2"}),
        Reply(body={"data": [4], "next_cursor": None}),
    )
    items = await adapter(upstream).paginate(("items",), credential=CRED, params={"limit": 2})
    assert items == [1, 2, 3, 4]
    assert [s.query for s in upstream.seen] == [
        "limit=2",
        "limit=2&cursor=c1",
        "limit=2&cursor=c2",
    ]


async def test_pagination_stops_at_the_page_cap(upstream: Upstream) -> None:
    upstream.then(*[Reply(body={"data": [n], "next_cursor": f"c{n}"}) for n in range(10)])
    with pytest.raises(LimitExceededError) as capped:
        await adapter(upstream, max_pages=3).paginate(("items",), credential=CRED)
    assert capped.value.limit == "pages"
    assert len(upstream.seen) == 3


async def test_a_malformed_page_is_upstream(upstream: Upstream) -> None:
    upstream.then(Reply(body={"data": "nope", "next_cursor": None}))
    with pytest.raises(UpstreamError):
        await adapter(upstream).paginate(("items",), credential=CRED)


def test_options_are_checked() -> None:
    with pytest.raises(ValueError, match="must be > 0"):
        RestAdapter("http://127.0.0.1:1", timeout=0)
    with pytest.raises(ValueError, match="must be > 0"):
        RestAdapter("http://127.0.0.1:1", max_pages=0)
