"""A kept session's module names: what ``import`` bound, written down and imported again.

Standard library only. A program's top-level name bound to a module, or to a class or function
of one (``from MODULE import NAME``), is kept as an entry, ``MODULE`` or ``MODULE:QUALNAME``
(:func:`entry`), and the next program imports it again through its own import rules
(:func:`imported`), when its process has that module loaded already (:func:`loaded`). Every
process of a kept container runs as the same user, so the file of names may be a program's
own work: reading an entry back accepts only what :func:`entry` writes, never a path through
another module (``csv:re.enum.sys`` is the real ``sys``) nor a private name
(``statistics:random._os``), and looks each attribute up where it is stored (:func:`stored`):
no ``__getattr__`` runs (``concurrent.futures``'s imports ``multiprocessing`` for
``ProcessPoolExecutor``).
"""

from __future__ import annotations

import inspect
import sys
import types

TYPE_CHECKING = False  # typing's, which the guest does not import (see airlock.sandbox.guest)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any


def entry(value: object) -> str | None:
    """How the next program imports ``value`` again, or ``None`` when it cannot: a module
    only as the name ``sys.modules`` holds it under (a made-up one would make the next
    program import, and run, whatever module it names), a function or class of one only as
    importing its qualified name gives it."""
    if isinstance(value, types.ModuleType):
        name = vars(value).get("__name__")
        return name if isinstance(name, str) and sys.modules.get(name) is value else None
    if not isinstance(value, (type, types.FunctionType, types.BuiltinFunctionType)):
        return None
    module = getattr(value, "__module__", None)
    qualname = getattr(value, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str) or "<" in qualname:
        return None
    if module.startswith("airlock") or module == "builtins":
        return None
    found: object = sys.modules.get(module)
    for part in qualname.split("."):
        try:
            found = stored(found, part)
        except AttributeError:
            return None
    return f"{module}:{qualname}" if found is value else None


def stored(value: object, name: str) -> object:
    """The attribute ``name`` of ``value`` as its dictionary holds it (a module's, a class's or
    one of its bases'), running none of its code: no ``__getattr__`` (a module's may import,
    and so run, another module), no property. A static method is its function.

    Raises:
        AttributeError: it holds no such attribute.
    """
    found = inspect.getattr_static(value, name)
    return found.__func__ if isinstance(found, staticmethod) else found


def loaded(where: str) -> bool:
    """Whether the module of the entry ``where`` is loaded in this process already, so that
    importing it again runs nothing. The next program's process is forked from one that
    imported what programs import most; a module it has not loaded would run its own code
    there when imported (``this`` prints the Zen on the next program's stdout)."""
    return where.partition(":")[0] in sys.modules


def imported(where: str, importer: Callable[..., Any], namespace: dict[str, Any]) -> object:
    """What the entry ``where`` names, imported through ``importer`` (the next program's
    ``__import__``, with ``namespace`` as its globals).

    Raises:
        ImportError: ``where`` is not an entry :func:`entry` writes: a private name, a path
            that leads through anything but classes, or a value that is not the class or
            function of that module and qualified name.
    """
    module, _, attribute = where.partition(":")
    parts = attribute.split(".") if attribute else []
    if any(not part or part.startswith("_") for part in parts):
        raise ImportError(f"{where!r} names a private attribute")
    value: object = importer(module, namespace, None, ["__name__"], 0)
    if not isinstance(value, types.ModuleType):
        raise ImportError(f"{module!r} is not a module")
    for step, part in enumerate(parts):
        try:
            value = stored(value, part)
        except AttributeError:
            raise ImportError(
                f"{where!r}: {part!r} is not an attribute where it is stored"
            ) from None
        # A qualified name leads through classes only, never through another module.
        if step < len(parts) - 1 and not isinstance(value, type):
            raise ImportError(f"{where!r} leads through a {type(value).__name__}")
    if parts and entry(value) != where:
        raise ImportError(f"{where!r} is not a class or function of {module!r}")
    return value


__all__ = ["entry", "imported", "loaded", "stored"]
