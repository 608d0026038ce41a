"""Frames between a guest program and the host, encoded and strictly decoded on the host.

A frame is a 4-byte big-endian length, then that many bytes of JSON holding one object with a
string ``type`` (the frame types are in :mod:`airlock.bridge.airlock_wire`). The guest writes
ASCII JSON (every other character as a ``\\u`` escape), which is also UTF-8.

The host treats every byte from a guest as hostile, and what a frame may cost it is bounded
before the frame is decoded, never by what the frame turns out to hold:

- **bytes**: the length is checked before the body is read, and a large body grows as its
  bytes arrive (here as in the server's :mod:`~airlock.bridge._inbox`): a header claims no
  memory, what a frame holds is what the guest sent;
- **elements**: a body may hold at most :data:`MAX_ELEMENTS` values and keys, counted outside
  strings with a few passes over its bytes, each over one slice (:func:`count_elements`);
  decoding is then bounded too (a 12 MB frame of empty objects would otherwise be millions of
  Python objects, most of a gigabyte);
- **nesting**: at most :data:`MAX_DEPTH` levels;
- **arguments**: one call's arguments hold at most ``MAX_CALL_ELEMENTS`` values and keys
  (:mod:`~airlock.bridge._call_budget`: they are validated on the event loop); what is over
  it, and what such frames carry besides what the host reads, is dropped as the frame is
  decoded, before the collector ever walks it;
- **time on the event loop**: a body over :data:`OFF_LOOP_BYTES`, or of more values and keys
  than one call's arguments may hold (it may have to be trimmed, a walk that grows with them),
  is counted and decoded in a worker thread (:func:`decoded_off_loop`), whose Python-level
  hooks give the loop its turn every few milliseconds.

Decoding also refuses non-ASCII bytes, duplicate keys, ``NaN`` and ``Infinity`` (also as an
overflowing float) and integers longer than :data:`MAX_INT_DIGITS` digits. Each refusal is a
:class:`FrameError`, which ends the run that sent it (and only that run) with
``protocol_error``. Nothing that crosses is ever unpickled or evaluated.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import math
import re
import struct
import threading
from collections.abc import Callable, Iterator
from typing import Any, Final

from pydantic_core import to_json

from airlock.bridge._call_budget import MAX_CALL_ELEMENTS, trim_frame, trims
from airlock.bridge.airlock_wire import HEADER_FORMAT, MAX_DEPTH, MAX_INT_DIGITS, RESULT

__all__ = [
    "MAX_DEPTH",
    "MAX_ELEMENTS",
    "MAX_INT_DIGITS",
    "OFF_LOOP_BYTES",
    "FrameError",
    "count_elements",
    "decode_body",
    "decoded_off_loop",
    "encode_frame",
    "encode_result",
    "read_frame",
    "read_sized_frame",
]

MAX_ELEMENTS: Final = 200_000
"""Values and keys one frame may hold (as :func:`count_elements` counts them): about 20 MiB of
Python objects at worst. A program's final value is checked against it in the guest first
(``value_elements`` of the ``run`` frame), so a legitimate value is refused as too large
rather than ending the run."""
_HEADER: Final = struct.Struct(HEADER_FORMAT)
OFF_LOOP_BYTES: Final = 64 * 1024
"""Bodies larger than this are counted and decoded in a worker thread (also by the server)."""
_SLICE_BYTES: Final = 64 * 1024
"""How much of a body one pass of the element count looks at: the count's C-level steps hold
the interpreter for well under a millisecond each."""
_READ_BYTES: Final = 1024 * 1024
_ESCAPE: Final = re.compile(rb"\\.", re.DOTALL)
# One encoder for every frame: ``json.dumps`` with options builds a new one per call.
_ENCODER: Final = json.JSONEncoder(separators=(",", ":"), allow_nan=False)


def _compact_encoder() -> Callable[[Any], str]:
    """``_ENCODER.encode``, with the C encoder it builds per call built once (the values the
    host sends hold no cycles: they are JSON values already)."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # an interpreter without the C accelerator
        return _ENCODER.encode
    chunks = make(
        None, _ENCODER.default, json.encoder.encode_basestring_ascii, None, ":", ",", False,
        False, False,
    )  # fmt: skip
    return lambda value: "".join(chunks(value, 0))


_encode: Final = _compact_encoder()
_RESULT_OK: Final = b'{"type":"%s","id":%%d,"ok":true,"value":' % RESULT.encode()
_RESULT_ERROR: Final = b'{"type":"%s","id":%%d,"ok":false,"error":' % RESULT.encode()


class FrameError(ValueError):
    """A frame broke the protocol: the run that sent it ends with ``protocol_error``."""


def encode_frame(message: dict[str, Any]) -> bytes:
    """Serialize one message as a frame (compact ASCII JSON, no NaN).

    Raises:
        ValueError: a value JSON cannot hold (``NaN``, ``Infinity``).
    """
    body = _encode(message).encode()
    return _HEADER.pack(len(body)) + body


