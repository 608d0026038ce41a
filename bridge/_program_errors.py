"""What a program sees of a failed tool call: the ``error`` object of a ``result`` frame.

It is ``{code, message, retryable}`` plus the typed fields that
:data:`airlock.bridge.airlock_wire.ERRORS` names for the code (``issues`` of
``invalid_input``, ``retry_after`` of ``rate_limited``, ...), taken from the error's wire form.
Never the operator's :attr:`~airlock.tools.ToolError.detail`. The values come from the host's
error classes, but tool code fills them, so each is checked and bounded before it crosses:
text is cut to :data:`MAX_FIELD_CHARS`, a list to :data:`MAX_FIELD_ITEMS` objects of scalars,
a number must be finite and exact in a float (a non-finite one would make the whole frame
unencodable), and anything else crosses as ``None``.
"""

from __future__ import annotations

import math
from typing import Final

from airlock.bridge.airlock_wire import ERRORS
from airlock.tools import JSONObject, JSONValue, ToolError

__all__ = ["MAX_FIELD_CHARS", "MAX_FIELD_ITEMS", "program_error"]

MAX_FIELD_CHARS: Final = 200
MAX_FIELD_ITEMS: Final = 20
_MAX_EXACT_INT: Final = 2**53


def program_error(error: ToolError) -> JSONObject:
    """The ``error`` object of a result frame for ``error``: public fields only, bounded."""
    wire = error.to_wire()
    public: JSONObject = {
        "code": wire["code"],
        "message": wire["message"],
        "retryable": wire["retryable"],
    }
    shape = ERRORS.get(error.code)
    for name in shape.fields if shape else ():
        public[name] = _field(wire.get(name))
    return public


def _field(value: JSONValue) -> JSONValue:
    if isinstance(value, list):
        return [_record(item) for item in value[:MAX_FIELD_ITEMS]]
    return _scalar(value)


def _record(item: JSONValue) -> JSONValue:
    if not isinstance(item, dict):
        return None
    return {
        str(key)[:MAX_FIELD_CHARS]: _scalar(value)
        for key, value in list(item.items())[:MAX_FIELD_ITEMS]
    }


def _scalar(value: JSONValue) -> JSONValue:
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value if -_MAX_EXACT_INT <= value <= _MAX_EXACT_INT else None
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str):
        return value[:MAX_FIELD_CHARS]
    return None
