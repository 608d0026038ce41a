"""The documented call forms at the bridge's limits, in a real container: the ``run`` frame
carries ``max_in_flight``, ``max_batch_items`` and ``max_call_frame_bytes``, so a ``gather``
of more awaitable calls, calls from more threads (or both at once), or a ``batch`` of more
items or bytes, ends ok with every result; cancelled calls free their places
on the host (one already running runs on, unanswered); a cancelled proposal leaves no
preview; and a call at
``max_call_frame_bytes`` is taken as the guest let it go."""

from __future__ import annotations

import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from airlock.bridge import BridgeLimits, ToolSession
from airlock.tools import AuditLog, MemoryAuditStore
from tests.bridge.records import ALICE, GRANT, build_registry
from tests.bridge.test_proposals_docker import World
from tests.conftest import Sandbox

pytestmark = pytest.mark.docker

LIMITS = BridgeLimits(max_in_flight=16, max_batch_items=10, max_call_frame_bytes=2000)


def session(slow_s: float = 0.05) -> ToolSession:
    registry = build_registry(audit=AuditLog(MemoryAuditStore()), slow_s=slow_s)
    return ToolSession(registry=registry, principal=ALICE, grant=GRANT, limits=LIMITS)


GATHER = """
import asyncio
async def main():
    return await asyncio.gather(*(tools.{tool}.aio(record_id=f"rec_{{n}}") for n in range(1, 61)))
[r["total"] for r in asyncio.run(main())]
"""
BATCH = '[r["total"] for r in tools.records_item_get.batch([{"record_id": f"rec_{n}"} for n in range(1, 12)])]'
CANCEL = """
import asyncio
async def main():
    cancelled = 0
    for n in range(1, 40):
        try:
            await asyncio.wait_for(tools.records_slow_get.aio(record_id=f"rec_{n}"), 0.01)
        except asyncio.TimeoutError:
            cancelled += 1
    return cancelled
asyncio.run(main())
"""
OUTSIDE_A_LOOP = """
import asyncio
futures = [tools.records_item_get.aio(record_id=f"rec_{n}") for n in range(1, 4)]
async def main():
    return await asyncio.gather(*futures)
[r["total"] for r in asyncio.run(main())]
"""
GATHER_AND_A_THREAD = """
import asyncio
def one(n):
    return tools.records_slow_get(record_id=f"rec_{n}")["total"]
async def main():
    calls = [tools.records_slow_get.aio(record_id=f"rec_{n}") for n in range(1, 31)]
    *records, aside = await asyncio.gather(*calls, asyncio.to_thread(one, 31))
    return [r["total"] for r in records] + [aside]
asyncio.run(main())
"""
THREAD_POOL = """
from concurrent.futures import ThreadPoolExecutor
with ThreadPoolExecutor(max_workers=40) as pool:
    totals = list(pool.map(lambda n: tools.records_slow_get(record_id=f"rec_{n}")["total"], range(1, 41)))
totals
"""
BATCH_OF_BYTES = """
ids = ["rec_1", "rec_" + "9" * 600, "rec_3", "rec_" + "9" * 600, "rec_" + "9" * 600, "rec_6",
       "rec_" + "9" * 3000, "rec_8"]
out = tools.records_item_get.batch([{"record_id": i} for i in ids], return_errors=True)
[r["total"] if isinstance(r, dict) else r.code for r in out]
"""
TWO_LOOPS_AND_A_SYNC_CALL = """
import asyncio, time
def another_loop():
    async def fan_out():
        calls = [tools.records_slow_get.aio(record_id=f"rec_{n}") for n in range(2, 18)]
        time.sleep(0.05)
        inline = tools.records_slow_get(record_id="rec_18")["total"]
        return [r["total"] for r in await asyncio.gather(*calls)] + [inline]
    return asyncio.run(fan_out())
async def main():
    first = await tools.records_slow_get.aio(record_id="rec_1")
    return [first["total"]] + await asyncio.to_thread(another_loop)
asyncio.run(main())
"""
INTERRUPTED_SYNC_CALLS = """
import signal
class Late(Exception):
    pass
def on_alarm(*_):
    raise Late()
signal.signal(signal.SIGALRM, on_alarm)
late = 0
for n in range(1, 21):
    signal.setitimer(signal.ITIMER_REAL, 0.02)
    try:
        tools.records_slow_get(record_id=f"rec_{n}")
    except Late:
        late += 1
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
[late, tools.records_slow_get(record_id="rec_1")["total"]]
"""
AN_ITEM_PAST_MAX_CALL_FRAME_BYTES = """
try:
    tools.records_item_get.batch([{"record_id": "rec_1"}, {"record_id": "rec_" + "9" * 3000}])
    out = "no error"
except tools.ToolError as e:
    out = [e.code, e.issues[0]["field"]]
out
"""
REFUSED = "invalid_input"
# (case, program, the slow tool's seconds, the value, the calls the host counted, the mode)
PROGRAMS: list[tuple[str, str, float, Any, int, str]] = [
    ("gather_past_max_in_flight", GATHER.format(tool="records_item_get"), 0.05,
     [n * 10 for n in range(1, 61)], 60, "restricted"),
    ("gather_of_slow_calls", GATHER.format(tool="records_slow_get"), 0.05,
     [n * 10 for n in range(1, 61)], 60, "restricted"),
    ("batch_past_max_batch_items", BATCH, 0.05, [n * 10 for n in range(1, 12)], 11,
     "restricted"),
    ("cancelled_calls_free_their_places", CANCEL, 2.0, 39, 39, "restricted"),
    ("aio_made_outside_a_loop", OUTSIDE_A_LOOP, 0.05, [10, 20, 30], 3, "restricted"),
    ("gather_and_a_call_from_a_thread", GATHER_AND_A_THREAD, 0.2,
     [n * 10 for n in range(1, 32)], 31, "full"),
    ("thread_pool_past_max_in_flight", THREAD_POOL, 0.2, [n * 10 for n in range(1, 41)], 40,
     "full"),
    ("batch_past_max_call_frame_bytes", BATCH_OF_BYTES, 0.05,
     [10, REFUSED, 30, REFUSED, REFUSED, 60, REFUSED, 80], 7, "restricted"),
    ("an_item_past_max_call_frame_bytes_raises_before_sending",
     AN_ITEM_PAST_MAX_CALL_FRAME_BYTES, 0.05, [REFUSED, "1"], 0, "restricted"),
    ("two_loops_and_a_sync_call_past_max_in_flight", TWO_LOOPS_AND_A_SYNC_CALL, 0.05,
     [n * 10 for n in range(1, 19)], 18, "full"),
    ("sync_calls_a_signal_handler_interrupts", INTERRUPTED_SYNC_CALLS, 0.2, [20, 10], 21,
     "full"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("case", "program", "slow_s", "value", "calls", "mode"),
    PROGRAMS,
    ids=[p[0] for p in PROGRAMS],
)
def test_a_documented_form_ends_ok_within_the_limits(
    sandbox: Sandbox, case: str, program: str, slow_s: float, value: Any, calls: int, mode: str
) -> None:
    tools = session(slow_s)
    profile = {"language_mode": mode} if mode != "restricted" else {}  # (the default)
    result = sandbox.run(textwrap.dedent(program), tools=tools, **profile)
    assert result.ok, (case, result.error)
    assert result.value == value
    assert result.tool_calls == calls
    if case == "cancelled_calls_free_their_places":
        # Those that started ran on within max_concurrency until the run's end cut them; those
        # still waiting for their turn never ran. None answered, none recorded twice.
        events = tools.registry.audit.events(run_id=tools.run_id)
        slow = Counter(e.outcome for e in events if e.tool == "records_slow_get")
        assert set(slow) == {"unknown"}, slow
        assert slow["unknown"] <= 39, slow


FRAME_EDGE = """
import json
def body(s):
    message = {{"type": "call", "tool": "records_item_get", "args": {{"record_id": s}}, "id": 1}}
    return len(json.dumps(message, separators=(",", ":")))
s = "x" * ({limit} + ({past}) - body(""))
try:
    tools.records_item_get(record_id=s)
    out = "ok"
except tools.ToolError as e:
    out = "sent" if "12 characters" in e.message else "refused in the sandbox"
[body(s), out]
"""
EDGES = [(-1, "sent"), (0, "sent"), (1, "refused in the sandbox")]


@pytest.mark.parametrize(("past", "outcome"), EDGES, ids=[f"limit{p:+d}" for p, _ in EDGES])
def test_a_call_frame_at_the_limit_reaches_the_tool(
    sandbox: Sandbox, past: int, outcome: str
) -> None:
    tools = session()
    program = FRAME_EDGE.format(limit=LIMITS.max_call_frame_bytes, past=past)
    result = sandbox.run(program, tools=tools)
    assert result.ok, result.error  # never a protocol error
    assert result.value == [LIMITS.max_call_frame_bytes + past, outcome]


def test_a_cancelled_proposal_leaves_no_preview(sandbox: Sandbox, tmp_path: Path) -> None:
    world = World(tmp_path)
    try:
        tools = world.session()
        program = textwrap.dedent("""
            import asyncio
            propose = tools.propose.billing_refund_create
            async def main():
                for n in (1, 2, 3):
                    try:
                        await asyncio.wait_for(propose.aio(invoice_id=f"inv_{n}", reason="duplicate"), 0)
                    except asyncio.TimeoutError:
                        pass
                await asyncio.sleep(0.3)
                return await propose.aio(invoice_id="inv_4", reason="duplicate")
            asyncio.run(main())["preview_id"]
        """)
        result = sandbox.run(program, tools=tools)
        assert result.ok, result.error
        assert [p.id for p in tools.proposed_previews()] == [result.value]
    finally:
        world.close()
