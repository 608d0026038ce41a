"""One pass over a program's syntax tree: every use of the ``tools`` namespace, and every
construct the static check cannot follow (:mod:`airlock.inventory._static_rules`).

:func:`airlock.inventory.check_program` resolves what this finds against the tools a
principal can call; the scan itself knows no registry.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from airlock.bridge import NAMESPACE_MEMBERS
from airlock.inventory._static_handoff import bound_names, handoff
from airlock.inventory._static_match import class_pattern_problems, protocol_binding
from airlock.inventory._static_mutation import mutation
from airlock.inventory._static_rules import (
    DYNAMIC_CALLS,
    ESCAPE_MODULES,
    REFLECTIVE_NAMES,
    attribute_problem,
)

__all__ = ["CallForm", "ProgramScan", "ToolUse", "Unresolved"]

CallForm = Literal["call", "aio", "batch", "getattr", "alias", "reference"]
NAMESPACE: Final = "tools"
# Members of the guest's ``tools`` namespace that are not tools: log() and the error classes.
_MEMBERS: Final = NAMESPACE_MEMBERS
# Dunder names a program may read: neither reaches a namespace.
_PLAIN_DUNDERS: Final = frozenset({"__name__", "__debug__"})
_SCOPES: Final = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.Module)
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
    proposal: bool = Field(default=False, description="A proposal: tools.propose.NAME.")


class Unresolved(_Record):
    """A construct through which the program may call tools the check cannot name."""

    line: int
    column: int
    reason: str
    source: str = Field(description="The construct's source text (shortened).")


class ProgramScan:
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
        self._bound = bound_names(tree)
        bindings = list(_bindings(tree))
        self._find_aliases(bindings)
        for name, value, node in bindings:
            if (
                isinstance(value, ast.Name)
                and value.id in self.namespaces
                and isinstance(self._scope(node), ast.ClassDef)
            ):
                self._unresolved(
                    node,
                    f"the namespace bound as the class attribute {name!r}: the class and its "
                    "instances reach it under names the check cannot follow",
                )
        for node in ast.walk(tree):
            self._visit(node)
        self.uses.sort(key=lambda u: (u.line, u.column))
        self.unresolved.sort(key=lambda u: (u.line, u.column))

    def _scope(self, node: ast.AST) -> ast.AST | None:
        parent = self._parents.get(node)
        while parent is not None and not isinstance(parent, _SCOPES):
            parent = self._parents.get(parent)
        return parent

    # -- aliases ---------------------------------------------------------------------------

    def _find_aliases(self, bindings: list[tuple[str, ast.expr, ast.AST]]) -> None:
        changed = True
        while changed:  # to a fixed point: aliases of aliases
            changed = False
            for name, value, _ in bindings:
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
        changed = mutation(node, self._parents.get(node), namespaces=self.namespaces,
                           aliases=self.aliases.keys())  # fmt: skip
        if changed is not None:
            self._unresolved(*changed)
        if (binding := protocol_binding(node)) is not None:
            self._unresolved(node, binding)
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            if node.id in self.namespaces:
                self._namespace_use(node)
            elif node.id in self.aliases:
                self._alias_use(node)
            elif node.id in DYNAMIC_CALLS:
                self._dynamic_use(node)
            elif node.id in REFLECTIVE_NAMES:
                self._unresolved(node, f"{node.id} fetches attributes or runs code from text")
            elif _is_dunder(node.id) and node.id not in _PLAIN_DUNDERS:
                self._unresolved(node, f"{node.id} reaches every global, the namespace too")
        elif isinstance(node, ast.Attribute):
            if not self._is_namespace(node.value) and not self._is_alias(node.value):
                # (the namespace's and a tool's own attributes are judged where they are used)
                reason = attribute_problem(node.attr)
                if reason is not None:
                    self._unresolved(node, reason)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            self._import(node)
        elif isinstance(node, ast.MatchClass):
            for reason in class_pattern_problems(node, bound=self._bound):
                self._unresolved(node, reason)
        elif isinstance(node, ast.AugAssign) and self._is_namespace(node.target):
            # ``tools += x`` calls ``x.__radd__(tools)``: code of the program's can keep it.
            self._unresolved(node, "an augmented assignment hands the namespace to an operand")
        elif isinstance(node, ast.AnnAssign | ast.arg) and node.annotation is not None:
            self._annotation(node.annotation)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.returns:
            self._annotation(node.returns)

    def _is_namespace(self, node: ast.AST) -> bool:
        return isinstance(node, ast.Name) and node.id in self.namespaces

    def _is_alias(self, node: ast.AST) -> bool:
        return isinstance(node, ast.Name) and node.id in self.aliases

    def _import(self, node: ast.Import | ast.ImportFrom) -> None:
        modules = [a.name for a in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom) and node.module:
            modules.append(node.module)
        for module in modules:
            top = module.split(".", 1)[0]
            if top in ESCAPE_MODULES or top.startswith("_"):
                self._unresolved(
                    node, f"import of {module!r} can reach the bridge without the namespace"
                )
                return
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if alias.name == "*":
                    self._unresolved(node, "import * brings names the check cannot see")
                elif alias.name in DYNAMIC_CALLS:
                    self._unresolved(node, f"import of {alias.name!r} runs code from text")
                elif (reason := attribute_problem(alias.name)) is not None:
                    self._unresolved(node, f"import of {reason}")

    def _dynamic_use(self, node: ast.Name) -> None:
        name = node.id
        parent = self._parents.get(node)
        if not (isinstance(parent, ast.Call) and parent.func is node):
            self._unresolved(node, f"{name} used as a value can run code or fetch any attribute")
            return
        if name == "open":
            first = parent.args[0] if parent.args else None
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                return  # a literal path: never the bridge's descriptor
            self._unresolved(parent, "open() of a descriptor or a computed path")
            return
        if name == "getattr":
            if parent.args and self._is_namespace(parent.args[0]):
                return  # judged by _namespace_use
            literal = parent.args[1] if len(parent.args) >= 2 else None
            if isinstance(literal, ast.Constant) and isinstance(literal.value, str):
                reason = attribute_problem(literal.value)
                if reason is not None:
                    self._unresolved(parent, f"getattr of {reason}")
                return
            self._unresolved(parent, "getattr with a computed name can fetch any attribute")
            return
        self._unresolved(parent, f"{name}() can call tools by a computed name")

    def _annotation(self, annotation: ast.expr) -> None:
        # typing.get_type_hints evaluates a string annotation as code, in the program's globals.
        for node in ast.walk(annotation):
            if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
                continue
            try:
                parsed = ast.parse(node.value.strip(), mode="eval")
            except SyntaxError:
                continue  # text that does not parse cannot be evaluated either
            if not all(self._plain_type(part) for part in ast.walk(parsed)):
                self._unresolved(
                    node,
                    "a string annotation that is more than a type runs as code when "
                    "typing.get_type_hints evaluates it",
                )

    def _plain_type(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Name):
            return (
                node.id not in self.namespaces
                and node.id not in self.aliases
                and not (
                    node.id in DYNAMIC_CALLS or node.id in REFLECTIVE_NAMES or _is_dunder(node.id)
                )
            )
        if isinstance(node, ast.Attribute):
            return attribute_problem(node.attr) is None
        if isinstance(node, ast.BinOp):
            return isinstance(node.op, ast.BitOr)
        return isinstance(
            node,
            ast.Expression
            | ast.Subscript
            | ast.Tuple
            | ast.List
            | ast.Constant
            | ast.Load
            | ast.BitOr,
        )

    def _namespace_use(self, node: ast.Name) -> None:
        parent = self._parents.get(node)
        if isinstance(parent, ast.Attribute) and parent.value is node:
            if not isinstance(parent.ctx, ast.Load):
                return  # a store or a delete: unresolved by mutation()
            if parent.attr.startswith("_"):
                self._unresolved(parent, f"private attribute {parent.attr!r} of the namespace")
            elif parent.attr == "propose":
                self._proposal_use(parent)
            elif parent.attr not in _MEMBERS:
                self._tool_use(parent, parent.attr, via=_via(node))
            return
        if isinstance(parent, ast.Call) and node in parent.args:
            reason = handoff(parent, node, bound=self._bound)
            if reason is not None:
                return self._unresolved(parent, reason)
            if isinstance(parent.func, ast.Name) and parent.func.id == "getattr":
                literal = self._getattr_literal(parent)
                if literal is None:
                    self._unresolved(parent, "getattr on the namespace with a computed name")
                elif literal.startswith("_"):
                    self._unresolved(parent, f"private attribute {literal!r} of the namespace")
                elif literal not in _MEMBERS:
                    self._tool_use(parent, literal, via=_via(node), form="getattr")
            return  # (setattr and delattr: unresolved by mutation())
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

    def _proposal_use(self, node: ast.Attribute) -> None:
        """``tools.propose.NAME...``: a proposal of the write NAME; the ``propose`` namespace
        taken any other way is unresolved (what it proposes through cannot be named)."""
        parent = self._parents.get(node)
        if not (isinstance(parent, ast.Attribute) and parent.value is node):
            return self._unresolved(node, "the propose namespace is used as a value")
        if not isinstance(parent.ctx, ast.Load):
            return None  # a store or a delete: unresolved by mutation()
        if parent.attr.startswith("_"):
            return self._unresolved(parent, f"private attribute {parent.attr!r} of proposals")
        start = len(self.uses)
        self._tool_use(parent, parent.attr, via=None)
        for n in range(start, len(self.uses)):
            self.uses[n] = self.uses[n].model_copy(update={"proposal": True})

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


def _bindings(tree: ast.Module) -> Iterator[tuple[str, ast.expr, ast.AST]]:
    """Every ``name = value`` the program makes (plain, annotated, walrus), with its node."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    yield target.id, node.value, node
        elif (
            isinstance(node, ast.AnnAssign | ast.NamedExpr)
            and node.value is not None
            and isinstance(node.target, ast.Name)
        ):
            yield node.target.id, node.value, node


def _is_dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__")


def _via(node: ast.Name) -> str | None:
    return None if node.id == NAMESPACE else node.id


def _is_tool_name(name: str) -> bool:
    return not name.startswith("_") and name not in _MEMBERS


def _position(node: ast.AST) -> tuple[int, int]:
    return getattr(node, "lineno", 0), getattr(node, "col_offset", 0)
