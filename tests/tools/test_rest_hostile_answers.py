"""Answers a hostile or broken upstream may send, each a typed tool error and never a raw
exception: results nested deeper than they can be serialized, statuses outside HTTP's range,
cursors that cannot be sent back, and URLs the HTTP library refuses."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest
from pydantic import BaseModel, Field

from airlock.policies import read
from airlock.tools import (
    AuditLog,
    CallContext,
    MemoryAuditStore,
    PermanentUpstreamError,
    Registry,
    RestAdapter,
    ToolError,
    UpstreamError,
)
from airlock.tools._rest import MAX_CURSOR_CHARS
from airlock.tools._rest_attempt import Attempt, send_once
from airlock.tools._shaping import shape_result
from tests.tools.billing import context

pytestmark = pytest.mark.anyio


def nested(depth: int, *, kind: str = "list") -> Any:
    value: Any = []
    for _ in range(depth):
        value = [value] if kind == "list" else {"k": value}
    return value


class Loose(BaseModel):
    a: Any = Field(description="anything the upstream sent")


# -- results that cannot be written as JSON --------------------------------------------------

UNSERIALIZABLE = [
    pytest.param(nested(900), id="list-900-deep"),
    pytest.param(nested(400, kind="dict"), id="dict-400-deep"),
    pytest.param("half a pair \ud800", id="lone-surrogate"),
]


@pytest.mark.parametrize("value", UNSERIALIZABLE)
def test_a_result_that_cannot_be_serialized_is_a_typed_upstream_error(value: Any) -> None:
    with pytest.raises(UpstreamError) as caught:
        shape_result(Loose, {"a": value}, max_bytes=1_000_000)
    assert caught.value.outcome == "unknown"  # the handler ran
    assert "do not retry" in caught.value.message  # the same answer fails the same way
    assert caught.value.retryable is False  # and the wire says so too
    assert "Loose" in (caught.value.detail or "")


def test_a_result_just_inside_the_depth_serializers_allow_is_shaped() -> None:
    assert shape_result(Loose, {"a": nested(100)}, max_bytes=1_000_000)["a"] == nested(100)


def _deep_answer(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, content=b'{"a":' + b"[" * 900 + b"]" * 900 + b"}")


@pytest.mark.parametrize("caller", ["direct", "code"])
async def test_a_deeply_nested_upstream_answer_is_upstream_through_the_registry(
    caller: str,
) -> None:
    api = RestAdapter("http://deep.test/v1", transport=httpx.MockTransport(_deep_answer))
    registry = Registry(audit=AuditLog(MemoryAuditStore()))

    @registry.tool(effects=[read("billing:invoice/*")], scope="billing.read",
                   callers={"direct", "code"}, output=Loose, destinations=api.destinations)  # fmt: skip
    async def billing_raw_get(ctx: CallContext) -> Any:
        """Fetch a raw answer. Use it to test shaping. It does nothing else."""
        return await api.get(("raw",), credential=None, deadline=ctx.deadline)

    with pytest.raises(ToolError) as caught:
        await registry.call("billing_raw_get", {}, context(caller=caller))
    assert type(caught.value) is PermanentUpstreamError
    assert "do not retry" in caught.value.message
    assert caught.value.to_wire()["retryable"] is False


# -- statuses outside 100-599 ----------------------------------------------------------------


def _status_answer(request: httpx.Request) -> httpx.Response:
    return httpx.Response(int(request.url.path.rsplit("/", 1)[1]), content=b"{}")


@pytest.mark.parametrize("status", [600, 700, 999])
@pytest.mark.parametrize(("method", "outcome"), [("GET", "error"), ("POST", "unknown")])
async def test_a_status_outside_http_is_upstream(status: int, method: str, outcome: str) -> None:
    api = RestAdapter(
        "http://status.test", transport=httpx.MockTransport(_status_answer), max_attempts=3
    )
    with pytest.raises(ToolError) as caught:
        await api.request(
            method, ("s", str(status)), credential=None, body={} if method == "POST" else None
        )
    assert type(caught.value) is UpstreamError
    assert caught.value.outcome == outcome  # a write answered so may have acted
    assert str(status) in (caught.value.detail or "")


# -- cursors an upstream hands back ----------------------------------------------------------


def _pages(cursor: str, seen: list[str]) -> httpx.MockTransport:
    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        if "cursor" in request.url.params:
            return httpx.Response(200, json={"data": [2], "next_cursor": None})
        return httpx.Response(200, content=json.dumps({"data": [1], "next_cursor": cursor}))

    return httpx.MockTransport(answer)


REFUSED_CURSORS = [
    pytest.param("\ud800", id="lone-surrogate"),
    pytest.param("c" * (MAX_CURSOR_CHARS + 1), id="just-over-the-limit"),
    pytest.param("c" * 70_000, id="over-httpx-url-limit"),
]


@pytest.mark.parametrize("cursor", REFUSED_CURSORS)
async def test_a_cursor_that_cannot_be_sent_back_is_a_malformed_page(cursor: str) -> None:
    seen: list[str] = []
    api = RestAdapter("http://pages.test/v1", transport=_pages(cursor, seen))
    with pytest.raises(ToolError) as caught:
        await api.paginate(("items",), credential=None)
    assert type(caught.value) is UpstreamError  # the upstream's fault, not the model's
    assert caught.value.outcome == "error"
    assert "cursor" in (caught.value.detail or "")
    assert len(seen) == 1  # the first page only: nothing was sent with it


@pytest.mark.parametrize(
    "cursor",
    [
        pytest.param("c" * MAX_CURSOR_CHARS, id="at-the-limit"),
        pytest.param("a\r\nX-Evil: 1", id="controls-are-percent-encoded"),
        pytest.param("é/?&=#", id="non-ascii-and-delimiters"),
    ],
)
async def test_a_cursor_within_the_rules_is_followed(cursor: str) -> None:
    seen: list[str] = []
    api = RestAdapter("http://pages.test/v1", transport=_pages(cursor, seen))
    assert await api.paginate(("items",), credential=None) == [1, 2]
    assert httpx.URL(seen[1]).params["cursor"] == cursor


async def test_a_url_the_http_library_refuses_is_upstream_and_nothing_is_sent() -> None:
    seen: list[str] = []
    attempt = Attempt(
        method="POST",
        url="http://pages.test/v1/items",
        query={"q": "x" * 70_000},
        headers={},
        content=b"{}",
        what="POST /items",
        idempotency_key=None,
        cap=1000,
        budget=2.0,
    )
    async with httpx.AsyncClient(transport=_pages("", seen)) as client:
        with pytest.raises(ToolError) as caught:
            await send_once(client, attempt, backoff=0.0)
    assert type(caught.value) is PermanentUpstreamError  # the same URL is refused again
    assert caught.value.outcome == "error"  # a write that was never sent did not act
    assert "InvalidURL" in (caught.value.detail or "")
    assert seen == []


async def test_the_billing_list_with_a_huge_cursor_is_a_definite_upstream_error() -> None:
    from airlock.policies import Grant, Principal
    from airlock.tools import Credential
    from examples.billing.tools import register_billing_tools

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"data": [], "next_cursor": "c" * 70_000})

    api = RestAdapter(
        "http://billing.test/v1",
        credentials=["BILLING_TOKEN_ACME"],
        transport=httpx.MockTransport(answer),
    )
    registry = register_billing_tools(
        Registry(audit=AuditLog(MemoryAuditStore())),
        api,
        {"acme": Credential.from_value("tok_abcdefgh", name="BILLING_TOKEN_ACME")},
    )
    scopes = frozenset({"billing.read"})
    ctx = CallContext(
        principal=Principal(user_id="alice", tenant_id="acme", scopes=scopes),
        grant=Grant(scopes=scopes, effects=(read("billing:**"),)),
        run_id="r1",
        caller="code",
        deadline=time.monotonic() + 30,
    )
    with pytest.raises(ToolError) as caught:
        await registry.call("billing_invoice_list", {"status": "any"}, ctx)
    assert (caught.value.code, caught.value.outcome) == ("upstream", "error")
    assert "may have acted" not in caught.value.message
