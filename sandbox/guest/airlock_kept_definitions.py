"""A kept session's functions: the source of a top-level ``def`` kept, and read back.

Standard library only. A function a program defined by a plain top-level ``def`` is kept as
its source (:func:`definition`: annotations left out, which would otherwise run in the next
program) and defined again in the next program's own namespace. Every process of a kept
container runs as the same user, so the file of names may be a program's own work: a source
read back is defined again only when it is a ``def`` as :func:`definition` keeps it, no longer
than :data:`MAX_DEFINITION_CHARS`, checked before it is parsed, and parsed once
(:func:`restorable`).
"""

from __future__ import annotations

import ast

MAX_DEFINITION_CHARS = 64 * 1024
"""The longest source of a kept function: a longer one is not kept, nor read back (a forged
``def`` of a list of 200,000 zeros took 490 times its size, all the next program's memory,
to check and compile)."""
MAX_DEFINITIONS_CHARS = 1024 * 1024
"""The most source the kept functions may take together; those past it are not kept."""


def _literal(node: ast.expr | None) -> bool:
    if node is None or isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        return isinstance(node.operand, ast.Constant)
    return False


def _plain(node: ast.stmt) -> bool:
    """Whether ``node`` is a ``def`` whose definition runs nothing but its annotations: no
    decorators, no type parameters, no default but a literal."""
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or node.decorator_list:
        return False
    if getattr(node, "type_params", None):  # (Python 3.12's ``def f[T: bound]()``)
        return False
    arguments = node.args
    return all(_literal(d) for d in [*arguments.defaults, *arguments.kw_defaults])


def _arguments(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.arg]:
    arguments = node.args
    every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
    return every + [a for a in (arguments.vararg, arguments.kwarg) if a is not None]


def definition(node: ast.stmt) -> str | None:
    """The source to keep for a top-level ``def`` (annotations left out), or ``None`` when
    defining it again could run code: decorators, type parameters, or a default that is not
    a literal. Reading the source back checks it the same way (:func:`restorable`)."""
    if not _plain(node):
        return None
    assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    return ast.unparse(_without_annotations(node))


def _without_annotations(node: ast.FunctionDef | ast.AsyncFunctionDef) -> ast.stmt:
    copy = ast.parse(ast.unparse(node)).body[0]
    assert isinstance(copy, (ast.FunctionDef, ast.AsyncFunctionDef))
    copy.returns = None
    for argument in _arguments(copy):
        argument.annotation = None
    copy.type_comment = None
    return copy


def restorable(name: str, source: str) -> str | None:
    """``source`` (read back from the file of names, which a program may have written), when
    it is a ``def`` of ``name`` as :func:`definition` keeps it, of at most
    :data:`MAX_DEFINITION_CHARS`; else ``None``. Whatever :func:`definition` leaves out or
    refuses would run in the next program's namespace, ``tools`` and all, when the ``def``
    runs: an annotation, a decorator, a default. Parsed once: the text compiled is the text
    whose tree was checked."""
    if len(source) > MAX_DEFINITION_CHARS:
        return None
    tree = ast.parse(source)
    if len(tree.body) != 1 or getattr(tree.body[0], "name", None) != name:
        return None
    node = tree.body[0]
    if not _plain(node):
        return None
    assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    if node.returns is not None or node.type_comment is not None:
        return None
    if any(argument.annotation is not None for argument in _arguments(node)):
        return None
    return source


def top_level_definitions(source: str) -> dict[str, tuple[int, str]]:
    """The keepable top-level ``def`` statements of a program: name -> (line, source)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {}
    found: dict[str, tuple[int, str]] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            kept = definition(node)
            if kept is None:
                found.pop(node.name, None)
            else:
                found[node.name] = (node.lineno, kept)
    return found


def compiled(name: str, source: str) -> object:
    """What restoring the function ``name`` of ``source`` does but define it: its code.

    Raises:
        ValueError: ``source`` is not :func:`restorable`.
        SyntaxError: it could not be parsed.
    """
    checked = restorable(name, source)
    if checked is None:
        raise ValueError(f"{name} is not a def as it is kept")
    return compile(checked, "<kept>", "exec")


__all__ = [
    "MAX_DEFINITIONS_CHARS",
    "MAX_DEFINITION_CHARS",
    "compiled",
    "definition",
    "restorable",
    "top_level_definitions",
]
