"""What one call from code may send as arguments: :data:`MAX_CALL_ELEMENTS` values and keys.

Admission validates a call's arguments on the event loop, at a cost that grows with their
values, and the cyclic collector walks what a frame holds as long as it lives: one call frame
within the budget of a frame (200,000 values and keys: a 372 KiB list of 6,400 lists 30 deep)
held the loop 150 to 330 ms in validation, and as much again in the collector's walks. So
:func:`trim_frame`, called as the frame is decoded with the collector still held off, puts
:class:`ArgumentsOverBudget` in place of arguments over the budget (a call's, a proposal's,
each item's of a batch), which the dispatcher answers ``invalid_input`` without admission,
and keeps of such frames only the keys the host reads: what is dropped is freed at once,
never walked.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from airlock.bridge.airlock_wire import BATCH, CALL, LOG, PROPOSE, REFUSED

__all__ = ["MAX_CALL_ELEMENTS", "ArgumentsOverBudget", "holds_more", "trim_frame", "trims"]

MAX_CALL_ELEMENTS: Final = 10_000
"""Values and keys one call's arguments may hold, the object itself included (a proposal's,
each item's of a batch): validated on the event loop, a few milliseconds at most."""

_KEYS: Final = {
    CALL: ("type", "id", "tool", "args"),
    PROPOSE: ("type", "id", "tool", "args"),
    BATCH: ("type", "id", "tool", "items"),
    LOG: ("type", "message"),
    REFUSED: ("type", "tool"),
}
"""The keys the host reads of each frame type that :func:`trim_frame` trims."""


class ArgumentsOverBudget(dict[str, Any]):
    """Stands, empty, for arguments of more than :data:`MAX_CALL_ELEMENTS` values and keys
    in a decoded frame."""

    __slots__ = ()


def trims(message: dict[str, Any]) -> bool:
    """Whether ``message`` (a decoded frame) is of a type :func:`trim_frame` trims."""
    kind = message.get("type")
    return type(kind) is str and kind in _KEYS


def trim_frame(message: dict[str, Any]) -> dict[str, Any]:
    """``message``, a decoded frame of a type it :func:`trims`, with only the keys the host
    reads of that type, and :class:`ArgumentsOverBudget` in place of arguments over the
    budget."""
    trimmed = {k: message[k] for k in _KEYS[message["type"]] if k in message}
    args = trimmed.get("args")
    if type(args) is dict and holds_more(args, MAX_CALL_ELEMENTS):
        trimmed["args"] = ArgumentsOverBudget()
    items = trimmed.get("items")
    if type(items) is list:
        for n, item in enumerate(items):
            if type(item) is dict and item and holds_more(item, MAX_CALL_ELEMENTS):
                items[n] = ArgumentsOverBudget()
    return trimmed


def holds_more(args: dict[str, Any], limit: int) -> bool:
    """Whether ``args`` (a decoded JSON object) holds more than ``limit`` values and keys,
    itself included; looks at ``limit`` of them at most."""
    count = 1 + 2 * len(args)
    if count > limit:
        return True
    # An empty container adds nothing to look at (it was counted as its parent's value).
    stack = [v for v in args.values() if (type(v) is dict or type(v) is list) and v]
    while stack:
        value = stack.pop()
        children: Iterable[Any]
        if type(value) is dict:
            count += 2 * len(value)
            children = value.values()
        else:
            count += len(value)
            children = value
        if count > limit:
            return True
        stack.extend(c for c in children if (type(c) is dict or type(c) is list) and c)
    return False
