"""The host side of one run: frames from the guest in, admitted tool calls out.

Every ``call``, ``batch`` and ``propose`` frame goes to the run's :class:`CallDispatcher`,
which admits it through the registry as ``caller="code"`` and answers it with a ``result``
frame matched by the guest's call id, in whatever order calls finish
(:class:`ResultWriter`). ``artifact`` frames (the files a program left, sent after it ends)
go to the run's :class:`ArtifactSink` (:func:`store_artifact`).

A malformed, oversized or unexpected frame, or a run limit reached, ends the run: the guest is
told with an ``abort`` frame, pending calls are cancelled, and the end is recorded in the audit
log. Once a run has ended, however it ended, no frame of it is handled any more. Nothing a
guest sends can raise out of :func:`serve_run`, and nothing it does can keep
:func:`serve_run` past the run's deadline (plus a grace for tool calls to notice their
cancellation): every read from the guest waits for the deadline at most, and nothing ever
waits for the guest to read. A ``log`` frame's message reaches the operator's log on one line,
with control characters escaped.

Frames are handled in the event loop's callback that received them (:class:`FrameInbox`), one
after another (up to :data:`_FRAMES_PER_TURN`, or :data:`TURN_S` of time, before other runs get the
loop), and each call
runs at once, until it first waits (:class:`CallRunner`): a read of data at hand is answered in
the turn of the loop that received it, with no task or extra turn of the loop per call. The
results that finish together leave together, a few to a write. What the callbacks cannot do
(decode off the loop a large frame, or one that may need trimming; store an artifact; finish
on ``done``; end the run) waits for the run's own task, and reading stops meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import struct
import time
from typing import Any, Final

from airlock.bridge import _codec
from airlock.bridge import airlock_wire as wire
from airlock.bridge._artifact_frames import artifact_bytes_in, store_artifact
from airlock.bridge._codec import FrameError, encode_frame
from airlock.bridge._dispatch import CallDispatcher
from airlock.bridge._inbox import CHUNK_BYTES, FrameInbox
from airlock.bridge._results import ResultWriter
from airlock.bridge._run_stop import RunStop, limit_stop, protocol_stop
from airlock.bridge._runner import TURN_S
from airlock.bridge._session import ArtifactSink, BridgeLimits, RunEnd, ToolSession
from airlock.tools import escape_controls

__all__ = ["serve_run"]

_log = logging.getLogger(__name__)
_FRAMES_PER_TURN: Final = 64
"""Frames already buffered that one run handles before the event loop serves others."""
_HEADER_BYTES: Final = struct.calcsize(wire.HEADER_FORMAT)
"""A frame's length prefix: its size on the wire less this is its body's."""


def _deadline_passed() -> RunStop:
    return RunStop(RunEnd("timeout", "timeout", "the run's deadline passed"))


class _RunServer:
    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        session: ToolSession | None,
        *,
        deadline: float,
        max_done_bytes: int,
        artifacts: ArtifactSink | None,
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._session = session
        self._artifacts = artifacts
        self._limits = session.limits if session else BridgeLimits()
        self._deadline = deadline
        self._max_frame = max(max_done_bytes, self._limits.max_call_frame_bytes)
        self._results = ResultWriter(writer, self._limits)
        self._calls = CallDispatcher(
            session, self._limits, deadline=deadline, results=self._results
        )
        self._bytes_in = 0
        self._inbox = FrameInbox(
            max_bytes=self._max_frame, on_data=self._pump, on_end=self._wake_up
        )
        self._slow: tuple[Any, int, bool] | None = None
        """A frame for the run's task: (body or frame, size on the wire, decoded)."""
        self._stop: BaseException | None = None
        """Why the run must end, found by a callback, for the run's task to raise."""
        self._waiter: asyncio.Future[None] | None = None
        self._scheduled = False
        self._finished = False
        """:meth:`serve` is returning: no frame is handled any more (a pump the loop had
        scheduled for the rest of a burst included)."""
        self._log_frames = 0  # ``log``, ``refused`` and ``cancel`` frames: ``max_log_frames``

    async def serve(self) -> dict[str, Any] | RunEnd | None:
        loop = asyncio.get_running_loop()
        try:
            # One timeout for the whole run, not one per read: frames are handled in the
            # callback that received them, and this task waits only for what needs it.
            bound = asyncio.timeout_at(loop.time() + (self._deadline - time.monotonic()))
            try:
                async with bound:
                    return await self._serve_frames()
            except TimeoutError:
                if not bound.expired():
                    raise
                raise _deadline_passed() from None
        except RunStop as stop:
            return await self._end(stop.end, stop.tool)
        finally:
            self._finished = True
            self._inbox.close()
            await self._calls.cancel_pending()

    async def _serve_frames(self) -> dict[str, Any] | None:
        """Wait for what the frame callbacks cannot do: a frame to decode off the loop, an
        artifact, the ``done`` frame, the end of the run or of the stream."""
        loop = asyncio.get_running_loop()
        reads_socket = await self._inbox.take_over(self._reader, self._writer)
        while True:
            if self._stop is not None:
                raise self._stop
            if self._slow is not None:
                item, size, decoded = self._slow
                self._slow = None
                done = await self._slow_frame(item, size, decoded=decoded)
                if done is not None:
                    return done
                self._pump()
                continue
            if self._results.ended is not None:
                raise RunStop(self._results.ended)
            if self._inbox.ended:
                if not self._inbox.clean:
                    return None
                if self._inbox.holding:  # frames sent before the end are served first
                    if not self._pump():
                        raise protocol_stop("the stream ended inside a frame")
                    await asyncio.sleep(0)
                    continue
                return None
            if self._scheduled:  # a burst of frames: the rest are handled on the next turn
                await asyncio.sleep(0)
            elif reads_socket:
                self._waiter = loop.create_future()
                try:
                    await self._waiter
                finally:
                    self._waiter = None
            else:
                try:
                    data = await self._reader.read(CHUNK_BYTES)
                except (ConnectionError, OSError) as exc:
                    self._inbox.connection_lost(exc)
                    continue
                if data:
                    self._inbox.feed(data)
                else:
                    self._inbox.eof_received()

    def _pump(self) -> bool:
        """Handle the frames the inbox holds, in order, up to :data:`_FRAMES_PER_TURN` or
        :data:`TURN_S` (the rest on the loop's next turn, so other runs get theirs); whether
        any was split off. A frame that needs this run's task (:meth:`_serve_frames`) stops
        the pump, and reading, until the task has handled it. Never raises: an end is left for
        the task. The results of the calls answered meanwhile leave together, at the end."""
        results = self._results
        results.holding = True
        try:
            return self._pump_frames()
        finally:
            results.holding = False
            if results.waiting:
                results.flush()

    def _pump_frames(self) -> bool:
        self._scheduled = False
        if self._slow is not None or self._stop is not None or self._finished:
            return False
        split = False
        turn_ends = time.monotonic() + TURN_S
        try:
            for handled in itertools.count():
                if self._results.ended is not None:
                    raise RunStop(self._results.ended)
                now = time.monotonic()
                if now >= self._deadline:
                    raise _deadline_passed()
                if handled == _FRAMES_PER_TURN or (handled and now >= turn_ends):
                    # The turn is over: the rest on the loop's next, so other runs get theirs.
                    self._inbox.pause()
                    self._scheduled = True
                    asyncio.get_running_loop().call_soon(self._pump)
                    return split
                taken = self._inbox.next_frame()
                if taken is None:
                    self._inbox.resume()
                    return split
                split = True
                body, size = taken
                if _codec.decoded_off_loop(body):  # (large, or perhaps to be trimmed)
                    self._slow = (body, size, False)
                    break
                frame = _codec.decode_body(body)
                if not self._take(frame, size, first=not handled):
                    self._slow = (frame, size, True)
                    break
        except FrameError as exc:
            self._stop = protocol_stop(str(exc))
        except Exception as exc:  # a RunStop, or a bug of the host's: raised in the task
            self._stop = exc
        self._inbox.pause()
        self._wake_up()
        return split

    def _wake_up(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _take(self, frame: dict[str, Any], size: int, *, first: bool = True) -> bool:
        """Handle one frame here; ``False`` when it is for the run's task (an artifact, the
        ``done`` frame). The call of the ``first`` frame of a turn runs at once and is
        answered in that turn, as a program's single call waits for it; the calls of the
        frames after it, a burst of calls in flight, run in the call runner's task on the
        loop's next turn. (Run at once too, a burst's calls cost the host 4 to 7 us more
        each, for reasons not pinned down: host alone, 26,300 to 29,100 calls/s against 31,300
        to 33,500 with 64 in flight, and 15,300 against 17,600 to 19,000 with 4.)"""
        kind = frame["type"]
        if kind == wire.ARTIFACT:
            # The file's own bytes count against the artifacts' budget; the rest, as any
            # frame's, against this one.
            self._count_bytes_in(artifact_bytes_in(frame, size))
            return False
        if kind == wire.DONE:
            # Bounded by its own budget (``max_done_bytes``, checked as it arrived): the
            # output caps, JSON-escaped up to six times over, may well be past bytes_in.
            return False
        self._count_bytes_in(size, frame)
        # The limit is a body's (as the guest measures it and the contract says), not the
        # body's and its header's: a call the guest let go at the limit ended the run.
        if kind == wire.CALL and size - _HEADER_BYTES <= self._limits.max_call_frame_bytes:
            self._calls.call(frame, at_once=first)  # (most frames: :meth:`_handle` skipped)
        else:
            self._handle(frame, size)
        return True

    def _count_bytes_in(self, size: int, frame: dict[str, Any] | None = None) -> None:
        self._bytes_in += size
        if self._bytes_in > self._limits.max_bytes_in:
            raise limit_stop(
                "bytes",
                f"the program sent {self._bytes_in} bytes through the bridge; the "
                f"limit is {self._limits.max_bytes_in} bytes",
                tool=_called_tool(frame),
            )

    async def _slow_frame(self, item: Any, size: int, *, decoded: bool) -> dict[str, Any] | None:
        """A frame the callbacks left to the run's task; the ``done`` frame, or ``None``."""
        if decoded:
            frame: dict[str, Any] = item
        else:
            try:
                frame = await asyncio.to_thread(_codec.decode_body, item)
            except FrameError as exc:
                raise protocol_stop(str(exc)) from None
            if self._take(frame, size):
                return None
        if frame["type"] == wire.ARTIFACT:
            await store_artifact(frame, sink=self._artifacts)
            return None
        if self._calls.runner.busy:  # calls sent just before the end get their turn, as before
            await asyncio.sleep(0)
        self._results.flush()
        return frame

    def _handle(self, frame: dict[str, Any], size: int) -> None:
        kind = frame["type"]
        body = size - _HEADER_BYTES
        if body > self._limits.max_call_frame_bytes:
            raise protocol_stop(f"a {kind!r} frame of {body} bytes is over the frame limit")
        if kind == wire.CALL:
            self._calls.call(frame)
        elif kind == wire.BATCH:
            self._calls.batch(frame)
        elif kind == wire.PROPOSE:
            self._calls.call(frame, propose=True)
        elif kind == wire.LOG:
            self._count_log_frame()
            message = frame.get("message")
            if not isinstance(message, str):
                raise protocol_stop("a log frame's 'message' must be a string")
            # One line whatever the program sent: no forged log lines, no terminal escapes.
            _log.info(
                "guest log (%s): %s",
                self._calls.run_id,
                escape_controls(message[: wire.MAX_LOG_CHARS]),
            )
        elif kind == wire.REFUSED:
            self._count_log_frame()
            self._calls.refused(frame)
        elif kind == wire.CANCEL:
            self._count_log_frame()
            self._calls.cancel(frame)
        else:
            raise protocol_stop(f"unexpected frame type {kind[:40]!r}")

    def _count_log_frame(self) -> None:
        # Frames that ask for no answer cost the host as much as a call (a log line, an audit
        # event): counted, so a run's frames are bounded by its limits, not only its bytes.
        self._log_frames += 1
        if self._log_frames > self._limits.max_log_frames:
            raise limit_stop(
                "calls",
                f"the program sent {self._log_frames} log lines, refused tool names and "
                f"cancelled calls; the limit is {self._limits.max_log_frames} per program",
            )

    async def _end(self, end: RunEnd, tool: str) -> RunEnd:
        self._results.flush()  # results already answered go before the abort
        self._results.ended = end
        with contextlib.suppress(ConnectionError, OSError, RuntimeError):
            self._writer.write(
                encode_frame({"type": wire.ABORT, "code": end.code, "message": end.message})
            )
        if self._session is not None:
            self._session.record_end(end, tool=tool)
        return end


def _called_tool(frame: dict[str, Any] | None) -> str:
    """The tool a call, batch or proposal frame names, when it names one as a call must
    (checked later, as it is dispatched); else empty."""
    tool = frame.get("tool") if frame is not None and frame["type"] in _CALL_FRAMES else None
    return tool if isinstance(tool, str) and 0 < len(tool) <= wire.MAX_TOOL_NAME_CHARS else ""


_CALL_FRAMES: Final = frozenset({wire.CALL, wire.BATCH, wire.PROPOSE})


async def serve_run(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    *,
    session: ToolSession | None,
    deadline: float,
    max_done_bytes: int,
    artifacts: ArtifactSink | None = None,
) -> dict[str, Any] | RunEnd | None:
    """Serve one run's frames until its ``done`` frame, its end, or the end of the stream.

    ``deadline`` is on the :func:`time.monotonic` clock. ``artifacts`` takes the files the
    program left (without it, an ``artifact`` frame is a protocol error). Returns the ``done``
    frame, the :class:`RunEnd` that stopped the run, or ``None`` when the guest went away.
    Durably flushes the session's audit events before returning, unless the session's caller
    does (``ToolSession.durable_by_caller``).
    """
    server = _RunServer(
        reader,
        writer,
        session,
        deadline=deadline,
        max_done_bytes=max_done_bytes,
        artifacts=artifacts,
    )
    try:
        return await server.serve()
    finally:
        if session is not None and not session.durable_by_caller:
            await session.registry.audit.wait_durable()
