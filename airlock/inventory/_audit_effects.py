"""What runs actually touched, set against what was reachable.

A call *exercised* its effects when admission let it run (:attr:`airlock.tools.AuditEvent.
exercised`): a read that got to ``execute`` or later, and a write by the sends of its commit
(its ``done`` event once committed), never by its preview or its approval: a proposed write
changed nothing. A program's own record (``execute_code``) is not a tool call: what a program
exercised through tools is its tool calls, each recorded on its own; the record counts only
by the input files the program was given (``read(file:NAME)``, which the grant must cover).
:func:`run_effects` groups one run's exercised effects by tool (the inputs under
``execute_code``) and flags any that the current inventory does not allow;
:func:`unused_effects` lists the reachable tools and effect patterns that no call in a
period exercised: candidates for removal, for least privilege.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from airlock.harness import EXECUTE_CODE
from airlock.inventory._model import SubjectInventory, ToolEntry
from airlock.policies import Effect, Grant, UsageError, currency_from_field
from airlock.tools import EXERCISED_STAGES, AuditEvent

__all__ = [
    "EXERCISED_STAGES",
    "ExercisedTool",
    "UnusedEffect",
    "exercised",
    "parse_since",
    "run_effects",
    "unused_effects",
    "users_of",
]

_SINCE = re.compile(r"\s*(\d{1,9})\s*([smhdw])\s*")
"""A duration (matched whole): nine digits reach back far enough, and a longer count would
reach past the first of all times."""
_SECONDS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


@dataclass(frozen=True, slots=True, kw_only=True)
class ExercisedTool:
    """One tool's exercised calls in a run."""

    tool: str
    callers: tuple[str, ...]
    calls: int
    effects: tuple[str, ...]
    """Distinct concrete effects, e.g. ``read(billing:invoice/inv_1)``."""
    outside: tuple[str, ...]
    """What the inventory does not allow: the tool (by caller) or effects outside its
    declared patterns or the grant."""


@dataclass(frozen=True, slots=True, kw_only=True)
class UnusedEffect:
    """A reachable tool, or one of its declared effects, that nothing exercised."""

    tool: str
    effect: str | None
    """The declared effect; ``None`` when the tool itself was never called."""


def parse_since(text: str) -> float:
    """``7d``, ``12h``, ``30m``, ``2w``, ``90s`` as seconds.

    Raises:
        UsageError: the text is not a duration.
    """
    match = _SINCE.fullmatch(text)
    if match is None:
        raise UsageError(f"--since {text!r} is not a duration; write for example 7d, 12h or 30m")
    return int(match.group(1)) * _SECONDS[match.group(2)]


def exercised(events: Iterable[AuditEvent]) -> list[AuditEvent]:
    """The events of tool calls that ran and of write steps that sent (one event per
    committed write), and the records of programs that ran with input files."""
    return [e for e in events if e.exercised and (e.tool != EXECUTE_CODE or e.effects)]


def run_effects(events: Iterable[AuditEvent], subject: SubjectInventory) -> list[ExercisedTool]:
    """One run's exercised effects by tool, each checked against ``subject``'s reach."""
    by_tool: dict[str, list[AuditEvent]] = {}
    for event in exercised(events):
        by_tool.setdefault(event.tool, []).append(event)
    tools = {tool.name: tool for tool in subject.tools}
    grant = _grant_of(subject)
    found = []
    for name in sorted(by_tool):
        group = by_tool[name]
        effects = sorted({text for event in group for text in event.effects})
        callers = sorted({event.caller for event in group})
        entry = tools.get(name)
        outside: list[str] = []
        if name == EXECUTE_CODE:  # a program's inputs: the grant alone admits them
            outside += [e for e in effects if not _granted(grant, e)]
        elif entry is None or not entry.reach:
            outside.append("tool not reachable")
        else:
            for caller in callers:
                if not _reachable_by(entry, caller):
                    outside.append(f"tool not reachable from {caller}")
            outside += [e for e in effects if not _declared(entry, e) or not _granted(grant, e)]
        found.append(
            ExercisedTool(
                tool=name,
                callers=tuple(callers),
                calls=len(group),
                effects=tuple(effects),
                outside=tuple(outside),
            )
        )
    return found


def unused_effects(events: Iterable[AuditEvent], subject: SubjectInventory) -> list[UnusedEffect]:
    """Reachable tools and declared effects of ``subject`` that ``events`` never exercised."""
    used: dict[str, set[str]] = {}
    for event in exercised(events):
        used.setdefault(event.tool, set()).update(event.effects)
    unused = []
    for tool in subject.tools:
        if not tool.reach:
            continue
        if tool.name not in used:
            unused.append(UnusedEffect(tool=tool.name, effect=None))
            continue
        for declared in tool.effects:
            if not any(_matches(declared.declared, e) for e in used[tool.name]):
                unused.append(UnusedEffect(tool=tool.name, effect=declared.declared))
    return unused


def _reachable_by(entry: ToolEntry, caller: str) -> bool:
    if caller == "code":
        return "code" in entry.reach
    return "direct" in entry.reach or "after_approval" in entry.reach


def _declared(entry: ToolEntry, concrete: str) -> bool:
    return any(_matches(declared.declared, concrete) for declared in entry.effects)


def _matches(declared: str, concrete: str) -> bool:
    """Whether the resolved effect ``concrete`` is one the declaration stands for."""
    try:
        pattern, effect = Effect.parse(declared), Effect.parse(concrete, resolved=True)
    except ValueError:
        return False
    if pattern.kind != effect.kind:
        return False
    if pattern.kind == "spend":  # in its currency; in any when a field names it ("{currency}")
        return (pattern.target == effect.target or currency_from_field(pattern.target)) and (
            isinstance(pattern.amount, str) or pattern.amount == effect.amount
        )
    return Grant(effects=(Effect(pattern.kind, pattern.pattern),)).covers(effect)


def _grant_of(subject: SubjectInventory) -> Grant:
    effects: list[Effect] = []
    for text in subject.grant.effects:
        try:
            effects.append(Effect.parse(text))
        except ValueError:
            continue
    return Grant(
        scopes=frozenset(subject.grant.scopes),
        effects=tuple(effects),
        spend_limits=subject.grant.spend_limits,
    )


def _granted(grant: Grant, concrete: str) -> bool:
    try:
        return grant.covers(Effect.parse(concrete, resolved=True))
    except ValueError:
        return False


def users_of(events: Sequence[AuditEvent]) -> list[tuple[str, str]]:
    """Distinct (user id, tenant id) pairs of ``events``, sorted."""
    return sorted({(e.user_id, e.tenant_id) for e in events})
