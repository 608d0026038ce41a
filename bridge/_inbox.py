"""Frames as they arrive from a guest: the socket read straight into the run's buffer and
split into frames, each frame's length checked before its body is read.

:class:`FrameInbox` is an :class:`asyncio.BufferedProtocol`: the event loop receives into
the inbox's own buffer (``recv_into``, no allocation per read) and calls back as soon as
bytes arrive, so a frame is handled in the callback that read it, with no task woken to read
it. A stream transport's reads would allocate a 256 KiB object each (above the C library's
``mmap`` threshold, a system call and page faults per read: about 20 us of a round trip here)
and wake the reading task once more per frame.

:meth:`FrameInbox.take_over` takes the socket of an :class:`asyncio.StreamReader` and its
writer over, bytes the reader had buffered first; a reader without such a socket (one fed by
hand) is read by the caller into :meth:`FrameInbox.get_buffer`, exactly as the transport
would. Bounds: one frame's body is at most ``max_bytes`` (a longer length ends the run
before a byte of the body is read); the buffer holds :data:`CHUNK_BYTES`; a frame larger than
that is read in pieces of at most :data:`PIECE_BYTES` and its body grows as they arrive, so
what the inbox holds is what the guest sent plus a piece, never what a header claims (a
header alone once made the host allocate and zero the whole claimed body: 772 MiB, with the
largest ``done`` frame a profile allows).
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable
from typing import Final

from airlock.bridge._codec import FrameError
from airlock.bridge.airlock_wire import HEADER_FORMAT

__all__ = ["CHUNK_BYTES", "PIECE_BYTES", "FrameInbox"]

_HEADER: Final = struct.Struct(HEADER_FORMAT)
CHUNK_BYTES: Final = 64 * 1024
"""The inbox's buffer: small frames are split from it; a larger one gets a buffer of its own."""
PIECE_BYTES: Final = 256 * 1024
"""Most the socket reads at once into a large frame: about what a Unix socket's buffer holds
(``net.core.wmem_default``), so a read takes what is there."""
_MOVE_BELOW: Final = 4096


