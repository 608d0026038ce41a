"""The answer to each line of an MCP client on stdin (and each POST body over HTTP:
``_mcp_http_bodies``) that the SDK cannot read.

The SDK's stdio transport turns each line into a JSON-RPC message with one validator
(``jsonrpc_message_adapter``); a line that fails it is logged at debug level and answered
with nothing, so a client waiting on that line's id waits forever. The lines are read first
(``_mcp_stdin``) and checked here with the same validator: what it refuses is answered as
JSON-RPC 2.0 says, ``-32700`` when the server cannot parse the JSON, ``-32600`` when the JSON
is no message the server takes (an id that is neither a string nor an integer, params that
are no object), with the request's id when it can be read and null otherwise. Params of
the wrong shape for a method the server answers (a call's name that is no string) get
``-32602`` naming the field, which the SDK answers without ("Invalid request parameters").
A line that opens a JSON array (a batch) is answered once, ``-32600`` with id null,
unparsed: one line is one answer and one log line, so a line of many small requests cannot
flood stdout, the log or the memory. A line over :data:`MAX_LINE_BYTES` is dropped as it
arrives, a buffer at a time, and answered ``-32700``; so is one of more objects, arrays and
members than :data:`MAX_MESSAGE_NODES`, unparsed (its id read from either end). Every other
line goes to the SDK as it is, which parses it once more: the price of keeping its reader
rather than writing another.
"""

from __future__ import annotations

import json
import re
from typing import Final

import mcp_types as types
from pydantic import BaseModel, ValidationError

from airlock.frontends._call_arguments import json_type

__all__ = ["MAX_LINE_BYTES", "MAX_MESSAGE_NODES", "PEEK_BYTES", "checked", "oversized", "refusals"]

MAX_LINE_BYTES: Final = 4 * 2**20
"""The longest line read over stdio and the largest POST body over HTTP: one JSON-RPC
message (a program in execute_code can be long). It is the SDK's own limit of HTTP bodies.
Within it, :data:`MAX_MESSAGE_NODES` bounds what a parse costs."""
MAX_MESSAGE_NODES: Final = 50_000
"""The most objects, arrays and object members one message may hold; a message with more is
answered ``-32700`` unparsed. They are what the SDK's parse costs most: 0.2 to 0.8 us of
the event loop and 130 to 200 bytes each, against under 0.1 us for a number or a short
string. 4 MiB of ``[[],[],...]`` took 0.9 to 1.2 s of the loop and 170 MiB to parse (of
``{"0":0,"1":0,...}``, 0.2 s and 75 MiB), while the server's other conversations waited; at
this bound a message takes about 13 ms and 10 MiB at most. A model's tool call holds a few
hundred; a program or a long text is one string, whatever it holds."""
PEEK_BYTES: Final = 4096
"""How much of each end of an unreadable line is searched for its id."""
_WHITESPACE: Final = re.compile(r"[ \t\n\r]*")
_STRING: Final = re.compile(r'"[^"\\]*+(?:\\.[^"\\]*+)*+(?:"|\\?\Z)', re.DOTALL)
"""A JSON string, or an unterminated one to the end. A match begun never fails and never
backtracks (nothing kept to go back to): each character is looked at once, however the
quotes and backslashes fall."""
_BLANK: Final = " \t\n\r"
# The id as a line's last member: a string or an integer, then the object's end. No string
# can end there (it would need a closing quote), so this is a member of the top object.
_LAST_ID: Final = re.compile(
    r'"id"[ \t\n\r]*:[ \t\n\r]*(-?[0-9]+|"(?:[^"\\]|\\.)*")[ \t\n\r]*\}[ \t\n\r]*\Z'
)
_DECODER: Final = json.JSONDecoder()
# The params of each method the server has a handler for (``mcp._server``), as the SDK
# validates them before calling it.
_PARAMS: Final[dict[str, type[BaseModel]]] = {
    "tools/call": types.CallToolRequestParams,
    "tools/list": types.PaginatedRequestParams,
    "resources/list": types.PaginatedRequestParams,
    "resources/read": types.ReadResourceRequestParams,
}


def refusals(text: str) -> list[types.JSONRPCError] | None:
    """None when the SDK reads the line ``text`` as a message; else the error to answer it
    with (a list of one; empty for a blank line, which is no message and needs no answer)."""
    found = checked(text)
    return found if isinstance(found, list) else None


