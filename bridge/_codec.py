"""Frames between a guest program and the host, encoded and strictly decoded on the host.

A frame is a 4-byte big-endian length, then that many bytes of UTF-8 JSON holding one
object with a string ``type`` (the frame types are in :mod:`airlock.bridge.airlock_wire`).
The host treats every byte from a guest as hostile: the length is checked before the body is
read, and decoding refuses duplicate keys, ``NaN`` and ``Infinity`` (also as an overflowing
float), integers longer than :data:`MAX_INT_DIGITS` digits and nesting deeper than
:data:`MAX_DEPTH`. Nothing that crosses is ever unpickled or evaluated.
"""

from __future__ import annotations

import asyncio
import json
import math
import struct
from typing import Any, Final

from airlock.bridge.airlock_wire import HEADER_FORMAT

__all__ = [
    "MAX_DEPTH",
    "MAX_INT_DIGITS",
    "FrameError",
    "decode_body",
    "encode_frame",
    "read_frame",
    "read_sized_frame",
]

MAX_DEPTH: Final = 64
MAX_INT_DIGITS: Final = 30
_HEADER: Final = struct.Struct(HEADER_FORMAT)


class FrameError(ValueError):
    """A frame broke the protocol: the run that sent it ends with ``protocol_error``."""


def encode_frame(message: dict[str, Any]) -> bytes:
    """Serialize one message as a frame (compact JSON, no NaN)."""
    body = json.dumps(message, separators=(",", ":"), allow_nan=False).encode()
    return _HEADER.pack(len(body)) + body


async def read_frame(reader: asyncio.StreamReader, *, max_bytes: int) -> dict[str, Any] | None:
    """Read and decode one frame; ``None`` at a clean end of stream (before any header byte).

    Raises:
        FrameError: a frame over ``max_bytes``, a stream cut inside a frame, or a bad body.
    """
    message, _ = await read_sized_frame(reader, max_bytes=max_bytes)
    return message


async def read_sized_frame(
    reader: asyncio.StreamReader, *, max_bytes: int
) -> tuple[dict[str, Any] | None, int]:
    """As :func:`read_frame`, with the frame's size on the wire (header included).

    Raises:
        FrameError: as :func:`read_frame`.
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
    try:
        body = await reader.readexactly(size)
    except asyncio.IncompleteReadError:
        raise FrameError("the stream ended inside a frame body") from None
    return decode_body(body), _HEADER.size + size


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
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return False
        stack.extend((child, depth + 1) for child in children)
    return True


def decode_body(body: bytes) -> dict[str, Any]:
    """Decode a frame body strictly into a message object with a string ``type``.

    Raises:
        FrameError: invalid UTF-8 or JSON, a forbidden construct, or not a typed object.
    """
    try:
        message = json.loads(
            body.decode("utf-8"),
            object_pairs_hook=_unique_keys,
            parse_constant=_reject_constant,
            parse_int=_bounded_int,
            parse_float=_finite_float,
        )
    except FrameError:
        raise
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise FrameError(f"frame body is not JSON: {exc}") from None
    except RecursionError:
        raise FrameError(f"frame nests deeper than {MAX_DEPTH} levels") from None
    if not _depth_within(message, MAX_DEPTH):
        raise FrameError(f"frame nests deeper than {MAX_DEPTH} levels")
    if not isinstance(message, dict) or not isinstance(message.get("type"), str):
        raise FrameError("a frame must be a JSON object with a string 'type'")
    return message
