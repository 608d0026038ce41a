"""A call the program cancels (``asyncio.wait_for`` timed out, a task cancelled) is given up
on the host too: the image's own guest half against the real host server, in process.

The guest drops the frame of a call cancelled before it left, and sends a ``cancel`` frame
for one that had: the host answers nothing and frees its place among the calls in flight at
once. A call still waiting never runs; one whose handler runs goes on to its end within
``max_concurrency`` and is audited as it ends (see test_cancel_running). A proposal cancelled
before it was answered is not among the run's proposals, for a person to approve.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from airlock.bridge import BridgeLimits, RunEnd, ToolSession, encode_frame, serve_run
from tests.bridge.frames import decode_frames
from tests.bridge.records import ALICE, GRANT, build_registry
from tests.bridge.test_fuzz import CollectingWriter
from tests.bridge.test_guest_calls import Host, bridge
from tests.bridge.test_proposals_docker import World
from tests.sandbox.guest_image import load_guest

guest = load_guest("airlock_bridge")


def outcomes(session: ToolSession, tool: str) -> Counter[str]:
    events = session.registry.audit.events(run_id=session.run_id)
    return Counter(e.outcome for e in events if e.tool == tool)


async def cancel_each(tools: Any, count: int, timeout: float) -> int:
    cancelled = 0
    for n in range(1, count + 1):
        try:
            await asyncio.wait_for(tools.records_slow_get.aio(record_id=f"rec_{n}"), timeout)
        except TimeoutError:
            cancelled += 1
    return cancelled


def test_cancelled_calls_free_their_places_in_flight(tmp_path: Path) -> None:
    # Each call is cancelled while the host runs it (0.2 s each): with the places not freed,
    # the 17th would end the run (max_in_flight 16), as the reviewer's program did.
    with bridge(tmp_path, limits=BridgeLimits(max_in_flight=16)) as (tools, conn, session, host):
        assert asyncio.run(cancel_each(tools, 40, 0.005)) == 40
        time.sleep(0.3)  # the handlers still running end
        assert tools.records_item_get(record_id="rec_3")["record_id"] == "rec_3"
        assert not conn._pending
    assert host.outcome == {"type": "done", "result": None}
    # A handler that ran, ran to its end (the run ended past them): none was cut short.
    ran = outcomes(session, "records_slow_get")
    assert set(ran) == {"ok"}
    assert 0 < ran["ok"] <= 40


def test_a_cancelled_call_is_not_answered(tmp_path: Path) -> None:
    async def program(tools: Any) -> Any:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(tools.records_slow_get.aio(record_id="rec_1"), 0.02)
        await asyncio.sleep(0.4)  # past the call's 0.2 s: an answer would have come
        return await tools.records_item_get.aio(record_id="rec_2")

    with bridge(tmp_path) as (tools, connection, session, _):
        assert asyncio.run(program(tools))["record_id"] == "rec_2"
        assert connection._received == b""  # nothing unread: no answer for the cancelled one
    assert outcomes(session, "records_slow_get") == Counter({"ok": 1})  # ran to its end


def test_a_call_cancelled_before_its_frame_left_is_never_sent(tmp_path: Path) -> None:
    with bridge(tmp_path) as (tools, _, session, _host):
        assert asyncio.run(cancel_each(tools, 5, 0)) == 5
        assert session.calls == 0
    assert outcomes(session, "records_slow_get") == Counter()


# (case, the frames after a call of id 1 that is still running; what the run does)
CANCELS: list[tuple[str, list[dict[str, Any]], str]] = [
    ("unknown_id", [{"type": "cancel", "id": 99}], "answered"),
    ("answered_id", [{"type": "cancel", "id": 2}], "answered"),
    ("twice", [{"type": "cancel", "id": 1}, {"type": "cancel", "id": 1}], "cancelled"),
    ("the_call", [{"type": "cancel", "id": 1}], "cancelled"),
    ("not_an_id", [{"type": "cancel", "id": "1"}], "protocol_error"),
    ("no_id", [{"type": "cancel"}], "protocol_error"),
    ("zero", [{"type": "cancel", "id": 0}], "protocol_error"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "cancels", "expected"), CANCELS, ids=[c[0] for c in CANCELS])
def test_a_cancel_frame_cancels_its_call_and_nothing_else(
    case: str, cancels: list[dict[str, Any]], expected: str
) -> None:
    session = ToolSession(registry=build_registry(slow_s=0.3), principal=ALICE, grant=GRANT)

    async def serve() -> tuple[Any, list[dict[str, Any]]]:
        reader = asyncio.StreamReader()
        slow = {"type": "call", "id": 1, "tool": "records_slow_get", "args": {"record_id": "rec_1"}}
        fast = {"type": "call", "id": 2, "tool": "records_item_get", "args": {"record_id": "rec_2"}}
        reader.feed_data(encode_frame(slow) + encode_frame(fast))
        writer = CollectingWriter()

        async def guest() -> None:
            await asyncio.sleep(0.05)  # the slow call runs, the fast one is answered
            reader.feed_data(b"".join(encode_frame(c) for c in cancels))
            await asyncio.sleep(0.5)
            reader.feed_data(encode_frame({"type": "done", "result": None}))
            reader.feed_eof()

        feeding = asyncio.create_task(guest())
        loop = asyncio.get_running_loop()
        outcome = await serve_run(
            reader, writer, session=session, deadline=loop.time() + 10, max_done_bytes=1 << 20
        )
        feeding.cancel()
        return outcome, decode_frames(bytes(writer.data))

    outcome, sent = asyncio.run(serve())
    answered = [f["id"] for f in sent if f["type"] == "result"]
    slow = outcomes(session, "records_slow_get")
    if expected == "protocol_error":
        assert isinstance(outcome, RunEnd)
        assert outcome.code == "protocol_error"
        return
    assert outcome == {"type": "done", "result": None}
    if expected == "answered":
        assert answered == [2, 1]
        assert slow == Counter({"ok": 1})
    else:
        assert answered == [2]
        assert slow == Counter({"ok": 1})  # it ran to its end, unanswered


# (case, wait_for's timeout, previews stored in the ledger: the kept one, and those whose
# preparing had begun, which ran to their end)
PROPOSALS = [("before_it_left", 0, 1), ("while_prepared", 0.05, 4)]


@pytest.mark.parametrize(("case", "timeout", "stored"), PROPOSALS, ids=[c[0] for c in PROPOSALS])
def test_a_cancelled_proposal_is_not_among_the_runs_proposals(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str, timeout: float, stored: int
) -> None:
    world = World(tmp_path)
    prepare = world.writes.propose_from_code

    async def slowly(*args: Any, **kwargs: Any) -> Any:  # a proposal takes a while to prepare
        await asyncio.sleep(0.2)
        return await prepare(*args, **kwargs)

    monkeypatch.setattr(world.writes, "propose_from_code", slowly)
    session = world.session()
    stubs = [s.to_wire() for s in session.stubs()]
    host = Host(tmp_path / "bridge.sock", session)
    tools = guest.Tools(guest.Connection(str(host.path)), stubs)
    propose = tools.propose.billing_refund_create

    async def program() -> list[Any]:
        for n in (1, 2, 3):
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(
                    propose.aio(invoice_id=f"inv_{n}", reason="duplicate"), timeout
                )
        await asyncio.sleep(0.3)  # past the preparing: a preview would be stored by now
        return [await propose.aio(invoice_id="inv_4", reason="duplicate")]

    try:
        (kept,) = asyncio.run(program())
        tools._connection.send({"type": "done", "result": None})
        host.join()
        assert host.outcome == {"type": "done", "result": None}
        assert [p.id for p in session.proposed_previews()] == [kept["preview_id"]]
        assert len(world.ledger.previews(run_id=session.run_id)) == stored
        assert world.system.sends() == 0
    finally:
        world.close()
