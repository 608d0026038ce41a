"""Frames on the guest's side of the bridge: a 4-byte big-endian length, then that many bytes
of JSON holding one object (the contract is ``airlock_wire``).

Standard library only; shipped in the image next to the runner. :func:`encode` makes one
frame; :func:`split_frame` takes the next whole frame off the bytes received so far.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airlock.bridge import airlock_wire as wire
else:  # in the image, the guest's modules sit side by side on the runner's path
    import airlock_wire as wire

HEADER = struct.Struct(wire.HEADER_FORMAT)
_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False)
_DECODER = json.JSONDecoder()


def _compact_encoder() -> Callable[[Any], str]:
    """``_ENCODER.encode`` without what it builds per call: the C encoder is built once, and
    without the table of containers being encoded that finds a cycle (which costs a third
    of a small frame's encoding); a value that refers to itself nests too deep instead."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # an interpreter without the C accelerator
        return _ENCODER.encode
    chunks = make(
        None, _ENCODER.default, json.encoder.encode_basestring_ascii, None, ":", ",", False,
        False, False,
    )  # fmt: skip
    return lambda value: "".join(chunks(value, 0))


_encode = _compact_encoder()


def encode(message: dict[str, Any]) -> bytes:
    """One frame holding ``message`` (compact ASCII JSON).

    Raises:
        ValueError: a value JSON cannot hold (``NaN``, ``Infinity``, a value that refers to
            itself or nests too deep).
        TypeError: a value of a type JSON cannot hold.
    """
    try:
        body = _encode(message).encode()
    except RecursionError:
        raise ValueError(
            "a value sent to a tool refers to itself or nests too deep for JSON; "
            "send plain, finite data"
        ) from None
    return HEADER.pack(len(body)) + body


def split_frame(received: bytearray) -> dict[str, Any] | None:
    """The next whole frame at the start of ``received`` (taken off it), or ``None`` until
    more bytes arrive.

    Raises:
        ConnectionError: the frame is over ``MAX_HOST_FRAME_BYTES`` or holds no JSON object.
        ValueError: the frame is not JSON.
    """
    if len(received) < HEADER.size:
        return None
    (size,) = HEADER.unpack_from(received)
    if size > wire.MAX_HOST_FRAME_BYTES:
        raise ConnectionError(f"frame of {size} bytes is over the limit")
    end = HEADER.size + size
    if len(received) < end:
        return None
    text = received[HEADER.size : end].decode()
    if end == len(received):
        received.clear()
    else:
        del received[:end]
    message = _DECODER.decode(text)
    if not isinstance(message, dict):
        raise ConnectionError("a frame must hold a JSON object")
    return message


__all__ = ["HEADER", "encode", "split_frame"]
