"""``max_call_frame_bytes`` is a frame body's size, on both sides: the guest sends a call
whose body is at the limit, so the host must take it (it counted the 4-byte length prefix
too, and ended such runs as a protocol error the program could not have avoided)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from airlock.bridge import BridgeLimits, RunEnd, ToolSession, encode_frame, serve_run
from airlock.tools import AuditLog, MemoryAuditStore
from tests.bridge.frames import decode_frames
from tests.bridge.records import ALICE, GRANT, build_registry
from tests.bridge.test_fuzz import CollectingWriter

LIMIT = 2000


def _body(kind: str, size: int) -> bytes:
    """A ``kind`` frame's body of exactly ``size`` bytes (its padding in an argument)."""
    args = {"record_id": ""}
    base = {"type": kind, "id": 1, "tool": "records_item_get"}
    message: dict[str, Any] = (
        {**base, "items": [args]} if kind == "batch" else {**base, "args": args}
    )
    empty = len(json.dumps(message, separators=(",", ":")))
    args["record_id"] = "x" * (size - empty)
    body = json.dumps(message, separators=(",", ":")).encode()
    assert len(body) == size
    return body


async def _serve(body: bytes) -> tuple[Any, list[dict[str, Any]]]:
    session = ToolSession(
        registry=build_registry(audit=AuditLog(MemoryAuditStore()), slow_s=0.0),
        principal=ALICE,
        grant=GRANT,
        limits=BridgeLimits(max_call_frame_bytes=LIMIT),
    )
    reader = asyncio.StreamReader()
    reader.feed_data(len(body).to_bytes(4, "big") + body)
    writer = CollectingWriter()

    async def end_once_answered() -> None:
        async with asyncio.timeout(10):
            while not writer.data and not writer.aborted:
                await asyncio.sleep(0.001)
        reader.feed_data(encode_frame({"type": "done", "result": None}))
        reader.feed_eof()

    ending = asyncio.create_task(end_once_answered())
    outcome = await serve_run(
        reader,
        writer,
        session=session,
        deadline=asyncio.get_running_loop().time() + 20,
        max_done_bytes=1 << 20,
    )
    ending.cancel()
    return outcome, decode_frames(bytes(writer.data))


# (body size past the limit, how the run goes on)
EDGES = [(-1, "answered"), (0, "answered"), (1, "protocol_error")]


@pytest.mark.parametrize("kind", ["call", "batch", "propose"])
@pytest.mark.parametrize(("past", "expected"), EDGES, ids=[f"limit{d:+d}" for d, _ in EDGES])
def test_a_call_frame_at_the_limit_is_taken(kind: str, past: int, expected: str) -> None:
    outcome, sent = asyncio.run(_serve(_body(kind, LIMIT + past)))
    if expected == "answered":
        assert outcome == {"type": "done", "result": None}
        assert [(f["type"], f["id"]) for f in sent] == [("result", 1)]
    else:
        assert isinstance(outcome, RunEnd)
        assert outcome.code == expected
        assert f"frame of {LIMIT + past} bytes" in outcome.message
