"""Find a registry from ``MODULE:OBJECT``, the way ASGI servers find an application."""

from __future__ import annotations

import importlib
import os
import sys
from typing import TypeGuard

from airlock.inventory._build import ToolCatalog
from airlock.inventory._errors import RegistryRefError

__all__ = ["load_registry"]


def load_registry(ref: str) -> ToolCatalog:
    """Import ``MODULE:OBJECT`` (``OBJECT`` may be dotted, or a function returning a registry).

    The current directory is importable, as it is for ``python -m``, so
    ``--registry myapp.tools:registry`` works from a project's root.

    Raises:
        RegistryRefError: the text is malformed, the module does not import, the object is
            missing or is not a registry.
    """
    module_name, sep, attribute = ref.partition(":")
    if not sep or not module_name or not attribute:
        raise RegistryRefError(ref, "expected one ':' between a module and an object")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        target: object = importlib.import_module(module_name)
    except ImportError as exc:
        raise RegistryRefError(ref, f"cannot import {module_name!r}: {exc}") from exc
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise RegistryRefError(ref, f"{module_name!r} has no {attribute!r}") from None
    if not _is_catalog(target) and callable(target):
        target = target()
    if not _is_catalog(target):
        raise RegistryRefError(
            ref, f"{attribute!r} is a {type(target).__name__}, not a tools.Registry"
        )
    return target


def _is_catalog(target: object) -> TypeGuard[ToolCatalog]:
    return callable(getattr(target, "specs", None)) and callable(getattr(target, "visible", None))
