"""How the answers to a burst of calls leave the host: the call of the first frame of a turn
runs at once and is answered on its own (a lone call, or the first of a burst); the burst's
other frames are all taken, then their calls run in the next turn and are answered in writes of
:data:`FLUSH_FRAMES` results, each as soon as that many are done, so the guest's program goes
on (and sends its next calls) while the host runs the rest of the burst."""

from __future__ import annotations

import asyncio
import socket

import pytest

from airlock.bridge import ToolSession, _runner, _server, encode_frame, serve_run
from airlock.bridge._results import FLUSH_FRAMES
from airlock.tools import AuditLog, MemoryAuditStore
from tests.bridge.frames import decode_frames
from tests.bridge.records import ALICE, GRANT, build_registry

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def turn_s(monkeypatch: pytest.MonkeyPatch) -> None:
    """A turn of the loop as long as the burst takes, the server's reading frames and the
    call runner's running calls: how results are written together is counted in frames
    here, whatever the machine's speed (the time a turn may take is tested on its own,
    below)."""
    monkeypatch.setattr(_server, "TURN_S", 60.0)
    monkeypatch.setattr(_runner, "TURN_S", 60.0)


class WriteLog:
    """Each write the host made to the guest: its results' ids, how many calls had been
    admitted when it left, and how many had run (their events, in the audit log)."""

    def __init__(self, session: ToolSession, writer: asyncio.StreamWriter) -> None:
        self.writes: list[tuple[list[int], int]] = []
        self.ran: list[int] = []
        write = writer.write

        def logged(data: bytes | bytearray | memoryview) -> None:
            ids = [f["id"] for f in decode_frames(bytes(data)) if f["type"] == "result"]
            if ids:
                self.writes.append((ids, session.calls))
                self.ran.append(len(session.registry.audit.events()))
            write(data)

        writer.write = logged  # type: ignore[method-assign]


async def _answer_burst(calls: int) -> WriteLog:
    """Serve ``calls`` read calls that reach the host's socket together (then ``done``), after
    one call alone; the writes of the burst's results."""
    registry = build_registry(audit=AuditLog(MemoryAuditStore()), slow_s=0.0)
    session = ToolSession(registry=registry, principal=ALICE, grant=GRANT)
    first, *burst = (
        encode_frame(
            {"type": "call", "id": n, "tool": "records_item_get", "args": {"record_id": f"rec_{n}"}}
        )
        for n in range(1, calls + 2)
    )
    host, guest = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with host, guest:
        reader, writer = await asyncio.open_unix_connection(sock=host)
        log = WriteLog(session, writer)
        serving = asyncio.create_task(
            serve_run(
                reader,
                writer,
                session=session,
                deadline=asyncio.get_running_loop().time() + 30,
                max_done_bytes=1 << 20,
            )
        )
        # A call alone first, answered alone: the host reads the socket itself by then, and
        # runs each call as its frame arrives.
        guest.sendall(first)
        await asyncio.wait_for(asyncio.to_thread(guest.recv, 4096), 10)
        guest.sendall(b"".join(burst) + encode_frame({"type": "done", "result": {"ok": True}}))
        outcome = await serving
        writer.transport.abort()
    assert outcome == {"type": "done", "result": {"ok": True}}
    assert log.writes[0] == ([1], 1)
    del log.writes[0], log.ran[0]
    return log


BURSTS = [
    # calls in one read, results per write
    (1, [1]),
    (5, [1, 4]),
    (8, [1, 7]),
    (9, [1, 8]),
    (40, [1] + [8] * 4 + [7]),
    (64, [1] + [8] * 7 + [7]),
    (65, [1] + [8] * 8),  # (the 65th taken on the loop's next turn, answered with the last 7)
]


@pytest.mark.parametrize(("calls", "sizes"), BURSTS, ids=[f"{c[0]}_calls" for c in BURSTS])
async def test_a_burst_is_answered_in_writes_of_a_few_results(calls: int, sizes: list[int]) -> None:
    log = await _answer_burst(calls)
    assert [len(ids) for ids, _ in log.writes] == sizes
    assert [i for ids, _ in log.writes for i in ids] == list(range(2, calls + 2))


async def test_a_turn_that_has_taken_its_time_leaves_the_rest_for_the_next(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # No time at all: each turn of the loop handles one frame, and its result leaves then.
    monkeypatch.setattr(_server, "TURN_S", 0.0)
    log = await _answer_burst(5)
    assert [ids for ids, _ in log.writes] == [[2], [3], [4], [5], [6]]


async def test_the_first_answers_leave_before_the_rest_of_the_burst_has_run() -> None:
    log = await _answer_burst(40)
    # The first call's answer at once; then each eight as they are done, not the burst's end.
    assert log.ran[:2] == [1 + 1, 1 + 1 + FLUSH_FRAMES], (
        f"the first answers waited until {log.ran[:2]} calls had run"
    )
    assert log.ran == sorted(log.ran)
    # The burst's frames were all taken first: then its calls ran, in the loop's next turn.
    assert [admitted for _, admitted in log.writes] == [1 + 40] * len(log.writes)
