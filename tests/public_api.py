"""The check every package's public-API test makes: ``__all__`` is exactly the pinned list,
in the order ``ruff`` keeps it, and every name in it resolves to something the package binds.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["assert_public_api", "export_order"]


def export_order(name: str) -> tuple[int, str]:
    """Where ``name`` sorts in an ``__all__``: constants, then classes, then the rest."""
    if name.isupper():
        return 0, name
    if name[:1].isupper():
        return 1, name
    return 2, name


def assert_public_api(module: ModuleType | str, pinned: list[str]) -> None:
    """``module.__all__`` equals ``pinned`` (a literal list kept in the test), is sorted and
    unique, and ``from module import *`` binds exactly those names, none of them ``None``."""
    found = importlib.import_module(module) if isinstance(module, str) else module
    names = list(found.__all__)
    assert names == pinned, {
        "added": sorted(set(names) - set(pinned)),
        "removed": sorted(set(pinned) - set(names)),
    }
    assert pinned == sorted(pinned, key=export_order), "keep __all__ sorted"
    assert len(set(pinned)) == len(pinned)
    star: dict[str, object] = {}
    exec(f"from {found.__name__} import *", star)
    star.pop("__builtins__", None)
    assert sorted(star) == sorted(pinned)
    for name in pinned:
        value = star[name]
        assert value is not None, name
        assert vars(found)[name] is value, name  # bound in the package, lazily or not
