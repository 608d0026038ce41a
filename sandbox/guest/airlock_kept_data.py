"""A kept session's plain data: what counts as plain, and how it is unpickled within bounds.

Standard library only. A kept name's value is kept as a pickle (protocol 5) when it is plain
data (:func:`is_plain`), and read back in the next program's process (:func:`loads_data`).
Every process of a kept container runs as the same user, so the pickle may be a program's own
work: reading it names no class or function but the plain ones, and calls none of them with
arguments that build more than the pickle's own bytes hold. The builtin types a
``defaultdict`` makes its values with (``list``, ``bytes``...) are named only, never called:
``list(bytes(60_000_000))`` takes 43 bytes to write and 480 MB to build.
"""

from __future__ import annotations

import collections
import datetime
import decimal
import io
import pickle

TYPE_CHECKING = False  # typing's, which the guest does not import (see airlock.sandbox.guest)
if TYPE_CHECKING:
    from typing import Any

MAX_ELEMENTS = 5_000_000
"""Values and keys a kept name may hold; a larger one is not kept (walking it costs time)."""
PLAIN = frozenset(
    {
        type(None), bool, int, float, complex, str, bytes, bytearray, list, tuple, dict, set,
        frozenset, collections.OrderedDict, collections.Counter, collections.defaultdict,
        collections.deque, datetime.date, datetime.datetime, datetime.time,
        datetime.timedelta, datetime.timezone, decimal.Decimal,
    }
)  # fmt: skip
"""The types of plain data (see ``airlock_kept``)."""
BUILTIN_FACTORIES = (list, dict, set, int, float, str, tuple, frozenset, bytes)
"""What a kept ``defaultdict`` may make its values with."""


class _Named:
    """A builtin type a pickle names as a ``defaultdict``'s factory: it stands for the type
    there, and cannot be called (called, each of these types builds what its arguments say:
    ``bytes(60_000_000)``, ``str`` of a list holding one long string many times)."""

    __slots__ = ("kind",)

    def __init__(self, kind: type) -> None:
        self.kind = kind


def _defaultdict(*arguments: object) -> collections.defaultdict[Any, Any]:
    """A ``defaultdict`` as its pickle makes it: of a named factory, or of none."""
    if not arguments or arguments == (None,):
        return collections.defaultdict()
    factory = arguments[0]
    if len(arguments) != 1 or type(factory) is not _Named:
        raise pickle.UnpicklingError("a defaultdict of something other than a builtin type")
    return collections.defaultdict(factory.kind)


def _decimal(*arguments: object) -> decimal.Decimal:
    """A ``Decimal`` as its pickle makes it: from its text (an integer of a million digits
    would take its conversion far longer than its bytes)."""
    if len(arguments) != 1 or type(arguments[0]) is not str:
        raise pickle.UnpicklingError("a Decimal made from other than its text")
    return decimal.Decimal(arguments[0])


# What each name a pickle may hold stands for. The types given as they are build, whatever
# their arguments, no more than those arguments hold (or a small value of their own); the
# others are checked (or not callable at all). A plain function is no class: a pickle's
# NEWOBJ, which calls its class's ``__new__`` unchecked, refuses it.
_GLOBALS: dict[tuple[str, str], object] = {
    **{("builtins", kind.__name__): _Named(kind) for kind in BUILTIN_FACTORIES},
    ("builtins", "complex"): complex,  # (complex pickles by NEWOBJ)
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("collections", "Counter"): collections.Counter,
    ("collections", "defaultdict"): _defaultdict,
    ("collections", "deque"): collections.deque,
    ("datetime", "date"): datetime.date,
    ("datetime", "datetime"): datetime.datetime,
    ("datetime", "time"): datetime.time,
    ("datetime", "timedelta"): datetime.timedelta,
    ("datetime", "timezone"): datetime.timezone,
    ("decimal", "Decimal"): _decimal,
}


class _DataOnly(pickle.Unpickler):
    """Unpickles plain data: any other class or function is refused."""

    def find_class(self, module: str, name: str) -> Any:
        found = _GLOBALS.get((module, name))
        if found is None:
            raise pickle.UnpicklingError(f"{module}.{name} is not plain data")
        return found


def loads_data(data: bytes) -> Any:
    """Unpickle ``data`` holding plain data only, building no more than its bytes hold.

    Raises:
        pickle.UnpicklingError: it names another class or function, or a builtin type for
            a value.
        Exception: it calls what it names otherwise than a pickle of plain data does.
    """
    value = _DataOnly(io.BytesIO(data)).load()
    if type(value) is _Named:  # (one inside a value is inert, and is not kept again)
        raise pickle.UnpicklingError("a builtin type is not plain data")
    return value


def is_plain(value: object) -> bool:
    """Whether ``value`` is plain data (see ``airlock_kept``), walked without calling any of
    its methods."""
    seen: set[int] = set()
    stack: list[Any] = [value]
    count = 0
    while stack:
        item = stack.pop()
        count += 1
        if count > MAX_ELEMENTS:
            return False
        kind = type(item)
        if kind not in PLAIN:
            return False
        if kind is collections.defaultdict:
            factory = item.default_factory
            if factory is not None and factory not in BUILTIN_FACTORIES:
                return False
        elif kind is datetime.datetime or kind is datetime.time:
            zone = item.tzinfo
            if zone is not None and type(zone) is not datetime.timezone:
                return False
        if id(item) in seen:
            continue
        if kind in (list, tuple, set, frozenset, collections.deque):
            seen.add(id(item))
            stack.extend(item)
        elif isinstance(item, dict):
            seen.add(id(item))
            stack.extend(item.keys())
            stack.extend(item.values())
    return True


__all__ = ["BUILTIN_FACTORIES", "MAX_ELEMENTS", "PLAIN", "is_plain", "loads_data"]
