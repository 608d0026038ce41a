"""Changes a program makes to a tool object, the ``tools`` namespace or ``tools.propose``.

A tool function sends the name it holds, not the one the program took it by: after
``f = tools.a; f.name = "b"``, ``f(...)`` calls ``b``, so the uses the check resolved no
longer say what the program calls. Storing or deleting any attribute of such an object
(``f.x = ...``, ``del tools.x``, ``for f.x in ...``) and ``setattr``/``delattr`` on one are
unresolved. ``vars(f)`` and ``f.__dict__`` already are (:mod:`airlock.inventory._static_rules`).
A ``setattr`` or ``delattr`` taken as a value, or called on arguments the check cannot see
(``setattr(*args)``), may change one of them too. On any other object, one of a computed or
private name may: a tool held where the check cannot follow it (``fs[0]``) keeps the name it
sends in a private attribute (its ``name`` cannot be set).
"""

from __future__ import annotations

import ast
from collections.abc import Collection
from typing import Final

from airlock.inventory._static_rules import attribute_problem

__all__ = ["MUTATING_CALLS", "mutation", "tool_object"]

MUTATING_CALLS: Final = frozenset({"delattr", "setattr"})
_PROPOSE: Final = "propose"


def tool_object(node: ast.AST, *, namespaces: Collection[str], aliases: Collection[str]) -> bool:
    """Whether ``node`` is the namespace, ``tools.propose``, a tool or a proposal: a name bound
    to one, ``tools.NAME``, ``tools.propose.NAME`` or ``getattr(tools, "NAME")``."""
    if isinstance(node, ast.Name):
        return node.id in namespaces or node.id in aliases
    if isinstance(node, ast.Attribute):
        owner = node.value
        if isinstance(owner, ast.Attribute) and owner.attr == _PROPOSE:
            owner = owner.value
        return isinstance(owner, ast.Name) and owner.id in namespaces
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "getattr"
        and bool(node.args)
        and isinstance(node.args[0], ast.Name)
        and node.args[0].id in namespaces
    )


def mutation(
    node: ast.AST,
    parent: ast.AST | None,
    *,
    namespaces: Collection[str],
    aliases: Collection[str],
) -> tuple[ast.AST, str] | None:
    """The construct at ``node`` (whose parent is ``parent``) that changes a tool object, and
    why it is unresolved; ``None`` when it changes none."""
    if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store | ast.Del):
        if tool_object(node.value, namespaces=namespaces, aliases=aliases):
            verb = "deletes" if isinstance(node.ctx, ast.Del) else "assigns"
            return node, (
                f"{verb} the attribute {node.attr!r} of a tool or the namespace: a tool sends "
                "the name it holds, so what it calls cannot be named"
            )
        return None
    if not (
        isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in MUTATING_CALLS
    ):
        return None
    if not (isinstance(parent, ast.Call) and parent.func is node):
        return node, f"{node.id} used as a value can change a tool, so what it calls"
    first = parent.args[0] if parent.args else None
    if first is None or isinstance(first, ast.Starred):
        return parent, f"{node.id}() on arguments the check cannot see can change a tool"
    if tool_object(first, namespaces=namespaces, aliases=aliases):
        return parent, f"{node.id}() on a tool or the namespace changes what it calls"
    # Any object may be a tool held where the check cannot see it (``fs[0]``): the name a
    # tool sends is private, so only a private or computed name can change it.
    named = parent.args[1] if len(parent.args) > 1 else None
    if not (isinstance(named, ast.Constant) and isinstance(named.value, str)):
        return parent, f"{node.id}() of a name the check cannot see can change a tool"
    if attribute_problem(named.value) is not None:
        return parent, f"{node.id}() of the attribute {named.value!r} can change a tool"
    return None
