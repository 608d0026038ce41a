from __future__ import annotations

import asyncio
import struct
import tracemalloc

import pytest

from airlock.bridge import (
    MAX_DEPTH,
    MAX_ELEMENTS,
    FrameError,
    count_elements,
    decode_body,
    encode_frame,
    read_frame,
)
from airlock.bridge._codec import encode_result


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
    ("not_utf8", b"\xff\xfe", "not ASCII JSON"),
    ("raw_utf8", '{"type":"a","v":"é"}'.encode(), "not ASCII JSON"),
    (
        "too_many_elements",
        b'{"type":"a","v":[' + b"{}," * MAX_ELEMENTS + b"{}]}",
        "values and keys",
    ),
    (
        "too_many_keys",
        b'{"type":"a","v":{'
        + b",".join(b'"k%d":0' % i for i in range(MAX_ELEMENTS // 2 + 1))
        + b"}}",
        "values and keys",
    ),
    ("not_json", b"{type: 1}", "not JSON"),
    ("trailing_data", b'{"type":"a"} {"type":"b"}', "not JSON"),
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


RESULTS = [
    (True, {"record_id": "rec_1", "memo": "caf\u00e9 \u2028", "n": [1, 2.5, None, False]}),
    (True, [{"ok": True, "value": 1}, {"ok": False, "error": {"code": "not_found"}}]),
    (True, None),
    (False, {"code": "not_found", "message": "no such record", "retryable": False}),
    (True, {"memo": "NaN and Infinity, as words", "n": [2**70, -0.0, 1e16, 0.1, -(2**63)]}),
    (True, {"quote": 'a "quoted" \\ back\tslash', "control": "\x00\x1f", "empty": [{}, []]}),
]
RESULT_IDS = ["record", "batch", "none", "error", "words-like-constants", "escapes"]


@pytest.mark.parametrize(("ok", "value"), RESULTS, ids=RESULT_IDS)
def test_a_result_frame_is_the_frame_of_its_message(ok: bool, value: object) -> None:
    message = {"type": "result", "id": 2**53 - 1, "ok": ok, ("value" if ok else "error"): value}
    frame = encode_result(2**53 - 1, ok, value)
    assert frame[4:].isascii()
    assert struct.unpack(">I", frame[:4])[0] == len(frame) - 4
    assert decode_body(frame[4:]) == decode_body(encode_frame(message)[4:]) == message


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_a_result_json_cannot_hold_is_refused(value: float) -> None:
    with pytest.raises(ValueError, match="JSON"):
        encode_result(1, True, {"v": [1, value]})


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


# Bodies whose values and keys count_elements must count exactly: strings full of what would
# be structure outside them (separators, colons, brackets, quotes and backslashes, escaped).
COUNTED = [
    ("scalar_object", {"type": "a"}),
    ("empty_containers", {"type": "a", "v": [[], {}, [[]], {"k": {}}]}),
    ("numbers", {"type": "a", "v": [1, 2.5, -3, True, None]}),
    ("structure_in_strings", {"type": "a", "v": ["a,b:c[d{e", '"quoted", [1]', "\\", '\\"x\\"']}),
    ("keys_with_structure", {"type": "a", "v": {"k,1": "x:y", "k[2]": {"{": "}"}}}),
    ("escapes", {"type": "a", "v": "\n\t\u0000\u2028é" * 50}),
    ("long_string_many_slices", {"type": "a", "v": ("a,b:[{" * 40_000) + '"\\'}),
    ("many_strings_many_slices", {"type": "a", "v": ['x,"\\y'] * 30_000}),
]


def _elements(value: object) -> int:
    """Every value, every key, one more for each empty container: what a frame holds."""
    if isinstance(value, dict):
        return 1 + len(value) + (not value) + sum(_elements(v) for v in value.values())
    if isinstance(value, list):
        return 1 + (not value) + sum(_elements(v) for v in value)
    return 1


@pytest.mark.parametrize(("name", "message"), COUNTED, ids=[c[0] for c in COUNTED])
def test_elements_are_counted_outside_strings(name: str, message: dict[str, object]) -> None:
    body = encode_frame(message)[4:]
    assert count_elements(body) == _elements(message)
    assert count_elements(bytearray(body)) == _elements(message)
    assert decode_body(body) == message


def test_a_frame_at_the_element_budget_is_decoded() -> None:
    # The object, its two keys, "a", the list: five; the rest are zeros.
    body = b'{"type":"a","v":[' + b",".join([b"0"] * (MAX_ELEMENTS - 5)) + b"]}"
    assert count_elements(body) == MAX_ELEMENTS
    assert len(decode_body(body)["v"]) == MAX_ELEMENTS - 5
    over = body.replace(b"[0,", b"[0,0,", 1)
    with pytest.raises(FrameError, match="values and keys"):
        decode_body(over)


def test_long_strings_do_not_count_as_elements() -> None:
    # A frame the size of a done frame whose strings hold a separator every other byte.
    message = {"type": "done", "result": {"stdout": ",:" * 3_000_000, "stderr": "[{" * 1_000_000}}
    body = encode_frame(message)[4:]
    assert count_elements(body) == _elements(message) == 9
    assert decode_body(body) == message


@pytest.mark.anyio
async def test_a_large_frame_is_read_and_decoded_whole() -> None:
    message = {"type": "done", "result": {"value": ["x" * 1000] * 5000}}
    frame = encode_frame(message)
    reader = _reader(frame)
    assert await read_frame(reader, max_bytes=len(frame)) == message
    with pytest.raises(FrameError, match="body"):
        await read_frame(_reader(frame[:-1]), max_bytes=len(frame))


@pytest.mark.anyio
async def test_a_header_claims_no_memory_before_its_body_arrives() -> None:
    # A header alone, claiming 256 MiB: the reader holds what came, not what was claimed.
    claimed = 256 << 20
    tracemalloc.start()
    try:
        with pytest.raises(FrameError, match="inside a frame body"):
            await read_frame(_reader(struct.pack(">I", claimed) + b"{" * 1000), max_bytes=claimed)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20
