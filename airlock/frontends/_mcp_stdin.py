"""An MCP client's lines on stdin, read without the SDK's reader, each checked
(``_mcp_lines``) before the SDK sees it.

A pipe (or a socket, or a terminal) is read on the event loop. The SDK's reader blocks a
worker thread in ``readline``, which neither a cancellation nor interpreter exit can stop, so
SIGTERM would leave the server hanging until the client closed stdin; reading the pipe on the
loop lets serving end at once.

A regular file (``airlock serve --mcp < requests.jsonl``), which the loop cannot wait on, is
read by a worker thread a buffer at a time, with the same checks and the same line limit; so
is a device the loop cannot wait on either (``/dev/null``, which ends at once). Its end is no
client going away but the last request sent: the lines end only once every
request read from it is answered, or cancelled by the client's ``notifications/cancelled``
(which the SDK never answers); a duplicate id waits for an answer each. The SDK cancels the
requests still running when its lines end, so a request that is never answered (a listen)
keeps the server up until it is stopped.

Either way at most :data:`MAX_OPEN_REQUESTS` requests read wait for their answers: beyond,
no line is read until one is answered or cancelled. A client that writes requests and reads
no answers would otherwise have every line it sends taken as a task holding its answer, and
the server's memory grow as fast as it writes; instead the pipe fills and the client waits.
A client with as many requests open that are answered only once it sends something (a listen
it would cancel) waits too: the cancel is not read.
"""

from __future__ import annotations

import asyncio
import logging
import os
import selectors
from collections import Counter
from types import TracebackType
from typing import Final, Protocol

import anyio
import mcp_types as types
from mcp.shared.dispatcher import as_request_id, coerce_request_id
from mcp.shared.message import SessionMessage

from airlock.frontends._mcp_lines import MAX_LINE_BYTES, PEEK_BYTES, checked, oversized

__all__ = ["MAX_OPEN_REQUESTS", "Answers", "StdinLines", "stdin_lines"]

MAX_OPEN_REQUESTS: Final = 64
"""Requests read from stdin that may wait for their answers at once; no line is read beyond."""
_FILE_CHUNK: Final = 2**16
_log = logging.getLogger("airlock.mcp")


class Answers(Protocol):
    """Where answers go: the SDK's write stream, whose writer puts each on stdout."""

    async def send(self, item: SessionMessage, /) -> None:
        """Queue one message for the client."""
        ...


class StdinLines:
    """The lines of stdin that the SDK can read; the others are answered here.

    ``wait_for_answers``: the lines end only once every request read is answered (a file's
    end). No line is read while ``max_open`` requests wait for their answers. Answers are
    seen through :meth:`noting`.
    """

    def __init__(
        self,
        reader: asyncio.StreamReader,
        *,
        wait_for_answers: bool = False,
        max_open: int = MAX_OPEN_REQUESTS,
    ) -> None:
        self._reader = reader
        self._answers: Answers | None = None
        self._attached = asyncio.Event()
        self._wait = wait_for_answers
        self._max_open = max_open
        # Ids as the SDK correlates them ("7" is 7); a count each, as the SDK answers each
        # request of a duplicate id.
        self._unanswered: Counter[int | str] = Counter()
        self._all_answered = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()

    def answer_with(self, answers: Answers) -> None:
        """Send the answers to unreadable lines to ``answers`` (the SDK's write stream, which
        exists only once the transport is open; until then they wait)."""
        self._answers = answers
        self._attached.set()

    def noting(self, stream: _Stream) -> _Noting:
        """``stream`` (the write stream the server answers on), telling these lines which
        requests are answered."""
        return _Noting(stream, self)

    def answered(self, message: types.JSONRPCMessage) -> None:
        """``message`` went to the client: the request it answers is no longer waited for."""
        if (
            isinstance(message, types.JSONRPCResponse | types.JSONRPCError)
            and message.id is not None
        ):
            self._settle(message.id)

    def _settle(self, request_id: int | str) -> None:
        """One request of ``request_id`` is no longer waited for."""
        key = coerce_request_id(request_id)
        if self._unanswered[key] > 1:
            self._unanswered[key] -= 1
        else:
            self._unanswered.pop(key, None)
        if not self._unanswered:
            self._all_answered.set()
        if self._unanswered.total() < self._max_open:
            self._room.set()

    def __aiter__(self) -> StdinLines:
        return self

    async def __anext__(self) -> str:
        while True:
            # Not read, the next lines stay in the pipe: the client's writes wait for room.
            while self._unanswered.total() >= self._max_open:
                self._room.clear()
                await self._room.wait()
            try:
                line = await self._reader.readuntil(b"\n")
            except asyncio.IncompleteReadError as exc:
                if not exc.partial:
                    await self._end()
                    raise StopAsyncIteration from None
                line = exc.partial  # the last line, without its newline
            except asyncio.LimitOverrunError as exc:
                head, tail = await self._drop_line(exc.consumed)
                await self._answer(oversized(head, tail))
                continue
            text = line.decode("utf-8", errors="replace")
            found = checked(text)
            if not isinstance(found, list):
                self._expect(found)
                return text
            for error in found:
                await self._answer(error)

    def _expect(self, message: types.JSONRPCMessage) -> None:
        if isinstance(message, types.JSONRPCRequest):
            self._unanswered[coerce_request_id(message.id)] += 1
            self._all_answered.clear()
        elif (
            isinstance(message, types.JSONRPCNotification)
            and message.method == "notifications/cancelled"
            and (request_id := as_request_id((message.params or {}).get("requestId"))) is not None
            and coerce_request_id(request_id) in self._unanswered
        ):
            # The SDK never answers a request its client cancelled.
            self._settle(request_id)

    async def _end(self) -> None:
        if self._wait and self._unanswered:
            await self._all_answered.wait()

    async def _drop_line(self, consumed: int) -> tuple[str, str]:
        """Drop the rest of a line over the limit as it arrives; the line's two ends."""
        head = tail = b""
        while True:
            # The reader scanned these bytes and found no newline it could return.
            piece = await self._reader.readexactly(consumed)
            head = head or piece[:PEEK_BYTES]
            tail = (tail + piece[-PEEK_BYTES:])[-PEEK_BYTES:]
            try:
                rest = await self._reader.readuntil(b"\n")
            except asyncio.IncompleteReadError as exc:
                rest = exc.partial  # the client closed stdin inside the line
            except asyncio.LimitOverrunError as exc:
                consumed = exc.consumed
                continue
            tail = (tail + rest[-PEEK_BYTES:])[-PEEK_BYTES:]
            return head.decode(errors="replace"), tail.decode(errors="replace")

    async def _answer(self, error: types.JSONRPCError) -> None:
        await self._attached.wait()
        if self._answers is None:  # pragma: no cover  # set with the event
            return
        _log.warning(
            "an MCP line that cannot be read, answered %d (id %.80r): %s",
            error.error.code,
            error.id,
            error.error.message,
        )
        try:
            await self._answers.send(SessionMessage(error))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            return  # the server is ending: there is no one left to tell


