"""The classes a ``restricted`` program may make, and the attribute writes it may do.

A class with a member of the program's choosing whose name starts with ``_`` (a
``__reduce_ex__``, an ``__init_subclass__``, a ``_guarded_writes``) gets the standard library
to call the program's code where it trusts its own (``copy`` applies a reduced object's state
to any object, modules included). RestrictedPython stops such names in the program's source;
these close the other ways to make one:

- :func:`build_class`, the program's ``__build_class__``: a class statement's bases must be
  classes of a standard metaclass (:func:`trusted_metaclasses`), none a metaclass itself
  (``class M(typing.Type[int])`` would make one), and its namespace holds only what a class
  body RestrictedPython compiled makes (:data:`CLASS_BODY_NAMES`).
- :func:`get_origin` and :func:`get_args`, ``typing``'s as a program gets them: no metaclass
  (``typing.get_origin(typing.Type[int])`` is ``type``), which called makes a class of any
  namespace.
- :func:`write_guards`: ``setattr``/``delattr`` of no name that starts with ``_``, and a write
  guard that trusts no object's own say (RestrictedPython's lets through any object with a
  ``_guarded_writes`` attribute).

Standard library only, plus RestrictedPython (shipped in the image); next to the runner.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing's, which the guest does not import (see airlock.sandbox.guest)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

CLASS_BODY_NAMES = frozenset(
    {
        # What the compiler puts in a class body's namespace, and __build_class__ for a base
        # with __mro_entries__ (typing.Generic[T]). 3.13 adds the last two.
        *("__module__", "__qualname__", "__doc__", "__classcell__", "__orig_bases__"),
        *("__static_attributes__", "__firstlineno__"),
        # The methods RestrictedPython lets a class statement define (ALLOWED_FUNC_NAMES).
        *("__init__", "__contains__", "__lt__", "__le__", "__eq__", "__ne__", "__gt__"),
        "__ge__",
    }
)
"""The names starting with ``_`` a class statement RestrictedPython compiled may define."""


def trusted_metaclasses() -> tuple[type, ...]:
    """The metaclasses a program's classes may have: the standard library's, whose look-ups
    the program cannot answer differently from one read to the next."""
    found: list[type] = [type]
    for module_name, name in (("abc", "ABCMeta"), ("typing", "_ProtocolMeta")):
        meta = getattr(sys.modules.get(module_name), name, None)
        if isinstance(meta, type):
            found.append(meta)
    return tuple(found)


def is_metaclass(value: object) -> bool:
    """Whether ``value`` is a metaclass: called, it makes a class of any namespace."""
    return isinstance(value, type) and issubclass(value, type)


def check_base(base: object, what: str) -> None:
    """A class a program's class may derive from: not a metaclass, with a standard one."""
    if not isinstance(base, type):
        raise TypeError(
            f"{what} {base!r} is not a class: restricted mode makes classes of classes only"
        )
    if is_metaclass(base):
        raise TypeError(
            f"{what} {base.__name__!r} is a metaclass, which restricted mode does not derive "
            "from: its classes would make classes of any namespace"
        )
    if type(base) not in trusted_metaclasses():
        raise TypeError(
            f"{what} {base.__name__!r} has the metaclass {type(base).__name__!r}, which "
            "restricted mode does not make classes of"
        )


def _winner(bases: tuple[type, ...]) -> type:
    """The metaclass ``type`` would choose for ``bases`` (each trusted)."""
    winner: type = type
    for base in bases:
        meta = type(base)
        if issubclass(winner, meta):
            continue
        if not issubclass(meta, winner):
            raise TypeError("metaclass conflict: the bases' metaclasses are unrelated")
        winner = meta
    return winner


def build_class(func: Any, name: str, /, *bases: Any, **keywords: Any) -> Any:
    """The ``__build_class__`` of a restricted program: a class of checked bases and namespace."""
    import builtins
    import types

    # RestrictedPython writes every class statement as ``metaclass=__metaclass__`` (``type``)
    # and refuses one in the source.
    if keywords.pop("metaclass", type) is not type:
        raise TypeError("restricted mode makes classes of the metaclass type only")
    for base in types.resolve_bases(bases):  # refused before the body runs
        check_base(base, "the base")

    def make(name: str, bases: tuple[type, ...], namespace: dict[str, Any], **kw: Any) -> Any:
        for base in bases:  # and as __build_class__ resolved them
            check_base(base, "the base")
        for key in namespace:
            if type(key) is not str or (
                key.startswith("_") and key != "_" and key not in CLASS_BODY_NAMES
            ):
                raise TypeError(
                    f"the class {name!r} would define {key!r}, which restricted mode does "
                    "not let a program define"
                )
        return _winner(bases)(name, bases, namespace, **kw)

    # A metaclass that is not a class: the body runs in a plain dict (the trusted metaclasses
    # prepare none other), then ``make`` sees the namespace before any class exists.
    return builtins.__build_class__(func, name, *bases, metaclass=make, **keywords)


def get_origin(tp: Any) -> Any:
    """``typing.get_origin``, with no metaclass (``typing.Type[int]``'s is ``type``)."""
    import typing

    origin = typing.get_origin(tp)
    if is_metaclass(origin):
        raise TypeError(
            f"the origin of {tp!r} is the metaclass {origin.__name__!r}, which restricted "
            "mode does not hand out: it makes classes of any namespace"
        )
    return origin


def get_args(tp: Any) -> Any:
    """``typing.get_args``, with no metaclass among them."""
    import typing

    args = typing.get_args(tp)
    for arg in args:
        if is_metaclass(arg):
            raise TypeError(
                f"an argument of {tp!r} is the metaclass {arg.__name__!r}, which restricted "
                "mode does not hand out: it makes classes of any namespace"
            )
    return args


def write_guards(
    program_module: str,
) -> tuple[Callable[[Any], Any], Callable[[Any, str, Any], None], Callable[[Any, str], None]]:
    """The program's ``_write_`` guard, ``setattr`` and ``delattr``."""
    from RestrictedPython.Guards import full_write_guard

    def write_guard(ob: Any) -> Any:
        # Objects of classes the program defined itself may have attributes set. Anything
        # else goes through RestrictedPython's guard, but not past it on the object's own
        # say (a ``_guarded_writes`` attribute): lists and dicts only.
        if getattr(type(ob), "__module__", None) == program_module:
            return ob
        if type(ob) in (dict, list):
            return ob
        wrapper = full_write_guard(ob)
        if wrapper is ob:
            raise TypeError(
                f"restricted mode writes no attribute or item of a {type(ob).__name__} object"
            )
        return wrapper

    def checked_name(name: object) -> str:
        # Exactly str: a subclass of the program's answers startswith as it likes.
        if type(name) is not str:
            raise TypeError(f"an attribute name must be a str, not {type(name).__name__}")
        if name.startswith("_"):
            raise AttributeError(
                f"{name!r} starts with '_', which restricted mode does not let a program "
                "write or delete"
            )
        return name

    def guarded_setattr(ob: Any, name: str, value: Any) -> None:
        setattr(write_guard(ob), checked_name(name), value)

    def guarded_delattr(ob: Any, name: str) -> None:
        delattr(write_guard(ob), checked_name(name))

    return write_guard, guarded_setattr, guarded_delattr


__all__ = [
    "CLASS_BODY_NAMES",
    "build_class",
    "check_base",
    "get_args",
    "get_origin",
    "is_metaclass",
    "trusted_metaclasses",
    "write_guards",
]
