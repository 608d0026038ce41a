"""Frames on the guest's side of the bridge: a 4-byte big-endian length, then that many bytes
of JSON holding one object (the contract is ``airlock_wire``).

Standard library only; shipped in the image next to the runner. :func:`encode` makes one
frame; :func:`split_frame` takes the next whole frame off the bytes received so far.
"""

from __future__ import annotations

import struct

TYPE_CHECKING = False  # typing's, which the guest does not import (see airlock.sandbox.guest)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from airlock.bridge import airlock_wire as wire
else:  # in the image, the guest's modules sit side by side on the runner's path
    import airlock_wire as wire

HEADER = struct.Struct(wire.HEADER_FORMAT)
_CONSTANTS = {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}


def _unserializable(value: object) -> object:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


class _Scanning:
    """What the C scanner reads off ``json.JSONDecoder``: its defaults."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = _CONSTANTS.__getitem__


def _codec() -> tuple[Callable[[Any], str], Callable[[str], Any]]:
    """Compact JSON out and ``json.loads`` in, straight from the C accelerator: the ``json``
    package compiles regular expressions on import (``re`` and ``enum`` with them), a
    quarter of what a runner costs before its first program. The encoder is built once,
    without the table of containers being encoded that finds a cycle (a third of a small
    frame's encoding): a value that refers to itself nests too deep instead."""
    try:
        import _json
    except ImportError:  # an interpreter without the C accelerator
        import json

        dumps = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode
        return dumps, json.JSONDecoder().decode
    chunks = _json.make_encoder(
        None, _unserializable, _json.encode_basestring_ascii, None, ":", ",", False, False,
        False,
    )  # fmt: skip
    scan = _json.make_scanner(_Scanning())  # type: ignore[arg-type]  # reads these attributes

    def loads(text: str) -> Any:
        body = text.strip(" \t\n\r")
        try:
            value, end = scan(body, 0)
        except StopIteration as exc:
            raise ValueError(f"Expecting value: char {exc.value}") from None
        if end != len(body):
            raise ValueError(f"Extra data: char {end}")
        return value

    return (lambda value: "".join(chunks(value, 0))), loads


_dumps, _loads = _codec()


def to_json(value: Any) -> str:
    """``value`` as compact ASCII JSON.

    Raises:
        ValueError: ``NaN``, ``Infinity``, or a value that refers to itself or nests too deep.
        TypeError: a value of a type JSON cannot hold.
    """
    try:
        return _dumps(value)
    except RecursionError:
        raise ValueError("a value refers to itself or nests too deep for JSON") from None


def encode(message: dict[str, Any]) -> bytes:
    """One frame holding ``message`` (compact ASCII JSON).

    Raises:
        ValueError: a value JSON cannot hold (``NaN``, ``Infinity``, a value that refers to
            itself or nests too deep).
        TypeError: a value of a type JSON cannot hold.
    """
    try:
        body = _dumps(message).encode()
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
    message = _loads(text)
    if not isinstance(message, dict):
        raise ConnectionError("a frame must hold a JSON object")
    return message


__all__ = ["HEADER", "encode", "split_frame", "to_json"]
