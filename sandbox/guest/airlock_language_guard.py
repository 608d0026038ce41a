"""What a ``restricted`` program may not hold, and the guards that check every value it reads.

The attribute, item, iteration and import guards of ``airlock_language`` ask :func:`refusal`
of each value they hand over (and of the object an attribute is read from). Refused: a module
the program could not import itself (allowed modules' submodules only as
:data:`SUBMODULES` lists them: ``asyncio.format_helpers`` leads to ``traceback`` and
``linecache``), a frame, code or traceback object, a module's namespace (its globals, whose
``__builtins__`` are the real ones), and the standard library's callables that get around the
guards (:data:`_REFUSED`): string evaluators, functions that read attributes by names the
caller chooses (``functools.update_wrapper``), ``str.format`` on a program's text, the
frames of a task, ``traceback``/``linecache``, which read any file, and the event loop's
methods that take a descriptor or socket (the bridge's among them), its exception handlers
(the default one formats the tracebacks a context names, a file's lines among them), and
``type.mro``, whose bases include ``enum.Enum``. Refused too: a metaclass, and a class whose
metaclass's call can make a class (an enum class without members: its functional API); called,
either makes a class of any namespace. ``dataclasses.dataclass``, ``make_dataclass``,
``typing.get_origin`` and ``get_args`` come as checked substitutes instead (:func:`substitute`,
``airlock_language_dataclasses``, ``airlock_language_classes``).

Standard library only. Nothing here imports a module: a refused object is looked up only in
the modules already loaded, so the table follows ``sys.modules`` (it is built again when that
loads or replaces one of the modules it reads), and a runner pays for no module its programs
do not use.
"""

from __future__ import annotations

import sys
import types

TYPE_CHECKING = False  # typing's, which the guest does not import (see airlock.sandbox.guest)
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from typing import Any

    from airlock.sandbox.guest.airlock_language_classes import get_args, get_origin
    from airlock.sandbox.guest.airlock_language_dataclasses import dataclass, make_dataclass
else:  # in the image, the guest's modules sit side by side on the runner's path
    from airlock_language_classes import get_args, get_origin
    from airlock_language_dataclasses import dataclass, make_dataclass

SUBMODULES = frozenset({"collections.abc", "json.decoder", "json.encoder", "json.scanner"})
"""Submodules a program may hold when it may import their top-level module. Any other module
only when the profile's ``allowed_imports`` names it (``xml.etree`` as well as ``xml``)."""

_EVALUATES = "evaluates strings outside restricted mode's guards"
_NAMES = "reads or writes attributes by names the program chooses, past the attribute guard"
_FORMATS = "formats the program's text by reading attributes past the attribute guard"
_FRAMES = "hands out the runner's frames"
_FILES = "reads any file and the runner's frames"
_PROCESSES = "starts processes, which restricted mode does not"
_DESCRIPTORS = "uses descriptors, sockets or signals the program names (the runner's bridge)"
_BASES = "hands out a class's bases, among them classes restricted mode does not hand out"
_CONTEXTS = "hands a program's handler the loop's contexts, past the guards"
_LOOP_METHODS = (
    # Each takes a descriptor, a socket or an object with fileno(): the bridge's is 3. A
    # container has no network, so the ones that open connections lose nothing either.
    *("connect_read_pipe", "connect_write_pipe", "connect_accepted_socket", "sendfile"),
    *("add_reader", "add_writer", "remove_reader", "remove_writer"),
    *("create_connection", "create_server", "create_datagram_endpoint", "start_tls"),
    *("create_unix_connection", "create_unix_server", "add_signal_handler"),
    *("remove_signal_handler", "sock_recv", "sock_recv_into", "sock_recvfrom"),
    *("sock_recvfrom_into", "sock_sendall", "sock_sendto", "sock_connect", "sock_accept"),
    "sock_sendfile",
)

