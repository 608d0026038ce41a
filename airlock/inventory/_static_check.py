"""The static check of a program before it runs: which tools it can call, with what effects.

From the program's syntax tree (never by running it) :func:`check_program` finds every
reference to a tool of the ``tools`` namespace and resolves it against the tools the
principal can call from code (the same set the typed API offers):

- ``tools.NAME(...)``, ``await tools.NAME.aio(...)``, ``tools.NAME.batch([...])``, anywhere:
  in loops, comprehensions, nested and async functions, lambdas;
- aliases: ``get = tools.NAME`` then ``get(...)``, ``t = tools`` then ``t.NAME(...)``,
  ``getattr(tools, "NAME")`` with a literal name;
- a bare reference (``fs = [tools.a, tools.b]``) counts as a call: it can be called later.

What it cannot resolve it reports as *unresolved*, never guessed: ``getattr(tools, name)``
with a computed name, ``tools.__dict__``, private attributes, the namespace passed around as a
value, ``eval``/``exec``/``globals()`` and imports that can reach the bridge socket without
the namespace. A name the principal cannot call from code is reported as *unknown*.

The check is sound for the tool set when nothing is unresolved: every tool the program can
call appears in :attr:`ProgramEffects.tools`. When something is unresolved, the program may
call any tool the principal can call from code (the bridge admits nothing else), so
:attr:`ProgramEffects.may_reach` is that whole set. It is advice for a reviewer or a policy;
admission on the host remains the enforcement.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from airlock.bridge import NAMESPACE_MEMBERS
from airlock.inventory._build import ToolCatalog
from airlock.inventory._errors import ProgramSyntaxError
from airlock.policies import Principal
from airlock.tools import ToolSpec

__all__ = [
    "DYNAMIC_CALLS",
    "ESCAPE_MODULES",
    "CallForm",
    "ProgramEffects",
    "ToolUse",
    "UnknownUse",
    "Unresolved",
    "check_program",
]

CallForm = Literal["call", "aio", "batch", "getattr", "alias", "reference"]
NAMESPACE: Final = "tools"
# Members of the guest's ``tools`` namespace that are not tools: log() and the error classes.
_MEMBERS: Final = NAMESPACE_MEMBERS
_HARMLESS: Final = frozenset({"dir", "hasattr", "isinstance", "print", "repr", "str"})
DYNAMIC_CALLS: Final = frozenset({"eval", "exec", "compile", "__import__", "globals", "locals"})
"""Built-ins that reach names the check cannot see; a call of one is unresolved."""
ESCAPE_MODULES: Final = frozenset(
    {
        "airlock_bridge", "airlock_runner", "builtins", "ctypes", "gc", "importlib",
        "inspect", "io", "_io", "os", "socket", "_socket", "sys",
    }
)  # fmt: skip
"""Modules (and their submodules) whose import can reach the bridge without the namespace."""
_MAX_SOURCE: Final = 120


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ToolUse(_Record):
    """One place the program calls (or takes) a tool."""

    line: int = Field(description="1-based line.")
    column: int = Field(description="0-based column.")
    tool: str = Field(description="The tool's name.")
    form: CallForm = Field(description="call, aio, batch, getattr, alias or reference.")
    via: str | None = Field(description="The alias it was reached through, if any.")


class UnknownUse(_Record):
    """A tool name the principal cannot call from code."""

    line: int
    column: int
    name: str
    reason: str


class Unresolved(_Record):
    """A construct through which the program may call tools the check cannot name."""

    line: int
    column: int
    reason: str
    source: str = Field(description="The construct's source text (shortened).")


class ProgramEffects(_Record):
    """What a program can call, and so what it can touch."""

    tools: tuple[str, ...] = Field(description="Tools the program can call, resolved, sorted.")
    effects: tuple[str, ...] = Field(description="Declared effects of those tools, sorted.")
    uses: tuple[ToolUse, ...] = Field(description="Every resolved use, in source order.")
    unknown: tuple[UnknownUse, ...] = Field(description="Names it cannot call from code.")
    unresolved: tuple[Unresolved, ...] = Field(description="Constructs it cannot resolve.")
    may_reach: tuple[str, ...] = Field(
        description=(
            "Effects the program may exercise: ``effects`` when everything resolved, else "
            "every effect of every tool the principal can call from code."
        )
    )

    @property
    def complete(self) -> bool:
        """Whether every tool call was resolved (no unresolved construct, no unknown name)."""
        return not self.unresolved and not self.unknown


def check_program(source: str, catalog: ToolCatalog, principal: Principal) -> ProgramEffects:
    """The tools ``source`` can call as ``principal`` from code, and their effects.

    Raises:
        ProgramSyntaxError: ``source`` is not valid Python.
    """
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise ProgramSyntaxError(exc.msg, line=exc.lineno) from None
    specs = {spec.name: spec for spec in catalog.specs()}
    callable_names = {d.name for d in catalog.visible(principal, "code")}
    scan = _Scan(source, tree)
    uses, unknown = [], []
    for use in scan.uses:
        if use.tool in callable_names:
            uses.append(use)
        else:
            unknown.append(
                UnknownUse(
                    line=use.line,
                    column=use.column,
                    name=use.tool,
                    reason=_why_unknown(specs.get(use.tool), principal),
                )
            )
    resolved = sorted({use.tool for use in uses})
    effects = _effects_of(resolved, specs)
    bound = _effects_of(sorted(callable_names), specs) if scan.unresolved else effects
    return ProgramEffects(
        tools=tuple(resolved),
        effects=effects,
        uses=tuple(uses),
        unknown=tuple(unknown),
        unresolved=tuple(scan.unresolved),
        may_reach=bound,
    )


def _effects_of(names: list[str], specs: Mapping[str, ToolSpec]) -> tuple[str, ...]:
    return tuple(sorted({str(e) for name in names for e in specs[name].effects}))


def _why_unknown(spec: ToolSpec | None, principal: Principal) -> str:
    if spec is None:
        return "no tool has this name"
    if "code" not in spec.callers:
        return "the tool is not callable from code (direct only)"
    if not principal.has_scope(spec.scope):
        return f"the principal lacks the tool's scope {spec.scope!r}"
    return "the principal cannot call this tool from code"


class _Scan:
    """One pass over a syntax tree: namespace aliases first, then every use."""

    def __init__(self, source: str, tree: ast.Module) -> None:
        self._source = source
        self._parents: dict[ast.AST, ast.AST] = {
            child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)
        }
        self.namespaces: set[str] = {NAMESPACE}
        self.aliases: dict[str, set[str]] = {}
        self.uses: list[ToolUse] = []
        self.unresolved: list[Unresolved] = []
        self._find_aliases(tree)
        for node in ast.walk(tree):
            self._visit(node)
        self.uses.sort(key=lambda u: (u.line, u.column))
        self.unresolved.sort(key=lambda u: (u.line, u.column))

    # -- aliases ---------------------------------------------------------------------------

    def _find_aliases(self, tree: ast.Module) -> None:
        bindings = list(_bindings(tree))
        changed = True
        while changed:  # to a fixed point: aliases of aliases
            changed = False
            for name, value in bindings:
                if isinstance(value, ast.Name) and value.id in self.namespaces:
                    changed |= name not in self.namespaces
                    self.namespaces.add(name)
                    continue
                found = self._tools_named_by(value)
                if found - self.aliases.get(name, set()):
                    self.aliases.setdefault(name, set()).update(found)
                    changed = True

    def _tools_named_by(self, value: ast.expr) -> set[str]:
        if isinstance(value, ast.Name):
            return set(self.aliases.get(value.id, set()))
        if (
            isinstance(value, ast.Attribute)
            and isinstance(value.value, ast.Name)
            and value.value.id in self.namespaces
            and _is_tool_name(value.attr)
        ):
            return {value.attr}
        literal = self._getattr_literal(value)
        return {literal} if literal is not None and _is_tool_name(literal) else set()

    def _getattr_literal(self, node: ast.AST) -> str | None:
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "getattr"
            and len(node.args) >= 2
            and isinstance(node.args[0], ast.Name)
            and node.args[0].id in self.namespaces
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
        ):
            return node.args[1].value
        return None

    # -- uses ------------------------------------------------------------------------------

    def _visit(self, node: ast.AST) -> None:
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            if node.id in self.namespaces:
                self._namespace_use(node)
            elif node.id in self.aliases:
                self._alias_use(node)
            elif node.id == "__builtins__":
                self._unresolved(node, "__builtins__ reaches every global, the namespace too")
        elif isinstance(node, ast.Attribute) and node.attr.startswith("__"):
            if not self._is_namespace(node.value):  # reported by _namespace_use
                self._unresolved(node, f"{node.attr} can reach the tools namespace indirectly")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            name = node.func.id
            if name in DYNAMIC_CALLS or (name == "vars" and not node.args):
                self._unresolved(node, f"{name}() can call tools by a computed name")
        elif isinstance(node, ast.Import | ast.ImportFrom):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                modules.append(node.module)
            for module in modules:
                if module.split(".", 1)[0] in ESCAPE_MODULES:
                    self._unresolved(
                        node, f"import of {module!r} can reach the bridge without the namespace"
                    )

    def _is_namespace(self, node: ast.AST) -> bool:
        return isinstance(node, ast.Name) and node.id in self.namespaces

    def _namespace_use(self, node: ast.Name) -> None:
        parent = self._parents.get(node)
        if isinstance(parent, ast.Attribute) and parent.value is node:
            if parent.attr.startswith("_"):
                self._unresolved(parent, f"private attribute {parent.attr!r} of the namespace")
            elif parent.attr not in _MEMBERS:
                self._tool_use(parent, parent.attr, via=_via(node))
            return
        if isinstance(parent, ast.Call) and node in parent.args:
            func = parent.func.id if isinstance(parent.func, ast.Name) else None
            if func == "getattr":
                literal = self._getattr_literal(parent)
                if literal is None:
                    self._unresolved(parent, "getattr on the namespace with a computed name")
                elif literal.startswith("_"):
                    self._unresolved(parent, f"private attribute {literal!r} of the namespace")
                elif literal not in _MEMBERS:
                    self._tool_use(parent, literal, via=_via(node), form="getattr")
                return
            if func in _HARMLESS:
                return
        if self._is_alias_binding(node, parent):
            return
        self._unresolved(node, "the namespace is used as a value; calls through it are unknown")

    def _is_alias_binding(self, node: ast.AST, parent: ast.AST | None) -> bool:
        if isinstance(parent, ast.Assign) and parent.value is node:
            return all(isinstance(t, ast.Name) for t in parent.targets)
        if isinstance(parent, ast.AnnAssign | ast.NamedExpr) and parent.value is node:
            return isinstance(parent.target, ast.Name)
        return False

    def _alias_use(self, node: ast.Name) -> None:
        parent = self._parents.get(node)
        if isinstance(parent, ast.Call) and parent.func is node:
            for tool in sorted(self.aliases[node.id]):
                self._record(parent, tool, "call", node.id)
        elif isinstance(parent, ast.Attribute) and parent.value is node:
            grand = self._parents.get(parent)
            if parent.attr.startswith("_"):
                self._unresolved(parent, f"private attribute {parent.attr!r} of a tool")
            elif parent.attr in ("aio", "batch") and isinstance(grand, ast.Call):
                form: CallForm = "aio" if parent.attr == "aio" else "batch"
                for tool in sorted(self.aliases[node.id]):
                    self._record(grand, tool, form, node.id)

    def _tool_use(
        self, node: ast.expr, tool: str, *, via: str | None, form: CallForm | None = None
    ) -> None:
        parent = self._parents.get(node)
        grand = self._parents.get(parent) if parent is not None else None
        if form is None:
            form = "reference"
            if isinstance(parent, ast.Call) and parent.func is node:
                form = "call"
            elif parent is not None and self._is_alias_binding(node, parent):
                form = "alias"
            elif isinstance(parent, ast.Attribute) and parent.value is node:
                if parent.attr.startswith("_"):
                    self._unresolved(parent, f"private attribute {parent.attr!r} of a tool")
                elif parent.attr in ("aio", "batch") and isinstance(grand, ast.Call):
                    form = "aio" if parent.attr == "aio" else "batch"
        self._record(node, tool, form, via)

    def _record(self, node: ast.AST, tool: str, form: CallForm, via: str | None) -> None:
        line, column = _position(node)
        self.uses.append(ToolUse(line=line, column=column, tool=tool, form=form, via=via))

    def _unresolved(self, node: ast.AST, reason: str) -> None:
        line, column = _position(node)
        text = ast.get_source_segment(self._source, node) or ""
        text = " ".join(text.split())
        if len(text) > _MAX_SOURCE:
            text = text[: _MAX_SOURCE - 1] + "…"
        self.unresolved.append(Unresolved(line=line, column=column, reason=reason, source=text))


def _bindings(tree: ast.Module) -> Iterator[tuple[str, ast.expr]]:
    """Every ``name = value`` the program makes (plain, annotated, walrus, for-less)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    yield target.id, node.value
        elif (
            isinstance(node, ast.AnnAssign | ast.NamedExpr)
            and node.value is not None
            and isinstance(node.target, ast.Name)
        ):
            yield node.target.id, node.value


def _via(node: ast.Name) -> str | None:
    return None if node.id == NAMESPACE else node.id


def _is_tool_name(name: str) -> bool:
    return not name.startswith("_") and name not in _MEMBERS


def _position(node: ast.AST) -> tuple[int, int]:
    return getattr(node, "lineno", 0), getattr(node, "col_offset", 0)
