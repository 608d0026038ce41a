from __future__ import annotations

import asyncio
import struct

import pytest

from airlock.bridge import MAX_DEPTH, FrameError, decode_body, encode_frame, read_frame


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


BAD_BODIES = [
    ("duplicate_key", b'{"type":"a","type":"b"}', "duplicate key"),
    ("nan", b'{"type":"a","v":NaN}', "NaN"),
    ("infinity", b'{"type":"a","v":-Infinity}', "Infinity"),
    ("overflowing_float", b'{"type":"a","v":1e999}', "finite"),
    ("huge_int", b'{"type":"a","v":' + b"9" * 31 + b"}", "digits"),
    ("deep_nesting", b'{"type":"a","v":' + b"[" * MAX_DEPTH + b"]" * MAX_DEPTH + b"}", "nests"),
    ("very_deep_nesting", b"[" * 200_000, "nests|JSON"),
    ("not_utf8", b"\xff\xfe", "not JSON"),
    ("not_json", b"{type: 1}", "not JSON"),
    ("array", b"[]", "JSON object"),
    ("missing_type", b'{"kind":"a"}', "string 'type'"),
    ("non_string_type", b'{"type":1}', "string 'type'"),
    ("empty", b"", "not JSON"),
]


@pytest.mark.parametrize(("name", "body", "message"), BAD_BODIES, ids=[b[0] for b in BAD_BODIES])
def test_bad_bodies_are_refused(name: str, body: bytes, message: str) -> None:
    with pytest.raises(FrameError, match=message):
        decode_body(body)


def test_round_trip() -> None:
    message = {"type": "call", "id": 7, "args": {"x": [1, 2.5, None, True, "é"]}}
    frame = encode_frame(message)
    assert struct.unpack(">I", frame[:4])[0] == len(frame) - 4
    assert decode_body(frame[4:]) == message


def _reader(data: bytes, *, eof: bool = True) -> asyncio.StreamReader:
    reader = asyncio.StreamReader()
    reader.feed_data(data)
    if eof:
        reader.feed_eof()
    return reader


@pytest.mark.anyio
async def test_size_is_checked_before_the_body_is_read() -> None:
    # No body and no end of stream: a reader that waited for the body would hang.
    reader = _reader(struct.pack(">I", 1 << 30), eof=False)
    with pytest.raises(FrameError, match="over the 1024-byte limit"):
        await asyncio.wait_for(read_frame(reader, max_bytes=1024), 1)


@pytest.mark.anyio
async def test_clean_end_and_cut_frames() -> None:
    assert await read_frame(_reader(b""), max_bytes=1024) is None
    with pytest.raises(FrameError, match="header"):
        await read_frame(_reader(b"\x00\x00"), max_bytes=1024)
    with pytest.raises(FrameError, match="body"):
        await read_frame(_reader(struct.pack(">I", 10) + b"{}"), max_bytes=1024)


@pytest.mark.anyio
async def test_frames_in_sequence() -> None:
    reader = _reader(encode_frame({"type": "a"}) + encode_frame({"type": "b"}))
    assert await read_frame(reader, max_bytes=64) == {"type": "a"}
    assert await read_frame(reader, max_bytes=64) == {"type": "b"}
    assert await read_frame(reader, max_bytes=64) is None
