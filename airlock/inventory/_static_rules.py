"""The lists the static check of programs judges by: what it cannot follow, by name.

Each list is the reason a construct makes a program *unresolved*: a way to reach the
``tools`` namespace (or the bridge behind it) by something other than its name, or to run
code the check never sees. The check does not count on restricted mode's guards, so every
list holds in full mode too; tests are parametrized over these lists, so adding an entry
adds a test. They name the routes known in the standard library of the image's Python; a
route found missing is added here, with the program that takes it in the evasion table
(``tests/airlock/inventory/test_static_evasions.py``).
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "DYNAMIC_CALLS",
    "ESCAPE_MODULES",
    "INTROSPECTION_ATTRIBUTES",
    "MATCH_PROTOCOL",
    "NAMEDTUPLE_API",
    "REFLECTIVE_NAMES",
    "attribute_problem",
]

DYNAMIC_CALLS: Final = frozenset(
    {
        "__import__", "breakpoint", "compile", "eval", "exec", "getattr", "globals", "locals",
        "open", "vars",
    }
)  # fmt: skip
"""Built-ins that run code from text, hand out a namespace, fetch an attribute by a computed
name, or open a file descriptor (the bridge's): any use is unresolved, except
``getattr(obj, "literal")`` with a harmless name and ``open("literal path")``."""

ESCAPE_MODULES: Final = frozenset(
    {
        # reach the bridge socket, the runner, frames or raw memory without the namespace
        "_io", "_socket", "airlock_bridge", "airlock_connection", "airlock_frames",
        "airlock_runner", "builtins", "codecs", "ctypes",
        "gc", "importlib", "inspect", "io", "os", "posix", "pty", "socket", "subprocess", "sys",
        "traceback",
        # run code from bytes or text, or import and call by dotted name
        "_pickle", "bdb", "cProfile", "code", "codeop", "concurrent", "copyreg", "doctest",
        "logging", "marshal", "multiprocessing", "pdb", "pickle", "pkgutil", "profile",
        "pydoc", "runpy", "shelve", "timeit", "trace", "types", "unittest", "zipimport",
    }
)  # fmt: skip
"""Modules (and their submodules) whose import is unresolved; as an attribute name
(``asyncio.base_events.sys``) or an imported name (``from x import os``) too. Every private
module (``_posixsubprocess``, ...) is unresolved as well."""

INTROSPECTION_ATTRIBUTES: Final = frozenset(
    {
        "ag_await", "ag_code", "ag_frame", "cell_contents", "co_code", "co_consts", "co_names",
        "cr_await", "cr_code", "cr_frame", "f_back", "f_builtins", "f_code", "f_globals",
        "f_locals", "f_trace", "gi_code", "gi_frame", "gi_yieldfrom", "setprofile", "settrace",
        "tb_frame", "tb_next",
    }
)  # fmt: skip
"""Attributes of frames, code objects, generators, coroutines and tracebacks: a frame's
globals hold the namespace whatever the program calls it."""

REFLECTIVE_NAMES: Final = frozenset(
    {
        "ForwardRef", "Formatter", "attrgetter", "evaluate_forward_ref", "get_annotations",
        "get_field", "get_type_hints", "methodcaller", "resolve_name",
    }
)  # fmt: skip
"""Library functions that fetch attributes by dotted text (``operator.attrgetter``,
``string.Formatter.get_field``) or evaluate text as code (``typing.get_type_hints`` on
string annotations the program built at run time): unresolved as a name, an attribute or an
imported name."""

MATCH_PROTOCOL: Final = frozenset(
    {"__instancecheck__", "__match_args__", "__subclasscheck__", "__subclasshook__"}
)
"""Names a program may not bind: with them a class decides which attributes a class pattern
reads (``__match_args__``, by text) and which objects it matches (any object, the namespace
too)."""

NAMEDTUPLE_API: Final = frozenset({"_asdict", "_field_defaults", "_fields", "_make", "_replace"})
"""The public methods of named tuples, the only ``_`` attributes the check lets through."""


def attribute_problem(name: str) -> str | None:
    """Why reading the attribute ``name`` of any object is a route the check cannot follow."""
    if name.startswith("_") and name not in NAMEDTUPLE_API:
        return f"the private attribute {name!r}, which the check cannot follow"
    if name in INTROSPECTION_ATTRIBUTES:
        return f"the frame or code attribute {name!r}, which holds every global"
    if name in ESCAPE_MODULES:
        return f"the module {name!r}, which can reach the bridge without the namespace"
    if name in REFLECTIVE_NAMES:
        return f"{name!r}, which fetches attributes or runs code from text"
    return None
