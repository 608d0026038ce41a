"""The host's inbox: frames split from the bytes however they arrive, each length checked
before its body is read; and a served run that takes a connection over, bytes its reader had
already buffered first."""

from __future__ import annotations

import asyncio
import random
import socket
import struct
import time

import pytest

from airlock.bridge import FrameError, RunEnd, ToolSession, encode_frame, serve_run
from airlock.bridge._inbox import CHUNK_BYTES, FrameInbox
from tests.bridge.frames import decode_frames
from tests.bridge.records import ALICE, GRANT, build_registry

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _body(size: int) -> bytes:
    """A frame body of exactly ``size`` bytes."""
    head = b'{"type":"log","message":"'
    return head + b"x" * (size - len(head) - 2) + b'"}'


# Around every edge the inbox has: the header, its buffer's size, one large frame.
SIZES = [30, 31, CHUNK_BYTES - 4, CHUNK_BYTES - 3, CHUNK_BYTES, CHUNK_BYTES + 1, 3 * CHUNK_BYTES]
FRAMES = [_body(size) for size in SIZES] * 2
STREAM = b"".join(struct.pack(">I", len(body)) + body for body in FRAMES)
# How the stream arrives: one byte at a time, a few bytes, about a buffer, random pieces.
PIECES = [1, 3, 4, 5, 4095, CHUNK_BYTES - 1, CHUNK_BYTES, CHUNK_BYTES + 7, "random", "all"]


def _pieces(how: int | str) -> list[bytes]:
    if how == "all":
        return [STREAM]
    if how == "random":
        rng = random.Random(17)
        cuts = sorted(rng.sample(range(1, len(STREAM)), 60))
        return [STREAM[a:b] for a, b in zip([0, *cuts], [*cuts, len(STREAM)], strict=True)]
    assert isinstance(how, int)
    return [STREAM[i : i + how] for i in range(0, len(STREAM), how)]


def _split_all(inbox: FrameInbox) -> list[tuple[bytes, int]]:
    out = []
    while (taken := inbox.next_frame()) is not None:
        body, size = taken
        out.append((bytes(body), size))
    return out


@pytest.mark.parametrize("how", PIECES, ids=[str(p) for p in PIECES])
def test_frames_are_split_however_the_bytes_arrive(how: int | str) -> None:
    inbox = FrameInbox(max_bytes=4 * CHUNK_BYTES, on_data=lambda: None, on_end=lambda: None)
    split: list[tuple[bytes, int]] = []
    for piece in _pieces(how):
        inbox.feed(piece)
        split += _split_all(inbox)
    assert split == [(body, 4 + len(body)) for body in FRAMES]
    assert not inbox.holding


@pytest.mark.parametrize("how", [1, 4096, "random"], ids=str)
def test_frames_are_split_as_the_socket_reads_them(how: int | str) -> None:
    # As the event loop's transport does it: into get_buffer(), then buffer_updated().
    split: list[tuple[bytes, int]] = []
    inbox = FrameInbox(
        max_bytes=4 * CHUNK_BYTES, on_data=lambda: split.extend(_split_all(inbox)), on_end=list
    )
    for piece in _pieces(how):
        while piece:
            space = inbox.get_buffer(-1)
            assert len(space) > 0
            count = min(len(space), len(piece))
            space[:count] = piece[:count]
            inbox.buffer_updated(count)
            piece = piece[count:]
    assert split == [(body, 4 + len(body)) for body in FRAMES]


def test_a_length_over_the_limit_is_refused_before_its_body() -> None:
    inbox = FrameInbox(max_bytes=1024, on_data=lambda: None, on_end=lambda: None)
    inbox.feed(struct.pack(">I", 1025))  # the header alone: no body was ever sent
    with pytest.raises(FrameError, match="over the 1024-byte limit"):
        inbox.next_frame()


def test_a_large_frame_is_read_into_a_buffer_of_its_own_size() -> None:
    inbox = FrameInbox(max_bytes=8 * CHUNK_BYTES, on_data=lambda: None, on_end=lambda: None)
    body = _body(5 * CHUNK_BYTES)
    inbox.feed(struct.pack(">I", len(body)) + body[:100])
    assert inbox.next_frame() is None
    space = inbox.get_buffer(-1)
    assert len(space) == len(body) - 100  # exactly the rest: nothing past the frame is read
    space[:] = body[100:]
    inbox.buffer_updated(len(body) - 100)
    assert _split_all(inbox) == [(body, 4 + len(body))]
    assert len(inbox.get_buffer(-1)) == CHUNK_BYTES  # back to the run's own buffer


async def test_frames_a_reader_buffered_before_the_run_are_served_first() -> None:
    host, guest = socket.socketpair()
    try:
        reader, writer = await asyncio.open_unix_connection(sock=host)
        calls = [
            {"type": "call", "id": n, "tool": "records_item_get", "args": {"record_id": f"rec_{n}"}}
            for n in range(1, 6)
        ]
        guest.sendall(b"".join(encode_frame(c) for c in calls))
        async with asyncio.timeout(10):
            while len(reader._buffer) < 5 * 40:  # the reader has them before the run starts
                await asyncio.sleep(0.01)
        guest.sendall(encode_frame({"type": "done", "result": {"n": 5}}))
        session = ToolSession(registry=build_registry(slow_s=0.0), principal=ALICE, grant=GRANT)
        outcome = await serve_run(
            reader,
            writer,
            session=session,
            deadline=time.monotonic() + 10,
            max_done_bytes=1 << 20,
        )
        assert outcome == {"type": "done", "result": {"n": 5}}
        guest.setblocking(False)
        answers = decode_frames(guest.recv(1 << 20))
        assert [a["id"] for a in answers] == [1, 2, 3, 4, 5]
        assert all(a["ok"] for a in answers)
        writer.close()
        async with asyncio.timeout(5):
            await writer.wait_closed()  # the writer still learns how the connection ended
    finally:
        guest.close()
        host.close()


CUT = [
    ("inside_a_header", b"\x00\x00"),
    ("inside_a_body", struct.pack(">I", 50) + b'{"type":'),
]


@pytest.mark.parametrize(("case", "tail"), CUT, ids=[c for c, _ in CUT])
async def test_a_stream_cut_inside_a_frame_ends_the_run(case: str, tail: bytes) -> None:
    host, guest = socket.socketpair()
    try:
        reader, writer = await asyncio.open_unix_connection(sock=host)
        guest.sendall(encode_frame({"type": "log", "message": "hello"}) + tail)
        guest.shutdown(socket.SHUT_WR)
        outcome = await serve_run(
            reader, writer, session=None, deadline=time.monotonic() + 10, max_done_bytes=1 << 20
        )
        assert isinstance(outcome, RunEnd)
        assert outcome.code == "protocol_error"
        assert "ended inside a frame" in outcome.message
    finally:
        guest.close()
        host.close()
