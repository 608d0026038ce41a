"""The stubs of a registry's tools, made once for each principal's scopes and names asked
for, and kept while the registry has the same tools.

A ``run`` frame carries its program's stubs on every run, and so does the model's
description of ``execute_code``: made anew each time (a deep copy of each tool's schema, its
docstring and signature), two tools' took 180 to 350 us of the event loop a run. A registry
only ever gains tools (a name cannot be registered twice), so the count of its tools tells
whether what was kept still holds; a stub is frozen, so the runs that ask for the same ones
share them.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Collection, Hashable
from typing import TYPE_CHECKING, Final

from airlock.tools import Registry

if TYPE_CHECKING:
    from airlock.bridge._api import ToolStub

__all__ = ["KEPT_PER_REGISTRY", "kept_count", "remembered"]

KEPT_PER_REGISTRY: Final = 256
"""Sets of stubs kept for one registry; past it, the oldest is dropped (each principal's
scopes and each narrowing by names are a set of their own)."""

_Kept = dict[Hashable, tuple["ToolStub", ...]]
_kept: weakref.WeakKeyDictionary[Registry, tuple[int, _Kept]] = weakref.WeakKeyDictionary()
_lock: Final = threading.Lock()


def remembered(
    registry: Registry,
    key: tuple[bool, frozenset[str], Collection[str] | None],
    make: Callable[[], list[ToolStub]],
) -> list[ToolStub]:
    """What ``make`` returns for ``key`` (proposals or not, the principal's scopes, the
    names asked for), made once while ``registry`` has the same tools."""
    proposal, scopes, names = key
    kept_key = (proposal, scopes, None if names is None else frozenset(names))
    count = len(registry.specs())
    with _lock:
        known = _kept.get(registry)
        if known is None or known[0] != count:
            known = _kept[registry] = (count, {})
        stubs = known[1].get(kept_key)
    if stubs is None:
        stubs = tuple(make())
        with _lock:
            kept = known[1]
            if len(kept) >= KEPT_PER_REGISTRY:
                kept.pop(next(iter(kept)))  # the oldest
            kept[kept_key] = stubs
    return list(stubs)


def kept_count(registry: Registry | None = None) -> int:
    """How many sets of stubs are kept for ``registry``; without one, for how many
    registries any are (a registry no longer used loses its own)."""
    with _lock:
        if registry is None:
            return len(_kept)
        known = _kept.get(registry)
        return 0 if known is None else len(known[1])
