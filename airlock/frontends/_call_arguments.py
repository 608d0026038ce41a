"""A call's arguments as the model wrote them, read without trusting their size or shape.

The OpenAI formats carry arguments as JSON text, which the model wrote token by token: it may
be no JSON at all, nest 100,000 levels deep or hold an integer of 5,000 digits. Each of these
is a problem of *that* call, answered ``invalid_input`` to its id, never an exception that
would end the turn and the valid calls in it. Anthropic's ``input`` arrives decoded, by the
provider's SDK, and is checked for depth alike.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Mapping
from typing import Final

__all__ = ["MAX_ARGUMENT_DEPTH", "json_type", "read_arguments", "too_deep", "too_deep_problem"]

MAX_ARGUMENT_DEPTH: Final = 200
"""Levels a call's arguments may nest below their own object. The registry refuses deeper
ones anyway (its strict validation parses JSON this deep and no deeper); ``json.loads`` builds
values about 1,000 levels deep, which code that recurses over them (``json.dumps``) cannot take.
"""


class _NotJSON(ValueError):
    """A constant JSON does not have (``NaN``, ``Infinity``), met while decoding."""


def _reject_constant(name: str) -> object:
    raise _NotJSON(f"'arguments' holds {name}, which is not JSON (send a number or null)")


# One decoder for every call: ``json.loads`` with options builds a new one per call.
_DECODER: Final = json.JSONDecoder(parse_constant=_reject_constant)


def read_arguments(text: str) -> tuple[object, str | None]:
    """The value ``text`` encodes (``{}`` for blank text) and None, or ``{}`` and the problem
    to tell the model: not JSON, deeper than :data:`MAX_ARGUMENT_DEPTH`, an integer too long
    to read, or no object."""
    try:
        parsed: object = _DECODER.decode(text) if text.strip() else {}
    except json.JSONDecodeError as exc:
        return {}, f"'arguments' is not valid JSON ({exc.msg} at position {exc.pos})"
    except _NotJSON as exc:
        return {}, str(exc)
    except RecursionError:  # the decoder's own stack ran out: far deeper than the limit
        return {}, too_deep_problem("'arguments'")
    except ValueError:  # int() refuses a literal over the interpreter's digit limit
        digits = sys.get_int_max_str_digits()
        return {}, f"'arguments' holds an integer longer than {digits} digits"
    if not isinstance(parsed, dict):
        return {}, f"'arguments' must encode a JSON object, not {json_type(parsed)}"
    # Each level opens a bracket: text with few of them (as nearly every call) is shallow.
    if text.count("[") + text.count("{") > MAX_ARGUMENT_DEPTH and too_deep(parsed):
        return {}, too_deep_problem("'arguments'")
    return parsed, None


def too_deep(arguments: object, *, levels: int = MAX_ARGUMENT_DEPTH) -> bool:
    """Whether ``arguments`` nest more than ``levels`` levels below their object (a value that
    contains itself does)."""
    # One iterator per open level: memory grows with the depth, not with the size.
    stack: list[Iterator[object]] = [iter((arguments,))]
    while stack:
        for item in stack[-1]:
            children: Iterator[object]
            if isinstance(item, Mapping):
                children = iter(item.values())
            elif isinstance(item, list | tuple):
                children = iter(item)
            else:
                continue
            if len(stack) > levels + 1:
                return True
            stack.append(children)
            break
        else:
            stack.pop()
    return False


def too_deep_problem(field: str) -> str:
    """What to tell the model about arguments nested too deep in ``field``."""
    return f"{field} nests deeper than {MAX_ARGUMENT_DEPTH} levels"


def json_type(value: object) -> str:
    """The JSON type of ``value`` in words ("an object", "null"), for messages that must not
    echo a value (its repr may be huge, or fail)."""
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}
    if value is None:
        return "null"
    if isinstance(value, int | float) and not isinstance(value, bool):
        return "a number"
    return names.get(type(value), type(value).__name__)
