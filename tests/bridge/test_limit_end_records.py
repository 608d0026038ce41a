"""The audit record of a run's end over a limit names the tool the call over it named: a call,
a batch or a proposal frame past ``max_calls`` or ``max_in_flight``, or one that took the
run past ``max_bytes_in``; an unknown name as the program sent it (escaped, as any unknown
name is recorded). An end no call frame brought (log lines, the deadline, a protocol error)
names no tool."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from airlock.bridge import BridgeLimits, RunEnd, ToolSession, encode_frame, serve_run
from airlock.tools import AuditLog, MemoryAuditStore
from tests.bridge.records import ALICE, GRANT, build_registry
from tests.bridge.test_fuzz import CollectingWriter

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _session(limits: BridgeLimits) -> ToolSession:
    registry = build_registry(audit=AuditLog(MemoryAuditStore()), slow_s=5.0)
    return ToolSession(registry=registry, principal=ALICE, grant=GRANT, limits=limits)


async def _serve(frames: list[dict[str, Any]], session: ToolSession, deadline_s: float) -> Any:
    reader = asyncio.StreamReader()
    reader.feed_data(b"".join(encode_frame(f) for f in frames))
    if deadline_s > 1:  # (else the stream stays open: the run ends at its deadline)
        reader.feed_data(encode_frame({"type": "done", "result": {}}))
        reader.feed_eof()
    return await serve_run(
        reader,
        CollectingWriter(),  # type: ignore[arg-type]
        session=session,
        deadline=asyncio.get_running_loop().time() + deadline_s,
        max_done_bytes=1 << 20,
    )


def _call(n: int, tool: str = "records_item_get") -> dict[str, Any]:
    return {"type": "call", "id": n, "tool": tool, "args": {"record_id": f"rec_{n}"}}


def _batch(n: int, tool: str = "records_item_get") -> dict[str, Any]:
    return {"type": "batch", "id": n, "tool": tool, "items": [{"record_id": "rec_1"}] * 2}


_LOG = {"type": "log", "message": "x"}

# name: (limits, frames, the run's end limit or code, the tool its audit record names)
CASES: dict[str, tuple[BridgeLimits, list[dict[str, Any]], str, str]] = {
    "calls": (BridgeLimits(max_calls=2), [_call(1), _call(2), _call(3)], "calls",
              "records_item_get"),
    "calls, another tool": (BridgeLimits(max_calls=2),
                            [_call(1), _call(2), _call(3, "records_slow_get")], "calls",
                            "records_slow_get"),
    "calls by a batch": (BridgeLimits(max_calls=3), [_call(1), _batch(2), _batch(3)], "calls",
                         "records_item_get"),
    "calls, an unknown name": (BridgeLimits(max_calls=1), [_call(1), _call(2, "no_such_tool")],
                               "calls", "no_such_tool"),
    "calls, a hidden tool": (BridgeLimits(max_calls=1),
                             [_call(1), _call(2, "records_secret_get")], "calls",
                             "records_secret_get"),
    "calls, a name with escapes": (BridgeLimits(max_calls=1), [_call(1), _call(2, "x\x1b[31m")],
                                   "calls", "x\\x1b[31m"),
    "in flight": (BridgeLimits(max_in_flight=2),
                  [_call(n, "records_slow_get") for n in range(1, 4)], "in_flight",
                  "records_slow_get"),
    "bytes": (BridgeLimits(max_bytes_in=300), [_call(n) for n in range(1, 10)], "bytes",
              "records_item_get"),
    "log lines": (BridgeLimits(max_log_frames=2), [_call(1), _LOG, _LOG, _LOG], "calls", ""),
    "bytes of log lines": (BridgeLimits(max_bytes_in=120), [_call(1)] + [_LOG] * 9, "bytes", ""),
    "a protocol error": (BridgeLimits(), [_call(1), {**_call(2), "args": []}], "protocol_error",
                         ""),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
async def test_the_record_of_an_end_over_a_limit_names_the_calls_tool(case: str) -> None:
    limits, frames, ended, tool = CASES[case]
    session = _session(limits)

    outcome = await _serve(frames, session, deadline_s=30)

    assert isinstance(outcome, RunEnd)
    assert ended in {outcome.limit, outcome.code}
    [end] = [e for e in session.registry.audit.events(run_id=session.run_id) if e.stage == "bridge"]
    assert (end.tool, end.code, end.call_id) == (tool, outcome.code, f"{session.run_id}:end")


async def test_the_record_of_a_run_past_its_deadline_names_no_tool() -> None:
    session = _session(BridgeLimits())

    outcome = await _serve([_call(1, "records_slow_get")], session, deadline_s=0.3)

    assert outcome == RunEnd("timeout", "timeout", "the run's deadline passed")
    [end] = [e for e in session.registry.audit.events(run_id=session.run_id) if e.stage == "bridge"]
    assert (end.tool, end.code) == ("", "timeout")
