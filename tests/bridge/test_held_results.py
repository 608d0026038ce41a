"""What a run's results cost the host while they are held: a batch's item results count
against ``max_bytes_out`` as each is held, not only once the whole answer is encoded and sent.

A guest that never reads its answers, and asks for more than ``max_bytes_out`` of them, ends
its run with ``limit_exceeded`` (``bytes``) after the host held about ``max_bytes_out`` of
them, plus the few results being made at that moment: one large batch, several at once,
batches beside single calls. Without the count, a batch held every item's result, then its
whole encoding, before the limit was checked: ``max_calls`` times a result's size.
"""

from __future__ import annotations

import asyncio
import socket
import time
import tracemalloc
from typing import Any

import pytest

from airlock.bridge import BridgeLimits, RunEnd, ToolSession, encode_frame, serve_run
from airlock.bridge._codec import _encode_value, encode_result
from airlock.bridge._results import _encode_item
from airlock.tools import AuditLog, MemoryAuditStore
from tests.bridge.records import ALICE, GRANT, build_registry
from tests.bridge.test_fuzz import CollectingWriter, _results

pytestmark = pytest.mark.anyio

LIMIT = 4 * 1024 * 1024
"""The runs' ``max_bytes_out``."""
LARGE = 1_500_000
"""The largest result ``records_blob_get`` makes."""
MARGIN = 2 * 1024 * 1024
"""What the host holds besides the results: the frames read, the audit log, asyncio's own."""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _blobs(call_id: int, count: int, size: int) -> dict[str, Any]:
    return {"type": "batch", "id": call_id, "tool": "records_blob_get",
            "items": [{"size": size}] * count}  # fmt: skip


def _blob(call_id: int, size: int) -> dict[str, Any]:
    return {"type": "call", "id": call_id, "tool": "records_blob_get", "args": {"size": size}}


async def _serve_unread(frames: list[dict[str, Any]], session: ToolSession) -> Any:
    """Serve ``frames`` from a guest that never reads its answers."""
    host, guest = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    reader, writer = await asyncio.open_unix_connection(sock=host)
    try:
        guest.sendall(b"".join(encode_frame(f) for f in frames))
        return await serve_run(
            reader, writer, session=session, deadline=time.monotonic() + 60,
            max_done_bytes=1 << 20,
        )  # fmt: skip
    finally:
        writer.transport.abort()
        guest.close()


