"""Fuzzing the host's frame decoder and dispatcher with generated guest traffic.

Whatever a guest sends, :func:`serve_run` returns (never raises), a bad run ends with
``protocol_error`` (or a limit), the end is in the audit log, and a well-behaved run served
at the same time is unaffected. `make soak` generates at least 10^5 frames.
"""

from __future__ import annotations

import asyncio
import json
import random
import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airlock.bridge import BridgeLimits, RunEnd, ToolSession, encode_frame, serve_run
from airlock.tools import AuditLog, MemoryAuditStore
from tests.bridge.frames import decode_frames
from tests.bridge.records import ALICE, GRANT, build_registry

REGISTRY = build_registry(audit=AuditLog(MemoryAuditStore()), slow_s=0.0)
TOOL_NAMES = [
    "records_item_get",
    "records_slow_get",
    "records_item_delete",
    "records_secret_get",
    "x" * 200,
    "",
]
FRAMES_GENERATED = 0
LOOP = asyncio.new_event_loop()  # one loop for every example: asyncio.run per example is slow


class CollectingWriter:
    """The parts of StreamWriter the server uses; collects what it would send."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.aborted = False
        self.transport = self

    def write(self, data: bytes) -> None:
        self.data += data

    def abort(self) -> None:
        self.aborted = True


def serving(
    reader: asyncio.StreamReader, session: ToolSession, *, max_done_bytes: int = 16 << 20
) -> tuple[asyncio.Task[Any], CollectingWriter]:
    """``serve_run`` of what ``reader`` is fed (its deadline 30 s away), as a task, and what
    it answers."""
    writer = CollectingWriter()
    served = asyncio.ensure_future(
        serve_run(
            reader,
            writer,  # type: ignore[arg-type]
            session=session,
            deadline=asyncio.get_running_loop().time() + 30,
            max_done_bytes=max_done_bytes,
        )
    )
    return served, writer


def _frame(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


# Hypothesis chooses each frame's kind and a seed; the frame is then built from the seed.
# Drawing whole JSON trees through Hypothesis costs milliseconds a frame, which would make
# 10^5 frames take minutes; seeds keep generation cheap and failures reproducible.


def _json_value(rng: random.Random, depth: int = 0) -> Any:
    choice = rng.randrange(9 if depth < 4 else 5)
    if choice == 0:
        return None
    if choice == 1:
        return rng.random() < 0.5
    if choice == 2:
        return rng.randint(-(2**70), 2**70)
    if choice == 3:
        return rng.uniform(-1e308, 1e308)
    if choice == 4:
        return "".join(chr(rng.randrange(0x20, 0x2FF)) for _ in range(rng.randrange(12)))
    if choice in (5, 6):
        return [_json_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {str(rng.randrange(50)): _json_value(rng, depth + 1) for _ in range(rng.randrange(4))}


def _args(rng: random.Random) -> Any:
    pick = rng.randrange(3)
    if pick == 0:
        return {
            "record_id": rng.choice(
                ["rec_1", "rec_999", "rec_7777", "../admin", "a/b?x=1", "rec_" + "1" * 9]
            )
        }
    if pick == 1:
        return {str(rng.randrange(5)): _json_value(rng) for _ in range(rng.randrange(3))}
    return _json_value(rng)


def _message_frame(rng: random.Random) -> bytes:
    kinds = [
        "call", "call", "call", "batch", "log", "refused", "done", "result", "hello", "abort",
        "shell",
    ]  # fmt: skip
    message: dict[str, Any] = {
        "type": rng.choice(kinds),
        "id": rng.choice([rng.randint(-5, 60), str(rng.randrange(9)), None, True, 2**60]),
        "tool": rng.choice([*TOOL_NAMES, 7]),
        "args": _args(rng),
        "items": [_args(rng) for _ in range(rng.randrange(4))]
        if rng.random() < 0.8
        else _json_value(rng),
        "message": _json_value(rng),
        "result": _json_value(rng),
    }
    for key in ("id", "tool", "args", "items", "message", "result"):
        if rng.random() < 0.1:
            del message[key]
    return _frame(json.dumps(message).encode())


def _raw_frame(rng: random.Random) -> bytes:
    pick = rng.randrange(8)
    if pick == 0:
        return _frame(rng.randbytes(rng.randrange(64)))
    if pick == 1:
        return struct.pack(">I", rng.randrange(2**20, 2**32))
    if pick == 2:
        return struct.pack(">I", rng.randrange(1, 2**16)) + b'{"type":'
    if pick == 3:
        depth = rng.randrange(1, 300)
        return _frame(b'{"type":"call","args":' + b"[" * depth + b"]" * depth + b"}")
    if pick == 4:
        return _frame(b'{"type":"call","type":"log"}')
    if pick == 5:
        return _frame(
            b'{"type":"log","message":' + rng.choice([b"NaN", b"Infinity", b"1e999"]) + b"}"
        )
    if pick == 6:
        return _frame(b'{"type":"call","id":' + b"9" * rng.randrange(31, 5000) + b"}")
    return _frame('{"type":"log","message":"\udcff"}'.encode("utf-8", "surrogatepass"))


def _build(kind: int, seed: int) -> bytes:
    rng = random.Random(seed)
    return _raw_frame(rng) if kind == 0 else _message_frame(rng)


traffic = st.lists(st.tuples(st.integers(0, 4), st.integers(0, 2**32)), min_size=30, max_size=70)


async def _serve(data: bytes, session: ToolSession) -> tuple[Any, CollectingWriter]:
    reader = asyncio.StreamReader()
    reader.feed_data(data)
    reader.feed_eof()
    writer = CollectingWriter()
    outcome = await serve_run(
        reader,
        writer,
        session=session,
        deadline=asyncio.get_running_loop().time() + 30,
        max_done_bytes=1 << 20,  # type: ignore[arg-type]
    )
    return outcome, writer


async def _good_run() -> tuple[Any, CollectingWriter]:
    """Five calls, then ``done`` once their answers came, as a program that waits for them
    (one that ends first has them cancelled: how many finish before depends on the load)."""
    session = ToolSession(registry=REGISTRY, principal=ALICE, grant=GRANT)
    reader = asyncio.StreamReader()
    for n in range(1, 6):
        call = {
            "type": "call",
            "id": n,
            "tool": "records_item_get",
            "args": {"record_id": f"rec_{n}"},
        }
        reader.feed_data(encode_frame(call))
    writer = CollectingWriter()

    async def end_once_answered() -> None:
        async with asyncio.timeout(20):
            while len(_results(writer)) < 5:
                await asyncio.sleep(0.001)
        reader.feed_data(encode_frame({"type": "done", "result": {"ok": True}}))
        reader.feed_eof()

    ending = asyncio.create_task(end_once_answered())
    outcome = await serve_run(
        reader,
        writer,
        session=session,
        deadline=asyncio.get_running_loop().time() + 30,
        max_done_bytes=1 << 20,  # type: ignore[arg-type]
    )
    await ending
    return outcome, writer


def _results(writer: CollectingWriter) -> list[dict[str, Any]]:
    return decode_frames(bytes(writer.data))


@settings(max_examples=2200, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(frames=traffic)
def _fuzz_one(frames: list[tuple[int, int]]) -> None:
    global FRAMES_GENERATED
    FRAMES_GENERATED += len(frames)
    data = b"".join(_build(kind, seed) for kind, seed in frames)
    session = ToolSession(
        registry=REGISTRY, principal=ALICE, grant=GRANT, limits=BridgeLimits(max_calls=40)
    )

    async def both() -> tuple[Any, Any]:
        return await asyncio.gather(_serve(data, session), _good_run())

    (outcome, _), (good, good_writer) = LOOP.run_until_complete(both())
    assert outcome is None or isinstance(outcome, RunEnd) or outcome.get("type") == "done"
    if isinstance(outcome, RunEnd):
        assert outcome.code in {"protocol_error", "limit_exceeded"}
        ends = [e for e in REGISTRY.audit.events(run_id=session.run_id) if e.stage == "bridge"]
        assert [e.code for e in ends] == [outcome.code]
    # The well-behaved run beside it: all five answers, right ids, then its own result.
    assert good == {"type": "done", "result": {"ok": True}}
    answers = {r["id"]: r["value"]["record_id"] for r in _results(good_writer)}
    assert answers == {n: f"rec_{n}" for n in range(1, 6)}
    for event in REGISTRY.audit.events(run_id=session.run_id):
        assert event.user_id == "alice"
        assert event.caller == "code"
        assert (
            event.tool not in {"records_item_delete", "records_secret_get"}
            or event.code == "unknown_tool"
        )


# A refused frame as the guest sends it, and forged ones: how the run ends, what is recorded.
REFUSED_CASES: dict[str, tuple[object, str | None, list[str]]] = {
    "a name": ("records_item_delete", None, ["records_item_delete"]),
    "terminal escapes": ("x\x1b[31m\nFAKE", None, ["x\\x1b[31m\\nFAKE"]),
    "empty": ("", "protocol_error", []),
    "too long": ("x" * 129, "protocol_error", []),
    "not a string": (["records_item_get"], "protocol_error", []),
}


@pytest.mark.parametrize("case", list(REFUSED_CASES), ids=list(REFUSED_CASES))
def test_a_refused_frame_is_recorded_or_ends_the_run(case: str) -> None:
    tool, end, recorded = REFUSED_CASES[case]
    session = ToolSession(registry=REGISTRY, principal=ALICE, grant=GRANT)
    data = encode_frame({"type": "refused", "tool": tool}) + encode_frame(
        {"type": "done", "result": {"ok": True}}
    )

    outcome, _ = LOOP.run_until_complete(_serve(data, session))

    events = REGISTRY.audit.events(run_id=session.run_id)
    if end is None:
        assert outcome == {"type": "done", "result": {"ok": True}}
    else:
        assert isinstance(outcome, RunEnd)
        assert outcome.code == end
    assert [e.tool for e in events if e.stage == "lookup"] == recorded
    assert all(e.code == "unknown_tool" for e in events if e.stage == "lookup")


@pytest.mark.parametrize("program", [None, "m2"])
def test_the_end_of_a_run_is_recorded_under_its_programs_call_ids(program: str | None) -> None:
    session = ToolSession(registry=REGISTRY, principal=ALICE, grant=GRANT)
    prefix = f"{session.run_id}:{program}" if program else session.run_id
    session.call_prefix = prefix if program else None

    outcome, _ = LOOP.run_until_complete(_serve(encode_frame({"type": "bogus"}), session))

    assert isinstance(outcome, RunEnd)
    [end] = [e for e in REGISTRY.audit.events(run_id=session.run_id) if e.stage == "bridge"]
    assert end.call_id == f"{prefix}:end"


@pytest.mark.slow
def test_fuzzed_frames_never_escape_the_run() -> None:
    _fuzz_one()
    assert FRAMES_GENERATED >= 100_000, FRAMES_GENERATED
