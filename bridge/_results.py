"""The answers of one run's calls on their way to the guest: ``result`` frames, counted
against the run's ``max_bytes_out``, written together when they finish together.

Results count against ``max_bytes_out`` as soon as the host holds them, not only once they
are sent: a batch's items are encoded as each finishes, and their bytes held
(:meth:`ResultWriter.reserve`) until the batch's answer leaves (:class:`BatchAnswer`). A run
whose results, sent and held, go over the limit ends then, and its batches stop: the host
holds about ``max_bytes_out`` of a guest's results at most, plus the few being made, not
every item of every batch in flight (``max_calls`` times a result's size).

Results that finish in the same turn of the event loop leave together, up to
:data:`FLUSH_FRAMES` to a write: one system call and one wake-up of the guest for several of
them, not one each. While the run's frames are being handled (:attr:`ResultWriter.holding`),
results wait for :meth:`ResultWriter.flush` at the end of them, unless :data:`FLUSH_FRAMES` are
waiting: a full outbox leaves at once, so the guest goes on with the first answers of a burst
while the host handles the rest. A large result (over :data:`COALESCE_BYTES`) is not worth a
copy, and leaves alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from typing import Any, Final

from pydantic_core import to_json

from airlock.bridge._codec import _encode_value, encode_result
from airlock.bridge._session import BridgeLimits, RunEnd
from airlock.bridge.airlock_wire import HEADER_FORMAT, RESULT

__all__ = ["COALESCE_BYTES", "FLUSH_FRAMES", "BatchAnswer", "ResultWriter"]

FLUSH_FRAMES: Final = 8
"""Results written together at most; more finishing in one turn of the loop go in parts, the
first as soon as it is full. With many calls in flight the guest then goes on with their
answers (and sends its next calls) while the host handles the rest of the burst, instead of
waiting for the whole of it: with 16 or 64 calls in flight, about a fifth more calls a
second than with one write per burst, and no more of the host's CPU per call."""
COALESCE_BYTES: Final = 64 * 1024
"""Results larger than this are written on their own (a batch's, in parts of about this)."""
_UNENCODABLE: Final = {"code": "upstream", "message": "unencodable result", "retryable": False}
_HEADER: Final = struct.Struct(HEADER_FORMAT)
_BATCH_HEAD: Final = b'{"type":"%s","id":%%d,"ok":true,"value":' % RESULT.encode()
_ITEM_HEADS: Final = (b'{"ok":false,"error":', b'{"ok":true,"value":')
_FIRST_HEADS: Final = tuple(b"[" + head for head in _ITEM_HEADS)
_NEXT_HEADS: Final = tuple(b"}," + head for head in _ITEM_HEADS)  # (the item before ends)


class ResultWriter:
    """Writes one run's ``result`` frames to ``writer``, within ``limits.max_bytes_out``."""

    def __init__(self, writer: asyncio.StreamWriter, limits: BridgeLimits) -> None:
        self._writer = writer
        self._limits = limits
        self._outbox: list[bytes] = []
        self.bytes_out = 0
        self.held = 0
        """Bytes of results held for answers still being built (:meth:`reserve`)."""
        self.holding = False
        """Frames are being handled: results wait for :meth:`flush` at the end of them."""
        self.ended: RunEnd | None = None
        """Set when the results went over ``max_bytes_out`` (the connection is aborted then),
        or by the run's end: nothing more is written."""

    def send(self, call_id: int, ok: bool, value: Any, *, alone: bool) -> None:
        """Answer call ``call_id``: a ``result`` frame with its value, or its error. ``alone``:
        no other call is waiting for its result, so nothing is worth waiting for."""
        if self.ended is not None:
            return
        try:
            frame = encode_result(call_id, ok, value)
        except ValueError:  # a tool returned NaN or the like: a bug on the host side
            frame = encode_result(call_id, False, _UNENCODABLE)
        self._send_frame(frame, alone=alone)

    def _send_frame(self, frame: bytes, *, alone: bool) -> None:
        self.bytes_out += len(frame)
        if self.bytes_out + self.held > self._limits.max_bytes_out:
            self._over(self.bytes_out + self.held)
            return
        outbox = self._outbox
        if len(frame) > COALESCE_BYTES or (alone and not outbox and not self.holding):
            # The only call (no one to wait for), or a large result (not worth a copy).
            self._writer.write(frame)
            return
        outbox.append(frame)
        if len(outbox) >= FLUSH_FRAMES:
            self.flush()
        elif len(outbox) == 1 and not self.holding:
            asyncio.get_running_loop().call_soon(self.flush)

    def reserve(self, size: int) -> bool:
        """Count ``size`` bytes of a result held for an answer still being built, as if sent;
        ``False`` when the run has ended (now, when they go over ``max_bytes_out``): the
        result is to be dropped. :meth:`release` uncounts them."""
        if self.ended is not None:
            return False
        if self.bytes_out + self.held + size > self._limits.max_bytes_out:
            self._over(self.bytes_out + self.held + size)
            return False
        self.held += size
        return True

    def release(self, size: int) -> None:
        """Uncount bytes :meth:`reserve` counted: sent, or dropped."""
        self.held -= size

    def send_parts(self, parts: list[bytes], size: int, *, alone: bool) -> None:
        """Send a frame of ``size`` bytes held in ``parts`` (emptied as they are written)."""
        if self.ended is not None:
            return
        if size <= COALESCE_BYTES:
            self._send_frame(b"".join(parts), alone=alone)
            return
        self.bytes_out += size
        if self.bytes_out + self.held > self._limits.max_bytes_out:
            self._over(self.bytes_out + self.held)
            return
        # In parts of about COALESCE_BYTES, each freed once written: a copy of the whole
        # (a join) would hold the frame twice over.
        start, gathered = 0, 0
        with contextlib.suppress(ConnectionError, OSError, RuntimeError):
            for n, part in enumerate(parts):
                gathered += len(part)
                if gathered >= COALESCE_BYTES or n == len(parts) - 1:
                    self._writer.write(b"".join(parts[start : n + 1]))
                    parts[start : n + 1] = [b""] * (n + 1 - start)
                    start, gathered = n + 1, 0

    def _over(self, size: int) -> None:
        # Ending from a call: stop the reader too, so the run's task sees the end.
        self.ended = RunEnd(
            "limit_exceeded",
            "bytes",
            f"the program's tool results came to {size} bytes; the limit is "
            f"{self._limits.max_bytes_out} bytes",
        )
        self._writer.transport.abort()

    def flush(self) -> None:
        """Write the results waiting, in one write (unless the run has ended)."""
        frames, self._outbox = self._outbox, []
        if frames and self.ended is None:
            with contextlib.suppress(ConnectionError, OSError, RuntimeError):
                self._writer.write(b"".join(frames))

    @property
    def waiting(self) -> bool:
        """Results are waiting for :meth:`flush`."""
        return bool(self._outbox)


