"""The REST adapter's bounds on what an upstream sends: compressed bodies, lists of pages and
the error body kept for the operator, each against a real HTTP server on loopback."""

from __future__ import annotations

import gzip
import tracemalloc
import zlib

import pytest

from airlock.tools import Credential, RestAdapter, ResultTooLargeError, ToolError, UpstreamError
from airlock.tools._redact import REDACTED

from .loopback import Reply, Upstream

pytestmark = pytest.mark.anyio
MIB = 1 << 20


def _gzip_zeros(mib: int) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    return b"".join(packer.compress(bytes(MIB)) for _ in range(mib)) + packer.flush()


@pytest.fixture(scope="module")
def bombs() -> dict[str, bytes]:
    """Bodies of zeros that inflate far past the 1 MB cap: one layer (64 MiB from ~64 KB)
    and two stacked layers (256 MiB from ~600 bytes)."""
    return {"gzip": _gzip_zeros(64), "gzip, gzip": gzip.compress(_gzip_zeros(256), 9)}


# -- compressed bodies: inflated within the cap, one layer at most --------------------------

BOMBS = [
    pytest.param(encoding, status, code, id=f"{encoding}-{status}")
    for encoding, code in [("gzip", "result_too_large"), ("gzip, gzip", "upstream")]
    for status in (200, 500)
]


@pytest.mark.parametrize(("encoding", "status", "code"), BOMBS)
async def test_a_compressed_body_is_never_inflated_past_the_cap(
    upstream: Upstream, bombs: dict[str, bytes], encoding: str, status: int, code: str
) -> None:
    body = bombs[encoding]
    upstream.then(Reply(status=status, body=body, headers={"content-encoding": encoding}))
    rest = RestAdapter(upstream.base_url, max_response_bytes=1_000_000, max_attempts=1)
    tracemalloc.start()
    try:
        with pytest.raises(ToolError) as refused:
            await rest.get(("x",), credential=None)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20_000_000, f"peak {peak / 1e6:.0f} MB while reading a 1 MB-capped answer"
    # a 500 is still the service failing, whatever its body
    assert refused.value.code == (code if status == 200 else "upstream")
    assert upstream.seen[0].headers["accept-encoding"] == "identity"


def _deflate(data: bytes, wbits: int) -> bytes:
    packer = zlib.compressobj(6, zlib.DEFLATED, wbits)
    return packer.compress(data) + packer.flush()


@pytest.mark.parametrize(
    ("encoding", "pack"),
    [
        ("gzip", gzip.compress),
        ("x-gzip", gzip.compress),
        ("GZIP", gzip.compress),
        ("deflate", lambda data: _deflate(data, zlib.MAX_WBITS)),
        ("deflate", lambda data: _deflate(data, -zlib.MAX_WBITS)),  # raw deflate, as some send
        ("identity", lambda data: data),
        ("identity, gzip", gzip.compress),
    ],
)
@pytest.mark.parametrize("chunks", [1, 7])
async def test_one_compressed_layer_is_read(
    upstream: Upstream, encoding: str, pack: object, chunks: int
) -> None:
    assert callable(pack)
    payload = b'{"data": "' + b"abc" * 20_000 + b'"}'
    upstream.then(Reply(body=pack(payload), headers={"content-encoding": encoding}, chunks=chunks))
    answer = await RestAdapter(upstream.base_url).get(("x",), credential=None)
    assert answer == {"data": "abc" * 20_000}


@pytest.mark.parametrize(
    ("encoding", "body"),
    [
        ("gzip, gzip", gzip.compress(gzip.compress(b"{}", mtime=0), mtime=0)),
        ("gzip, deflate", b"{}"),
        ("br", b"{}"),
        ("zstd", b"{}"),
        ("compress", b"{}"),
        ("gzip", b"not gzip"),
        ("gzip", gzip.compress(b"{}", mtime=0)[:-6]),  # ends before the stream does
        ("gzip", gzip.compress(b"{}", mtime=0) + b"trailing"),
        ("deflate", b"\xff\xfe not deflate"),
    ],
)
@pytest.mark.parametrize("method", ["GET", "POST"])
async def test_a_body_that_cannot_be_read_within_the_rules_is_upstream(
    upstream: Upstream, encoding: str, body: bytes, method: str
) -> None:
    upstream.then(Reply(body=body, headers={"content-encoding": encoding}))
    with pytest.raises(UpstreamError) as refused:
        await RestAdapter(upstream.base_url).request(
            method, ("x",), credential=None, body={}, idempotency_key="k"
        )
    assert refused.value.outcome == ("error" if method == "GET" else "unknown")
    assert "content-encoding" in (refused.value.detail or "")
    assert len(upstream.seen) == 1  # an answer came: not retried