# (name, max_concurrency, frames, largest result): each run asks for 10 to 45 times
# LIMIT, and the guest reads none of it.
HELD = [
    ("one_batch_of_large_items", 4, [_blobs(1, 40, LARGE)], LARGE),
    ("one_batch_of_many_items", 4, [_blobs(1, 1000, 60_000)], 60_000),
    ("batches_at_once", 4, [_blobs(n, 300, 60_000) for n in range(1, 4)], 60_000),
    ("batches_each_within_the_limit", 4, [_blobs(n, 30, LARGE // 2) for n in range(1, 9)],
     LARGE // 2),
    ("batch_after_calls", 4, [*(_blob(n, LARGE) for n in range(1, 3)), _blobs(3, 40, LARGE)],
     LARGE),
    ("batch_at_default_concurrency", 32, [_blobs(1, 200, 200_000)], 200_000),
    # Single calls are encoded and counted as each one ends: the same bound holds.
    ("calls", 4, [_blob(n, LARGE) for n in range(1, 41)], LARGE),
    ("calls_at_default_concurrency", 32, [_blob(n, 200_000) for n in range(1, 201)], 200_000),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "concurrency", "frames", "largest"), HELD, ids=[c[0] for c in HELD]
)
async def test_results_held_for_a_guest_count_against_max_bytes_out(
    name: str, concurrency: int, frames: list[dict[str, Any]], largest: int
) -> None:
    limits = BridgeLimits(max_bytes_out=LIMIT, max_concurrency=concurrency)
    registry = build_registry(audit=AuditLog(MemoryAuditStore()), slow_s=0.0)
    session = ToolSession(registry=registry, principal=ALICE, grant=GRANT, limits=limits)
    tracemalloc.start()
    try:
        outcome = await _serve_unread(frames, session)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert isinstance(outcome, RunEnd)
    assert (outcome.code, outcome.limit) == ("limit_exceeded", "bytes")
    assert outcome.message.endswith(f"; the limit is {LIMIT} bytes")
    # A result being made costs up to about three times its size (the tool's value, its
    # dump, its encoding) in each call running at the time: the rest counts against LIMIT.
    bound = LIMIT + 3 * largest * (concurrency + 1) + MARGIN
    assert peak <= bound, f"the host held {peak} bytes at its peak; at most {bound} expected"


@pytest.mark.parametrize("concurrency", [1, 4, 32])
async def test_a_batch_over_max_bytes_out_starts_no_more_items(concurrency: int) -> None:
    limits = BridgeLimits(max_bytes_out=LIMIT, max_concurrency=concurrency)
    registry = build_registry(audit=AuditLog(MemoryAuditStore()), slow_s=0.0)
    started: list[str] = []
    call = registry.call

    async def counting(name: str, args: Any, ctx: Any) -> Any:
        started.append(ctx.call_id)
        return await call(name, args, ctx)

    registry.call = counting  # type: ignore[method-assign]
    session = ToolSession(registry=registry, principal=ALICE, grant=GRANT, limits=limits)
    outcome = await _serve_unread([_blobs(1, 100, LARGE)], session)
    assert isinstance(outcome, RunEnd)
    assert (outcome.code, outcome.limit) == ("limit_exceeded", "bytes")
    # Two results fit, the third goes over: the items running then end, and no more start.
    assert len(started) <= 3 + concurrency


async def _serve_batch(frame: dict[str, Any]) -> CollectingWriter:
    """Serve one batch frame, and a ``done`` frame once it is answered (as the guest does)."""
    registry = build_registry(audit=AuditLog(MemoryAuditStore()), slow_s=0.0)
    session = ToolSession(registry=registry, principal=ALICE, grant=GRANT)
    reader = asyncio.StreamReader()
    writer = CollectingWriter()
    served = asyncio.create_task(
        serve_run(
            reader, writer,  # type: ignore[arg-type]
            session=session, deadline=time.monotonic() + 30, max_done_bytes=1 << 20,
        )
    )  # fmt: skip
    reader.feed_data(encode_frame(frame))
    async with asyncio.timeout(10):
        while not writer.data:
            await asyncio.sleep(0)
    reader.feed_data(encode_frame({"type": "done", "result": {}}))
    reader.feed_eof()
    assert await served == {"type": "done", "result": {}}
    return writer


ITEMS = [
    {"record_id": "rec_1"},
    {"record_id": "rec_999"},  # another tenant's: not found
    {"record_id": "nope"},  # invalid input
    {"x": list(range(20_000))},  # over the call budget: refused before admission
    {"record_id": "rec_2"},
]


async def test_a_batch_is_answered_as_one_frame_of_its_items_outcomes() -> None:
    writer = await _serve_batch(
        {"type": "batch", "id": 7, "tool": "records_item_get", "items": ITEMS}
    )
    [answer] = _results(writer)
    outcomes = answer["value"]
    assert [o["ok"] for o in outcomes] == [True, False, False, False, True]
    assert [o["value"]["total"] for o in outcomes if o["ok"]] == [10, 20]
    assert [o["error"]["code"] for o in outcomes if not o["ok"]] == [
        "not_found", "invalid_input", "invalid_input",
    ]  # fmt: skip
    # The very bytes of the frame encoded from the whole answer at once.
    assert bytes(writer.data) == encode_result(7, True, outcomes)


FEW = [
    ("empty", "records_item_get", []),
    ("one", "records_item_get", [{"record_id": "rec_1"}]),
    ("three", "records_item_get", [{"record_id": f"rec_{n}"} for n in range(1, 4)]),
    ("large", "records_blob_get", [{"size": 100_000}] * 20),  # written in parts
]


@pytest.mark.parametrize(("name", "tool", "items"), FEW, ids=[c[0] for c in FEW])
async def test_a_batch_within_the_limits_is_one_frame(
    name: str, tool: str, items: list[dict[str, Any]]
) -> None:
    writer = await _serve_batch({"type": "batch", "id": 3, "tool": tool, "items": items})
    [answer] = _results(writer)
    assert [o["ok"] for o in answer["value"]] == [True] * len(items)
    assert bytes(writer.data) == encode_result(3, True, answer["value"])


def _deep(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


ITEM_VALUES = [
    ("record", {"record_id": "rec_1", "total": 10}),
    ("capitals", {"Name": "Ivy", "Note": "INFO"}),
    ("nan_in_a_string", {"note": "NaN"}),
    ("infinity_in_a_string", ["Infinity", "-Infinity"]),
    ("non_ascii", {"name": "Zoë", "sign": "\u2028"}),
    ("deep", _deep(200)),
    ("large", {"data": "b" * 200_000}),
]


@pytest.mark.parametrize(("name", "value"), ITEM_VALUES, ids=[c[0] for c in ITEM_VALUES])
def test_a_batch_item_is_encoded_as_any_result(name: str, value: Any) -> None:
    assert _encode_item(value) == _encode_value(value)


@pytest.mark.parametrize("value", [float("nan"), {"x": [float("inf")]}, -float("inf")])
def test_a_batch_item_json_cannot_hold_is_refused(value: Any) -> None:
    with pytest.raises(ValueError, match="not JSON compliant"):
        _encode_item(value)
