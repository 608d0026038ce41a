"""An MCP client's lines on stdin, read on the event loop, and an answer to each one the SDK
cannot read.

The SDK's stdio transport turns each line into a JSON-RPC message with one validator
(``jsonrpc_message_adapter``); a line that fails it is logged at debug level and answered
with nothing, so a client waiting on that line's id waits forever. The lines are read here
and checked with the same validator first: what it refuses is answered here as JSON-RPC 2.0
says, ``-32700`` when the server cannot parse the JSON, ``-32600`` when the JSON is no message
the server takes (a batch, an id that is neither a string nor an integer, params that are no
object), with the request's id when it can be read and null otherwise. A line over
:data:`MAX_LINE_BYTES` is dropped as it arrives, a buffer at a time, and answered ``-32700``.
Every other line goes to the SDK as it is, which parses it once more: the price of keeping
its reader rather than writing another.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from typing import Final, Protocol

import anyio
import mcp_types as types
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from airlock.frontends._call_arguments import json_type

__all__ = ["MAX_LINE_BYTES", "StdinLines", "oversized", "refusals", "stdin_pipe"]

MAX_LINE_BYTES: Final = 16 * 2**20
"""The longest line read (one JSON-RPC message per line; a program in execute_code can be
long)."""
# How much of each end of an unreadable line is searched for its id.
_PEEK: Final = 4096
_WHITESPACE: Final = re.compile(r"[ \t\n\r]*")
# The id as a line's last member: a string or an integer, then the object's end. No string
# can end there (it would need a closing quote), so this is a member of the top object.
_LAST_ID: Final = re.compile(
    r'"id"[ \t\n\r]*:[ \t\n\r]*(-?[0-9]+|"(?:[^"\\]|\\.)*")[ \t\n\r]*\}[ \t\n\r]*\Z'
)
_DECODER: Final = json.JSONDecoder()
_log = logging.getLogger("airlock.mcp")


class Answers(Protocol):
    """Where answers go: the SDK's write stream, whose writer puts each on stdout."""

    async def send(self, item: SessionMessage, /) -> None:
        """Queue one message for the client."""
        ...


class StdinLines:
    """Lines of a stdin pipe, read by the event loop: no worker thread.

    The SDK's reader blocks a worker thread in ``readline``, which neither a cancellation nor
    interpreter exit can stop, so SIGTERM would leave the server hanging until the client
    closed stdin; reading the pipe on the loop lets serving end at once.
    """

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader
        self._answers: Answers | None = None
        self._attached = asyncio.Event()

    def answer_with(self, answers: Answers) -> None:
        """Send the answers to unreadable lines to ``answers`` (the SDK's write stream, which
        exists only once the transport is open; until then they wait)."""
        self._answers = answers
        self._attached.set()

    def __aiter__(self) -> StdinLines:
        return self

    async def __anext__(self) -> str:
        while True:
            try:
                line = await self._reader.readuntil(b"\n")
            except asyncio.IncompleteReadError as exc:
                if not exc.partial:
                    raise StopAsyncIteration from None
                line = exc.partial  # the last line, without its newline
            except asyncio.LimitOverrunError as exc:
                head, tail = await self._drop_line(exc.consumed)
                await self._answer([oversized(head, tail)])
                continue
            text = line.decode("utf-8", errors="replace")
            errors = refusals(text)
            if errors is None:
                return text
            await self._answer(errors)

    async def _drop_line(self, consumed: int) -> tuple[str, str]:
        """Drop the rest of a line over the limit as it arrives; the line's two ends."""
        head = tail = b""
        while True:
            # The reader scanned these bytes and found no newline it could return.
            piece = await self._reader.readexactly(consumed)
            head = head or piece[:_PEEK]
            tail = (tail + piece[-_PEEK:])[-_PEEK:]
            try:
                rest = await self._reader.readuntil(b"\n")
            except asyncio.IncompleteReadError as exc:
                rest = exc.partial  # the client closed stdin inside the line
            except asyncio.LimitOverrunError as exc:
                consumed = exc.consumed
                continue
            tail = (tail + rest[-_PEEK:])[-_PEEK:]
            return head.decode(errors="replace"), tail.decode(errors="replace")

    async def _answer(self, errors: list[types.JSONRPCError]) -> None:
        if not errors:
            return
        await self._attached.wait()
        if self._answers is None:  # pragma: no cover  # set with the event
            return
        for error in errors:
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


