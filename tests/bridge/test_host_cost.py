"""What a guest can make the host spend or record through the bridge, without a container.

A frame over the element budget ends its own run with ``protocol_error`` and leaves a run
served beside it untouched; a large frame is decoded on a worker thread, not on the event
loop; a ``log`` frame reaches the operator's log on one line, its control characters escaped.
Frames that call nothing (an empty batch, a log line, a refused name) count against the run's
limits, and no frame is handled once the run has ended.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import socket
import struct
import sys
import threading
import time
from typing import Any

import pytest

import airlock.bridge._codec as codec
from airlock.bridge import (
    MAX_ELEMENTS,
    BridgeLimits,
    RunEnd,
    ToolSession,
    encode_frame,
    serve_run,
)
from airlock.tools import AuditLog, MemoryAuditStore
from tests.bridge.records import ALICE, GRANT, build_registry
from tests.bridge.test_fuzz import CollectingWriter, _results, serving

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _session() -> ToolSession:
    registry = build_registry(audit=AuditLog(MemoryAuditStore()), slow_s=0.0)
    return ToolSession(registry=registry, principal=ALICE, grant=GRANT)


async def _serve(
    data: bytes, session: ToolSession, *, max_done_bytes: int = 16 << 20
) -> tuple[Any, CollectingWriter]:
    reader = asyncio.StreamReader()
    reader.feed_data(data)
    reader.feed_eof()
    served, writer = serving(reader, session, max_done_bytes=max_done_bytes)
    return await served, writer


async def _serve_answered(
    calls: bytes, done: dict[str, Any], session: ToolSession, *, answers: int
) -> tuple[Any, CollectingWriter]:
    """:func:`_serve` of a guest that sends ``done`` once its ``answers`` results came, as a
    program that waits for its calls does (a ``done`` sent with calls in flight ends the run
    without their answers, whenever they would have come)."""
    reader = asyncio.StreamReader()
    reader.feed_data(calls)
    served, writer = serving(reader, session)
    async with asyncio.timeout(20):
        while len(_results(writer)) < answers and not served.done():
            await asyncio.sleep(0.001)
    reader.feed_data(encode_frame(done))
    reader.feed_eof()
    return await served, writer


def _raw(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


def _done(value: bytes) -> bytes:
    return _raw(b'{"type":"done","result":{"status":"ok","value":' + value + b"}}")


OVER_BUDGET = [
    ("empty_objects", _done(b"[" + b"{}," * MAX_ELEMENTS + b"{}]")),
    ("empty_lists", _done(b"[" + b"[]," * MAX_ELEMENTS + b"[]]")),
    ("keys", _done(b"{" + b",".join(b'"%d":0' % n for n in range(MAX_ELEMENTS // 2)) + b"}")),
    ("numbers", _done(b"[" + b"0," * MAX_ELEMENTS + b"0]")),
    (
        "call_args",
        _raw(
            b'{"type":"call","id":1,"tool":"records_item_get","args":{"x":['
            + b"0," * 300_000
            + b"0]}}"
        ),
    ),
]


@pytest.mark.parametrize(("name", "frame"), OVER_BUDGET, ids=[c[0] for c in OVER_BUDGET])
async def test_a_frame_over_the_element_budget_ends_only_its_run(name: str, frame: bytes) -> None:
    hostile, good = _session(), _session()
    calls = b"".join(
        encode_frame(
            {"type": "call", "id": n, "tool": "records_item_get", "args": {"record_id": f"rec_{n}"}}
        )
        for n in range(1, 4)
    )
    (outcome, _), (answer, good_writer) = await asyncio.gather(
        _serve(frame, hostile, max_done_bytes=8 << 20),
        _serve_answered(calls, {"type": "done", "result": {"ok": True}}, good, answers=3),
    )
    assert isinstance(outcome, RunEnd)
    assert outcome.code == "protocol_error"
    assert f"more than {MAX_ELEMENTS} values and keys" in outcome.message
    ends = [e for e in hostile.registry.audit.events(run_id=hostile.run_id) if e.stage == "bridge"]
    assert [e.code for e in ends] == ["protocol_error"]
    assert answer == {"type": "done", "result": {"ok": True}}
    assert sorted(r["id"] for r in _results(good_writer)) == [1, 2, 3]


async def test_a_large_frame_is_decoded_off_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    threads: list[str] = []
    decode = codec.decode_body

    def recording(body: bytes | bytearray, **options: Any) -> dict[str, Any]:
        threads.append(threading.current_thread().name)
        return decode(body, **options)

    monkeypatch.setattr(codec, "decode_body", recording)
    small = encode_frame({"type": "log", "message": "x"})
    large = encode_frame({"type": "done", "result": {"stdout": "y" * (2 * codec.OFF_LOOP_BYTES)}})
    outcome, _ = await _serve(small + large, _session())
    assert outcome["result"]["stdout"] == "y" * (2 * codec.OFF_LOOP_BYTES)
    loop_thread = threading.current_thread().name
    assert threads[0] == loop_thread  # a small frame costs less than a hop to a thread
    assert threads[1] != loop_thread


FORGED_LOG_LINES = [
    ("newline", "x\nFAKE LINE\x1b[31m", "x\\nFAKE LINE\\x1b[31m"),
    ("carriage_return", "ok\r2026-01-01 INFO forged", "ok\\r2026-01-01 INFO forged"),
    ("line_separator", "a\u2028b\u2029c\x85d", "a\\u2028b\\u2029c\\x85d"),
    ("terminal_title", "\x1b]0;owned\x07", "\\x1b]0;owned\\x07"),
    ("bidi", "ok \u202etxt.exe", "ok \\u202etxt.exe"),
]


@pytest.mark.parametrize(
    ("name", "message", "logged"), FORGED_LOG_LINES, ids=[c[0] for c in FORGED_LOG_LINES]
)
async def test_a_log_line_from_a_program_is_one_escaped_line(
    caplog: pytest.LogCaptureFixture, name: str, message: str, logged: str
) -> None:
    session = _session()
    frames = encode_frame({"type": "log", "message": message})
    frames += encode_frame({"type": "done", "result": {}})
    with caplog.at_level(logging.INFO, logger="airlock.bridge._server"):
        outcome, _ = await _serve(frames, session)
    assert outcome == {"type": "done", "result": {}}
    [record] = [r for r in caplog.records if r.name == "airlock.bridge._server"]
    line = logging.Formatter("%(levelname)s %(message)s").format(record)
    assert line == f"INFO guest log ({session.run_id}): {logged}"
    assert line.isprintable()


def test_frames_decoded_at_once_on_several_threads_leave_the_collector_on() -> None:
    # Each decode of a large frame holds the cyclic collector off; overlapping ones (the loop
    # and worker threads) must leave it on once the last is done, however they interleave.
    large = b'{"type":"done","result":[' + b'{"a":1},' * 2000 + b"{}]}"
    small = b'{"type":"call","id":1,"tool":"t","args":{"record_id":"rec_1"}}'
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible: every interleaving
    try:
        for _ in range(20):
            stop = threading.Event()

            def decode(body: bytes, stop: threading.Event = stop) -> None:
                while not stop.is_set():
                    codec.decode_body(body)

            threads = [threading.Thread(target=decode, args=(b,)) for b in (large, large, small)]
            for thread in threads:
                thread.start()
            time.sleep(0.02)
            stop.set()
            for thread in threads:
                thread.join()
            assert gc.isenabled()
    finally:
        sys.setswitchinterval(interval)
        gc.enable()  # for the tests after this one, should it have failed


def _limited(limits: BridgeLimits) -> ToolSession:
    registry = build_registry(audit=AuditLog(MemoryAuditStore()), slow_s=0.0)
    return ToolSession(registry=registry, principal=ALICE, grant=GRANT, limits=limits)


def _empty_batch(n: int) -> dict[str, Any]:
    return {"type": "batch", "id": n, "tool": "records_item_get", "items": []}


_LOG = {"type": "log", "message": "x"}
_LOG_LIMIT = (
    "the program sent 4 log lines, refused tool names and cancelled calls; the limit is 3 per "
    "program"
)
COUNTED_FRAMES = [
    ("empty_batches", BridgeLimits(max_calls=3), [_empty_batch(n) for n in range(1, 5)],
     "the program asked for 4 tool calls; the limit is 3 per program"),
    ("log_lines", BridgeLimits(max_log_frames=3), [_LOG] * 4, _LOG_LIMIT),
    ("refused_names", BridgeLimits(max_log_frames=3),
     [{"type": "refused", "tool": f"tool_{n}"} for n in range(1, 5)], _LOG_LIMIT),
    ("logs_and_refused", BridgeLimits(max_log_frames=3),
     [_LOG, {"type": "refused", "tool": "nope"}, _LOG, _LOG], _LOG_LIMIT),
    ("cancels_of_unknown_ids", BridgeLimits(max_log_frames=3),
     [{"type": "cancel", "id": n} for n in range(1, 5)], _LOG_LIMIT),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "limits", "frames", "message"), COUNTED_FRAMES, ids=[c[0] for c in COUNTED_FRAMES]
)
async def test_frames_that_call_nothing_count_against_the_runs_limits(
    name: str, limits: BridgeLimits, frames: list[dict[str, Any]], message: str
) -> None:
    # Each costs the host a frame's work (an answer, a log line, an audit event): bounded by
    # the run's limits, not only by its bytes (64 MiB of them are a million such frames).
    done = encode_frame({"type": "done", "result": {}})
    within = b"".join(encode_frame(f) for f in frames[:-1]) + done
    outcome, _ = await _serve(within, _limited(limits))
    assert outcome == {"type": "done", "result": {}}  # a program at the limit is served

    session = _limited(limits)
    outcome, _ = await _serve(b"".join(encode_frame(f) for f in frames) + done, session)
    assert outcome == RunEnd("limit_exceeded", "calls", message)
    ends = [e for e in session.registry.audit.events(run_id=session.run_id) if e.stage == "bridge"]
    assert [e.code for e in ends] == ["limit_exceeded"]


def _call(n: int) -> bytes:
    return encode_frame(
        {"type": "call", "id": n, "tool": "records_item_get", "args": {"record_id": "rec_1"}}
    )


async def test_no_frame_is_handled_once_the_run_has_ended() -> None:
    # A burst of frames, more than one turn of the loop handles, and the connection breaks
    # meanwhile (the guest closed it with an answer unread): the run ends, and the frames
    # left in its buffer are never handled, by a turn the loop had scheduled or any other.
    session = _session()
    host, guest = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    reader, writer = await asyncio.open_unix_connection(sock=host)
    served = asyncio.create_task(
        serve_run(
            reader,
            writer,
            session=session,
            deadline=time.monotonic() + 30,
            max_done_bytes=1 << 20,
        )
    )
    loop = asyncio.get_running_loop()
    guest.setblocking(False)
    try:
        await loop.sock_sendall(guest, _call(1))
        await asyncio.sleep(0.2)  # its answer waits in the guest's socket, unread
        size = len(_call(1000))
        await loop.sock_sendall(
            guest, b"".join(_call(n) for n in range(1000, 1000 + 60_000 // size))
        )
    finally:
        guest.close()
    async with asyncio.timeout(10):
        assert await served is None
    calls, events = session.calls, len(session.registry.audit.events(run_id=session.run_id))
    await asyncio.sleep(0.2)
    assert session.calls == calls
    assert len(session.registry.audit.events(run_id=session.run_id)) == events
    writer.close()


_BYTES_IN = 64 * 1024
_DONE_BYTES = 2 << 20  # over max_call_frame_bytes: the done frame's budget decides
_CALLS_WITHIN = b"".join(_call(n) for n in range(1, 400))  # about half of max_bytes_in
_CALLS_OVER = b"".join(_call(n) for n in range(1, 1000))  # past max_bytes_in


def _done_with_stdout(chars: int) -> bytes:
    return encode_frame({"type": "done", "result": {"stdout": "\0" * chars}})


# The done frame has a budget of its own (max_done_bytes: the profile's output caps, escaped,
# and the value's limit), checked as it arrives: bytes_in bounds only the frames before it.
BYTES_IN_CASES = [
    ("done_over_bytes_in", _done_with_stdout(4 * _BYTES_IN), "done"),
    ("calls_then_done_over_bytes_in", _CALLS_WITHIN + _done_with_stdout(4 * _BYTES_IN), "done"),
    ("done_at_its_own_budget", _done_with_stdout(_DONE_BYTES // 6 - 100), "done"),
    ("calls_over_bytes_in", _CALLS_OVER + _done_with_stdout(10), "bytes"),
    ("done_over_its_own_budget", _done_with_stdout(_DONE_BYTES // 6 + 1), "protocol_error"),
]


@pytest.mark.parametrize(
    ("name", "data", "ends"), BYTES_IN_CASES, ids=[c[0] for c in BYTES_IN_CASES]
)
async def test_the_done_frame_has_its_own_budget_not_bytes_in(
    name: str, data: bytes, ends: str
) -> None:
    # Calls in flight are not what this is about: however slowly the host answers them (a
    # loaded machine), the bytes are the limit the calls reach.
    session = _limited(BridgeLimits(max_bytes_in=_BYTES_IN, max_in_flight=len(_CALLS_OVER)))
    outcome, _ = await _serve(data, session, max_done_bytes=_DONE_BYTES)
    if ends == "done":
        assert isinstance(outcome, dict), outcome
        assert outcome["type"] == "done"
        assert len(outcome["result"]["stdout"]) >= 4 * _BYTES_IN
    elif ends == "bytes":
        assert isinstance(outcome, RunEnd)
        assert (outcome.code, outcome.limit) == ("limit_exceeded", "bytes")
        assert f"the limit is {_BYTES_IN} bytes" in outcome.message
    else:
        assert isinstance(outcome, RunEnd)
        assert outcome.code == "protocol_error", outcome
