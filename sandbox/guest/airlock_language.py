"""How a program is compiled, and the globals it runs with, in each language mode.

Standard library only, plus RestrictedPython (shipped in the image) for the ``restricted``
mode: its guards, an import allow-list and coroutines, so programs can fan out reads. On top
of RestrictedPython's guards (no ``_`` names, no frame or code attributes), the attribute,
item, iteration and import guards hand out nothing ``airlock_language_guard`` refuses: no
module the program could not import itself (``typing.sys`` would reach ``sys.modules``), no
frame, code or traceback object, no module's globals, and none of the standard library's
callables that get around the guards (:func:`evaluators` among them). The ``full`` mode is
plain Python. Either way the container is the boundary; this is defence in
depth and clearer errors.
"""

from __future__ import annotations

import _ast
import operator

TYPE_CHECKING = False  # typing's, which the guest does not import (see airlock.sandbox.guest)
if TYPE_CHECKING:
    import ast
    from collections.abc import Callable
    from typing import Any

    from airlock.sandbox.guest.airlock_asyncio import import_asyncio
    from airlock.sandbox.guest.airlock_bridge import Tools
    from airlock.sandbox.guest.airlock_language_classes import build_class, write_guards
    from airlock.sandbox.guest.airlock_language_copy import guard_copy
    from airlock.sandbox.guest.airlock_language_guard import (
        evaluators,
        item_guard,
        iteration_guard,
        module_allowed,
        reading_builtins,
        refusal,
        substitute,
    )
else:  # in the image, the guest's modules sit side by side on the runner's path
    from airlock_asyncio import import_asyncio
    from airlock_language_classes import build_class, write_guards
    from airlock_language_copy import guard_copy
    from airlock_language_guard import (
        evaluators,
        item_guard,
        iteration_guard,
        module_allowed,
        reading_builtins,
        refusal,
        substitute,
    )

PROGRAM_FILENAME = "<program>"
PROGRAM_MODULE = "airlock_program"


class _Printer:
    """RestrictedPython's ``_print_`` hook: ``print`` in a restricted program writes stdout."""

    def __init__(self, _getattr_: Any = None) -> None:
        pass

    def _call_print(self, *objects: Any, **kwargs: Any) -> None:
        print(*objects, **kwargs)