def checked(text: str) -> types.JSONRPCMessage | list[types.JSONRPCError]:
    """The message the SDK reads in the line ``text``; else as :func:`refusals`."""
    if not text.strip():
        return []
    if text.lstrip(_BLANK).startswith("["):
        # One answer for the line, before any parse: a batch of many small requests would
        # cost a parse of each (and once, an answer and a log line each).
        reason = "batches are not supported: send one JSON-RPC message at a time"
        return [_error(None, types.INVALID_REQUEST, reason)]
    if _nodes_at_most(text) > MAX_MESSAGE_NODES:
        reason = (
            f"a message of more than {MAX_MESSAGE_NODES:,} objects, arrays and members was "
            "not read; send less in one message"
        )
        found = _id_at_ends(text[:PEEK_BYTES], text[-PEEK_BYTES:])
        return [_error(found, types.PARSE_ERROR, reason)]
    try:
        message = types.jsonrpc_message_adapter.validate_json(text, by_name=False)
    except ValidationError as exc:
        return [_refused(text, exc)]
    # The SDK reads a request whose id is null, a float, a boolean or an object as a
    # notification (it drops the id): the client would wait for an answer forever. The key
    # is looked for once parsed: written with escapes ("\u0069d") it is the id all the same.
    if isinstance(message, types.JSONRPCNotification):
        try:
            parsed = json.loads(text)
        except (ValueError, RecursionError):  # pragma: no cover  # the SDK parsed it
            return message
        if isinstance(parsed, dict) and "id" in parsed:
            reason = f"the id must be a string or an integer, not {json_type(parsed['id'])}"
            return [_error(None, types.INVALID_REQUEST, reason)]
    if isinstance(message, types.JSONRPCRequest):
        wrong = _wrong_params(message)
        if wrong is not None:
            return [wrong]
    return message


def _wrong_params(request: types.JSONRPCRequest) -> types.JSONRPCError | None:
    """The answer to a request whose params the SDK refuses for its method, naming the
    first wrong field; None when they fit (or the SDK does not check them before a handler)."""
    model = _PARAMS.get(request.method)
    if model is None:
        return None
    try:
        # As the SDK does: no params are read as {}, so a required field is still missing.
        model.model_validate(request.params or {}, by_name=False)
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False, include_context=False)[0]
        where = ".".join(str(part) for part in ("params", *first["loc"]))
        reason = f"{where}: {first['msg']}"
        return _error(_usable_id(request.id), types.INVALID_PARAMS, reason[:200])
    return None


def _nodes_at_most(text: str) -> int:
    """The objects, arrays and members the JSON ``text`` holds (its ``{``, ``[`` and ``:``
    outside its strings), or more. Those inside its strings are counted too while the count
    stays within :data:`MAX_MESSAGE_NODES` (three passes at C speed, nothing copied); past
    it, the strings are taken out first: a long text full of brackets is one string, cheap
    to parse."""
    found = text.count("{") + text.count("[") + text.count(":")
    if found <= MAX_MESSAGE_NODES:
        return found
    bare = _STRING.sub("", text)
    return bare.count("{") + bare.count("[") + bare.count(":")


def oversized(head: str, tail: str) -> types.JSONRPCError:
    """The answer to a line (or an HTTP body) over :data:`MAX_LINE_BYTES`, given its first
    and last bytes."""
    reason = f"a message over {MAX_LINE_BYTES // 2**20} MiB was dropped; send less in one message"
    return _error(_id_at_ends(head, tail), types.PARSE_ERROR, reason)


def _refused(text: str, exc: ValidationError) -> types.JSONRPCError:
    first = exc.errors(include_url=False, include_input=False, include_context=False)[0]
    try:
        parsed: object = json.loads(text)
    except (ValueError, RecursionError):  # no JSON, or deeper or longer than Python reads
        found = _id_at_ends(text[:PEEK_BYTES], text[-PEEK_BYTES:])
        return _error(found, types.PARSE_ERROR, first["msg"][:200])
    code = types.PARSE_ERROR if first["type"] == "json_invalid" else types.INVALID_REQUEST
    if not isinstance(parsed, dict):
        return _error(None, types.INVALID_REQUEST, "a JSON-RPC message is a JSON object")
    if code == types.INVALID_REQUEST:
        # The union's errors name each kind of message; show those of the kind it claims.
        kind = "JSONRPCRequest" if "id" in parsed else "JSONRPCNotification"
        if "method" not in parsed:
            kind = "JSONRPCError" if "error" in parsed else "JSONRPCResponse"
        errors = exc.errors(include_url=False, include_input=False, include_context=False)
        first = next((e for e in errors if e["loc"][:1] == (kind,)), first)
    where = ".".join(str(part) for part in first["loc"][1:])
    reason = f"{where}: {first['msg']}" if where else first["msg"]
    return _error(_request_id(parsed), code, reason[:200])


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
