"""An HTTP answer's body, read within a byte cap whatever the other side compresses.

httpx would inflate every ``Content-Encoding`` layer of a network read in one step, before a
cap could count a byte: a kilobyte of stacked gzip becomes a gigabyte on the event loop. So
the request asks for ``identity``, the raw bytes are read, and at most one ``gzip`` or
``deflate`` layer is inflated here, a slice at a time and never past the cap (plus one byte,
to know it was passed). Stacked or unknown encodings are refused unread. The REST adapter
reads its upstreams so, and ``airlock chat`` the model API's answers.
"""

from __future__ import annotations

import zlib
from typing import Final

import httpx

from airlock.tools._errors import UpstreamError

__all__ = ["ACCEPT_ENCODING", "BodyOverCapError", "UnreadableBodyError", "read_body"]

ACCEPT_ENCODING: Final = "identity"
"""What a request asks for; a server that compresses anyway gets one layer inflated."""
_SLICE: Final = 1 << 20
"""The most bytes one inflate step makes, so no piece is much larger than a network read."""
_WIRE_SLACK: Final = 65_536
"""Compressed bytes allowed past the cap: framing, never a body's worth."""
_GZIP: Final = frozenset({"gzip", "x-gzip"})


class BodyOverCapError(UpstreamError):
    """The body passed the cap; ``size`` bytes were counted when reading stopped (a reader
    says what that means for its call: the REST adapter's is ``result_too_large``)."""

    def __init__(self, size: int) -> None:
        super().__init__(f"the answer's body passed its cap ({size} bytes read)")
        self.size = size


class UnreadableBodyError(UpstreamError):
    """The body is in an encoding that is not read here, or is not valid in it; the
    :attr:`message` says which."""


class _Inflater:
    """One ``gzip``/``deflate`` layer, inflated a bounded amount at a time."""

    def __init__(self, encoding: str) -> None:
        self._gzip = encoding in _GZIP
        self._encoding = encoding
        self._stream = zlib.decompressobj(16 + zlib.MAX_WBITS if self._gzip else zlib.MAX_WBITS)
        self._first = True

    def inflate(self, data: bytes, room: int) -> list[bytes]:
        """Pieces of at most ``room`` bytes in all from ``data``; fewer means all of it was
        used (the rest of ``data`` is dropped: the reader stops past the cap)."""
        pieces: list[bytes] = []
        while data and room > 0 and not self._stream.eof:
            piece = self._step(data, min(room, _SLICE))
            pieces.append(piece)
            room -= len(piece)
            data = self._stream.unconsumed_tail
        if self._stream.eof and (data or self._stream.unused_data):
            raise self._unreadable("data after the end of its stream")
        return pieces

    def _step(self, data: bytes, limit: int) -> bytes:
        try:
            piece = self._stream.decompress(data, limit)
        except zlib.error:
            if self._gzip or not self._first:
                raise self._unreadable("invalid data") from None
            # "deflate" is zlib-wrapped by the standard, bare by some servers (as httpx reads it)
            self._stream = zlib.decompressobj(-zlib.MAX_WBITS)
            self._first = False
            return self._step(data, limit)
        self._first = False
        return piece

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


async def read_body(response: httpx.Response, cap: int, *, refuse: bool) -> tuple[bytes, bool]:
    """At most ``cap`` bytes of the body, inflated, and whether reading stopped at the cap
    (what is past it is never read: the connection is closed with the stream).

    Raises:
        BodyOverCapError: ``refuse`` and the body is over ``cap`` bytes.
        UnreadableBodyError: a stacked or unknown ``Content-Encoding``, or an invalid body.
    """
    if response.is_stream_consumed:
        # An in-process transport (httpx.MockTransport) built the answer already read and
        # decoded, in this process: there are no network bytes left to bound.
        data = response.content
        if len(data) > cap and refuse:
            raise BodyOverCapError(len(data))
        return data[:cap], len(data) > cap
    inflater = _inflater(response.headers)
    chunks: list[bytes] = []
    size = wire = 0
    async for raw in response.aiter_raw():
        wire += len(raw)
        pieces = [raw] if inflater is None else inflater.inflate(raw, cap - size + 1)
        chunks.extend(pieces)
        size += sum(len(piece) for piece in pieces)
        if size > cap or wire > cap + _WIRE_SLACK:
            if refuse:
                raise BodyOverCapError(max(size, wire))
            return b"".join(chunks)[:cap], True
    # No byte at all is no stream, not one cut short: servers mark a 204 or a
    # Content-Length: 0 answer compressed too, and the body is then empty.
    if inflater is not None and wire:
        inflater.finish()
    return b"".join(chunks), False
