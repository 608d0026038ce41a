"""The host side of one run: frames from the guest in, admitted tool calls out.

Every ``call`` frame becomes ``Registry.call(tool, args, ctx)`` with ``caller="code"`` and a
context the host built from the run's :class:`ToolSession`: the principal, grant and deadline
come from the host, never from a frame. Results go back as ``result`` frames matched by the
guest's call id, in whatever order they finish. A ``propose`` frame is a program's proposal
of a write: it becomes :meth:`ToolSession.propose <airlock.bridge.ToolSession.propose>` (admitted
and prepared on the host, never committed), answered like a call.

A malformed, oversized or unexpected frame, or a run limit reached, ends the run: the guest is
told with an ``abort`` frame, pending calls are cancelled, and the end is recorded in the audit
log. Nothing a guest sends can raise out of :func:`serve_run`, and nothing it does can keep
:func:`serve_run` past the run's deadline (plus :data:`_CANCEL_GRACE_S` for tool calls to
notice their cancellation): every read from the guest waits for the deadline at most, and
nothing ever waits for the guest to read. A ``log`` frame's message reaches the operator's log
on one line, with control characters escaped.

Frames are handled in the event loop's callback that received them (:class:`FrameInbox`), one
after another (up to :data:`_FRAMES_PER_TURN` before other runs get the loop), and each call
runs at once, until it first waits (:class:`CallRunner`): a read of data at hand is answered
in the turn of the loop that received it, with no task or extra turn of the loop per call.
The results that finish together leave in one write. What the callbacks cannot do (decode a
large frame off the loop, store an artifact, finish on ``done``, end the run) waits for the
run's own task, and reading stops meanwhile.

``artifact`` frames (the files a program left, sent after it ends) go to the run's
:class:`ArtifactSink` on a worker thread, after their shape, name and piece size are checked;
they are bounded by the sink's limits (bytes and files) rather than by ``max_bytes_in``, and
every piece but a file's last must be full, so their number is bounded too.

It is one module over 400 lines on purpose: reading, dispatching and answering one run's
frames share the run's state (calls in flight, bytes each way, how it ended), and every path
that ends a run must see all of it at once.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import logging
import re
import time
from collections import deque
from collections.abc import Coroutine, Mapping
from typing import Any, Final

from airlock.bridge import _codec
from airlock.bridge import airlock_wire as wire
from airlock.bridge._codec import OFF_LOOP_BYTES, FrameError, encode_frame, encode_result
from airlock.bridge._inbox import CHUNK_BYTES, FrameInbox
from airlock.bridge._program_errors import program_error
from airlock.bridge._runner import CallRunner
from airlock.bridge._session import (
    ArtifactRefused,
    ArtifactSink,
    BridgeLimits,
    RunEnd,
    ToolSession,
)
from airlock.tools import JSONObject, ToolError, UnknownToolError, escape_controls

__all__ = ["serve_run"]

_log = logging.getLogger(__name__)
_MAX_CALL_ID: Final = 2**53
_MAX_TOOL_NAME: Final = wire.MAX_TOOL_NAME_CHARS
# Refused names recorded one by one per run; a program probing names in a loop is recorded
# this far, then once more as "more" (the guest sends each name once; bytes bound the rest).
_MAX_REFUSED: Final = 64
_CANCEL_GRACE_S: Final = 5.0
"""How long the end of a run waits for its cancelled tool calls (host code) to finish."""
_ARTIFACT_NAME: Final = re.compile(wire.ARTIFACT_NAME)
_FLUSH_FRAMES: Final = 16
"""Results written together at most; more finishing in one turn of the loop go in parts."""
_COALESCE_BYTES: Final = 64 * 1024
"""Results larger than this are written on their own."""
_FRAMES_PER_TURN: Final = 64
"""Frames already buffered that one run handles before the event loop serves others."""


class _End(Exception):
    def __init__(self, end: RunEnd) -> None:
        super().__init__(end.message)
        self.end = end


def _protocol(message: str) -> _End:
    return _End(RunEnd("protocol_error", None, message))


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
        self._running = 0  # calls executing (at most max_concurrency)
        self._turns: deque[asyncio.Future[None]] = deque()  # calls waiting for their turn
        self._calls = CallRunner(on_done=self._done)
        self._seen_ids: set[int] = set()
        self._refused = 0
        self._in_flight = 0
        self._bytes_in = 0
        self._bytes_out = 0
        self._outbox: list[bytes] = []
        self._ended: RunEnd | None = None
        self._inbox = FrameInbox(
            max_bytes=self._max_frame, on_data=self._pump, on_end=self._wake_up
        )
        self._slow: tuple[Any, int, bool] | None = None
        """A frame for the run's task: (body or frame, size on the wire, decoded)."""
        self._stop: BaseException | None = None
        """Why the run must end, found by a callback, for the run's task to raise."""
        self._waiter: asyncio.Future[None] | None = None
        self._scheduled = False
        self._pumping = False  # frames are being handled: results wait for the end of them

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
                raise _End(RunEnd("timeout", "timeout", "the run's deadline passed")) from None
        except _End as stop:
            return await self._end(stop.end)
        finally:
            self._inbox.close()
            await self._cancel_pending()

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
            if self._ended is not None:
                raise _End(self._ended)
            if self._inbox.ended:
                if not self._inbox.clean:
                    return None
                if self._inbox.holding:  # frames sent before the end are served first
                    if not self._pump():
                        raise _protocol("the stream ended inside a frame")
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
        """Handle the frames the inbox holds, in order, up to :data:`_FRAMES_PER_TURN` (the
        rest on the loop's next turn, so other runs get theirs); whether any was split off.
        A frame that needs this run's task (:meth:`_serve_frames`) stops the pump, and
        reading, until the task has handled it. Never raises: an end is left for the task.
        The results of the calls answered meanwhile leave together, at the end."""
        self._pumping = True
        try:
            return self._pump_frames()
        finally:
            self._pumping = False
            if self._outbox:
                self._flush()

    def _pump_frames(self) -> bool:
        self._scheduled = False
        if self._slow is not None or self._stop is not None:
            return False
        split = False
        try:
            for _ in range(_FRAMES_PER_TURN):
                if self._ended is not None:
                    raise _End(self._ended)
                if time.monotonic() >= self._deadline:
                    raise _End(RunEnd("timeout", "timeout", "the run's deadline passed"))
                taken = self._inbox.next_frame()
                if taken is None:
                    self._inbox.resume()
                    return split
                split = True
                body, size = taken
                if len(body) > OFF_LOOP_BYTES:  # decoded in a worker thread
                    self._slow = (body, size, False)
                    break
                frame = _codec.decode_body(body)
                if not self._take(frame, size):
                    self._slow = (frame, size, True)
                    break
            else:
                self._inbox.pause()
                self._scheduled = True
                asyncio.get_running_loop().call_soon(self._pump)
                return split
        except FrameError as exc:
            self._stop = _protocol(str(exc))
        except Exception as exc:  # an _End, or a bug of the host's: raised in the task
            self._stop = exc
        self._inbox.pause()
        self._wake_up()
        return split

    def _wake_up(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _take(self, frame: dict[str, Any], size: int) -> bool:
        """Handle one frame here; ``False`` when it is for the run's task (an artifact, the
        ``done`` frame)."""
        kind = frame["type"]
        if kind == wire.ARTIFACT:
            return False
        self._bytes_in += size
        if self._bytes_in > self._limits.max_bytes_in:
            raise _End(
                RunEnd(
                    "limit_exceeded",
                    "bytes",
                    f"the program sent {self._bytes_in} bytes through the bridge; the "
                    f"limit is {self._limits.max_bytes_in} bytes",
                )
            )
        if kind == wire.DONE:
            return False
        self._handle(frame, size)
        return True

    async def _slow_frame(self, item: Any, size: int, *, decoded: bool) -> dict[str, Any] | None:
        """A frame the callbacks left to the run's task; the ``done`` frame, or ``None``."""
        if decoded:
            frame: dict[str, Any] = item
        else:
            try:
                frame = await asyncio.to_thread(_codec.decode_body, item)
            except FrameError as exc:
                raise _protocol(str(exc)) from None
            if self._take(frame, size):
                return None
        if frame["type"] == wire.ARTIFACT:
            await self._artifact(frame, size)
            return None
        if self._calls.busy:  # calls sent just before the end get their turn, as before
            await asyncio.sleep(0)
        self._flush()
        return frame

    def _handle(self, frame: dict[str, Any], size: int) -> None:
        kind = frame["type"]
        if size > self._limits.max_call_frame_bytes:
            raise _protocol(f"a {kind!r} frame of {size} bytes is over the frame limit")
        if kind == wire.CALL:
            call_id, tool = self._call_header(frame)
            args = frame.get("args")
            if not isinstance(args, dict):
                raise _protocol("a call's 'args' must be an object")
            self._admit_count(1)
            self._spawn(self._answer_call(call_id, tool, args))
        elif kind == wire.BATCH:
            call_id, tool = self._call_header(frame)
            items = frame.get("items")
            if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
                raise _protocol("a batch's 'items' must be a list of objects")
            if len(items) > self._limits.max_batch_items:
                raise _End(
                    RunEnd(
                        "limit_exceeded",
                        "calls",
                        f"a batch of {len(items)} items is too big; the limit is "
                        f"{self._limits.max_batch_items} items",
                    )
                )
            self._admit_count(len(items))
            self._spawn(self._answer_batch(call_id, tool, items))
        elif kind == wire.PROPOSE:
            call_id, tool = self._call_header(frame)
            args = frame.get("args")
            if not isinstance(args, dict):
                raise _protocol("a proposal's 'args' must be an object")
            self._admit_count(1)
            self._spawn(self._answer_call(call_id, tool, args, propose=True))
        elif kind == wire.LOG:
            message = frame.get("message")
            if not isinstance(message, str):
                raise _protocol("a log frame's 'message' must be a string")
            # One line whatever the program sent: no forged log lines, no terminal escapes.
            _log.info(
                "guest log (%s): %s", self._run_id, escape_controls(message[: wire.MAX_LOG_CHARS])
            )
        elif kind == wire.REFUSED:
            refused = frame.get("tool")
            if not isinstance(refused, str) or not 0 < len(refused) <= _MAX_TOOL_NAME:
                raise _protocol("a refused frame's 'tool' must be a short string")
            self._refused += 1
            if self._session is not None and self._refused <= _MAX_REFUSED + 1:
                name = escape_controls(refused) if self._refused <= _MAX_REFUSED else "*"
                self._session.record_refused(name, self._refused)
        else:
            raise _protocol(f"unexpected frame type {kind[:40]!r}")

    async def _artifact(self, frame: dict[str, Any], size: int) -> None:
        """Check one ``artifact`` frame and hand its piece to the sink (off the loop)."""
        if self._artifacts is None:
            raise _protocol("this run collects no artifacts")
        if size > self._limits.max_call_frame_bytes:
            raise _protocol(f"an 'artifact' frame of {size} bytes is over the frame limit")
        name, offset, data, end = (frame.get(k) for k in ("name", "offset", "data", "end"))
        if not isinstance(name, str) or not _ARTIFACT_NAME.match(name):
            shown = repr(name[:80]) if isinstance(name, str) else type(name).__name__
            raise _protocol(f"artifact name {shown} is not a safe relative path")
        if type(offset) is not int or offset < 0 or type(end) is not bool:
            raise _protocol("an artifact's 'offset' must be a count of bytes and 'end' a bool")
        if not isinstance(data, str) or len(data) > 4 * (wire.ARTIFACT_CHUNK_BYTES // 3 + 1):
            raise _protocol("an artifact's 'data' must be base64 of one piece")
        sink = self._artifacts

        def store() -> None:
            try:
                piece = base64.b64decode(data, validate=True)
            except (binascii.Error, ValueError):
                raise ArtifactRefused("an artifact's 'data' is not base64", limit=False) from None
            if len(piece) > wire.ARTIFACT_CHUNK_BYTES or (
                not end and len(piece) != wire.ARTIFACT_CHUNK_BYTES
            ):
                raise ArtifactRefused(
                    f"a piece of {len(piece)} bytes: every piece but the last must hold "
                    f"{wire.ARTIFACT_CHUNK_BYTES}",
                    limit=False,
                )
            sink.receive(name, offset, piece, end=end)

        try:
            await asyncio.to_thread(store)
        except ArtifactRefused as exc:
            if exc.limit:
                raise _End(RunEnd("limit_exceeded", "artifacts", exc.message)) from None
            raise _protocol(exc.message) from None

    @property
    def _run_id(self) -> str:
        return self._session.run_id if self._session else "-"

    def _call_header(self, frame: Mapping[str, Any]) -> tuple[int, str]:
        call_id, tool = frame.get("id"), frame.get("tool")
        if type(call_id) is not int or not 0 < call_id < _MAX_CALL_ID:
            raise _protocol("a call's 'id' must be a positive integer")
        if call_id in self._seen_ids:
            raise _protocol(f"call id {call_id} was used twice")
        if not isinstance(tool, str) or not 0 < len(tool) <= _MAX_TOOL_NAME:
            raise _protocol("a call's 'tool' must be a short string")
        self._seen_ids.add(call_id)
        return call_id, tool

    def _admit_count(self, count: int) -> None:
        if self._in_flight >= self._limits.max_in_flight:
            raise _End(
                RunEnd(
                    "limit_exceeded",
                    "in_flight",
                    f"{self._in_flight + 1} calls were waiting for results at once; the limit "
                    f"is {self._limits.max_in_flight}",
                )
            )
        if self._session is not None:
            if self._session.calls + count > self._limits.max_calls:
                raise _End(
                    RunEnd(
                        "limit_exceeded",
                        "calls",
                        f"the program asked for {self._session.calls + count} tool calls; "
                        f"the limit is {self._limits.max_calls} per program",
                    )
                )
            self._session.calls += count

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        self._in_flight += 1
        self._calls.submit(coro)

    def _done(self) -> None:
        self._in_flight -= 1

    async def _admit(
        self, guest_id: str, tool: str, args: dict[str, Any], *, propose: int = 0
    ) -> tuple[bool, Any]:
        """One admitted call's outcome for the wire: ``(True, value)`` or ``(False, error)``;
        with ``propose`` (the call id), a proposal's."""
        session = self._session
        if session is None:
            return False, program_error(UnknownToolError(name=tool))
        ctx = session.context(f"{session.call_prefix or session.run_id}:{guest_id}", self._deadline)
        if self._running >= self._limits.max_concurrency:
            await self._turn()
        self._running += 1
        try:
            if propose:
                return True, await session.propose(tool, args, ctx, order=propose)
            return True, await session.registry.call(tool, args, ctx)
        except ToolError as exc:
            return False, program_error(exc)
        except Exception as exc:  # the registry audits it; the guest learns only the class
            _log.exception("tool %r failed unexpectedly in run %s", tool, self._run_id)
            return False, {
                "code": "upstream",
                "message": f"the tool failed ({type(exc).__name__})",
                "retryable": True,
            }
        finally:
            self._running -= 1
            if self._turns:
                self._next_turn()

    async def _turn(self) -> None:
        """Wait until fewer than ``max_concurrency`` calls run (in order of arrival)."""
        while self._running >= self._limits.max_concurrency:
            turn = asyncio.get_running_loop().create_future()
            self._turns.append(turn)
            try:
                await turn
            except asyncio.CancelledError:
                if turn.done() and not turn.cancelled():
                    self._next_turn()  # pass the turn it was given on
                raise

    def _next_turn(self) -> None:
        while self._turns:
            turn = self._turns.popleft()
            if not turn.done():
                turn.set_result(None)
                return

    async def _answer_call(
        self, call_id: int, tool: str, args: dict[str, Any], *, propose: bool = False
    ) -> None:
        ok, value = await self._admit(str(call_id), tool, args, propose=call_id if propose else 0)
        self._send(call_id, ok, value)

    async def _answer_batch(self, call_id: int, tool: str, items: list[dict[str, Any]]) -> None:
        outcomes: list[JSONObject] = [{} for _ in items]
        pending = iter(enumerate(items))

        async def worker() -> None:
            # A few workers share the items: concurrency for slow tools without a task
            # (and its scheduling cost) per item for fast ones.
            for n, item in pending:
                ok, value = await self._admit(f"{call_id}.{n}", tool, item)
                outcomes[n] = {"ok": True, "value": value} if ok else {"ok": False, "error": value}

        workers = min(len(items), self._limits.max_concurrency)
        await asyncio.gather(*(worker() for _ in range(workers)))
        self._send(call_id, True, outcomes)

    def _send(self, call_id: int, ok: bool, value: Any) -> None:
        """Answer call ``call_id``: a ``result`` frame with its value, or its error."""
        if self._ended is not None:
            return
        try:
            frame = encode_result(call_id, ok, value)
        except ValueError:  # a tool returned NaN or the like: a bug on the host side
            frame = encode_result(
                call_id,
                False,
                {"code": "upstream", "message": "unencodable result", "retryable": False},
            )
        self._bytes_out += len(frame)
        if self._bytes_out > self._limits.max_bytes_out:
            # Ending from a call task: stop the reader too, so the main loop sees the end.
            self._ended = RunEnd(
                "limit_exceeded",
                "bytes",
                f"the program's tool results came to {self._bytes_out} bytes; the limit is "
                f"{self._limits.max_bytes_out} bytes",
            )
            self._writer.transport.abort()
            return
        if len(frame) > _COALESCE_BYTES or (
            self._in_flight <= 1 and not self._outbox and not self._pumping
        ):
            # The only call (no one to wait for), or a large result (not worth a copy).
            self._writer.write(frame)
            return
        # Results that finish in the same turn of the event loop leave in one write: one
        # system call and one wake-up of the guest for all of them, not one each (those
        # answered while frames are handled leave when the frames are done).
        # A full outbox leaves at once, so the guest can go on while the rest are answered.
        self._outbox.append(frame)
        if len(self._outbox) >= _FLUSH_FRAMES:
            self._flush()
        elif len(self._outbox) == 1 and not self._pumping:
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        frames, self._outbox = self._outbox, []
        if frames and self._ended is None:
            with contextlib.suppress(ConnectionError, OSError, RuntimeError):
                self._writer.write(b"".join(frames))

    async def _end(self, end: RunEnd) -> RunEnd:
        self._flush()  # results already answered go before the abort
        self._ended = end
        with contextlib.suppress(ConnectionError, OSError, RuntimeError):
            self._writer.write(
                encode_frame({"type": wire.ABORT, "code": end.code, "message": end.message})
            )
        if self._session is not None:
            self._session.record_end(end)
        return end

    async def _cancel_pending(self) -> None:
        self._calls.cancel()
        if self._calls.tasks:
            # A handler that swallows its cancellation must not hold the run open.
            _, stuck = await asyncio.wait(list(self._calls.tasks), timeout=_CANCEL_GRACE_S)
            if stuck:
                _log.warning(
                    "%d tool calls of run %s ignored their cancellation", len(stuck), self._run_id
                )


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
    Durably flushes the session's audit events before returning.
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
        if session is not None:
            await session.registry.audit.wait_durable()
