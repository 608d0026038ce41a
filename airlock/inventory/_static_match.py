"""Class patterns in ``match``, and the names that drive them.

A class pattern reads attributes of the subject: ``case C(attr=x)`` the attribute it names,
which the scan judges like any other; ``case C(x)`` the one the class's ``__match_args__``
names, as text the check cannot see (``("__globals__",)`` reads a function's globals, the
namespace among them). So a positional sub-pattern is unresolved unless its class is a
built-in type the program does not rebind (``int(x)``, ``str(s)``: the subject itself), and a
program that binds one of :data:`~airlock.inventory._static_rules.MATCH_PROTOCOL` (the text
``__match_args__``, a metaclass's ``__instancecheck__`` that matches any object) is
unresolved wherever it does.
"""

from __future__ import annotations

import ast

from airlock.inventory._static_handoff import BUILTIN_TYPES
from airlock.inventory._static_rules import MATCH_PROTOCOL, attribute_problem

__all__ = ["class_pattern_problems", "protocol_binding"]


def class_pattern_problems(node: ast.MatchClass, *, bound: frozenset[str]) -> list[str]:
    """Why matching ``node`` may read attributes the check cannot name (none: it may not).

    ``bound`` holds every name the program binds (``bound_names``)."""
    problems = []
    for attribute in node.kwd_attrs:
        reason = attribute_problem(attribute)
        if reason is not None:
            problems.append(f"a class pattern reads {reason}")
    cls = node.cls
    builtin = isinstance(cls, ast.Name) and cls.id in BUILTIN_TYPES and cls.id not in bound
    if node.patterns and not builtin:
        problems.append(
            "a positional sub-pattern reads the attribute its class's __match_args__ names, "
            "which the check cannot see; name the attribute (C(attr=x)) instead"
        )
    return problems


def protocol_binding(node: ast.AST) -> str | None:
    """Why ``node`` binding a name makes class patterns unresolvable; ``None`` if it does not."""
    name = _bound_name(node)
    if name not in MATCH_PROTOCOL:
        return None
    return f"binding {name} decides what class patterns read or match, out of the check's sight"


def _bound_name(node: ast.AST) -> str | None:
    # The forms of _static_handoff.bound_names, one node at a time.
    if isinstance(node, ast.Name):
        return None if isinstance(node.ctx, ast.Load) else node.id
    if isinstance(node, ast.arg):
        return node.arg
    if isinstance(node, ast.alias):
        return node.asname or node.name.split(".", 1)[0]
    if isinstance(node, ast.MatchMapping):
        return node.rest
    name = getattr(node, "name", None)
    return name if isinstance(name, str) else None