class BatchAnswer:
    """The answer to one ``batch`` frame, built as its items finish: each item's outcome is
    encoded at once, its value dropped, and its bytes held counted against the run's
    ``max_bytes_out`` (:meth:`ResultWriter.reserve`) until the answer is sent or dropped."""

    __slots__ = ("_held", "_parts", "_results")

    def __init__(self, results: ResultWriter, items: int) -> None:
        self._results = results
        # The frame's parts: its head, then each item's head and value, then its end.
        self._parts: list[bytes] = [b""] * (2 * items + 2)
        self._parts[-1] = b"}]}" if items else b"[]}"
        self._held = 0

    def put(self, n: int, ok: bool, value: Any) -> bool:
        """Hold item ``n``'s outcome: ``(True, value)`` or ``(False, error)``. ``False`` when
        the run has ended (perhaps by this very item, over ``max_bytes_out``): the batch's
        other items are not worth running, and nothing is held."""
        if self._results.ended is not None:  # (not worth encoding either)
            self.drop()
            return False
        try:
            encoded = _encode_item(value)
        except ValueError:  # a tool returned NaN or the like: a bug on the host side
            ok, encoded = False, _encode_value(_UNENCODABLE)
        head = (_NEXT_HEADS if n else _FIRST_HEADS)[ok]
        size = len(head) + len(encoded)
        if not self._results.reserve(size):
            self.drop()
            return False
        self._held += size
        self._parts[2 * n + 1] = head
        self._parts[2 * n + 2] = encoded
        return True

    def send(self, call_id: int, *, alone: bool) -> None:
        """Send the answer (``call_id``'s ``result`` frame), every item's outcome held
        (unless the run has ended)."""
        parts, held = self._parts, self._held
        self.drop()
        if self._results.ended is not None:
            return
        head = _BATCH_HEAD % call_id
        body = len(head) + held + len(parts[-1])
        parts[0] = _HEADER.pack(body) + head
        self._results.send_parts(parts, _HEADER.size + body, alone=alone)

    def drop(self) -> None:
        """Let go of the outcomes held (the answer is sent, or will never be)."""
        self._results.release(self._held)
        self._held = 0
        self._parts = []


def _encode_item(value: Any) -> bytes:
    """What ``_encode_value`` makes of ``value``, its checks cheaper for a batch's many small
    values (a byte looked for costs a tenth of a word: items are encoded one by one).

    Raises:
        ValueError: a value JSON cannot hold (``NaN``, ``Infinity``).
    """
    try:
        data = to_json(value, inf_nan_mode="constants")
    except ValueError:
        return _encode_value(value)
    if data.isascii() and (
        (78 not in data and 73 not in data)  # no "N", no "I": neither NaN nor Infinity
        or (data.find(b"NaN") < 0 and data.find(b"Infinity") < 0)
    ):
        return data
    return _encode_value(value)
