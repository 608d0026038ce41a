"""The host's inbox: frames split from the bytes however they arrive, each length checked
before its body is read; and a served run that takes a connection over, bytes its reader had
already buffered first."""

from __future__ import annotations

import asyncio
import random
import socket
import struct
import time
import tracemalloc
from collections.abc import Callable

import pytest

from airlock.bridge import FrameError, RunEnd, ToolSession, encode_frame, serve_run
from airlock.bridge._inbox import CHUNK_BYTES, PIECE_BYTES, FrameInbox
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


def test_a_large_frame_is_read_in_pieces_never_past_its_end() -> None:
    inbox = FrameInbox(max_bytes=8 * PIECE_BYTES, on_data=lambda: None, on_end=lambda: None)
    body = _body(5 * PIECE_BYTES + 17)
    rest = struct.pack(">I", len(body)) + body + _frame_after()
    inbox.feed(rest[:104])
    rest = rest[104:]
    assert inbox.next_frame() is None
    sizes: list[int] = []
    while sum(sizes) < len(body) - 100:
        space = inbox.get_buffer(-1)
        sizes.append(len(space))
        space[:] = rest[: len(space)]
        inbox.buffer_updated(len(space))
        rest = rest[len(space) :]
    # At most a piece at a time, and exactly the rest at the end: nothing past the frame.
    assert sizes == [PIECE_BYTES] * 4 + [PIECE_BYTES + 17 - 100]
    assert _split_all(inbox) == [(body, 4 + len(body))]
    assert len(inbox.get_buffer(-1)) == CHUNK_BYTES  # back to the run's own buffer


def _frame_after() -> bytes:
    after = _body(40)
    return struct.pack(">I", len(after)) + after


def _allocated(work: Callable[[], object]) -> int:
    """The most memory ``work`` held at once, beyond what it started with (tracemalloc)."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before, _ = tracemalloc.get_traced_memory()
        work()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak - before


# What a header claims, and what of its body the guest then sent: the inbox holds what came
# (and a piece to read into), never what was claimed. (It allocated and zeroed the whole
# claimed body on the header: 772 MiB for the largest done frame a profile allows.)
CLAIMS = [
    ("just_over_the_buffer", CHUNK_BYTES + 1, 0),
    ("a_done_frame_header_alone", 772 << 20, 0),
    ("a_done_frame_and_a_few_bytes", 772 << 20, 1000),
    ("a_done_frame_and_a_megabyte", 772 << 20, 1 << 20),
    ("a_large_frame_all_but_a_byte", 3 << 20, (3 << 20) - 1),
]


@pytest.mark.parametrize(("case", "claimed", "sent"), CLAIMS, ids=[c[0] for c in CLAIMS])
def test_a_large_frames_memory_follows_the_bytes_that_came(
    case: str, claimed: int, sent: int
) -> None:
    inbox = FrameInbox(max_bytes=800 << 20, on_data=lambda: None, on_end=lambda: None)
    data = b"x" * sent

    def receive() -> None:
        inbox.feed(struct.pack(">I", claimed))
        assert inbox.next_frame() is None
        got = 0
        while got < sent:  # as the event loop's transport reads the socket
            space = inbox.get_buffer(-1)
            count = min(len(space), sent - got)
            space[:count] = data[got : got + count]
            inbox.buffer_updated(count)
            got += count
        assert inbox.next_frame() is None
        assert inbox.holding

    # The bytes that came, grown by appending (an eighth more at most), a piece, and a
    # little for the objects themselves.
    assert _allocated(receive) <= sent * 9 // 8 + PIECE_BYTES + 64 * 1024


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


class _EndWatch(asyncio.Protocol):
    """Stands in front of a stream's protocol, passing everything on, and notes the end (as
    the sandbox's watch of a runner's control connection does)."""

    def __init__(self, inner: asyncio.Protocol) -> None:
        self.inner = inner
        self.ends: list[str] = []

    def data_received(self, data: bytes) -> None:
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        self.ends.append("eof")
        return self.inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self.ends.append("lost")
        self.inner.connection_lost(exc)


async def test_a_connection_watched_for_its_end_is_read_in_callbacks_too() -> None:
    host, guest = socket.socketpair()
    try:
        reader, writer = await asyncio.open_unix_connection(sock=host)
        transport = writer.transport
        watch = _EndWatch(transport.get_protocol())  # type: ignore[arg-type]
        transport.set_protocol(watch)
        guest.sendall(encode_frame({"type": "call", "id": 1, "tool": "records_item_get",
                                    "args": {"record_id": "rec_1"}}))  # fmt: skip
        inbox = FrameInbox(max_bytes=1 << 20, on_data=lambda: None, on_end=lambda: None)
        assert await inbox.take_over(reader, writer)
        assert transport.get_protocol() is inbox
        async with asyncio.timeout(5):
            while (frame := inbox.next_frame()) is None:
                await asyncio.sleep(0.01)
        assert frame[0].startswith(b'{"type":"call","id":1')
        guest.shutdown(socket.SHUT_WR)
        async with asyncio.timeout(5):
            while not inbox.ended:
                await asyncio.sleep(0.01)
        assert inbox.clean
        assert watch.ends == ["eof"]  # the watch still learns how the connection ended
        writer.close()
        async with asyncio.timeout(5):
            await writer.wait_closed()
        assert watch.ends == ["eof", "lost"]
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