class ProgramRejected(Exception):
    """The program cannot run: syntax error, forbidden import or restricted construct."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.line = line


def _import_checker(allowed: frozenset[str]) -> Any:
    import ast

    def check(node: ast.AST) -> None:
        for child in ast.walk(node):
            if isinstance(child, ast.Import):
                names = [alias.name for alias in child.names]
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    raise ProgramRejected("relative imports are not allowed", child.lineno)
                names = [child.module or ""]
            else:
                continue
            for name in names:
                if not module_allowed(name, allowed):
                    raise ProgramRejected(
                        f"import of {name!r} is not allowed in restricted mode; "
                        f"allowed modules: {', '.join(sorted(allowed))}",
                        child.lineno,
                    )

    return check


def _restricted_policy() -> Any:
    from typing import Any, cast  # cast(Any, ...) evaluates Any

    from RestrictedPython.transformer import RestrictingNodeTransformer

    class AirlockPolicy(RestrictingNodeTransformer):
        """RestrictedPython's policy, plus coroutines so programs can fan out reads.

        ``async``/``await`` add no way to reach an object the guards do not already see.
        """

        def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> Any:
            self.check_name(node, node.name, allow_magic_methods=True)
            self.check_function_argument_names(node)
            with self.print_info.new_print_scope():
                node = self.node_contents_visit(node)
                self.inject_print_collector(cast(Any, node))
            return node

        def visit_Await(self, node: ast.Await) -> Any:
            return self.node_contents_visit(node)

        def visit_AsyncFor(self, node: ast.AsyncFor) -> Any:
            # Not guard_iter: it wraps the iterable in ``_getiter_`` (``iter``), which an
            # asynchronous iterable is not; ``_getiter_`` guards nothing more here.
            return self.node_contents_visit(node)

        def visit_AsyncWith(self, node: ast.AsyncWith) -> Any:
            return self.visit_With(cast(Any, node))

    return AirlockPolicy


_INPLACE_OPERATORS: dict[str, Callable[[Any, Any], Any]] = {
    "+=": operator.iadd,
    "-=": operator.isub,
    "*=": operator.imul,
    "/=": operator.itruediv,
    "//=": operator.ifloordiv,
    "%=": operator.imod,
    "**=": operator.ipow,
    "<<=": operator.ilshift,
    ">>=": operator.irshift,
    "&=": operator.iand,
    "|=": operator.ior,
    "^=": operator.ixor,
    "@=": operator.imatmul,
}


def _inplace(op: str, x: Any, y: Any) -> Any:
    return _INPLACE_OPERATORS[op](x, y)


def restricted_globals(
    allowed_imports: frozenset[str], result: Callable[[Any], None], tools: Tools
) -> dict[str, Any]:
    """The globals of a ``restricted`` program: guarded builtins, ``result`` and ``tools``."""
    from types import ModuleType
    from typing import Any, cast  # cast(Any, ...) evaluates Any

    from RestrictedPython.Guards import (
        guarded_iter_unpack_sequence,
        guarded_unpack_sequence,
        raise_,
        safe_builtins,
        safer_getattr,
    )
    from RestrictedPython.Limits import limited_builtins
    from RestrictedPython.Utilities import utility_builtins

    def guarded_import(
        name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0
    ) -> Any:
        if level or not module_allowed(name, allowed_imports):
            raise ImportError(f"import of {name!r} is not allowed in restricted mode")
        if name.partition(".")[0] == "asyncio":
            import_asyncio()
        module = __import__(name, globals, locals, fromlist, level)
        members: dict[str, Any] = {}
        for member in fromlist or ():
            # ``from typing import sys`` reads the attribute without the attribute guard.
            value = getattr(module, member, None)
            refused = refusal(value, allowed_imports)
            if refused:
                raise ImportError(
                    f"cannot import {member!r} from {name!r} in restricted mode: it is {refused}"
                )
            members[member] = substitute(value)
        if any(members[m] is not getattr(module, m, None) for m in members):
            # The from-import reads its names from what this returns: a stand-in module.
            stand_in = type(module)(module.__name__)
            vars(stand_in).update(members)
            return stand_in
        return module

    # The modules RestrictedPython's utility builtins hand a program (random, string, math)
    # are read from like its imports.
    readable = allowed_imports | {
        m.__name__ for m in utility_builtins.values() if isinstance(m, ModuleType)
    }

    def guarded_getattr(ob: Any, name: str, *default: Any) -> Any:
        # An object a guard missed (an argument to a callback, say) yields nothing either.
        refused = refusal(ob, readable)
        if refused:
            raise AttributeError(f"cannot read {name!r} of {refused}")
        # safer_getattr answers None for a missing attribute unless told to raise: then
        # ``tools.not_given(...)`` failed as "'NoneType' object is not callable" and a typo
        # read as None. Attribute access and getattr() without a default raise as in Python.
        value = cast(Any, safer_getattr)(ob, name, default[0] if default else raise_)
        refused = refusal(value, allowed_imports)
        if refused:
            raise AttributeError(
                f"{name!r} is {refused}; use only the modules you import "
                f"({', '.join(sorted(allowed_imports))}) and what they return"
            )
        return substitute(value)

    guard_copy()  # behind the guards: copy writes a reducer's state onto no module or class
    write_guard, guarded_setattr, guarded_delattr = write_guards(PROGRAM_MODULE)
    builtins: dict[str, Any] = {}
    builtins.update(safe_builtins)
    builtins.update(limited_builtins)
    builtins.update(utility_builtins)
    builtins.update(
        {
            "__import__": guarded_import,
            # RestrictedPython's trust an object's ``_guarded_writes`` and check no name.
            "setattr": guarded_setattr,
            "delattr": guarded_delattr,
            "__build_class__": build_class,
            "all": all,
            "any": any,
            "dict": dict,
            "dir": dir,
            "enumerate": enumerate,
            "filter": filter,
            "iter": iter,
            "list": list,
            "map": map,
            "max": max,
            "min": min,
            "next": next,
            "range": range,
            "result": result,
            "reversed": reversed,
            "sorted": sorted,
            "sum": sum,
            "zip": zip,
        }
    )
    builtins.update(reading_builtins(guarded_getattr))
    return {
        "__builtins__": builtins,
        "__name__": PROGRAM_MODULE,
        "__metaclass__": type,
        "tools": tools,
        "_getattr_": guarded_getattr,
        "_getitem_": item_guard(allowed_imports),
        "_getiter_": iteration_guard(allowed_imports),
        "_iter_unpack_sequence_": guarded_iter_unpack_sequence,
        "_unpack_sequence_": guarded_unpack_sequence,
        "_write_": write_guard,
        "_inplacevar_": _inplace,
        "_print_": _Printer,
        # RestrictedPython binds ``_print`` per scope, but not in an expression compiled on
        # its own (a program's final expression), so a module-level one is provided.
        "_print": _Printer(),
        "_apply_": lambda f, *a, **kw: f(*a, **kw),
    }


def full_globals(result: Callable[[Any], None], tools: Tools) -> dict[str, Any]:
    """The globals of a ``full`` program: every builtin, ``result`` and ``tools``."""
    import builtins

    namespace = dict(vars(builtins))
    namespace["result"] = result
    return {"__builtins__": namespace, "__name__": PROGRAM_MODULE, "tools": tools}


TOP_LEVEL_AWAIT = _ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
"""Programs may ``await`` at the top level (as in ``python -m asyncio``); such a program's
code is a coroutine, which the runner runs on an event loop of its own."""


def _restrict(tree: ast.AST, policy: Any) -> list[str]:
    """Apply RestrictedPython's policy to ``tree`` in place; its refusals."""
    errors: list[str] = []
    warnings: list[str] = []
    used_names: dict[str, bool] = {}
    policy(errors, warnings, used_names).visit(tree)
    return errors