def _encode_value(value: Any) -> bytes:
    """``value`` as compact ASCII JSON: by pydantic's serializer (in Rust, three times as fast
    as the standard library's here) when what it writes is what :func:`encode_frame` would
    write, else by the standard library's encoder (characters beyond ASCII escaped, ``NaN``
    refused, a type JSON cannot hold named)."""
    try:
        data = to_json(value, inf_nan_mode="constants")
    except ValueError:  # not a JSON value, or too deep: the encoder below says why
        return _encode(value).encode()
    if data.isascii() and b"NaN" not in data and b"Infinity" not in data:
        return data
    return _encode(value).encode()


def encode_result(call_id: int, ok: bool, value: Any) -> bytes:
    """A ``result`` frame: call ``call_id``'s value, or (``ok`` false) its error. The frame
    of the same message as :func:`encode_frame` of ``{type, id, ok, value | error}``, with
    less work.

    Raises:
        ValueError: a value JSON cannot hold (``NaN``, ``Infinity``).
    """
    encoded = _encode_value(value)
    head = (_RESULT_OK if ok else _RESULT_ERROR) % call_id
    return b"".join((_HEADER.pack(len(head) + len(encoded) + 1), head, encoded, b"}"))


async def read_frame(reader: asyncio.StreamReader, *, max_bytes: int) -> dict[str, Any] | None:
    """Read and decode one frame; ``None`` at a clean end of stream (before any header byte).

    Raises:
        FrameError: a frame over ``max_bytes``, a stream cut inside a frame, or a bad body.
    """
    message, _ = await read_sized_frame(reader, max_bytes=max_bytes)
    return message


async def read_sized_frame(
    reader: asyncio.StreamReader, *, max_bytes: int, max_elements: int = MAX_ELEMENTS
) -> tuple[dict[str, Any] | None, int]:
    """As :func:`read_frame`, with the frame's size on the wire (header included).

    A large body is decoded in a worker thread, so the event loop keeps serving other runs
    meanwhile.

    Raises:
        FrameError: as :func:`read_frame`, or a body of more than ``max_elements`` values and
            keys.
    """
    try:
        header = await reader.readexactly(_HEADER.size)
    except asyncio.IncompleteReadError as exc:
        if not exc.partial:
            return None, 0
        raise FrameError("the stream ended inside a frame header") from None
    (size,) = _HEADER.unpack(header)
    if size > max_bytes:
        raise FrameError(f"frame of {size} bytes is over the {max_bytes}-byte limit")
    body = await _read_body(reader, size)
    if decoded_off_loop(body):
        message = await asyncio.to_thread(decode_body, body, max_elements=max_elements)
    else:
        message = decode_body(body, max_elements=max_elements)
    return message, _HEADER.size + size


async def _read_body(reader: asyncio.StreamReader, size: int) -> bytes | bytearray:
    if size <= _READ_BYTES:
        try:
            return await reader.readexactly(size)
        except asyncio.IncompleteReadError:
            raise FrameError("the stream ended inside a frame body") from None
    # Piece by piece into a body that grows as they arrive: readexactly would gather the
    # whole body in the stream's buffer and then copy it twice, and a buffer of the size the
    # header claims would cost that much before a byte of the body came.
    body = bytearray()
    while len(body) < size:
        piece = await reader.read(min(size - len(body), _READ_BYTES))
        if not piece:
            raise FrameError("the stream ended inside a frame body")
        body += piece
    return body


def count_elements(body: bytes | bytearray, *, stop_after: int | None = None) -> int:
    """The values and keys in a JSON ``body``: separators, colons and opening brackets outside
    strings, plus one (exact for valid JSON: every value, every key, and one more for each
    empty container). Never more than ``len(body)``.

    Strings are skipped without decoding them: escape sequences are dropped, then the quotes
    left split the body into outside and inside parts. The work is done one slice of
    :data:`_SLICE_BYTES` at a time; with ``stop_after`` it stops once the count is over it
    (and answers a number over ``stop_after``, not the whole count).
    """
    count = 1
    inside = False
    skip_first = False
    for start in range(0, len(body), _SLICE_BYTES):
        part = bytes(body[start : start + _SLICE_BYTES])
        if skip_first:  # the escape that ended the last slice covers this byte
            part = part[1:]
        skip_first = False
        if b"\\" in part:
            part = _ESCAPE.sub(b"", part)
            if part.endswith(b"\\"):  # an escape cut by the slice's end
                part, skip_first = part[:-1], True
        pieces = part.split(b'"')
        outside = b"".join(pieces[1 if inside else 0 :: 2])
        count += _structural(outside)
        if len(pieces) % 2 == 0:  # an odd number of quotes: the next slice starts elsewhere
            inside = not inside
        if stop_after is not None and count > stop_after:
            break
    return count


def _structural(data: bytes) -> int:
    return data.count(b",") + data.count(b":") + data.count(b"[") + data.count(b"{")


def _upper_bound(body: bytes | bytearray) -> int:
    """Structural bytes wherever they are, plus one: at least :func:`count_elements`."""
    return 1 + sum(
        _structural(bytes(body[start : start + _SLICE_BYTES]))
        for start in range(0, len(body), _SLICE_BYTES)
    )