_REFUSED: tuple[tuple[str, str, str], ...] = (
    # (module, attribute path, why): looked up only once the module is loaded.
    ("typing", "get_type_hints", _EVALUATES),  # string annotations, with the real builtins
    ("typing", "ForwardRef", _EVALUATES),
    ("functools", "singledispatch", _EVALUATES),  # register() calls get_type_hints
    ("functools", "singledispatchmethod", _EVALUATES),
    ("functools", "update_wrapper", _NAMES),  # updated=('__globals__',) copies a module's
    ("functools", "wraps", _NAMES),
    ("operator", "attrgetter", _NAMES),
    ("operator", "methodcaller", _NAMES),
    ("builtins", "getattr", _NAMES),  # the real ones; a program's own are guarded
    ("builtins", "setattr", _NAMES),
    ("builtins", "delattr", _NAMES),
    ("builtins", "vars", _NAMES),
    ("builtins", "eval", _EVALUATES),
    ("builtins", "exec", _EVALUATES),
    ("builtins", "compile", _EVALUATES),
    ("builtins", "__import__", _EVALUATES),
    ("builtins", "open", _FILES),
    ("builtins", "type.mro", _BASES),  # enum.Enum, say: see refusal()
    ("builtins", "str.format", _FORMATS),
    ("builtins", "str.format_map", _FORMATS),
    ("collections", "UserString.format", _FORMATS),
    ("collections", "UserString.format_map", _FORMATS),
    ("string", "Formatter", _FORMATS),
    ("asyncio", "create_subprocess_exec", _PROCESSES),  # the second seccomp layer refuses
    ("asyncio", "create_subprocess_shell", _PROCESSES),  # fork too; this says so first
    ("asyncio", "BaseEventLoop.subprocess_exec", _PROCESSES),
    ("asyncio", "BaseEventLoop.subprocess_shell", _PROCESSES),
    ("asyncio", "Task.get_stack", _FRAMES),
    ("asyncio", "Task.print_stack", _FRAMES),
    ("traceback", "StackSummary", _FILES),
    ("traceback", "FrameSummary", _FILES),
    ("traceback", "TracebackException", _FILES),
    ("traceback", "extract_stack", _FILES),
    ("traceback", "extract_tb", _FILES),
    ("traceback", "format_stack", _FILES),
    ("traceback", "print_stack", _FILES),
    ("traceback", "walk_stack", _FILES),
    ("traceback", "walk_tb", _FILES),
    ("linecache", "getline", _FILES),
    ("linecache", "getlines", _FILES),
    ("linecache", "updatecache", _FILES),
    ("linecache", "lazycache", _FILES),
    ("linecache", "checkcache", _FILES),
    ("asyncio", "open_connection", _DESCRIPTORS),  # call the loop's methods with sock=
    ("asyncio", "start_server", _DESCRIPTORS),
    ("asyncio", "open_unix_connection", _DESCRIPTORS),
    ("asyncio", "start_unix_server", _DESCRIPTORS),
    # The running loop is a SelectorEventLoop; a method is the function of the class that
    # defines it, which one of these two names.
    *(
        ("asyncio", f"{loop}.{method}", reason)
        for loop in ("BaseEventLoop", "SelectorEventLoop")
        for method, reason in (
            *((method, _DESCRIPTORS) for method in _LOOP_METHODS),
            # A context's source_traceback and handle_traceback are formatted with linecache.
            ("default_exception_handler", _FILES),
            ("call_exception_handler", _FILES),
            ("set_exception_handler", _CONTEXTS),
        )
    ),
)
_REFUSED_INSTANCES = (("traceback", "StackSummary"), ("traceback", "FrameSummary"))
_HIDDEN_TYPES = (types.FrameType, types.CodeType, types.TracebackType)
_PLAIN = frozenset({str, int, float, bool, complex, bytes, list, tuple, set, type(None)})
"""Types whose values need no look-up (what a container holds is checked when read)."""