class FrameInbox(asyncio.BufferedProtocol):
    """One run's incoming frames: bytes in (from the socket or :meth:`get_buffer`), whole
    frame bodies out (:meth:`next_frame`). ``on_data`` is called when bytes arrived,
    ``on_end`` when the stream ended (:attr:`ended`)."""

    def __init__(
        self, *, max_bytes: int, on_data: Callable[[], object], on_end: Callable[[], object]
    ) -> None:
        self._max_bytes = max_bytes
        self._on_data = on_data
        self._on_end = on_end
        self._buffer = bytearray(CHUNK_BYTES)
        self._view = memoryview(self._buffer)
        self._start = 0  # the first byte not yet split off
        self._end = 0  # one past the last byte received
        self._body: bytearray | None = None  # a frame larger than the buffer, being read
        self._body_size = 0  # what its header claims
        self._piece = memoryview(b"")  # where the socket reads the body's next bytes
        self._transport: asyncio.Transport | None = None
        self._previous: asyncio.Protocol | None = None
        self._held = memoryview(b"")  # bytes given by :meth:`feed`, not yet in the buffer
        self._held_at = 0
        self._paused = False
        self._closed = False
        self.ended = False
        """The stream ended (the guest closed it, or the connection was lost)."""
        self.clean = True
        """The stream ended at its end, not by a connection error."""

    # -- taking the connection over ---------------------------------------------------------

    async def take_over(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Read ``writer``'s socket from now on, starting with what ``reader`` had buffered;
        ``False`` (and nothing changed) when it has no socket transport to take, and the
        caller reads ``reader`` into :meth:`get_buffer` instead. ``reader`` is left at its
        end; ``writer`` writes as before.

        The transport's protocol is the stream's own, or a plain one that stands in front of
        it and passes what it receives on (a watch of the connection's end): either is told
        of the end as before (its ``eof_received`` and ``connection_lost``)."""
        transport = writer.transport
        if not isinstance(transport, asyncio.Transport) or transport.is_closing():
            return False
        previous = transport.get_protocol()
        if not isinstance(previous, asyncio.Protocol):  # (a buffered one reads elsewhere)
            return False
        transport.pause_reading()  # until what the reader holds has gone first
        self._transport, self._previous = transport, previous
        transport.set_protocol(self)
        # Whatever the reader received before: nothing more reaches it now, and at its end
        # it hands over what it holds without waiting.
        reader.feed_eof()
        try:
            held = await reader.read()
        except (ConnectionError, OSError):
            held = b""
        self._paused = True
        self.feed(held)
        self.resume()  # (only once what it held is split off)
        return True

    def feed(self, data: bytes) -> None:
        """Take ``data`` as if the socket had received it (split off as frames are asked
        for, so ``data`` may be of any length)."""
        if data:
            rest = self._held[self._held_at :]
            self._held = memoryview(bytes(rest) + data if rest else data)
            self._held_at = 0
            self._on_data()

    # -- asyncio.BufferedProtocol -----------------------------------------------------------

    def get_buffer(self, sizehint: int) -> memoryview:
        """Where the next bytes go: a piece of a large frame's body (never past its end),
        or the free end of the buffer (never empty)."""
        if self._body is not None:
            return self._piece[: self._body_size - len(self._body)]
        if self._start == self._end:
            self._start = self._end = 0
        elif self._start and CHUNK_BYTES - self._end < _MOVE_BELOW:
            # Little room left after a frame's start: move it to the front. (Never empty:
            # a frame that cannot fit the buffer has a buffer of its own by now.)
            left = self._end - self._start
            self._view[:left] = self._view[self._start : self._end]
            self._start, self._end = 0, left
        return self._view[self._end :]

    def buffer_updated(self, nbytes: int) -> None:
        self._received(nbytes)
        if not self._closed:
            self._on_data()

    def eof_received(self) -> bool:
        self._stop(clean=True)
        if self._previous is not None:  # (what it answers is the stream's: this one keeps it)
            self._previous.eof_received()
        return True  # keep the transport open: results and the abort frame may still go

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop(clean=exc is None)
        if self._previous is not None:  # the writer's drain and wait_closed learn it too
            self._previous.connection_lost(exc)

    def pause_writing(self) -> None:
        if self._previous is not None:
            self._previous.pause_writing()

    def resume_writing(self) -> None:
        if self._previous is not None:
            self._previous.resume_writing()

    # -- frames -----------------------------------------------------------------------------

    def next_frame(self) -> tuple[bytes | bytearray, int] | None:
        """The next whole frame's body and its size on the wire (header included), or
        ``None`` until more bytes arrive.

        Raises:
            FrameError: the frame's length is over ``max_bytes``.
        """
        while True:
            frame = self._split()
            left = len(self._held) - self._held_at
            if frame is not None or not left:
                return frame
            space = self.get_buffer(left)
            count = min(len(space), left)
            space[:count] = self._held[self._held_at : self._held_at + count]
            self._held_at += count
            self._received(count)

    def _split(self) -> tuple[bytes | bytearray, int] | None:
        if self._body is not None:
            if len(self._body) < self._body_size:
                return None
            body, self._body, self._piece = self._body, None, memoryview(b"")
            return body, _HEADER.size + len(body)
        available = self._end - self._start
        if available < _HEADER.size:
            return None
        (size,) = _HEADER.unpack_from(self._buffer, self._start)
        if size > self._max_bytes:
            raise FrameError(f"frame of {size} bytes is over the {self._max_bytes}-byte limit")
        total = _HEADER.size + size
        if available >= total:
            start = self._start + _HEADER.size
            self._start += total
            return self._buffer[start : start + size], total
        if total > CHUNK_BYTES:
            # Too large for the buffer: a body of its own, the bytes already here first, that
            # grows by what the socket reads into a piece. Its header is only a claim: the
            # memory follows the bytes that came (appending costs what zeroing a buffer of
            # the claimed size first would, and the bytes are copied once either way).
            self._body = bytearray(self._view[self._start + _HEADER.size : self._end])
            self._body_size = size
            self._piece = memoryview(bytearray(min(size - len(self._body), PIECE_BYTES)))
            self._start = self._end = 0
        return None

    @property
    def holding(self) -> bool:
        """Bytes not yet split off as frames are waiting (at the stream's end: a frame cut
        short)."""
        return self._body is not None or self._end > self._start or self._held_at < len(self._held)

    def pause(self) -> None:
        """Stop reading the socket (frames waiting are being handled)."""
        if not self._paused and self._transport is not None and not self.ended:
            self._paused = True
            self._transport.pause_reading()

    def resume(self) -> None:
        """Read the socket again (once the bytes :meth:`feed` gave are all split off)."""
        if self._held_at < len(self._held):
            return
        if self._paused and self._transport is not None and not self._closed:
            self._paused = False
            self._transport.resume_reading()

    def close(self) -> None:
        """Stop reading for good: the run is over (the transport is the caller's to close)."""
        self.pause()
        self._closed = True

    def _received(self, count: int) -> None:
        if self._body is not None:
            self._body += self._piece[:count]
        else:
            self._end += count

    def _stop(self, *, clean: bool) -> None:
        if not self.ended:
            self.ended = True
            self.clean = clean
            if not self._closed:
                self._on_end()
