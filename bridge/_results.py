"""The answers of one run's calls on their way to the guest: ``result`` frames, counted
against the run's ``max_bytes_out``, written together when they finish together.

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
from typing import Any, Final

from airlock.bridge._codec import encode_result
from airlock.bridge._session import BridgeLimits, RunEnd

__all__ = ["COALESCE_BYTES", "FLUSH_FRAMES", "ResultWriter"]

FLUSH_FRAMES: Final = 8
"""Results written together at most; more finishing in one turn of the loop go in parts, the
first as soon as it is full. With many calls in flight the guest then goes on with their
answers (and sends its next calls) while the host handles the rest of the burst, instead of
waiting for the whole of it: with 16 or 64 calls in flight, about a fifth more calls a
second than with one write per burst, and no more of the host's CPU per call."""
COALESCE_BYTES: Final = 64 * 1024
"""Results larger than this are written on their own."""


class ResultWriter:
    """Writes one run's ``result`` frames to ``writer``, within ``limits.max_bytes_out``."""

    def __init__(self, writer: asyncio.StreamWriter, limits: BridgeLimits) -> None:
        self._writer = writer
        self._limits = limits
        self._outbox: list[bytes] = []
        self.bytes_out = 0
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
            frame = encode_result(
                call_id,
                False,
                {"code": "upstream", "message": "unencodable result", "retryable": False},
            )
        self.bytes_out += len(frame)
        if self.bytes_out > self._limits.max_bytes_out:
            # Ending from a call: stop the reader too, so the run's task sees the end.
            self.ended = RunEnd(
                "limit_exceeded",
                "bytes",
                f"the program's tool results came to {self.bytes_out} bytes; the limit is "
                f"{self._limits.max_bytes_out} bytes",
            )
            self._writer.transport.abort()
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
