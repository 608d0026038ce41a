"""A program's final value, re-checked on the host against the limits the guest enforces.

The guest refuses a final value over :data:`MAX_VALUE_BYTES` of compact JSON or
:data:`VALUE_ELEMENTS` values and keys (``airlock_output.too_large``); a program that forges
its ``done`` frame skips that, so the host measures the value again, the way the guest does,
and answers what the guest answers for it (:func:`oversized`). Measuring means encoding: a
bound read from at most :data:`_LOOKED_AT` values skips that for the values that surely fit
(numbers, short texts, small records: most), and a value that may not is measured on a worker
thread (a forged one can be hundreds of megabytes: the done frame's budget is the output
caps', JSON-escaped).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable
from itertools import islice
from typing import Any, Final

from airlock.bridge import MAX_ELEMENTS
from airlock.sandbox._result import ProgramError

__all__ = ["MAX_VALUE_BYTES", "VALUE_ELEMENTS", "oversized"]

MAX_VALUE_BYTES: Final = 4 * 1024 * 1024
"""The largest final value a program may return, as compact JSON; a larger one is refused
in the guest as ``result_too_large`` with its size and this limit."""
VALUE_ELEMENTS: Final = MAX_ELEMENTS - 1000
"""Values and keys a final value may hold: the done frame's other fields fit in the rest."""

_LOOKED_AT: Final = 1000
"""Values and keys read for a bound before the value is measured instead: far fewer than
:data:`VALUE_ELEMENTS`, so a value that fits this walk holds few enough."""
_SCALAR_BYTES: Final = 32
"""At most, a number (the decoder refuses integers of more than ``MAX_INT_DIGITS`` digits; a
float's ``repr`` is 24 characters at most), ``true``, ``false`` or ``null``, and a comma."""
_CHAR_BYTES: Final = 12
"""At most, one character of a string: an astral one is two ``\\uXXXX`` escapes."""
_SLICE_CHARS: Final = 1 << 16
"""Characters of a text encoded at once (a few milliseconds of the interpreter lock)."""
_CHUNK_BYTES: Final = 1 << 16
"""The most JSON one call of the encoder may make: items of a list or dict are encoded
together while an upper bound of their encoding is within it."""
_SCALARS: Final = frozenset({float, bool, type(None)})
_FLAT: Final = _SCALARS | {int}
_ADVICE: Final = "return a summary (counts, totals, the few records that matter) instead"

# The guest's encoding (``airlock_frames.to_json``): compact, ASCII, no NaN.
_encode: Final = json.JSONEncoder(
    separators=(",", ":"), allow_nan=False, check_circular=False
).encode


async def oversized(value: Any) -> ProgramError | None:
    """The ``ResultTooLarge`` error the guest reports for a final ``value`` (a JSON value, as
    the bridge's decoder made it) over :data:`MAX_VALUE_BYTES` or :data:`VALUE_ELEMENTS`, with
    the same fields and message; ``None`` when it fits."""
    if value is None or _surely_fits(value):
        return None
    return await asyncio.to_thread(_measured, value)


def _surely_fits(value: Any, limit: int = MAX_VALUE_BYTES) -> bool:
    """Whether an upper bound of ``value``'s encoded size, read from at most
    :data:`_LOOKED_AT` values and keys, is within ``limit``."""
    bound, looked_at = 0, 0
    stack = [value]
    while stack:
        item = stack.pop()
        looked_at += 1 + (len(item) if isinstance(item, (list, dict)) else 0)
        if looked_at > _LOOKED_AT:
            return False
        if isinstance(item, str):
            bound += _CHAR_BYTES * len(item) + 3  # quotes, comma
        elif isinstance(item, list):
            bound += 3  # brackets, comma
            stack.extend(item)
        elif isinstance(item, dict):
            bound += 3 + sum(_CHAR_BYTES * len(key) + 3 for key in item)  # quotes, colon
            stack.extend(item.values())
        elif isinstance(item, int) and not isinstance(item, bool) and item.bit_length() > 100:
            return False  # (not from the decoder: measured)
        else:
            bound += _SCALAR_BYTES
        if bound > limit:
            return False
    return True


