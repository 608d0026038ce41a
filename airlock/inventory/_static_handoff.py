"""Calls that take the ``tools`` namespace itself as an argument: which of them may.

Code handed the namespace can keep it where the check cannot follow it: ``setattr(box,
"ns", tools)`` stores it on any object, and ``isinstance(tools, C)`` hands it to the
``__instancecheck__`` of ``C``'s metaclass; the program then calls any tool through
``box.ns`` or ``C.ns`` unseen. So the namespace may be an argument only of the few
built-ins below, in the place given, which run none of the program's code with it (each
calls only the namespace's own class, or hands a file ``str()`` of it), and only while the
program binds none of their names (a ``def print(x)`` of its own receives it). Any other
call that takes it is unresolved.
"""

from __future__ import annotations

import ast
import builtins
from typing import Final

__all__ = ["BUILTIN_TYPES", "TRUSTED_CALLS", "bound_names", "handoff"]

_FIRST: Final = frozenset({"delattr", "dir", "getattr", "hasattr", "repr", "setattr", "str"})
"""Built-ins that may take the namespace as their first argument (what ``getattr`` fetches
is judged by the scan; ``setattr``/``delattr`` on it by :mod:`._static_mutation`)."""
_ANY: Final = frozenset({"print"})
_TYPE_CHECKS: Final = frozenset({"isinstance", "issubclass"})
TRUSTED_CALLS: Final = _FIRST | _ANY | _TYPE_CHECKS
"""Every built-in that may take the namespace; none may once the program binds its name."""

BUILTIN_TYPES: Final = frozenset(
    name
    for name, value in vars(builtins).items()
    if type(value) is type and not name.startswith("_")
)
"""Built-in classes whose metaclass is ``type`` itself: ``isinstance(tools, int)`` runs no
``__instancecheck__`` of the program's."""


def handoff(call: ast.Call, argument: ast.expr, *, bound: frozenset[str]) -> str | None:
    """Why passing the namespace as ``argument`` (one of ``call.args``) lets code the check
    cannot see keep it; ``None`` for a built-in that cannot.

    ``bound`` holds every name the program binds (:func:`bound_names`)."""
    func = call.func.id if isinstance(call.func, ast.Name) else None
    if func is None:
        return "the namespace is passed to a call the check cannot see into, which can keep it"
    if func in bound:
        return f"the namespace is passed to {func}(), a name the program binds, which can keep it"
    first = bool(call.args) and call.args[0] is argument
    if func in _ANY or (first and func in _FIRST):
        return None
    if func in _TYPE_CHECKS:
        plain = first and len(call.args) == 2 and not call.keywords
        if plain and _builtin_types(call.args[1], bound):
            return None
        hook = "__instancecheck__" if func == "isinstance" else "__subclasscheck__"
        return (
            f"{func}() hands the namespace to the {hook} of a class the check cannot see, "
            "which can keep it; compare against built-in types only"
        )
    return f"the namespace is passed to {func}(), which can keep it; calls through it are unknown"


def _builtin_types(node: ast.expr, bound: frozenset[str]) -> bool:
    if isinstance(node, ast.Tuple):
        return all(_builtin_types(element, bound) for element in node.elts)
    return isinstance(node, ast.Name) and node.id in BUILTIN_TYPES and node.id not in bound


def bound_names(tree: ast.AST) -> frozenset[str]:
    """Every name the program binds anywhere, in any scope: a built-in it shadows may be code
    of its own."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.alias):
            names.add(node.asname or node.name.split(".", 1)[0])
        elif isinstance(node, ast.MatchMapping) and node.rest is not None:
            names.add(node.rest)
        elif isinstance(name := getattr(node, "name", None), str):
            # def, class, except ... as, match captures (and type parameters, where parsed)
            names.add(name)
    return frozenset(names)
