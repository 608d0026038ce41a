"""A ``cancel`` frame never frees a place among the calls the host runs before the handler
ends: a call still waiting (not started, or waiting for its turn) never runs and is not
recorded; one whose handler runs goes on to its end within ``max_concurrency``, is audited
as it ends, and its result is dropped. Only its place in flight is free at once.

The reviewer's program cancelled a blocking (sync) handler every 5 ms: each cancel freed
the call's place while its worker thread ran on, and 1980 handlers ran at once under the
default limits, some after the run had ended.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from airlock.bridge import BridgeLimits, ToolSession, encode_frame, serve_run
from airlock.policies import read
from airlock.tools import AuditLog, MemoryAuditStore, Registry
from tests.bridge.frames import decode_frames
from tests.bridge.records import ALICE, GRANT, build_registry
from tests.bridge.test_fuzz import CollectingWriter
from tests.bridge.test_guest_calls import Host
from tests.sandbox.guest_image import load_guest

guest = load_guest("airlock_bridge")


class Counted(BaseModel):
    n: int


class Running:
    """Handlers running at once, counted from their threads."""

    def __init__(self) -> None:
        self.now = 0
        self.peak = 0
        self.ran = 0
        self._lock = threading.Lock()

    def __enter__(self) -> None:
        with self._lock:
            self.now += 1
            self.ran += 1
            self.peak = max(self.peak, self.now)

    def __exit__(self, *_: object) -> None:
        with self._lock:
            self.now -= 1


def blocking_registry(running: Running, sleep_s: float) -> Registry:
    registry = Registry(audit=AuditLog(MemoryAuditStore()))

    @registry.tool(effects=[read("records:record/{n}")], scope="records.read",
                   callers={"direct", "code"})  # fmt: skip
    def records_sync_slow(n: int) -> Counted:
        """Fetch slowly from a blocking client. Use it to test cancel.
        It does not store anything."""
        with running:
            time.sleep(sleep_s)
        return Counted(n=n)

    return registry


def outcomes(session: ToolSession) -> Counter[str]:
    events = session.registry.audit.events(run_id=session.run_id)
    return Counter(e.outcome for e in events if e.tool)


def test_cancelled_blocking_handlers_stay_within_max_concurrency(tmp_path: Path) -> None:
    running = Running()
    limits = BridgeLimits(max_in_flight=8, max_concurrency=4)
    session = ToolSession(
        registry=blocking_registry(running, 0.25), principal=ALICE, grant=GRANT, limits=limits
    )
    host = Host(tmp_path / "bridge.sock", session)
    connection = guest.Connection(str(host.path))
    tools = guest.Tools(connection, [s.to_wire() for s in session.stubs()])

    async def program() -> int:
        cancelled = 0
        for n in range(80):
            try:
                await asyncio.wait_for(tools.records_sync_slow.aio(n=n), 0.005)
            except TimeoutError:
                cancelled += 1
        await asyncio.sleep(0.4)  # the handlers still running end: audited as they end
        return cancelled

    assert asyncio.run(program()) == 80
    connection.send({"type": "done", "result": None})
    host.join()
    assert host.outcome == {"type": "done", "result": None}
    time.sleep(0.3)  # a grace longer than a handler
    assert running.now == 0
    assert 0 < running.peak <= limits.max_concurrency
    # Those that ran, ran to their end; those cancelled while waiting were never recorded.
    assert outcomes(session) == Counter({"ok": running.ran})


async def serve(
    session: ToolSession, first: list[dict[str, Any]], then: list[dict[str, Any]]
) -> tuple[Any, list[dict[str, Any]]]:
    """Serve ``first``, then 0.05 s later (calls running) ``then``, then ``done`` 0.6 s
    later (past every handler): the outcome, and the frames the host sent."""
    reader = asyncio.StreamReader()
    reader.feed_data(b"".join(encode_frame(f) for f in first))
    writer = CollectingWriter()

    async def program() -> None:
        await asyncio.sleep(0.05)
        reader.feed_data(b"".join(encode_frame(f) for f in then))
        await asyncio.sleep(0.6)
        reader.feed_data(encode_frame({"type": "done", "result": None}))
        reader.feed_eof()

    feeding = asyncio.create_task(program())
    loop = asyncio.get_running_loop()
    outcome = await serve_run(
        reader, writer, session=session, deadline=loop.time() + 10, max_done_bytes=1 << 20
    )
    feeding.cancel()
    return outcome, decode_frames(bytes(writer.data))


def slow(call_id: int) -> dict[str, Any]:
    record = {"record_id": f"rec_{call_id}"}
    return {"type": "call", "id": call_id, "tool": "records_slow_get", "args": record}


def cancel(call_id: int) -> dict[str, Any]:
    return {"type": "cancel", "id": call_id}


FAST_2 = {"type": "call", "id": 2, "tool": "records_item_get", "args": {"record_id": "rec_2"}}
SLOW_BATCH = {"type": "batch", "id": 1, "tool": "records_slow_get",
              "items": [{"record_id": f"rec_{n}"} for n in range(1, 7)]}  # fmt: skip

# (case, max_concurrency, max_in_flight, frames, frames once calls run, answered ids,
#  audit outcomes of records_slow_get: what ran, ran to its end)
CASES: list[tuple[str, int, int, list[Any], list[Any], list[int], dict[str, int]]] = [
    ("running_call", 32, 16, [slow(1)], [cancel(1)], [], {"ok": 1}),
    ("its_place_is_free_at_once", 32, 1, [slow(1)], [cancel(1), FAST_2], [2], {"ok": 1}),
    ("waiting_for_its_turn", 1, 16, [slow(1), slow(2), slow(3)], [cancel(2)], [1, 3],
     {"ok": 2}),
    ("all_but_the_running_one_never_run", 1, 16, [slow(1), slow(2), slow(3)],
     [cancel(1), cancel(2), cancel(3)], [], {"ok": 1}),
    ("batch", 2, 16, [SLOW_BATCH], [cancel(1)], [], {"ok": 2}),
]  # fmt: skip


@pytest.mark.parametrize(
    ("case", "concurrency", "in_flight", "first", "then", "answered", "audited"),
    CASES,
    ids=[c[0] for c in CASES],
)
def test_a_running_call_cancelled_runs_to_its_end_unanswered(
    case: str,
    concurrency: int,
    in_flight: int,
    first: list[dict[str, Any]],
    then: list[dict[str, Any]],
    answered: list[int],
    audited: dict[str, int],
) -> None:
    limits = BridgeLimits(max_concurrency=concurrency, max_in_flight=in_flight)
    session = ToolSession(
        registry=build_registry(slow_s=0.2), principal=ALICE, grant=GRANT, limits=limits
    )
    outcome, sent = asyncio.run(serve(session, first, then))
    assert outcome == {"type": "done", "result": None}
    assert [f["id"] for f in sent if f["type"] == "result"] == answered
    events = session.registry.audit.events(run_id=session.run_id)
    assert Counter(e.outcome for e in events if e.tool == "records_slow_get") == audited