_STAND_INS = (
    ("dataclasses", "dataclass", dataclass),
    ("dataclasses", "make_dataclass", make_dataclass),
    ("typing", "get_origin", get_origin),
    ("typing", "get_args", get_args),
)
_MODULES = tuple(sorted({name for name, _, _ in (*_REFUSED, *_STAND_INS)}))
"""The modules the table is read from: it is built again when any of them is another."""


def _loaded() -> tuple[object, ...]:
    return tuple(map(sys.modules.get, _MODULES))


class _Table:
    """:data:`_REFUSED` by id, for the modules loaded when it was built."""

    def __init__(self) -> None:
        self.built_for = _loaded()
        self.why: dict[int, str] = {}
        self.held: list[object] = []  # keeps the ids theirs
        for module_name, path, reason in _REFUSED:
            value: object = sys.modules.get(module_name)
            for part in path.split(".") if value is not None else ():
                value = getattr(value, part, None)
            if value is not None:
                self.why[id(value)] = reason
                self.held.append(value)
        self.instances = tuple(
            cls
            for module_name, name in _REFUSED_INSTANCES
            if isinstance(cls := getattr(sys.modules.get(module_name), name, None), type)
        )
        self.stand_ins: dict[int, object] = {}
        for module_name, name, stand_in in _STAND_INS:
            original = getattr(sys.modules.get(module_name), name, None)
            if original is not None:
                self.stand_ins[id(original)] = stand_in
                self.held.append(original)


_current: _Table | None = None


def _table() -> _Table:
    global _current
    # By identity: a module removed and another loaded leaves len(sys.modules) as it was.
    loaded = _loaded()
    if _current is None or any(
        now is not then for now, then in zip(loaded, _current.built_for, strict=True)
    ):
        _current = _Table()
    return _current


def module_allowed(name: str, allowed_imports: frozenset[str]) -> bool:
    """Whether a restricted program may import or hold the module called ``name``."""
    return name in allowed_imports or (
        name in SUBMODULES and name.partition(".")[0] in allowed_imports
    )


def _unbound(value: object) -> object:
    """The function behind a bound method, which the table holds."""
    if type(value) is types.MethodType:
        return value.__func__
    if type(value) is types.BuiltinMethodType:
        owner = value.__self__
        if owner is not None and not isinstance(owner, types.ModuleType):
            return getattr(type(owner), value.__name__, value)
    return value


def _is_namespace(value: dict[Any, Any]) -> bool:
    if "__builtins__" in value:
        return True
    name = value.get("__name__")
    module = sys.modules.get(name) if type(name) is str else None
    return module is not None and getattr(module, "__dict__", None) is value


def _looks_members_up(cls: type) -> bool:
    """Whether calling ``cls`` only looks one of its members up: an enum class with members.

    ``enum.EnumType.__call__`` with names makes a class (the functional API) of any namespace:
    ``Enum('X', [('__reduce_ex__', f)])``. Of a class with members it refuses ("cannot
    extend"), so ``re.RegexFlag(2)`` stays a look-up; ``enum.Enum`` and its kin have none."""
    meta = getattr(sys.modules.get("enum"), "EnumType", None)
    return (
        meta is not None
        and type(cls).__call__ is meta.__call__
        and bool(type.__getattribute__(cls, "_member_names_"))
    )


def refusal(value: object, allowed_imports: frozenset[str]) -> str | None:
    """Why a restricted program may not hold ``value``, or ``None`` when it may."""
    kind = type(value)
    if kind in _PLAIN:
        return None
    if kind is dict:
        if _is_namespace(value):  # type: ignore[arg-type]  # kind is dict
            return "a module's namespace (its globals), which holds the real builtins"
        return None
    if isinstance(value, types.ModuleType):
        name = str(getattr(value, "__name__", "?"))
        if not module_allowed(name, allowed_imports):
            return f"the module {name!r}, which restricted mode does not import"
        return None
    if isinstance(value, _HIDDEN_TYPES):
        return f"a {kind.__name__} object, which shows the runner's internals"
    if isinstance(value, type):
        if issubclass(value, type):
            # Called, a metaclass makes a class of any namespace: dunders and names no class
            # statement could hold, which the standard library reads (copy, dataclasses).
            return f"the metaclass {value.__name__!r}, which makes classes of any namespace"
        if type(value).__call__ is not type.__call__ and not _looks_members_up(value):
            return (
                f"the class {value.__name__!r}, which called can make a class of any "
                f"namespace (its metaclass {type(value).__name__!r} does)"
            )
    table = _table()
    why = table.why.get(id(_unbound(value)))
    if why is not None:
        return f"{getattr(value, '__qualname__', kind.__name__)}, which {why}"
    if table.instances and isinstance(value, table.instances):
        return f"a {kind.__name__} object, which {_FILES}"
    return None


