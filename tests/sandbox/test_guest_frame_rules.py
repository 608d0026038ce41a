"""A program's call or final value that JSON holds but the host's frame rules refuse.

The host refuses a frame with an integer of more than ``MAX_INT_DIGITS`` digits, one nested
deeper than ``MAX_DEPTH``, or a call frame over ``max_call_frame_bytes``, and ends the run as a
protocol error. The guest checks first: such a call is ``InvalidInput`` in the program (which
can catch it; nothing is sent), such a final value an ``InvalidResult`` error. The guest's
verdict is pinned to the host's decoder here, frame by frame; the runner's, as a process on
the host, below (the container's in ``test_frame_rules_docker.py``).
"""

from __future__ import annotations

from typing import Any

import pytest

from airlock.bridge import BridgeLimits, FrameError, decode_body
from airlock.bridge.airlock_wire import MAX_CALL_FRAME_BYTES, MAX_DEPTH, MAX_INT_DIGITS
from tests.sandbox.guest_image import load_guest
from tests.sandbox.test_guest_runner import run_in_process

frames = load_guest("airlock_frames")
errors = load_guest("airlock_errors")
output = load_guest("airlock_output")


def _nested(levels: int, leaf: Any = 1, *, kind: str = "list") -> Any:
    value = leaf
    for _ in range(levels):
        value = [value] if kind == "list" else (value,) if kind == "tuple" else {"k": value}
    return value


BIG = 10**MAX_INT_DIGITS
# (case, a value; the call's argument and the final value both)
VALUES = [
    ("int_30_digits", BIG - 1),
    ("int_31_digits", BIG),
    ("negative_30_digits", -(BIG - 1)),
    ("negative_31_digits", -BIG),
    ("int_in_a_list", [1, [2, BIG]]),
    ("int_as_a_key", {BIG: 1}),  # JSON's keys are text
    ("bool", True),
    ("float", 1e300),
    ("lists_60", _nested(60)),
    ("lists_61", _nested(61)),
    ("lists_62", _nested(62)),
    ("lists_63", _nested(63)),
    ("dicts_62", _nested(62, kind="dict")),
    ("dicts_63", _nested(63, kind="dict")),
    ("tuples_63", _nested(63, kind="tuple")),
    ("lists_70", _nested(70)),
    ("deep_and_wide", [_nested(10)] * 50 + [_nested(64)]),
]


def _host_refuses(message: dict[str, Any]) -> bool:
    try:
        decode_body(frames.encode(message)[frames.HEADER.size :])
    except FrameError:
        return True
    return False


@pytest.mark.parametrize(("case", "value"), VALUES, ids=[row[0] for row in VALUES])
@pytest.mark.parametrize("kind", ["call", "propose", "batch"])
def test_the_guest_refuses_a_call_as_the_host_would(case: str, value: Any, kind: str) -> None:
    if kind == "batch":
        message = {"type": kind, "tool": "t", "items": [{"a": 1}, {"a": value}], "id": 7}
    else:
        message = {"type": kind, "tool": "t", "args": {"a": value}, "id": 7}
    refused = _host_refuses(message)
    if not refused:
        assert frames.encode_call(message) == frames.encode(message)
        return
    with pytest.raises(errors.InvalidInput) as caught:
        frames.encode_call(message)
    (issue,) = caught.value.issues
    assert issue["field"].startswith("1.a" if kind == "batch" else "a"), case


@pytest.mark.parametrize(("case", "value"), VALUES, ids=[row[0] for row in VALUES])
def test_the_guest_refuses_a_final_value_as_the_host_would(case: str, value: Any) -> None:
    refused = _host_refuses({"type": "done", "result": {"status": "ok", "value": value}})
    assert (frames.unfit(value, 2) is not None) == refused, case


# The done frame holds the value two levels down: 62 levels of its own fit, 63 do not.
EDGES = [(f"{kind}_{n}", _nested(n, kind=kind)) for kind in ("list", "dict") for n in range(61, 66)]


@pytest.mark.parametrize(("case", "value"), VALUES + EDGES, ids=[r[0] for r in VALUES + EDGES])
def test_a_final_value_the_host_refuses_is_an_invalid_result(case: str, value: Any) -> None:
    # The whole check the runner makes (its quick pass first), not the walk alone: a value
    # 63 or 64 levels deep passed the quick pass, and the host ended the run on its frame.
    refused = _host_refuses({"type": "done", "result": {"status": "ok", "value": value}})
    text = frames.to_json(value)
    error = output.too_large(value, text, len(text), output.VALUE_ELEMENTS)
    assert (error is not None) == refused, case
    if refused:
        assert error["type"] == "InvalidResult", case


@pytest.mark.parametrize("levels", [61, 62])
def test_a_batch_split_in_frames_checks_its_items_at_their_level(levels: int) -> None:
    # The items' list sits in the frame's object: its text shows one level fewer than the
    # frame has (62 levels in an item's argument: 64 brackets, a frame 65 deep).
    batch_items = load_guest("airlock_batch_items")
    bound = [{"a": _nested(levels)}]
    message = {"type": "batch", "tool": "t", "items": bound, "id": 7}
    if not _host_refuses(message):
        batch_items._refuse_unsendable("t", [0], bound)
        return
    with pytest.raises(errors.InvalidInput) as caught:
        batch_items._refuse_unsendable("t", [0], bound)
    assert caught.value.issues[0]["field"].startswith("0.a.")