async def stdin_pipe(*, limit: int = MAX_LINE_BYTES) -> StdinLines | None:
    """stdin as lines read on the loop, or None when it is no pipe (a file, a closed fd)."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=limit)
    try:
        pipe = open(0, "rb", buffering=0, closefd=False)  # noqa: SIM115  # the loop owns it
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), pipe)
    except (OSError, ValueError):
        return None
    return StdinLines(reader)


def refusals(text: str) -> list[types.JSONRPCError] | None:
    """None when the SDK reads the line ``text`` as a message; else the errors to answer it
    with (none for a blank line, which is no message and needs no answer)."""
    if not text.strip():
        return []
    try:
        message = types.jsonrpc_message_adapter.validate_json(text, by_name=False)
    except ValidationError as exc:
        return _refused(text, exc)
    # The SDK reads a request whose id is null, a float, a boolean or an object as a
    # notification (it drops the id): the client would wait for an answer forever.
    if isinstance(message, types.JSONRPCNotification) and '"id"' in text:
        try:
            parsed = json.loads(text)
        except (ValueError, RecursionError):  # pragma: no cover  # the SDK parsed it
            return None
        if isinstance(parsed, dict) and "id" in parsed:
            reason = f"the id must be a string or an integer, not {json_type(parsed['id'])}"
            return [_error(None, types.INVALID_REQUEST, reason)]
    return None


def oversized(head: str, tail: str) -> types.JSONRPCError:
    """The answer to a line over :data:`MAX_LINE_BYTES`, given its first and last bytes."""
    reason = f"a line over {MAX_LINE_BYTES // 2**20} MiB was dropped; send less in one message"
    return _error(_id_at_ends(head, tail), types.PARSE_ERROR, reason)


def _refused(text: str, exc: ValidationError) -> list[types.JSONRPCError]:
    first = exc.errors(include_url=False, include_input=False, include_context=False)[0]
    try:
        parsed: object = json.loads(text)
    except (ValueError, RecursionError):  # no JSON, or deeper or longer than Python reads
        found = _id_at_ends(text[:_PEEK], text[-_PEEK:])
        return [_error(found, types.PARSE_ERROR, first["msg"][:200])]
    code = types.PARSE_ERROR if first["type"] == "json_invalid" else types.INVALID_REQUEST
    if isinstance(parsed, list):
        reason = "batches are not supported: send one JSON-RPC message per line"
        ids: list[int | str | None] = [i for i in map(_request_id, parsed) if i is not None]
        return [_error(i, types.INVALID_REQUEST, reason) for i in ids or [None]]
    if not isinstance(parsed, dict):
        return [_error(None, types.INVALID_REQUEST, "a JSON-RPC message is a JSON object")]
    if code == types.INVALID_REQUEST:
        # The union's errors name each kind of message; show those of the kind it claims.
        kind = "JSONRPCRequest" if "id" in parsed else "JSONRPCNotification"
        if "method" not in parsed:
            kind = "JSONRPCError" if "error" in parsed else "JSONRPCResponse"
        errors = exc.errors(include_url=False, include_input=False, include_context=False)
        first = next((e for e in errors if e["loc"][:1] == (kind,)), first)
    where = ".".join(str(part) for part in first["loc"][1:])
    reason = f"{where}: {first['msg']}" if where else first["msg"]
    return [_error(_request_id(parsed), code, reason[:200])]


def _request_id(message: object) -> int | str | None:
    """A request's id, when it is one that can be answered. A response's id is never
    answered: the client would take the error for the answer to its own request."""
    if not isinstance(message, dict) or not isinstance(message.get("method"), str):
        return None
    return _usable_id(message.get("id"))


def _usable_id(value: object) -> int | str | None:
    if type(value) is int:
        return value
    if isinstance(value, str):
        try:
            value.encode("utf-8")  # a lone surrogate cannot be written back
        except UnicodeEncodeError:
            return None
        return value
    return None


def _id_at_ends(head: str, tail: str) -> int | str | None:
    """The id of a request whose line cannot be parsed whole, read from its two ends.

    The Python SDK writes jsonrpc, id, method and params in that order; the TypeScript SDK
    writes method and params, then jsonrpc and id. Either way the plain members at the start
    show a method (a response's id is never answered) and the id is among them or last.
    """
    leading = _leading_members(head)
    if not isinstance(leading.get("method"), str):
        return None
    if "id" in leading:
        return _usable_id(leading["id"])
    last = _LAST_ID.search(tail)
    if last is None:
        return None
    try:
        return _usable_id(json.loads(last.group(1)))
    except ValueError:  # an integer too long to read
        return None


def _leading_members(text: str) -> dict[str, object]:
    """The members at the start of a JSON object, up to the first whose value is an object
    or an array (never parsed: it may be what cannot be read) or is cut off."""
    members: dict[str, object] = {}
    pos = _skip(text, 0)
    if not text.startswith("{", pos):
        return members
    pos += 1
    while True:
        pos = _skip(text, pos)
        try:
            key, pos = _DECODER.raw_decode(text, pos)
            pos = _skip(text, pos)
            if not isinstance(key, str) or not text.startswith(":", pos):
                return members
            pos = _skip(text, pos + 1)
            if text.startswith(("{", "["), pos):
                return members
            value, pos = _DECODER.raw_decode(text, pos)
        except (ValueError, RecursionError):  # cut off, no JSON, or too long a number
            return members
        pos = _skip(text, pos)
        # A value at the very end may be cut short (an id of 12 read from 123): only one
        # that something follows is whole.
        if not text.startswith((",", "}"), pos):
            return members
        members[key] = value
        if text.startswith("}", pos):
            return members
        pos += 1


def _skip(text: str, pos: int) -> int:
    found = _WHITESPACE.match(text, pos)
    return found.end() if found is not None else pos


def _error(request_id: int | str | None, code: int, message: str) -> types.JSONRPCError:
    return types.JSONRPCError(
        jsonrpc="2.0", id=request_id, error=types.ErrorData(code=code, message=message)
    )
