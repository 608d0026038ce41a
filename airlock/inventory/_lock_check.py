"""The check of the effect lock: every difference between two locks, and whether the
reachable set grew.

:func:`compare_locks` lists every difference as a :class:`Change` with a direction. *Growth*
fails a check; it is anything that lets some principal reach more:

- a new subject that reaches a tool or holds a grant (a grant alone reads input files), or
  a tool that becomes reachable: listed with its grant and *every* effect, destination
  and credential it brings (a tool with side effects callable from code is called out);
- a tool reachable in a new way (``code``, ``direct``, or ``proposal``: programs may now
  propose it); a grant that lets programs propose more tools; an effect, destination or
  credential not covered by the old ones (a wider pattern, a new host, path, scheme or
  port: see :mod:`airlock.inventory._lock_cover`);
- an approval verdict loosened at some amount (deny → ask, ask → allow);
- a precondition removed or weakened (fewer fields must agree);
- a principal moved to another tenant, or unbound from its own (it acts in every tenant);
  ``self_approval`` turned on; a principal's entry removed while ``*`` gives it more;
- a grant widened (scope, effect pattern, spend limit);
- a harness connection added or pointed elsewhere (model provider, listener, engine, store);
- a sandbox widened: every field of :class:`SandboxEffects` has a rule in
  :data:`SANDBOX_RULES` (a limit raised, a system call, import, capability, mount or
  environment variable added, network or file system opened, restricted mode left, a weaker
  runtime), and a field without one counts as growth until it gets one.

The mirror images are *shrink*: a tool removed or denied, a narrower pattern, a tighter
verdict (adding an ``ask`` or ``deny`` rule to a tool), a precondition added, a lower limit.
What neither widens nor narrows is a *change* (a scope renamed, idempotency, the image, a
tool now waiting for approval where it ran without: the verdicts say which way that went).
Neither shrink nor change fails a check.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

from airlock.inventory._change import Change, Direction
from airlock.inventory._lock import EffectLock, LockedSubject, LockedTool
from airlock.inventory._lock_cover import Covers, destination_covered, effect_covered
from airlock.inventory._lock_deployment import SANDBOX_RULES, compare_harness, compare_sandbox
from airlock.inventory._model import ApprovalCase, GrantSummary, Requirement
from airlock.inventory._subjects import ANY_PRINCIPAL
from airlock.policies import (
    SIDE_EFFECT_KINDS,
    STRICTNESS,
    breakpoints,
    target_classes,
    verdict_at,
)

__all__ = ["SANDBOX_RULES", "Change", "Direction", "compare_locks", "render_changes"]


def compare_locks(old: EffectLock, new: EffectLock) -> list[Change]:
    """Every difference from ``old`` to ``new``, growth first, then shrink, then change."""
    changes: list[Change] = []
    for key in sorted(old.subjects.keys() | new.subjects.keys()):
        before, after = old.subjects.get(key), new.subjects.get(key)
        if before is None and after is not None:
            changes += _new_subject(key, after)
        elif after is None and before is not None:
            changes += _removed_subject(key, before, new)
        elif before is not None and after is not None:
            changes += _compare_subject(key, before, after)
    changes += compare_harness(old.harness, new.harness)
    changes += compare_sandbox(old.sandbox, new.sandbox)
    rank = {"growth": 0, "shrink": 1, "change": 2}
    # A new subject's or tool's line comes before the lines of what it brings.
    return sorted(
        changes,
        key=lambda c: (
            rank[c.direction],
            c.subject,
            c.tool,
            c.kind not in ("new_subject", "new_tool"),
            c.kind,
            c.detail,
        ),
    )


def render_changes(changes: Sequence[Change]) -> str:
    """One line per change: ``GROWTH principal:alice billing_x new_effect: read(...)``."""
    if not changes:
        return "the reachable set is unchanged\n"
    lines = []
    for change in changes:
        where = f"{change.subject} {change.tool}".strip() or "-"
        lines.append(f"{change.direction.upper():<7} {where}: {change.kind}: {change.detail}")
    growth = sum(c.direction == "growth" for c in changes)
    verdict = (
        f"the reachable set grew ({growth} change(s)); review them, then refresh the lock"
        if growth
        else "the reachable set did not grow"
    )
    return "\n".join([*lines, verdict]) + "\n"


# -- subjects and tools --------------------------------------------------------------------


def _new_subject(key: str, subject: LockedSubject) -> list[Change]:
    reachable = sorted(name for name, tool in subject.tools.items() if tool.reach)
    detail = f"tenant {subject.tenant}; reaches {', '.join(reachable) or 'nothing'}"
    # A grant is reach without any tool: a program reads input files by read(file:...).
    granted = _grant_lines(key, subject.grant)
    direction: Direction = "growth" if reachable or granted else "change"
    changes = [Change(direction, key, "", "new_subject", detail), *granted]
    for name in reachable:
        changes += _new_tool(key, name, subject.tools[name])
    return changes


def _grant_lines(key: str, grant: GrantSummary) -> list[Change]:
    lines = [f"scope {scope}" for scope in grant.scopes]
    lines += list(grant.effects)
    lines += [f"spend limit {cur}: {amount}" for cur, amount in grant.spend_limits.items()]
    lines += [f"propose {pattern}" for pattern in grant.propose]
    return [Change("growth", key, "", "grant_widened", line) for line in lines]


def _new_tool(key: str, name: str, tool: LockedTool) -> list[Change]:
    """A tool that became reachable, with every reach it brings on a line of its own."""
    detail = f"reachable: {', '.join(tool.reach)}"
    if tool.requires:
        detail += f"; requires {', '.join(r.text for r in tool.requires)}"
    changes = [Change("growth", key, name, "new_tool", detail)]
    changes += [Change("growth", key, name, "new_effect", e) for e in tool.effects]
    changes += [Change("growth", key, name, "new_destination", d) for d in tool.destinations]
    changes += [Change("growth", key, name, "new_credential", c) for c in tool.credentials]
    if "code" in tool.reach:
        changes += _side_effects_from_code(key, name, tool)
    return changes


def _removed_subject(key: str, old: LockedSubject, lock: EffectLock) -> list[Change]:
    """A principal whose entry went away still exists: it now holds what ``*`` holds, so it
    is compared as ``*`` (its deny rules may have gone with its entry)."""
    fallback = lock.subjects.get(f"principal:{ANY_PRINCIPAL}")
    if old.kind != "principal" or key == f"principal:{ANY_PRINCIPAL}" or fallback is None:
        return [Change("shrink", key, "", "removed_subject", "no longer inventoried")]
    detail = f"no longer named: holds what principal:{ANY_PRINCIPAL} holds"
    # Where its own entry did not apply it held *'s authority already, so * acting in other
    # tenants is nothing new for it: its tenant is not compared.
    as_fallback = {"tenant": old.tenant, "every_tenant": old.every_tenant}
    compared = _compare_subject(key, old, fallback.model_copy(update=as_fallback))
    return [Change("change", key, "", "removed_subject", detail), *compared]


def _compare_subject(key: str, old: LockedSubject, new: LockedSubject) -> list[Change]:
    changes = _compare_grant(key, old.grant, new.grant)
    if new.every_tenant and not old.every_tenant:
        # No entry binds it any more: its authority applies to every tenant's records.
        detail = f"{old.tenant} → any tenant: reaches the records of every tenant"
        changes.append(Change("growth", key, "", "tenant_unbound", detail))
    elif old.every_tenant and not new.every_tenant:
        detail = f"any tenant → {new.tenant}"
        changes.append(Change("shrink", key, "", "tenant_bound", detail))
    elif old.tenant != new.tenant and not new.every_tenant:
        # Records are tenant-scoped: the same grant now reaches another tenant's data.
        detail = f"{old.tenant} → {new.tenant}: reaches the records of tenant {new.tenant}"
        changes.append(Change("growth", key, "", "tenant_moved", detail))
    if old.self_approval != new.self_approval:
        # Approval by the requester is no second pair of eyes: every write that waits for
        # approval can be made by whoever asked for it.
        detail = "on: whoever asks for a write may approve it" if new.self_approval else "off"
        direction: Direction = "growth" if new.self_approval else "shrink"
        changes.append(Change(direction, key, "", "self_approval", detail))
    for name in sorted(old.tools.keys() | new.tools.keys()):
        before, after = old.tools.get(name), new.tools.get(name)
        if after is None or not after.reach:
            if before is not None and before.reach:
                why = "no longer visible" if after is None else "every call is now refused"
                changes.append(Change("shrink", key, name, "removed_tool", why))
            continue
        if before is None or not before.reach:
            changes += _new_tool(key, name, after)
            continue
        changes += _compare_tool(key, name, before, after)
    return changes


def _side_effects_from_code(key: str, name: str, tool: LockedTool) -> list[Change]:
    side = [e for e in tool.effects if e.split("(", 1)[0] in SIDE_EFFECT_KINDS]
    if not side:
        return []
    return [
        Change("growth", key, name, "write_from_code", f"callable from code: {', '.join(side)}")
    ]


# Reaching a tool without approval (from code or directly) is more than reaching it only once
# approved; "after_approval" appearing or going away is explained by the approval verdicts,
# which are judged amount by amount in _compare_approval.
# A proposal is reached from code without the model asking for it: growth as well.
_OPEN_REACH: Final = ("code", "direct", "proposal")


def _compare_tool(key: str, name: str, old: LockedTool, new: LockedTool) -> list[Change]:
    changes: list[Change] = []

    def sets(kind: str, before: Iterable[str], after: Iterable[str], covered: Covers) -> None:
        before, after = tuple(before), tuple(after)
        for item in sorted(set(after) - set(before)):
            if not covered(item, before):
                changes.append(Change("growth", key, name, f"new_{kind}", item))
        for item in sorted(set(before) - set(after)):
            if not covered(item, after):
                changes.append(Change("shrink", key, name, f"removed_{kind}", item))

    gained = [r for r in new.reach if r not in old.reach and r in _OPEN_REACH]
    lost = [r for r in old.reach if r not in new.reach and r in _OPEN_REACH]
    if gained:
        changes.append(
            Change("growth", key, name, "new_reach", f"now reachable: {', '.join(gained)}")
        )
        if "code" in gained:
            changes += _side_effects_from_code(key, name, new)
    if lost:
        changes.append(
            Change("shrink", key, name, "removed_reach", f"no longer: {', '.join(lost)}")
        )
    if ("after_approval" in old.reach) != ("after_approval" in new.reach):
        detail = "now waits for approval" if "after_approval" in new.reach else "never waits"
        changes.append(Change("change", key, name, "approval_reach", detail))
    sets("effect", old.effects, new.effects, effect_covered)
    sets("destination", old.destinations, new.destinations, destination_covered)
    sets("credential", old.credentials, new.credentials, lambda item, pool: item in pool)
    changes += _compare_requires(key, name, old.requires, new.requires)
    changes += _compare_approval(key, name, old.approval, new.approval)
    if old.callers != new.callers and not gained and not lost:
        detail = f"{', '.join(old.callers)} → {', '.join(new.callers)} (reach unchanged)"
        changes.append(Change("change", key, name, "callers", detail))
    if old.scope != new.scope:
        changes.append(Change("change", key, name, "scope", f"{old.scope} → {new.scope}"))
    if old.idempotency != new.idempotency:
        detail = f"{old.idempotency} → {new.idempotency}"
        changes.append(Change("change", key, name, "idempotency", detail))
    return changes


def _at_least_as_strict(requirement: Requirement, pool: Sequence[Requirement]) -> bool:
    """Whether some requirement in ``pool`` demands all that ``requirement`` does."""
    wanted = set(requirement.fields.items())
    return any(r.tool == requirement.tool and wanted <= set(r.fields.items()) for r in pool)


def _compare_requires(
    key: str, name: str, old: Sequence[Requirement], new: Sequence[Requirement]
) -> list[Change]:
    changes: list[Change] = []
    for requirement in old:
        if not _at_least_as_strict(requirement, new):
            detail = f"no longer requires {requirement.text}"
            changes.append(Change("growth", key, name, "precondition_removed", detail))
    for requirement in new:
        if not _at_least_as_strict(requirement, old):
            detail = f"now requires {requirement.text}"
            changes.append(Change("shrink", key, name, "precondition_added", detail))
    return changes


def _compare_approval(
    key: str, name: str, old: Sequence[ApprovalCase], new: Sequence[ApprovalCase]
) -> list[Change]:
    """Verdicts compared at every amount, for every target class either side tells apart
    (a class one side lacks is judged there as its "every other call" class)."""
    changes: list[Change] = []
    currency = next((c.currency for c in (*new, *old) if c.currency), None)
    for targets in target_classes(old, new):
        for amount in breakpoints(old, new):
            before = verdict_at(old, amount, targets)
            after = verdict_at(new, amount, targets)
            if before == after:
                continue
            where = f"at ≥ {amount} {currency or ''}".rstrip() if amount else "at any amount"
            if targets:
                where = f"for {', '.join(targets)} {where}"
            was, now = _case_text(old, amount, targets), _case_text(new, amount, targets)
            detail = f"{where}: {was} → {now}"
            if STRICTNESS[after] < STRICTNESS[before]:
                changes.append(Change("growth", key, name, "approval_loosened", detail))
            else:
                changes.append(Change("shrink", key, name, "approval_tightened", detail))
    return changes


def _case_text(cases: Sequence[ApprovalCase], amount: int, targets: tuple[str, ...] = ()) -> str:
    own = [c for c in cases if c.targets == targets] or [c for c in cases if not c.targets]
    chosen = [c for c in own if c.from_amount <= amount]
    if not chosen:
        return "ask"
    case = max(chosen, key=lambda c: c.from_amount)
    return f"{case.verdict} ({case.rule})"


def _compare_grant(key: str, old: GrantSummary, new: GrantSummary) -> list[Change]:
    changes: list[Change] = []
    for scope in sorted(set(new.scopes) - set(old.scopes)):
        changes.append(Change("growth", key, "", "grant_widened", f"scope {scope}"))
    for scope in sorted(set(old.scopes) - set(new.scopes)):
        changes.append(Change("shrink", key, "", "grant_narrowed", f"scope {scope}"))
    for effect in sorted(set(new.effects) - set(old.effects)):
        if not effect_covered(effect, old.effects):
            changes.append(Change("growth", key, "", "grant_widened", effect))
    for effect in sorted(set(old.effects) - set(new.effects)):
        if not effect_covered(effect, new.effects):
            changes.append(Change("shrink", key, "", "grant_narrowed", effect))
    for pattern in sorted(set(new.propose) - set(old.propose)):
        changes.append(Change("growth", key, "", "grant_widened", f"propose {pattern}"))
    for pattern in sorted(set(old.propose) - set(new.propose)):
        changes.append(Change("shrink", key, "", "grant_narrowed", f"propose {pattern}"))
    for currency in sorted(old.spend_limits.keys() | new.spend_limits.keys()):
        before, after = old.spend_limits.get(currency, -1), new.spend_limits.get(currency, -1)
        if before == after:
            continue
        detail = f"spend limit {currency}: {_limit(before)} → {_limit(after)}"
        direction: Direction = "growth" if after > before else "shrink"
        kind = "grant_widened" if after > before else "grant_narrowed"
        changes.append(Change(direction, key, "", kind, detail))
    return changes


def _limit(value: int) -> str:
    return "none" if value < 0 else str(value)