def decoded_off_loop(body: bytes | bytearray) -> bool:
    """Whether ``body`` is decoded in a worker thread: it is over :data:`OFF_LOOP_BYTES`, or
    holds more values and keys than one call's arguments may (:func:`decode_body` may then
    trim it, a walk of each call's arguments). Most frames are told by their size alone."""
    return len(body) > OFF_LOOP_BYTES or _over_call_budget(body)


def _over_call_budget(body: bytes | bytearray) -> bool:
    return (
        len(body) > MAX_CALL_ELEMENTS
        and _upper_bound(body) > MAX_CALL_ELEMENTS
        and count_elements(body, stop_after=MAX_CALL_ELEMENTS) > MAX_CALL_ELEMENTS
    )


def _reject_constant(name: str) -> Any:
    raise FrameError(f"{name} is not valid in a frame")


def _bounded_int(digits: str) -> int:
    if len(digits.lstrip("-")) > MAX_INT_DIGITS:
        raise FrameError(f"integer of {len(digits)} digits is over the {MAX_INT_DIGITS} limit")
    return int(digits)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise FrameError(f"number {text[:40]!r} does not fit a finite float")
    return value


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        raise FrameError("duplicate key in a frame object")
    return result


def _depth_within(value: Any, limit: int) -> bool:
    # One iterator per open level: memory grows with the depth, not with the size.
    stack: list[Iterator[Any]] = [iter((value,))]
    while stack:
        for item in stack[-1]:
            if isinstance(item, dict):
                children: Iterator[Any] = iter(item.values())
            elif isinstance(item, list):
                children = iter(item)
            else:
                continue
            if len(stack) > limit:
                return False
            stack.append(children)
            break
        else:
            stack.pop()
    return True


# One decoder for every frame: ``json.loads`` with options builds a new one per call.
_DECODER: Final = json.JSONDecoder(
    object_pairs_hook=_unique_keys,
    parse_constant=_reject_constant,
    parse_int=_bounded_int,
    parse_float=_finite_float,
)


class _CollectorPause:
    """The cyclic garbage collector held off while any large frame is decoded, in any
    thread, and on again after the last one if it was on before the first.

    A JSON tree has no cycles, so the collector has nothing to find in a frame being
    decoded; left on, it walks the half-built tree again and again, holding the interpreter
    lock (100,000 empty lists: 30 ms instead of 5). The switch is the process's: decodes on
    the loop and on worker threads overlap, and each turning it off and back on by itself
    left it off for good when one read it off while another had it so."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pauses = 0
        self._resume = False

    def __enter__(self) -> None:
        with self._lock:
            if self._pauses == 0:
                self._resume = gc.isenabled()
                gc.disable()
            self._pauses += 1

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._pauses -= 1
            if self._pauses == 0 and self._resume:
                gc.enable()


_COLLECTOR: Final = _CollectorPause()
_NO_PAUSE: Final = contextlib.nullcontext()
_PAUSE_OVER: Final = 4096
"""Bodies up to this size (a call frame, as a program sends it) make too few objects for the
collector's walks to matter, and decode without touching the switch."""


def decode_body(body: bytes | bytearray, *, max_elements: int = MAX_ELEMENTS) -> dict[str, Any]:
    """Decode a frame body strictly into a message object with a string ``type``.

    Raises:
        FrameError: non-ASCII bytes, invalid JSON, a forbidden construct, more than
            ``max_elements`` values and keys, or not a typed object.
    """
    if not body.isascii():
        raise FrameError(
            "frame body is not ASCII JSON: characters beyond ASCII travel as \\u escapes"
        )
    # Each value or key takes a byte at least; structural bytes anywhere, strings included,
    # bound the count from above at C speed (a frame of one long string costs little).
    if (
        len(body) > max_elements
        and _upper_bound(body) > max_elements
        and count_elements(body, stop_after=max_elements) > max_elements
    ):
        raise FrameError(
            f"frame holds more than {max_elements} values and keys; send less per frame"
        )
    too_deep = False
    try:
        # What is checked or dropped is so with the collector held off: a tree freed before
        # the collector resumes is never walked.
        with _COLLECTOR if len(body) > _PAUSE_OVER else _NO_PAUSE:
            message = _DECODER.decode(body.decode("ascii"))
            # Each level opens a bracket: a body with few of them (most frames) is shallow.
            if body.count(b"[") + body.count(b"{") > MAX_DEPTH and not _depth_within(
                message, MAX_DEPTH
            ):
                message, too_deep = None, True
            elif type(message) is dict and trims(message) and _over_call_budget(body):
                message = trim_frame(message)
    except FrameError:
        raise
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise FrameError(f"frame body is not JSON: {exc}") from None
    except RecursionError:
        raise FrameError(f"frame nests deeper than {MAX_DEPTH} levels") from None
    if too_deep:
        raise FrameError(f"frame nests deeper than {MAX_DEPTH} levels")
    if not isinstance(message, dict) or not isinstance(message.get("type"), str):
        raise FrameError("a frame must be a JSON object with a string 'type'")
    return message