@pytest.mark.parametrize("encoding", ["gzip, gzip", "br", "gzip"])
async def test_an_error_status_keeps_its_code_whatever_its_body_is(
    upstream: Upstream, encoding: str
) -> None:
    upstream.then(
        Reply(status=409, body=b"\x1f\x8b garbage", headers={"content-encoding": encoding})
    )
    with pytest.raises(ToolError) as refused:
        await RestAdapter(upstream.base_url).post(
            ("x",), credential=None, body={}, idempotency_key="k"
        )
    assert refused.value.code == "conflict"
    assert refused.value.outcome == "error"
    assert "content-encoding" in (refused.value.detail or "")


# -- pagination: a byte budget over all pages ------------------------------------------------


@pytest.mark.parametrize(
    ("pages", "page_bytes", "total", "sent"),
    [
        (20, 90_000, None, 2),  # the default budget is the adapter's byte cap
        (20, 90_000, 200_000, 3),
        (20, 40_000, 100_000, 3),
    ],
)
async def test_pagination_bounds_the_total_bytes_not_only_each_page(
    upstream: Upstream, pages: int, page_bytes: int, total: int | None, sent: int
) -> None:
    page = b'{"next_cursor":"again","data":[' + b"{}," * (page_bytes // 3) + b"{}]}"
    upstream.then(*[Reply(body=page)] * pages)
    rest = RestAdapter(upstream.base_url, max_response_bytes=100_000, max_list_bytes=total)
    with pytest.raises(ResultTooLargeError) as refused:
        await rest.paginate(("invoices",), credential=None)
    budget = total or 100_000
    assert refused.value.limit_bytes == budget
    assert refused.value.size_bytes > budget
    assert "max_list_bytes" in (refused.value.detail or "")
    assert len(upstream.seen) == sent


async def test_pages_within_the_budget_are_all_read(upstream: Upstream) -> None:
    upstream.then(
        *[Reply(body={"data": [n] * 1_000, "next_cursor": f"c{n}"}) for n in range(4)],
        Reply(body={"data": [], "next_cursor": None}),
    )
    rest = RestAdapter(upstream.base_url, max_response_bytes=5_000, max_list_bytes=25_000)
    assert len(await rest.paginate(("items",), credential=None)) == 4_000


def test_the_list_budget_is_checked() -> None:
    with pytest.raises(ValueError, match="max_list_bytes"):
        RestAdapter("http://127.0.0.1:1", max_list_bytes=0)


# -- the error body kept for the operator ---------------------------------------------------


@pytest.mark.parametrize("length", [40, 400, 2_000, 8_000])
@pytest.mark.parametrize("shift", [0, 1, 7, 999])
async def test_an_echoed_token_is_never_kept_in_part(
    upstream: Upstream, length: int, shift: int
) -> None:
    token = ("tk" + "0123456789abcdefghijklmnopqrstuvwxyz" * 250)[:length] + f"{shift}"
    body = b"x" * shift + b'{"seen":[' + b",".join([f'"{token}"'.encode()] * 12) + b"]}"
    upstream.then(Reply(status=400, body=body))
    rest = RestAdapter(upstream.base_url, credentials=["T"])
    with pytest.raises(ToolError) as refused:
        await rest.get(("x",), credential=Credential.from_value(token, name="T"))
    detail = refused.value.detail or ""
    assert REDACTED in detail or "seen" not in detail
    # no copy of the token survives, not even the start of one cut short
    assert token[:8] not in detail


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
@pytest.mark.parametrize("status", [200, 201, 204])
@pytest.mark.parametrize("method", ["GET", "POST"])
async def test_an_empty_body_marked_compressed_is_an_empty_answer(
    upstream: Upstream, encoding: str, status: int, method: str
) -> None:
    # Some servers mark every answer compressed, a 204 or a Content-Length: 0 one too: no
    # byte is no stream at all, not one that ends early (a write that succeeded stays so).
    upstream.then(Reply(status=status, body=b"", headers={"content-encoding": encoding}))
    answer = await RestAdapter(upstream.base_url).request(
        method, ("x",), credential=None, body={}, idempotency_key="k"
    )
    assert answer == {}
