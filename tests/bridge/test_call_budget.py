"""The arguments of one call from code hold at most ``MAX_CALL_ELEMENTS`` values and keys.

Admission validates arguments on the event loop, so the bridge's own budget of a frame
(200,000 values) let one call frame within every limit hold the loop 150 to 330 ms. Arguments
over the call budget (a call's, a proposal's, a batch item's) are answered ``invalid_input``,
naming the limit, without admission: the registry never sees them, the audit log records the
refusal, and the run goes on. Arguments at the budget are admitted as before.
"""

from __future__ import annotations

import asyncio
import threading
import tracemalloc
from collections.abc import Mapping
from typing import Annotated, Any

import pytest
from pydantic import BaseModel, Field

import airlock.bridge._codec as codec
from airlock.bridge import ToolSession, encode_frame
from airlock.bridge._call_budget import MAX_CALL_ELEMENTS, ArgumentsOverBudget
from airlock.bridge._codec import OFF_LOOP_BYTES, decode_body
from airlock.policies import read
from airlock.tools import AuditLog, CallContext, MemoryAuditStore, Registry
from tests.bridge.records import ALICE, GRANT
from tests.bridge.test_fuzz import _results, serving

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Count(BaseModel):
    count: int


def _registry() -> Registry:
    registry = Registry(audit=AuditLog(MemoryAuditStore()))

    @registry.tool(effects=[read("records:values")], scope="records.read",
                   callers={"direct", "code"})  # fmt: skip
    def records_values_count(
        values: Annotated[list[int], Field(max_length=2 * MAX_CALL_ELEMENTS)],
    ) -> Count:
        """Count the values given. Use it to send long arguments.
        It does not look at the values."""
        return Count(count=len(values))

    return registry


def _nested(depth: int, count: int) -> list[Any]:
    """``count`` lists, each ``depth`` levels deep (``count * depth`` values)."""
    unit: list[Any] = []
    for _ in range(depth - 1):
        unit = [unit]
    return [unit] * count


# Values and keys of {"values": VALUE}: the object, its key, and VALUE's own.
AT_BUDGET = [0] * (MAX_CALL_ELEMENTS - 3)
OVER_BUDGET = [0] * (MAX_CALL_ELEMENTS - 2)
_OK = {"ok": True, "value": {"count": MAX_CALL_ELEMENTS - 3}}
_REFUSED = {"ok": False, "code": "invalid_input"}


def _call(n: int, args: Mapping[str, Any], kind: str = "call") -> dict[str, Any]:
    return {"type": kind, "id": n, "tool": "records_values_count", "args": args}


def _batch(n: int, items: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "batch", "id": n, "tool": "records_values_count", "items": items}


CASES = [
    ("flat_list_at_the_budget", _call(1, {"values": AT_BUDGET}), _OK),
    ("flat_list_over_the_budget", _call(1, {"values": OVER_BUDGET}), _REFUSED),
    # The shape that held the loop longest: lists 30 deep (372 KiB, 193,730 values).
    ("nested_lists", _call(1, {"values": _nested(30, 6400)}), _REFUSED),
    ("nested_objects", _call(1, {"values": [{"a": {"b": {"c": 0}}}] * 2000}), _REFUSED),
    ("names_the_tool_does_not_take", _call(1, {f"k{n}": 0 for n in range(6000)}), _REFUSED),
    ("proposal", _call(1, {"values": OVER_BUDGET}, kind="propose"), _REFUSED),
]


def _outcome(answer: dict[str, Any]) -> dict[str, Any]:
    if answer["ok"]:
        return {"ok": True, "value": answer["value"]}
    return {"ok": False, "code": answer["error"]["code"]}


async def _serve(
    frames: list[dict[str, Any]], *, answers: int | None = None
) -> tuple[list[dict[str, Any]], ToolSession, list]:
    """Serve ``frames`` and a ``done`` frame (after ``answers`` answers, one a frame unless
    told); the answers, the session, and the arguments the registry was asked to admit."""
    registry = _registry()
    admitted: list[Mapping[str, Any]] = []
    call = registry.call

    async def spy(name: str, args: Mapping[str, Any], ctx: CallContext) -> Any:
        admitted.append(args)
        return await call(name, args, ctx)

    registry.call = spy  # type: ignore[method-assign]
    session = ToolSession(registry=registry, principal=ALICE, grant=GRANT)
    reader = asyncio.StreamReader()
    reader.feed_data(b"".join(encode_frame(f) for f in frames))
    served, writer = serving(reader, session, max_done_bytes=1 << 20)
    async with asyncio.timeout(20):  # as a program does: its answers, then its end
        while len(_results(writer)) < (len(frames) if answers is None else answers):
            await asyncio.sleep(0.01)
    reader.feed_data(encode_frame({"type": "done", "result": {}}))
    reader.feed_eof()
    outcome = await served
    assert outcome == {"type": "done", "result": {}}  # the run goes on
    return _results(writer), session, admitted


@pytest.mark.parametrize(("case", "frame", "expected"), CASES, ids=[c[0] for c in CASES])
async def test_arguments_over_the_call_budget_are_refused_without_admission(
    case: str, frame: dict[str, Any], expected: dict[str, Any]
) -> None:
    [answer], session, admitted = await _serve([frame])
    assert _outcome(answer) == expected
    if expected["ok"]:
        assert len(admitted) == 1
        return
    assert admitted == []  # never validated: the loop is not held by them
    error = answer["error"]
    assert error["retryable"] is False
    assert f"more than {MAX_CALL_ELEMENTS} values and keys" in error["message"]
    assert error["issues"][0]["field"] == ""
    [event] = session.registry.audit.events(run_id=session.run_id)
    assert (event.stage, event.decision, event.code) == ("validate", "deny", "invalid_input")
    assert event.call_id == f"{session.run_id}:1"
    assert event.tool == "records_values_count"