def substitute(value: object) -> object:
    """What a program gets in place of ``value``: itself, or a checked stand-in."""
    return _table().stand_ins.get(id(value), value)


def item_guard(allowed_imports: frozenset[str]) -> Callable[[Any, Any], Any]:
    """RestrictedPython's ``_getitem_``: ``ob[index]``, unless :func:`refusal` refuses it."""

    def guarded_getitem(ob: Any, index: Any) -> Any:
        value = ob[index]
        if type(value) not in _PLAIN:
            _refuse_item(value, ob, allowed_imports)
        return value

    return guarded_getitem


def iteration_guard(allowed_imports: frozenset[str]) -> Callable[[Any], Iterator[Any]]:
    """RestrictedPython's ``_getiter_`` (``for``, comprehensions, unpacking): ``iter(ob)``,
    each item past :func:`refusal`."""

    def checked(ob: Any, iterator: Iterator[Any]) -> Iterator[Any]:
        for item in iterator:
            if type(item) not in _PLAIN:
                _refuse_item(item, ob, allowed_imports)
            yield item

    def guarded_iter(ob: Any) -> Iterator[Any]:
        return checked(ob, iter(ob))  # iter() now: a non-iterable fails where it stands

    return guarded_iter


def _refuse_item(value: object, ob: object, allowed_imports: frozenset[str]) -> None:
    refused = refusal(value, allowed_imports)
    if refused:
        raise LookupError(
            f"an item of a {type(ob).__name__} is {refused}; restricted mode does not hand it out"
        )


def reading_builtins(guarded_getattr: Callable[..., Any]) -> dict[str, Any]:
    """What a restricted program gets beside RestrictedPython's builtins to read attributes
    and handle asyncio's errors: ``getattr`` (``guarded_getattr``), a ``hasattr`` that asks
    it, and the exceptions asyncio raises (``asyncio.timeout`` raises ``TimeoutError``, a
    ``TaskGroup`` an ``ExceptionGroup``); plain classes, which make no class and reach no
    object. ``type`` is not among them (called with three arguments it makes a class), and
    ``except*`` stays refused (RestrictedPython refuses ``TryStar``): a group's errors are
    read from its ``exceptions``."""

    def guarded_hasattr(ob: Any, name: str) -> bool:
        # Answers False, as Python's hasattr does, for any name the guarded getattr refuses
        # (a "_" name, a module the program cannot import): it tells no more than reading
        # the attribute would. Only AttributeError means "no": others raise, as in Python.
        try:
            guarded_getattr(ob, name)
        except AttributeError:
            return False
        return True

    return {
        "getattr": guarded_getattr,
        "hasattr": guarded_hasattr,
        **{kind.__name__: kind for kind in (TimeoutError, ExceptionGroup, BaseExceptionGroup)},
    }


def evaluators() -> tuple[object, ...]:
    """Standard library callables that evaluate strings as Python outside the guards."""
    import functools
    import typing

    return (
        typing.get_type_hints,
        typing.ForwardRef,
        functools.singledispatch,
        functools.singledispatchmethod,
    )


__all__ = [
    "SUBMODULES",
    "dataclass",
    "evaluators",
    "item_guard",
    "iteration_guard",
    "make_dataclass",
    "module_allowed",
    "reading_builtins",
    "refusal",
    "substitute",
]
