"""The guest's frames: JSON straight from the C accelerator (the runner imports no ``json``
package), which must read and write what the ``json`` module does, and refuse what it
refuses; the same with the ``json`` package where the accelerator is missing."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.sandbox.guest_image import load_guest

frames = load_guest("airlock_frames")

VALUES: list[object] = [
    {},
    {"type": "run", "program": "print('é')\n", "tools": [], "limit": None, "keep": True},
    {"n": [0, -1, 10**30, 1.5, -0.0, 1e300], "s": '\u2603\x00"\\', "nested": {"a": [[{}]]}},
    {"1": "keys stay strings"},
]
TEXTS = [
    '{"a":1}',
    ' \n{"a": [1, 2.5, "x"]}\t',
    '{"a":NaN,"b":-Infinity}',
    '{"a":"\\u00e9\\ud83d\\ude00"}',
]
REFUSED_VALUES: list[tuple[object, type[Exception]]] = [
    (math.nan, ValueError),
    (math.inf, ValueError),
    (object(), TypeError),
    ({1, 2}, TypeError),
    (b"bytes", TypeError),
]
REFUSED_TEXTS: list[tuple[str, type[Exception]]] = [
    ("", ValueError),
    ('{"a":1} x', ValueError),
    ('{"a":1}{"b":2}', ValueError),
    ("{'a':1}", ValueError),
    ('{"a":[1,}', ValueError),
    ('{"a":"\x01"}', ValueError),  # a control character in a string: strict, as json
    ("[1]", ConnectionError),  # not an object
]


@pytest.fixture(params=["_json", "json package"])
def codec(request: pytest.FixtureRequest) -> Iterator[tuple[Callable[..., str], Any]]:
    """(to_json, loads) as the guest builds them, with or without the C accelerator."""
    if request.param == "_json":
        yield frames.to_json, frames.split_frame
        return
    saved = sys.modules.get("_json")
    sys.modules["_json"] = None  # type: ignore[assignment]  # "import _json" now fails
    try:
        dumps, loads = frames._codec()
    finally:
        if saved is not None:
            sys.modules["_json"] = saved
    assert "JSONEncoder" in repr(dumps)
    yield dumps, lambda received: loads(bytes(received[4:]).decode())


def _frame(text: str) -> bytearray:
    body = text.encode()
    return bytearray(len(body).to_bytes(4, "big") + body)


@pytest.mark.parametrize("value", VALUES)
def test_a_value_is_written_as_compact_ascii_json(codec: Any, value: object) -> None:
    to_json, split = codec
    assert to_json(value) == json.dumps(value, separators=(",", ":"))
    assert split(_frame(to_json(value))) == json.loads(json.dumps(value))


@pytest.mark.parametrize("text", TEXTS)
def test_a_frame_is_read_as_json_reads_it(codec: Any, text: str) -> None:
    _, split = codec
    read = split(_frame(text))
    assert json.dumps(read, sort_keys=True) == json.dumps(json.loads(text), sort_keys=True)


@pytest.mark.parametrize(("value", "error"), REFUSED_VALUES)
def test_what_json_cannot_hold_is_refused(codec: Any, value: object, error: type) -> None:
    to_json, _ = codec
    with pytest.raises(error):
        to_json({"value": value})


@pytest.mark.parametrize(("text", "error"), REFUSED_TEXTS)
def test_a_frame_that_is_not_one_json_object_is_refused(text: str, error: type) -> None:
    with pytest.raises(error):
        frames.split_frame(_frame(text))


def test_a_value_that_holds_itself_is_refused_not_a_crash() -> None:
    cycle: list[object] = []
    cycle.append(cycle)
    with pytest.raises(ValueError, match="refers to itself"):
        frames.to_json(cycle)
    with pytest.raises(ValueError, match="refers to itself"):
        frames.encode({"args": cycle})


def test_a_frame_is_taken_off_the_bytes_received_and_the_rest_kept() -> None:
    received = bytearray(frames.encode({"a": 1}) + frames.encode({"b": 2})[:6])
    assert frames.split_frame(received) == {"a": 1}
    assert frames.split_frame(received) is None
    assert len(received) == 6