class _Stream(Answers, Protocol):
    """The SDK's write stream, as the server uses it."""

    async def aclose(self) -> None: ...

    async def __aenter__(self) -> _Stream: ...

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None: ...


class _Noting:
    """A write stream that tells :class:`StdinLines` what it sent."""

    def __init__(self, stream: _Stream, lines: StdinLines) -> None:
        self._stream = stream
        self._lines = lines

    async def send(self, item: SessionMessage, /) -> None:
        await self._stream.send(item)
        self._lines.answered(item.message)

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def __aenter__(self) -> _Noting:
        await self._stream.__aenter__()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        return await self._stream.__aexit__(kind, exc, tb)


async def stdin_lines(*, limit: int = MAX_LINE_BYTES) -> StdinLines | None:
    """stdin as lines read on the loop (a pipe, a socket, a terminal) or by a worker thread a
    buffer at a time (a regular file, a device the loop cannot wait on such as ``/dev/null``);
    None when there is no stdin to read (a closed fd)."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=limit)
    try:
        os.fstat(0)
    except OSError:
        return None
    try:
        if not _pollable(0):
            raise ValueError("the loop cannot wait on stdin")
        pipe = open(0, "rb", buffering=0, closefd=False)  # noqa: SIM115  # the loop owns it
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), pipe)
    except (OSError, ValueError):  # no pipe: epoll cannot wait on a regular file
        _FileFeed(reader).start()
        return StdinLines(reader, wait_for_answers=True)
    return StdinLines(reader)


def _pollable(fd: int) -> bool:
    """Whether the loop's selector can wait on ``fd``. ``connect_read_pipe`` takes any
    character device, but epoll refuses some (``/dev/null``: EPERM), and it finds out only
    in a callback of the loop, after the reader was handed over: the reader then waits for
    ever. Asked first, such an input goes to the worker thread, which reads its end."""
    try:
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
    except (OSError, ValueError):
        return False
    return True


class _FileFeed(asyncio.ReadTransport):
    """Feeds ``reader`` from fd 0 in a worker thread, a buffer at a time; ``reader`` pauses
    it (as it would a pipe's transport) while it holds more than twice its limit, so a file
    of any size is read in bounded memory."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        super().__init__()
        self._reader = reader
        self._go = asyncio.Event()
        self._go.set()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._reader.set_transport(self)  # it pauses and resumes the feed
        self._task = asyncio.get_running_loop().create_task(self._feed())

    def pause_reading(self) -> None:
        self._go.clear()

    def resume_reading(self) -> None:
        self._go.set()

    async def _feed(self) -> None:
        try:
            while True:
                await self._go.wait()
                # A regular file answers at once: the thread never waits for a client.
                data = await asyncio.to_thread(os.read, 0, _FILE_CHUNK)
                if not data:
                    break
                self._reader.feed_data(data)
        except OSError as exc:
            _log.warning("reading stdin failed: %s", exc)
        self._reader.feed_eof()