@pytest.mark.parametrize("extra", [0, 1])
def test_a_call_frame_over_the_byte_limit_is_refused(extra: int) -> None:
    frames.limit_calls(1000)
    try:
        base = {"type": "call", "tool": "t", "args": {"a": ""}, "id": 7}
        room = 1000 - len(frames.encode(base)[frames.HEADER.size :])
        message = {**base, "args": {"a": "x" * (room + extra)}}
        if not extra:
            assert len(frames.encode_call(message)) == frames.HEADER.size + 1000
            return
        with pytest.raises(errors.InvalidInput, match="1001 bytes"):
            frames.encode_call(message)
    finally:
        frames.limit_calls(None)


def test_the_default_call_limit_is_the_hosts() -> None:
    assert BridgeLimits().max_call_frame_bytes == MAX_CALL_FRAME_BYTES


CAUGHT = "try:\n    {call}\nexcept tools.ToolError as e:\n    result([e.code, e.issues])\n"
DEEP = "v = 1\nfor _ in range(70):\n    v = [v]\n"


def _deep(levels: int, end: str) -> str:
    return f"v = 1\nfor _ in range({levels}):\n    v = {{'k': v}}\n{end}"


ENDS = {"final": "v\n", "result": "result(v)\n'not this'\n"}  # the value's two ways out


# (case, program, status, final value, error type, calls the host received)
PROGRAMS = [
    ("value_fits", f"{BIG - 1}\n", "ok", BIG - 1, None, 0),
    ("value_big_int", "2**128\n", "error", None, "InvalidResult", 0),
    ("value_deep", DEEP + "v\n", "error", None, "InvalidResult", 0),
    ("value_deep_in_result", DEEP + "result({'v': v})\n", "error", None, "InvalidResult", 0),
    # 63 and 64 levels (with the done frame's two: 65, 66) ended the run as protocol_error.
    *[
        (f"value_{n}_deep_{way}", _deep(n, end), *verdict)
        for n, verdict in [(62, ("ok", _nested(62, kind="dict"), None, 0))]
        + [(n, ("error", None, "InvalidResult", 0)) for n in (63, 64, 65)]
        for way, end in ENDS.items()
    ],
    ("call_fits", "tools.t(arg=10**29)\n", "ok", "answered", None, 1),
    (
        "call_big_int",
        CAUGHT.format(call="tools.t(arg=10**31)"),
        "ok",
        ["invalid_input", [{"field": "arg", "reason": "..."}]],
        None,
        0,
    ),
    (
        "call_deep",
        DEEP + CAUGHT.format(call="tools.t(arg=v)"),
        "ok",
        # the list that opens the frame's level 65: the argument is at level 3
        ["invalid_input", [{"field": "arg" + ".0" * (MAX_DEPTH - 2), "reason": "..."}]],
        None,
        0,
    ),
    (
        "call_over_the_byte_limit",
        CAUGHT.format(call="tools.t(arg='x' * 1_100_000)"),
        "ok",
        ["invalid_input", [{"field": "", "reason": "..."}]],
        None,
        0,
    ),
    (
        "batch_item_big_int",
        CAUGHT.format(call="tools.t.batch([{'arg': 1}, {'arg': -10**31}])"),
        "ok",
        ["invalid_input", [{"field": "1.arg", "reason": "..."}]],
        None,
        0,
    ),
    (
        "awaitable_big_int",
        "import asyncio\nasync def main():\n    return await tools.t.aio(arg=10**31)\n"
        + CAUGHT.format(call="asyncio.run(main())"),
        "ok",
        ["invalid_input", [{"field": "arg", "reason": "..."}]],
        None,
        0,
    ),
    ("call_big_int_uncaught", "tools.t(arg=10**31)\n", "error", None, "InvalidInput", 0),
]


@pytest.mark.parametrize(
    ("case", "program", "status", "value", "error_type", "calls"),
    PROGRAMS,
    ids=[row[0] for row in PROGRAMS],
)
def test_the_runner_keeps_a_program_within_the_frame_rules(
    case: str, program: str, status: str, value: Any, error_type: str | None, calls: int
) -> None:
    received: list[dict[str, Any]] = []

    def answer(frame: dict[str, Any]) -> dict[str, Any]:
        received.append(frame)
        return {"ok": True, "value": "answered"}

    result = run_in_process(program, mode="full", tools=["t"], answer=answer)
    assert result["status"] == status, (case, result["error"])
    assert len(received) == calls, case
    if error_type is not None:
        assert result["error"]["type"] == error_type, case
        return
    got = result["value"]
    if isinstance(value, list):  # an issue's reason is prose: its field is what is pinned
        got = [got[0], [{**issue, "reason": "..."} for issue in got[1]]]
    assert got == value, case
