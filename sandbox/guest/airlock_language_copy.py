"""``copy``'s reconstruction of an object, as a runner that runs ``restricted`` programs lets it.

``copy.copy`` and ``copy.deepcopy`` (and what calls them: ``dataclasses.asdict``, ``astuple``,
``collections.UserDict.copy``) rebuild an object from what its ``__reduce_ex__`` returns: a
callable, its arguments, and state and items that copy then writes onto whatever the callable
returned, names unchecked (``__dict__.update``, ``setattr``, ``append``, ``[key] =``). The
standard library's reducers return a new object of the reduced one's type. A reducer of a
program's making would pick any object it holds instead: a module (``dataclasses._create_fn``
replaced, and so the real builtins), a class (its ``__module__``), an instance of another
class. The guards let a program make no class with a reducer (``airlock_language_classes``,
``airlock_language_guard``); behind them, :func:`guard_copy` has copy write state and items
only onto an object of the reduced one's type that is neither a module nor a class.

Standard library only; shipped in the image next to the runner.
"""

from __future__ import annotations

import types

TYPE_CHECKING = False  # typing's, which the guest does not import (see airlock.sandbox.guest)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any


def _check_target(original: object, target: object) -> None:
    kind = type(original)
    made = type(target)
    # By the MRO: isinstance asks the class (an ABC answers for what it registered).
    bases = type.__getattribute__(made, "__mro__")
    if issubclass(made, (type, types.ModuleType)) or not any(base is kind for base in bases):
        what = made.__name__
        raise TypeError(
            f"copy would write the state of a {kind.__name__!r} object onto a {what!r} "
            f"object its reducer returned, not a new {kind.__name__!r}: restricted mode "
            "lets copy write state only onto a copy of the original's type"
        )


def _checked(reconstruct: Callable[..., Any]) -> Callable[..., Any]:
    def checked_reconstruct(x: Any, memo: Any, func: Any, args: Any, *rest: Any, **kw: Any) -> Any:
        # rest: state, listiter, dictiter, as copy passes them from the reducer's tuple.
        if all(part is None for part in rest[:3]):
            return reconstruct(x, memo, func, args, *rest, **kw)

        def made(*made_args: Any) -> Any:
            target = func(*made_args)
            _check_target(x, target)  # before copy writes anything onto it
            return target

        return reconstruct(x, memo, made, args, *rest, **kw)

    checked_reconstruct.__wrapped__ = reconstruct  # type: ignore[attr-defined]
    return checked_reconstruct


def guard_copy() -> None:
    """Have ``copy`` write a reduced object's state and items only onto an object of its type
    (once per loaded ``copy`` module: a program's reducer chooses that object).

    For the whole process: a standard library reducer returns an object of its type, so a
    ``full`` program's copies are as they were."""
    import copy

    namespace = vars(copy)  # _reconstruct is private: typeshed does not declare it
    reconstruct = namespace["_reconstruct"]
    if getattr(reconstruct, "__wrapped__", None) is None:
        namespace["_reconstruct"] = _checked(reconstruct)


__all__ = ["guard_copy"]