async def test_a_batch_item_over_the_call_budget_is_refused_alone() -> None:
    small = {"values": [1, 2]}
    items = [small, {"values": OVER_BUDGET}, small, {"values": _nested(20, 600)}, small]
    [answer], session, admitted = await _serve([_batch(7, items)])
    assert answer["ok"]
    outcomes = [
        {"ok": True, "value": o["value"]} if o["ok"] else {"ok": False, "code": o["error"]["code"]}
        for o in answer["value"]
    ]
    assert outcomes == [
        {"ok": True, "value": {"count": 2}},
        _REFUSED,
        {"ok": True, "value": {"count": 2}},
        _REFUSED,
        {"ok": True, "value": {"count": 2}},
    ]
    assert admitted == [small] * 3
    refused = [e for e in session.registry.audit.events(run_id=session.run_id) if e.code]
    assert sorted(e.call_id for e in refused) == [f"{session.run_id}:7.{n}" for n in (1, 3)]


async def test_a_small_batch_of_items_at_the_budget_is_admitted_whole() -> None:
    # A frame too small to hold more than the budget is not looked into (its size says so).
    items = [{"values": list(range(n))} for n in range(50)]
    [answer], _, admitted = await _serve([_batch(1, items)])
    assert [o["value"]["count"] for o in answer["value"]] == list(range(50))
    assert len(admitted) == 50


def _body(message: dict[str, Any]) -> bytes:
    return encode_frame(message)[4:]


_NESTED = _nested(30, 3000)  # 90,000 lists: 5 MiB of Python objects once decoded
_OVER = ArgumentsOverBudget()
# As decoded: what the host keeps of a frame, and so what the collector may ever walk.
DECODED = [
    ("call_over", _call(1, {"values": _NESTED}), _call(1, _OVER)),
    ("call_with_other_keys", {**_call(1, {"values": [1]}), "pad": _NESTED, "id": 2},
     _call(2, {"values": [1]})),
    ("proposal_over", _call(1, {"values": _NESTED}, kind="propose"),
     _call(1, _OVER, kind="propose")),
    ("batch_item_over", _batch(1, [{"values": [1]}, {"values": _NESTED}]),
     _batch(1, [{"values": [1]}, _OVER])),
    ("log_with_other_keys", {"type": "log", "message": "hi", "pad": _NESTED},
     {"type": "log", "message": "hi"}),
    ("refused_with_other_keys", {"type": "refused", "tool": "x_y", "pad": _NESTED},
     {"type": "refused", "tool": "x_y"}),
    ("small_call_untouched", {**_call(1, {"values": [1]}), "pad": [[0]] * 100},
     {**_call(1, {"values": [1]}), "pad": [[0]] * 100}),
]  # fmt: skip


@pytest.mark.parametrize(("case", "frame", "kept"), DECODED, ids=[c[0] for c in DECODED])
def test_what_a_frame_holds_over_the_budget_is_dropped_as_it_is_decoded(
    case: str, frame: dict[str, Any], kept: dict[str, Any]
) -> None:
    body = _body(frame)
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        decoded = decode_body(body)
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert decoded == kept
    assert [type(v) for v in _items_or_args(decoded)] == [type(v) for v in _items_or_args(kept)]
    # Freed before the collector could walk it: what stays is the frame the host reads.
    assert held - before < 64 * 1024


def _items_or_args(frame: dict[str, Any]) -> list[Any]:
    return frame.get("items", [frame.get("args")])


# Where the server decodes a frame: on the event loop when it is small and holds few values,
# else in a worker thread. A body of more values and keys than one call's arguments may hold
# may have to be trimmed, a walk of its arguments that grows with them: it is not done on the
# loop, however small the body (6 items of 5,000 empty lists, 58 KiB: 10 ms instead of 4).
_TEN = [0] * 10  # an item of 13 values and keys in a batch frame
WHERE = [
    ("small_call", _call(1, {"values": [1, 2]}), "loop"),
    ("call_within_the_budget", _call(1, {"values": [0] * 9000}), "loop"),
    ("call_over_the_budget", _call(1, {"values": OVER_BUDGET}), "thread"),
    ("proposal_over_the_budget", _call(1, {"values": OVER_BUDGET}, kind="propose"), "thread"),
    ("batch_of_many_small_items", _batch(1, [{"values": _TEN}] * 1000), "thread"),
    ("log_with_other_keys", {"type": "log", "message": "hi", "pad": [0] * 12000}, "thread"),
    ("large_body", _call(1, {"values": [10**9] * (OFF_LOOP_BYTES // 10)}), "thread"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "frame", "where"), WHERE, ids=[c[0] for c in WHERE])
async def test_a_frame_that_may_need_trimming_is_decoded_off_the_event_loop(
    monkeypatch: pytest.MonkeyPatch, case: str, frame: dict[str, Any], where: str
) -> None:
    body = _body(frame)
    assert len(body) > OFF_LOOP_BYTES if case == "large_body" else len(body) <= OFF_LOOP_BYTES
    threads: dict[int, str] = {}
    decode = codec.decode_body

    def recording(data: bytes | bytearray, **options: Any) -> dict[str, Any]:
        threads[len(data)] = threading.current_thread().name
        return decode(data, **options)

    monkeypatch.setattr(codec, "decode_body", recording)
    await _serve([frame], answers=0 if frame["type"] == "log" else 1)
    loop_thread = threading.current_thread().name
    assert (threads[len(body)] == loop_thread) == (where == "loop")
