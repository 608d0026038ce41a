"""Find a registry from ``MODULE:OBJECT``, the way ASGI servers find an application."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from typing import TypeGuard, TypeVar

from airlock.inventory._build import ToolCatalog
from airlock.inventory._errors import RegistryRefError
from airlock.tools import Registry, ToolSpec

__all__ = ["load_registry", "load_tool_registry"]

_Found = TypeVar("_Found")


def load_registry(ref: str) -> ToolCatalog:
    """Import ``MODULE:OBJECT`` (``OBJECT`` may be dotted, or a function returning a registry).

    The current directory is importable, as it is for ``python -m``, so
    ``--registry myapp.tools:registry`` works from a project's root. Anything with the
    registry's ``specs`` and ``visible`` will do: the inventory only reads it.

    Raises:
        RegistryRefError: the text is malformed, the module does not import (or raises while
            it is imported), the object is missing, raises when looked up, read or called, is
            not a registry, or its ``specs()`` raises or gives something else than tool specs.
    """
    catalog = _load(ref, _is_catalog, "not a tools.Registry")
    # specs() is the user's code too, read by every command after this: what it raises is
    # theirs to fix, reported here rather than as a traceback (exit 1, "the lock grew").
    attribute = ref.partition(":")[2]
    try:
        specs = tuple(catalog.specs())
    except (Exception, SystemExit) as exc:
        raise RegistryRefError(ref, f"calling {attribute}.specs() {_raised(exc)}") from exc
    stray = next((spec for spec in specs if not isinstance(spec, ToolSpec)), None)
    if stray is not None:
        kind = type(stray).__name__
        raise RegistryRefError(ref, f"{attribute}.specs() gave a {kind}, not a tools.ToolSpec")
    return catalog


def load_tool_registry(ref: str) -> Registry:
    """Like :func:`load_registry`, for commands that run tools (``reconcile``, ``serve``):
    the object must be an :class:`airlock.tools.Registry` (or a function returning one).

    Raises:
        RegistryRefError: as for :func:`load_registry`, and when the object is a registry
            look-alike rather than an :class:`airlock.tools.Registry`.
    """
    return _load(ref, _is_registry, "not a tools.Registry, which can run its tools")


def _load(ref: str, accepts: Callable[[object], TypeGuard[_Found]], refusal: str) -> _Found:
    module_name, sep, attribute = ref.partition(":")
    if not sep or not module_name or not attribute:
        raise RegistryRefError(ref, "expected one ':' between a module and an object")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    # The module is the user's code: whatever it raises (sys.exit too) is reported as theirs,
    # never as a traceback whose exit status 1 would read as "the lock grew".
    try:
        target: object = importlib.import_module(module_name)
    except ImportError as exc:
        raise RegistryRefError(ref, f"cannot import {module_name!r}: {exc}") from exc
    except (Exception, SystemExit) as exc:
        raise RegistryRefError(ref, f"importing {module_name!r} {_raised(exc)}") from exc
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise RegistryRefError(ref, f"{module_name!r} has no {attribute!r}") from None
        except (Exception, SystemExit) as exc:
            raise RegistryRefError(ref, f"looking up {attribute!r} {_raised(exc)}") from exc
    if not _probe(target, ref, accepts) and callable(target):
        try:
            target = target()
        except (Exception, SystemExit) as exc:
            raise RegistryRefError(ref, f"calling {attribute!r} {_raised(exc)}") from exc
    if not _probe(target, ref, accepts):
        raise RegistryRefError(ref, f"{attribute!r} is a {type(target).__name__}, {refusal}")
    return target


def _probe(
    target: object, ref: str, accepts: Callable[[object], TypeGuard[_Found]]
) -> TypeGuard[_Found]:
    # Reading the object's attributes runs its code (__getattr__, a property), which may raise
    # anything, not only the AttributeError getattr's default stands in for.
    try:
        return accepts(target)
    except (Exception, SystemExit) as exc:
        attribute = ref.partition(":")[2]
        raise RegistryRefError(ref, f"reading {attribute!r} {_raised(exc)}") from exc


def _raised(exc: BaseException) -> str:
    return f"raised {type(exc).__name__}: {exc}"


def _is_catalog(target: object) -> TypeGuard[ToolCatalog]:
    # A class has the methods too, unbound: it is a factory to call, not a registry.
    return (
        not isinstance(target, type)
        and callable(getattr(target, "specs", None))
        and callable(getattr(target, "visible", None))
    )


def _is_registry(target: object) -> TypeGuard[Registry]:
    return isinstance(target, Registry)
