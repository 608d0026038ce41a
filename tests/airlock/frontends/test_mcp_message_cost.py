"""A message of more objects, arrays and members than :data:`MAX_MESSAGE_NODES` is answered
``-32700`` (with its id, read from either end) before anything parses it, over both
transports (one check: :func:`checked`); brackets and colons inside its strings do not count,
and a text that never closes its string, or ends in a backslash, costs one look at each
character. The host's side is checked: refusing the costliest 4 MiB message allocates a
fraction of what parsing it would."""

from __future__ import annotations

import json
import tracemalloc

import mcp_types as types
import pytest

from airlock.frontends._mcp_lines import MAX_LINE_BYTES, MAX_MESSAGE_NODES, checked

_ENVELOPE_NODES = 8
"""The message around the arguments: its object, params' object and six members."""


def _call(arguments: str, *, id_last: bool = False) -> str:
    """A tools/call of id 7 (9 with the id last, as the TypeScript SDK writes it)."""
    params = '{"name":"x","arguments":' + arguments + "}"
    if id_last:
        return '{"method":"tools/call","params":' + params + ',"jsonrpc":"2.0","id":9}'
    return '{"jsonrpc":"2.0","id":7,"method":"tools/call","params":' + params + "}"


def _arrays(nodes: int) -> str:
    """Arguments of exactly ``nodes`` objects, arrays and members: ``{"a":[[],[],...]}``."""
    return '{"a":[' + ",".join(["[]"] * (nodes - 3)) + "]}"


def _filling(unit: str) -> str:
    """Arguments of ``{"a":[unit,unit,...]}`` filling a message to :data:`MAX_LINE_BYTES`."""
    count = (MAX_LINE_BYTES - len(_call('{"a":[]}'))) // (len(unit) + 1)
    return '{"a":[' + ",".join([unit] * count) + "]}"


def _members() -> str:
    """Arguments of one object of numbered members, filling a message to the line limit."""
    members, size, n = [], len(_call('{"a":{}}')), 0
    while size + len(f'"{n}":0,') <= MAX_LINE_BYTES:
        members.append(f'"{n}":0')
        size += len(members[-1]) + 1
        n += 1
    return '{"a":{' + ",".join(members) + "}}"


_BRACKETS = "{[:" * 100
_AT_BOUND = MAX_MESSAGE_NODES - _ENVELOPE_NODES

_OVER = (types.PARSE_ERROR, 7, True)
"""Refused by the bound: -32700, the id read from the start."""
_OVER_ID_LAST = (types.PARSE_ERROR, 9, True)

# (the message) -> None when it passes to the SDK, else the error's code, the id answered
# and whether the bound refused it (else the parse did: no JSON)
MESSAGES: list[tuple[str, str, tuple[int, object, bool] | None]] = [
    ("at the bound", _call(_arrays(_AT_BOUND)), None),
    ("one over the bound", _call(_arrays(_AT_BOUND + 1)), _OVER),
    ("one over, the id last", _call(_arrays(_AT_BOUND + 1), id_last=True), _OVER_ID_LAST),
    ("4 MiB of empty arrays", _call(_filling("[]")), _OVER),
    ("4 MiB of empty objects", _call(_filling("{}")), _OVER),
    ("4 MiB of members", _call(_members()), _OVER),
    ("4 MiB of members, the id last", _call(_members(), id_last=True), _OVER_ID_LAST),
    # Inside strings, brackets and colons are text: cheap to parse, and not counted.
    ("one long string of brackets", _call(json.dumps({"a": _BRACKETS * 10_000})), None),
    ("many strings of brackets", _call(json.dumps({"a": [_BRACKETS] * 5_000})), None),
    ("keys of brackets", _call(json.dumps({f"{_BRACKETS}{n}": 0 for n in range(1_000)})), None),
    ("escaped quotes among brackets", _call(json.dumps({"a": '\\"{[:"' * 100_000})), None),
    # No JSON: the parse fails at once, as before.
    ("a string never closed", _call('{"a":"' + '\\"{[:' * 100_000), (types.PARSE_ERROR, 7, False)),
    (
        "ending in a backslash",
        _call('{"a":"' + "{[:" * 100_000 + "\\"),
        (types.PARSE_ERROR, 7, False),
    ),
    # Outside strings: counted (no message either, so no id).
    ("quotes and colons", '":' * (MAX_LINE_BYTES // 2), (types.PARSE_ERROR, None, True)),
]


@pytest.mark.parametrize(
    ("text", "expected"), [m[1:] for m in MESSAGES], ids=[m[0] for m in MESSAGES]
)
def test_a_message_over_the_bound_is_refused_before_any_parse(
    text: str, expected: tuple[int, object, bool] | None
) -> None:
    assert len(text) <= MAX_LINE_BYTES
    tracemalloc.start()
    try:
        found = checked(text)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    if expected is None:
        assert isinstance(found, types.JSONRPCRequest), found
        return
    assert isinstance(found, list), found
    [error] = found
    code, answered_id, by_the_bound = expected
    assert (error.error.code, error.id) == (code, answered_id), error
    bound = f"more than {MAX_MESSAGE_NODES:,} objects, arrays and members"
    assert (bound in error.error.message) is by_the_bound, error.error.message
    # A parse of the costliest 4 MiB shapes allocates 75 to 190 MiB; their refusal, at most
    # the text once more, and a little for each string taken out of it.
    assert peak < 8 * len(text) + 2**20, peak