def _measured(value: Any) -> ProgramError | None:
    size, elements = _size_of(value)
    if size > MAX_VALUE_BYTES:
        return ProgramError(
            type="ResultTooLarge",
            code="result_too_large",
            message=f"the final value is {size} bytes of JSON; the limit is "
            f"{MAX_VALUE_BYTES}: {_ADVICE}",
            size_bytes=size,
            limit_bytes=MAX_VALUE_BYTES,
        )
    if elements > VALUE_ELEMENTS:
        return ProgramError(
            type="ResultTooLarge",
            code="result_too_large",
            message=f"the final value holds more than {VALUE_ELEMENTS} values and keys: {_ADVICE}",
            size_bytes=size,
        )
    return None


def _size_of(value: Any) -> tuple[int, int]:
    """The size of ``value``'s compact JSON and its values and keys, counted as
    :func:`~airlock.bridge.count_elements` counts them (one more for an empty container).

    Never the whole at once: ``json``'s C encoder holds the interpreter lock until it is
    done, and a forged value would hold the event loop with it, on whatever thread it runs.
    A list's or dict's items are encoded in runs that surely make at most
    :data:`_CHUNK_BYTES` (:func:`_run_of`); an item too large for one is measured part by
    part, and a long text in slices (escaping is per character)."""
    size, elements = 0, 0
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            elements += 1
            size += 2 + sum(
                len(_encode(item[at : at + _SLICE_CHARS])) - 2
                for at in range(0, len(item), _SLICE_CHARS)
            )
        elif isinstance(item, (list, dict)):
            elements += 1 + (not item)
            keys, values = (
                (list(item), list(item.values())) if isinstance(item, dict) else (None, item)
            )
            size += 1 + max(len(values), 1) + (0 if keys is None else len(keys))  # and colons
            at = 0
            while at < len(values):
                end, counted = _run_of(values, at, keys)
                if end == at:  # too large for one run: measured part by part
                    stack.append(values[at])
                    if keys is not None:
                        stack.append(keys[at])
                    at += 1
                    continue
                if keys is None:
                    size += len(_encode(values[at:end])) - 1 - (end - at)
                else:
                    part = dict(zip(keys[at:end], values[at:end], strict=True))
                    size += len(_encode(part)) - 1 - 2 * (end - at)
                elements += counted
                at = end
        else:
            elements += 1
            size += len(_encode(item))
    return size, elements


def _run_of(values: list[Any], at: int, keys: list[str] | None) -> tuple[int, int]:
    """``(end, elements)``: ``values[at:end]`` (with ``keys[at:end]``, a dict's) surely
    encode to at most :data:`_CHUNK_BYTES` and hold ``elements`` values and keys; ``end`` is
    ``at`` when ``values[at]`` alone may not (or is not a JSON value).

    Walked in Python, which gives the interpreter lock up in turn; a container's items are
    counted before they are walked, so a large one is given up at once."""
    if keys is None and type(values[at]) in _FLAT:  # a run of numbers: no walk
        run = values[at : at + _CHUNK_BYTES // _SCALAR_BYTES]
        kinds = set(map(type, run))
        if kinds <= _SCALARS or (kinds == {int} and max(map(int.bit_length, run)) <= 100):
            return at + len(run), len(run)
    bound, elements, end = 0, 0, at
    for value in islice(values, at, at + _CHUNK_BYTES // 3):
        # Each value is at least 3 bytes (with a comma) when its container is walked;
        # what more it may be is added as it is reached.
        if keys is None:
            bound, counted = bound + 3, 1
        else:  # quotes, colon, comma
            bound, counted = bound + _CHAR_BYTES * len(keys[end]) + 7, 2
        pending: list[Iterable[Any]] = [(value,)]
        while pending:
            for item in pending.pop():
                kind = type(item)
                if kind is str:  # printable ASCII is escaped as \" at most, other as \u00XX
                    ascii_bytes = 2 if item.isprintable() else 6
                    bound += len(item) * (ascii_bytes if item.isascii() else _CHAR_BYTES)
                elif kind is int:
                    bound += _SCALAR_BYTES - 3 if item.bit_length() <= 100 else item.bit_length()
                elif kind in _SCALARS:
                    bound += _SCALAR_BYTES - 3
                elif kind is dict:
                    counted += 2 * len(item) + (not item)
                    bound += 7 * len(item) + _CHAR_BYTES * sum(map(len, item))
                    if bound > _CHUNK_BYTES:
                        return end, elements
                    pending.append(item.values())
                elif kind is list:
                    counted += len(item) + (not item)
                    bound += 3 * len(item)
                    if bound > _CHUNK_BYTES:
                        return end, elements
                    pending.append(item)
                else:
                    return end, elements
        if bound > _CHUNK_BYTES:
            return end, elements
        elements += counted
        end += 1
    return end, elements