def compile_program(source: str, mode: str, allowed_imports: frozenset[str]) -> tuple[Any, Any]:
    """Compile ``source`` into (body code, last-expression code or None).

    A program ending in an expression statement has that expression's value as its final
    value, as in a notebook cell. Top-level ``await`` is allowed in both modes: the code is
    then a coroutine (``co_flags & CO_COROUTINE``).

    Raises:
        ProgramRejected: on a syntax error, a forbidden import or a restricted construct.
        SyntaxError: a statement the compiler refuses where it stands (``return``, ``break``
            or ``yield`` at the top level, ``await`` in a plain function); the runner reports
            it as the program's error, with its line.
    """
    try:  # ast.parse, without importing ast
        tree: ast.Module = compile(  # type: ignore[assignment]  # "exec" makes a Module
            source, PROGRAM_FILENAME, "exec", _ast.PyCF_ONLY_AST, dont_inherit=True
        )
    except SyntaxError as exc:
        raise ProgramRejected(f"syntax error: {exc.msg}", exc.lineno) from None
    last: ast.Expression | None = None
    final_statement = tree.body[-1] if tree.body else None
    if isinstance(final_statement, _ast.Expr):
        tree.body.pop()
        last = _ast.Expression(final_statement.value)
    if mode != "full":
        _import_checker(allowed_imports)(tree)
        # RestrictedPython's own compile functions drop the flags they are given, so its
        # policy transforms the tree here and the compiler gets top-level await.
        policy = _restricted_policy()
        errors = _restrict(tree, policy)
        if last is not None and not errors:
            errors.extend(_restrict(last, policy))
        if errors:
            raise ProgramRejected("; ".join(errors), _line_of(errors[0]))
    body_code = compile(tree, PROGRAM_FILENAME, "exec", flags=TOP_LEVEL_AWAIT, dont_inherit=True)
    last_code = (
        compile(last, PROGRAM_FILENAME, "eval", flags=TOP_LEVEL_AWAIT, dont_inherit=True)
        if last is not None
        else None
    )
    return body_code, last_code


CO_COROUTINE = 0x0080
"""``inspect.CO_COROUTINE``: a code object's flag (importing inspect would cost every runner
about 2 ms of CPU before its first program)."""


def _is_coroutine(code: Any) -> bool:
    return code is not None and bool(code.co_flags & CO_COROUTINE)


def run_program(
    body_code: Any,
    last_code: Any,
    namespace: dict[str, Any],
    result: Callable[[Any], None],
    has_result: Callable[[], bool],
) -> None:
    """Run a compiled program's body, then its last expression, whose value becomes the
    final one (through ``result``) unless the program called ``result()`` itself
    (``has_result``). On an event loop of its own when either awaits at the top level."""
    if not (_is_coroutine(body_code) or _is_coroutine(last_code)):
        exec(body_code, namespace)
        if last_code is not None:
            value = eval(last_code, namespace)
            if not has_result() and value is not None:
                result(value)
        return

    async def main() -> None:
        step = eval(body_code, namespace)
        if _is_coroutine(body_code):
            await step
        if last_code is not None:
            value = eval(last_code, namespace)
            if _is_coroutine(last_code):
                value = await value
            if not has_result() and value is not None:
                result(value)

    import_asyncio()
    import asyncio

    asyncio.run(main())


def _line_of(message: str) -> int | None:
    # RestrictedPython formats errors as "Line N: ...".
    head, _, _ = message.partition(":")
    number = head.removeprefix("Line ").strip()
    return int(number) if number.isdigit() else None


__all__ = [
    "PROGRAM_FILENAME",
    "PROGRAM_MODULE",
    "TOP_LEVEL_AWAIT",
    "ProgramRejected",
    "compile_program",
    "evaluators",
    "full_globals",
    "refusal",
    "restricted_globals",
    "run_program",
]
