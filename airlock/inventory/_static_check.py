"""The static check of a program before it runs: which tools it can call, with what effects.

From the program's syntax tree (never by running it) :func:`check_program` finds every
reference to a tool of the ``tools`` namespace and resolves it against the tools the
principal can call from code (the same set the typed API offers):

- ``tools.NAME(...)``, ``await tools.NAME.aio(...)``, ``tools.NAME.batch([...])``, anywhere:
  in loops, comprehensions, nested and async functions, lambdas;
- aliases: ``get = tools.NAME`` then ``get(...)``, ``t = tools`` then ``t.NAME(...)``,
  ``getattr(tools, "NAME")`` with a literal name;
- a bare reference (``fs = [tools.a, tools.b]``) counts as a call: it can be called later.

What it cannot follow it reports as *unresolved*, never guessed (the lists are in
:mod:`airlock.inventory._static_rules`):

- the namespace used as a value (passed, returned, stored in a container or an attribute, a
  default, an operand), or bound as a class attribute (``class C: t = tools``, a
  ``NamedTuple`` or dataclass field default), where ``C.t``/``self.t`` reach it unseen;
  passed to any call but a few built-ins that cannot keep it (``print``, ``str``, ``repr``,
  ``dir``, ``hasattr``, ``isinstance``/``issubclass`` against built-in types), or to one
  of those the program rebinds (:mod:`airlock.inventory._static_handoff`): ``setattr(box,
  "ns", tools)`` or a metaclass's ``__instancecheck__`` keeps it where calls are unseen;
- an attribute fetched by a computed name (``getattr(x, name)``, ``vars``,
  ``operator.attrgetter``), any ``_`` attribute but the named-tuple API, and every attribute
  of frames, generators, coroutines and tracebacks (``f_globals``, ``gi_frame``, ...);
- code the check never sees: ``eval``/``exec``/``compile``, ``pickle``/``marshal``/
  ``types``-style modules, ``typing.get_type_hints`` on text built at run time, and a
  string annotation that holds more than a type (``get_type_hints`` evaluates it);
- a way to the bridge socket without the namespace: ``open`` of a descriptor, ``os``,
  ``socket``, ``sys``, ``gc``, ``subprocess``, ... as an import, an imported name or an
  attribute of another module;
- a change to a tool, ``tools`` or ``tools.propose``: an attribute stored or deleted,
  ``setattr``/``delattr`` (:mod:`airlock.inventory._static_mutation`), since a tool sends the
  name it holds;
- a program nested too deeply for the parser (``RecursionError``, ``MemoryError``): not a
  syntax error, as an interpreter with other limits may still run it.

A name the principal cannot call from code is reported as *unknown*. A proposal
(``tools.propose.NAME(...)``) is listed apart, in :attr:`ProgramEffects.proposals`: it is
resolved against the write tools whose contract makes them proposable and whose scope the
principal has (the grant's ``propose`` list is the session's to apply); any other name is
*unknown* too. Proposals never count as calls: each waits for approval before it is made.

The verdict (:attr:`ProgramEffects.verdict`) is ``complete`` only when nothing is unresolved
or unknown: then every tool the program can call appears in :attr:`ProgramEffects.tools`,
in restricted and in full mode alike (the rules do not count on restricted mode's guards).
It speaks of one program in a fresh process: a session that keeps a container gives each
program the names earlier ones left, which this check does not see. When something is
unresolved, the program may call any tool the principal can call from code (the bridge
admits nothing else), so :attr:`ProgramEffects.may_reach` is that whole set. It is advice
for a reviewer or a policy; admission on the host remains the enforcement.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from airlock.inventory._build import ToolCatalog
from airlock.inventory._errors import ProgramSyntaxError
from airlock.inventory._static_rules import (
    DYNAMIC_CALLS,
    ESCAPE_MODULES,
    INTROSPECTION_ATTRIBUTES,
    REFLECTIVE_NAMES,
)
from airlock.inventory._static_scan import CallForm, ProgramScan, ToolUse, Unresolved
from airlock.policies import Principal
from airlock.tools import ToolSpec

__all__ = [
    "DYNAMIC_CALLS",
    "ESCAPE_MODULES",
    "INTROSPECTION_ATTRIBUTES",
    "REFLECTIVE_NAMES",
    "CallForm",
    "ProgramEffects",
    "ToolUse",
    "UnknownUse",
    "Unresolved",
    "Verdict",
    "check_program",
]

_MAX_SOURCE: Final = 120

Verdict = Literal["complete", "unknown_tools", "unresolved"]
"""``complete``: every tool the program can call is listed. ``unknown_tools``: resolved, but
it names a tool the principal cannot call from code. ``unresolved``: a route the check cannot
follow, so it may call any tool callable from code."""


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class UnknownUse(_Record):
    """A tool name the principal cannot call from code."""

    line: int
    column: int
    name: str
    reason: str


class ProgramEffects(_Record):
    """What a program can call, and so what it can touch."""

    tools: tuple[str, ...] = Field(description="Tools the program can call, resolved, sorted.")
    effects: tuple[str, ...] = Field(description="Declared effects of those tools, sorted.")
    uses: tuple[ToolUse, ...] = Field(description="Every resolved use, in source order.")
    unknown: tuple[UnknownUse, ...] = Field(description="Names it cannot call from code.")
    proposals: tuple[str, ...] = Field(
        default=(),
        description="Writes the program proposes (``tools.propose.NAME``), resolved, sorted: "
        "each waits for approval before it is made.",
    )
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

    @property
    def verdict(self) -> Verdict:
        """``unresolved`` before ``unknown_tools`` before ``complete``."""
        if self.unresolved:
            return "unresolved"
        return "unknown_tools" if self.unknown else "complete"


def check_program(source: str, catalog: ToolCatalog, principal: Principal) -> ProgramEffects:
    """The tools ``source`` can call as ``principal`` from code, and their effects.

    Raises:
        ProgramSyntaxError: ``source`` is not valid Python.
    """
    specs = {spec.name: spec for spec in catalog.specs()}
    callable_names = {d.name for d in catalog.visible(principal, "code")}
    proposable = {
        d.name
        for d in catalog.visible(principal, "direct")
        if (write := specs[d.name].write) is not None and write.proposable
    }
    try:
        scan = ProgramScan(source, ast.parse(source))
    except SyntaxError as exc:
        raise ProgramSyntaxError(exc.msg, line=exc.lineno) from None
    except (RecursionError, MemoryError) as exc:
        # Nesting too deep for this process's parser is no syntax error: an interpreter with
        # other limits (the guest's) may still run it, so it may call anything.
        return _too_deep(source, exc, _effects_of(sorted(callable_names), specs))
    uses, unknown, proposals = [], [], set()
    for use in scan.uses:
        if use.proposal and use.tool in proposable:
            proposals.add(use.tool)
        elif use.proposal:
            unknown.append(
                UnknownUse(
                    line=use.line,
                    column=use.column,
                    name=use.tool,
                    reason="no write tool of this name may be proposed from code",
                )
            )
        elif use.tool in callable_names:
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
        proposals=tuple(sorted(proposals)),
        unresolved=tuple(scan.unresolved),
        may_reach=bound,
    )


def _too_deep(source: str, error: BaseException, every: tuple[str, ...]) -> ProgramEffects:
    first = " ".join(source.lstrip().split("\n", 1)[0].split())
    text = first if len(first) <= _MAX_SOURCE else first[: _MAX_SOURCE - 1] + "…"
    reason = (
        f"the program nests too deeply for the check to parse ({type(error).__name__}); "
        "flatten its expressions"
    )
    unresolved = Unresolved(line=1, column=0, reason=reason, source=text)
    return ProgramEffects(
        tools=(), effects=(), uses=(), unknown=(), unresolved=(unresolved,), may_reach=every
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
