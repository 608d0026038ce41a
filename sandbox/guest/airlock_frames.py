"""Frames on the guest's side of the bridge: a 4-byte big-endian length, then that many bytes
of JSON holding one object (the contract is ``airlock_wire``).

Standard library only; shipped in the image next to the runner. :func:`encode` makes one
frame; :func:`split_frame` takes the next whole frame off the bytes received so far.

The host refuses a frame that JSON can hold but its rules do not (``airlock_wire``: an integer
of more than ``MAX_INT_DIGITS`` digits, more than ``MAX_DEPTH`` levels, a call's frame over its
byte limit), and ends the run that sent it as a protocol error. So a program's call is checked
here first (:func:`encode_call`): one that breaks them is refused in the program as
``InvalidInput``, and nothing is sent; :func:`unfit` says where a value breaks them.
"""

from __future__ import annotations

import struct

TYPE_CHECKING = False  # typing's, which the guest does not import (see airlock.sandbox.guest)
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from typing import Any

    from airlock.bridge import airlock_wire as wire
    from airlock.sandbox.guest import airlock_errors as errors
else:  # in the image, the guest's modules sit side by side on the runner's path
    import airlock_errors as errors
    import airlock_wire as wire

HEADER = struct.Struct(wire.HEADER_FORMAT)
_INT_BOUND = 10**wire.MAX_INT_DIGITS
_DIGITS = bytes(1 if 0x30 <= byte <= 0x39 else 0 for byte in range(256))
"""A ``bytes.translate`` table: digits to 1, every other byte to 0."""
_LONG_NUMBER = b"\x01" * (wire.MAX_INT_DIGITS + 1)
_call_bytes = wire.MAX_CALL_FRAME_BYTES
"""The largest call frame body this process's program may send (its ``run`` frame's)."""
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


def limit_calls(max_bytes: object) -> None:
    """Hold this process's program to call frames of at most ``max_bytes`` (its ``run``
    frame's ``max_call_frame_bytes``; the contract's default when that is not a size)."""
    global _call_bytes
    _call_bytes = count(max_bytes, wire.MAX_CALL_FRAME_BYTES)


def count(value: object, default: int) -> int:
    """A positive count from a ``run`` frame, or ``default`` when it is not one."""
    fits = isinstance(value, int) and not isinstance(value, bool) and value > 0
    return value if fits else default  # type: ignore[return-value]


def max_call_bytes() -> int:
    """The largest call frame body this process's program may send (:func:`limit_calls`)."""
    return _call_bytes


def encode_call(message: dict[str, Any]) -> bytes:
    """One ``call``, ``propose`` or ``batch`` frame holding ``message``, as :func:`encode`.

    Raises:
        InvalidInput: the frame breaks a rule of the host's (see the module's docstring);
            ``issues`` names the argument (a batch's: ``INDEX.NAME``).
        ValueError: as :func:`encode`.
        TypeError: as :func:`encode`.
    """
    frame = encode(message)
    size = len(frame) - HEADER.size
    tool = message.get("tool")
    if size > _call_bytes:
        reason = (
            f"the call's frame is {size} bytes of JSON, over the bridge's limit of "
            f"{_call_bytes}: send less per call (a batch in parts, a long text in pieces)"
        )
        raise errors.InvalidInput(
            f"{tool}: {reason}; nothing was sent", issues=[{"field": "", "reason": reason}]
        )
    if suspect(frame):
        found = unfit(message.get("items" if message.get("type") == wire.BATCH else "args"), 1)
        if found is not None:
            field, reason = found
            raise errors.InvalidInput(
                f"{tool}: the argument {field!r} {reason}; nothing was sent",
                issues=[{"field": field, "reason": reason}],
            )
    return frame


def suspect(body: bytes, level: int = 0) -> bool:
    """Whether the JSON ``body`` may break the host's nesting or integer rule (``False``: it
    does not): two passes at C speed spare most frames the walk of :func:`unfit`.
    ``level``: the levels of the frame around ``body`` (as for :func:`unfit`), which its own
    brackets do not show: a value two levels down in its frame breaks the rule at 63."""
    brackets = body.count(b"[") + body.count(b"{")
    return brackets + level > wire.MAX_DEPTH or _LONG_NUMBER in body.translate(_DIGITS)


def unfit(value: Any, level: int = 0) -> tuple[str, str] | None:
    """Where in ``value`` (a dotted path; ``""``: the value itself) the host's nesting or
    integer rule is broken, and how; ``None`` when it is not. ``level``: the levels of the
    frame around ``value``."""
    stack: list[tuple[Any, int, str]] = [(value, level, "")]
    while stack:
        item, depth, path = stack.pop()
        kind = type(item)
        if issubclass(kind, int) and kind is not bool:
            if int.__abs__(item) >= _INT_BOUND:
                return path, (
                    f"holds an integer of more than {wire.MAX_INT_DIGITS} digits, which the "
                    "bridge does not carry: pass it as a string"
                )
            continue
        children: Iterable[tuple[Any, Any]]
        if issubclass(kind, dict):
            children = dict.items(item)
        elif issubclass(kind, (list, tuple)):
            children = enumerate(item)
        else:
            continue
        if depth + 1 > wire.MAX_DEPTH:
            return path, (
                f"nests deeper than the bridge carries ({wire.MAX_DEPTH} levels, the "
                "frame's own included): flatten it"
            )
        stack.extend(
            (child, depth + 1, f"{path}.{key}" if path else str(key)) for key, child in children
        )
    return None


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


__all__ = [
    "HEADER",
    "count",
    "encode",
    "encode_call",
    "limit_calls",
    "max_call_bytes",
    "split_frame",
    "suspect",
    "to_json",
    "unfit",
]
