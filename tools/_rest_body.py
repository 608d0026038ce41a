"""An answer's body, read within a byte cap whatever the upstream compresses, and the part of
an error body the operator log may keep.

httpx would inflate every ``Content-Encoding`` layer of a network read in one step, before a
cap could count a byte: a few hundred bytes of stacked gzip become gigabytes on the event
loop. So the adapter asks for ``identity``, reads the raw bytes, and inflates at most one
``gzip`` or ``deflate`` layer itself, never more than the cap allows (plus one byte, to know
it was passed). Stacked or unknown encodings are refused unread.
"""

from __future__ import annotations

import json
import math
import zlib
from collections.abc import AsyncIterator
from typing import Final

import httpx

from airlock.tools._credential import MAX_CREDENTIAL_CHARS
from airlock.tools._errors import UpstreamError
from airlock.tools._json import JSONObject
from airlock.tools._redact import redact

__all__ = [
    "ACCEPT_ENCODING",
    "BodyOverCapError",
    "UnreadableBodyError",
    "decode_object",
    "error_text",
    "read_body",
    "status_detail",
]

ACCEPT_ENCODING: Final = "identity"
"""What the adapter asks for; an upstream that compresses anyway gets one layer inflated."""
ERROR_BODY_BYTES: Final = 2_000
"""How much of an error body is read for the operator log (the model never sees it)..."""
_ERROR_READ_BYTES: Final = ERROR_BODY_BYTES + MAX_CREDENTIAL_CHARS
"""...plus room for one credential, whose copy cut short is dropped (:func:`error_text`)."""
_KEPT_CHARS: Final = 300
_WIRE_SLACK: Final = 65_536
"""Compressed bytes allowed past the cap: headers and framing, never a body's worth."""
_GZIP: Final = frozenset({"gzip", "x-gzip"})


class BodyOverCapError(Exception):
    """The body passed the cap; ``size`` bytes were counted when reading stopped."""

    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.size = size


class UnreadableBodyError(Exception):
    """The body is in an encoding the adapter does not read, or is not valid in it."""


class _Inflater:
    """One ``gzip``/``deflate`` layer, inflated a bounded amount at a time."""

    def __init__(self, encoding: str) -> None:
        self._gzip = encoding in _GZIP
        self._encoding = encoding
        self._stream = zlib.decompressobj(16 + zlib.MAX_WBITS if self._gzip else zlib.MAX_WBITS)
        self._first = True

    def inflate(self, data: bytes, room: int) -> bytes:
        """At most ``room`` bytes from ``data``; fewer means all of ``data`` was used."""
        if self._stream.eof:
            if data:
                raise self._unreadable("data after the end of its stream")
            return b""
        try:
            out = self._stream.decompress(data, room)
        except zlib.error:
            if self._gzip or not self._first:
                raise self._unreadable("invalid data") from None
            # "deflate" is zlib-wrapped by the standard, bare by some servers (as httpx reads it)
            self._stream = zlib.decompressobj(-zlib.MAX_WBITS)
            self._first = False
            return self.inflate(data, room)
        self._first = False
        if self._stream.eof and self._stream.unused_data:
            raise self._unreadable("data after the end of its stream")
        return out

    def finish(self) -> None:
        if not self._stream.eof:
            raise self._unreadable("a stream that ends early")

    def _unreadable(self, why: str) -> UnreadableBodyError:
        return UnreadableBodyError(f"content-encoding {self._encoding!r}: {why}")


def _inflater(headers: httpx.Headers) -> _Inflater | None:
    layers = [
        e.strip().lower()
        for e in headers.get_list("content-encoding", split_commas=True)
        if e.strip().lower() not in ("", "identity")
    ]
    if not layers:
        return None
    if len(layers) == 1 and layers[0] in {*_GZIP, "deflate"}:
        return _Inflater(layers[0])
    raise UnreadableBodyError(f"content-encoding {', '.join(layers)!r}, which is not read here")


def _source(response: httpx.Response) -> tuple[_Inflater | None, AsyncIterator[bytes]]:
    if response.is_stream_consumed:
        # An in-process transport (httpx.MockTransport) built the answer already read and
        # decoded, in this process: there are no network bytes left to bound.
        return None, _once(response.content)
    return _inflater(response.headers), response.aiter_raw()


async def _once(data: bytes) -> AsyncIterator[bytes]:
    yield data


async def read_body(response: httpx.Response, cap: int, *, refuse: bool) -> tuple[bytes, bool]:
    """At most ``cap`` bytes of the body, inflated, and whether reading stopped at the cap.

    Raises:
        BodyOverCapError: ``refuse`` and the body is over ``cap`` bytes.
        UnreadableBodyError: a stacked or unknown ``Content-Encoding``, or an invalid body.
    """
    inflater, source = _source(response)
    chunks: list[bytes] = []
    size = wire = 0
    async for raw in source:
        wire += len(raw)
        chunk = raw if inflater is None else inflater.inflate(raw, cap - size + 1)
        size += len(chunk)
        if size > cap or wire > cap + _WIRE_SLACK:
            if refuse:
                raise BodyOverCapError(max(size, wire))
            chunks.append(chunk[: max(cap - (size - len(chunk)), 0)])
            return b"".join(chunks), True
        chunks.append(chunk)
    # No byte at all is no stream, not one cut short: servers mark a 204 or a
    # Content-Length: 0 answer compressed too, and the body is then empty.
    if inflater is not None and wire:
        inflater.finish()
    return b"".join(chunks), False


async def error_text(response: httpx.Response) -> str:
    """The start of an error body for the operator log, credentials redacted, or a note on
    why it was not read."""
    try:
        data, cut = await read_body(response, _ERROR_READ_BYTES, refuse=False)
    except UnreadableBodyError as exc:
        return f"(not read: {exc})"
    text = redact(data.decode("utf-8", "replace"))
    if cut:
        # A credential echoed across the cut is there only in part, so redact() cannot know
        # it; whatever is left of it is shorter than a credential and at the very end.
        text = text[: max(len(text) - MAX_CREDENTIAL_CHARS, 0)]
    return text[:_KEPT_CHARS]


def status_detail(what: str, status: int, url: httpx.URL, headers: httpx.Headers, text: str) -> str:
    """Operator-log detail: route, status, the host a ``Location`` points to (resolved
    against ``url``, the request's), and the kept start of the body."""
    detail = f"{what} -> {status}"
    location = headers.get("location")
    if location:
        try:
            host = url.join(location).host or "(no host)"
        except (httpx.InvalidURL, ValueError):
            host = "(a malformed URL)"
        detail += f"; redirect to {host} refused"
    return f"{detail}; body {text!r}" if text else detail


def decode_object(data: bytes, *, what: str, safe: bool) -> JSONObject:
    """The JSON object of a success's body (an empty body is ``{}``).

    Raises:
        UpstreamError: not a JSON object, nested too deep to parse, or holding ``NaN``,
            ``Infinity`` or a number out of float range (none of them JSON).
    """
    try:
        value = json.loads(data, parse_constant=_refuse, parse_float=_finite) if data else {}
    except (ValueError, RecursionError):  # nesting too deep is not worth a stack overflow
        value = None
    if not isinstance(value, dict):
        raise UpstreamError(
            outcome="error" if safe else "unknown",
            detail=f"{what}: the answer is not a JSON object",
        )
    result: JSONObject = value
    return result


def _refuse(constant: str) -> float:
    raise ValueError(f"{constant} is not JSON")


def _finite(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):  # 1e999: not NaN or Infinity by name, the same once read
        raise ValueError(f"{text} is out of range")
    return number
