"""The check of the effect lock: every difference between two locks, and whether the
reachable set grew.

:func:`compare_locks` lists every difference as a :class:`Change`. *Growth* fails a check:
a new subject or tool that is reachable, a tool reachable in a new way (``code``, ``direct``,
``after_approval``; a tool with side effects becoming callable from code is called out), an
effect, destination or credential not covered by the old ones, an approval verdict loosened
at some amount, a grant widened (scope, effect pattern or spend limit), and a sandbox
widened (a limit raised, a system call, import, capability, mount or environment variable
added, network or file system opened, restricted mode left). The mirror images are
*shrink*; anything else (scope renamed, idempotency, image) is a *change*. Neither fails.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Final, Literal

from airlock.inventory._lock import EffectLock, LockedSubject, LockedTool
from airlock.inventory._model import ApprovalCase, GrantSummary, Mount, SandboxEffects
from airlock.policies import SIDE_EFFECT_KINDS, STRICTNESS, Effect, Grant, breakpoints, verdict_at

__all__ = ["Change", "Direction", "compare_locks", "render_changes"]

Direction = Literal["growth", "shrink", "change"]


@dataclass(frozen=True, slots=True, order=True)
class Change:
    """One difference between two locks."""

    direction: Direction
    subject: str
    tool: str
    kind: str
    """What changed, e.g. ``new_tool``, ``approval_loosened``, ``sandbox_widened``."""
    detail: str


def compare_locks(old: EffectLock, new: EffectLock) -> list[Change]:
    """Every difference from ``old`` to ``new``, growth first, then shrink, then change."""
    changes: list[Change] = []
    for key in sorted(old.subjects.keys() | new.subjects.keys()):
        before, after = old.subjects.get(key), new.subjects.get(key)
        if before is None and after is not None:
            reachable = sorted(name for name, tool in after.tools.items() if tool.reach)
            changes.append(
                Change(
                    "growth" if reachable else "change",
                    key,
                    "",
                    "new_subject",
                    f"reaches {', '.join(reachable) or 'nothing'}",
                )
            )
        elif after is None and before is not None:
            changes.append(Change("shrink", key, "", "removed_subject", "no longer inventoried"))
        elif before is not None and after is not None:
            changes += _compare_subject(key, before, after)
    changes += _compare_sandbox(old.sandbox, new.sandbox)
    rank = {"growth": 0, "shrink": 1, "change": 2}
    return sorted(changes, key=lambda c: (rank[c.direction], c.subject, c.tool, c.kind, c.detail))


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


def _compare_subject(key: str, old: LockedSubject, new: LockedSubject) -> list[Change]:
    changes = _compare_grant(key, old.grant, new.grant)
    if old.tenant != new.tenant:
        changes.append(Change("change", key, "", "tenant", f"{old.tenant} → {new.tenant}"))
    for name in sorted(old.tools.keys() | new.tools.keys()):
        before, after = old.tools.get(name), new.tools.get(name)
        if after is None or not after.reach:
            if before is not None and before.reach:
                why = "no longer visible" if after is None else "every call is now refused"
                changes.append(Change("shrink", key, name, "removed_tool", why))
            continue
        if before is None or not before.reach:
            ways = ", ".join(after.reach)
            changes.append(Change("growth", key, name, "new_tool", f"reachable: {ways}"))
            if "code" in after.reach:
                changes += _side_effects_from_code(key, name, after)
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


def _compare_tool(key: str, name: str, old: LockedTool, new: LockedTool) -> list[Change]:
    changes: list[Change] = []

    def sets(kind: str, before: Iterable[str], after: Iterable[str], covered: _Covers) -> None:
        before, after = tuple(before), tuple(after)
        for item in sorted(set(after) - set(before)):
            if not covered(item, before):
                changes.append(Change("growth", key, name, f"new_{kind}", item))
        for item in sorted(set(before) - set(after)):
            if not covered(item, after):
                changes.append(Change("shrink", key, name, f"removed_{kind}", item))

    gained = [r for r in new.reach if r not in old.reach]
    lost = [r for r in old.reach if r not in new.reach]
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
    sets("effect", old.effects, new.effects, _effect_covered)
    sets("destination", old.destinations, new.destinations, _host_covered)
    sets("credential", old.credentials, new.credentials, lambda item, pool: item in pool)
    changes += _compare_approval(key, name, old.approval, new.approval)
    if old.scope != new.scope:
        changes.append(Change("change", key, name, "scope", f"{old.scope} → {new.scope}"))
    if old.idempotency != new.idempotency:
        detail = f"{old.idempotency} → {new.idempotency}"
        changes.append(Change("change", key, name, "idempotency", detail))
    return changes


def _compare_approval(
    key: str, name: str, old: Sequence[ApprovalCase], new: Sequence[ApprovalCase]
) -> list[Change]:
    changes: list[Change] = []
    currency = next((c.currency for c in (*new, *old) if c.currency), None)
    for amount in breakpoints(old, new):
        before, after = verdict_at(old, amount), verdict_at(new, amount)
        if before == after:
            continue
        where = f"at ≥ {amount} {currency or ''}".rstrip() if amount else "at any amount"
        detail = f"{where}: {_case_text(old, amount)} → {_case_text(new, amount)}"
        if STRICTNESS[after] < STRICTNESS[before]:
            changes.append(Change("growth", key, name, "approval_loosened", detail))
        else:
            changes.append(Change("shrink", key, name, "approval_tightened", detail))
    return changes


def _case_text(cases: Sequence[ApprovalCase], amount: int) -> str:
    chosen = [c for c in cases if c.from_amount <= amount]
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
        if not _effect_covered(effect, old.effects):
            changes.append(Change("growth", key, "", "grant_widened", effect))
    for effect in sorted(set(old.effects) - set(new.effects)):
        if not _effect_covered(effect, new.effects):
            changes.append(Change("shrink", key, "", "grant_narrowed", effect))
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


# -- coverage --------------------------------------------------------------------------------

_Covers = Callable[[str, Sequence[str]], bool]


def _effect_covered(text: str, pool: Sequence[str]) -> bool:
    """Whether effect ``text`` reaches nothing the effects in ``pool`` did not already."""
    try:
        effect = Effect.parse(text)
        others = [Effect.parse(item) for item in pool]
    except ValueError:
        return text in pool
    for other in others:
        if other.kind != effect.kind:
            continue
        if effect.kind == "spend":
            if effect.target == other.target and (
                isinstance(other.amount, str)
                or (isinstance(effect.amount, int) and effect.amount <= int(other.amount or 0))
            ):
                return True
        elif Grant(effects=(Effect(other.kind, other.pattern),)).covers(effect):
            return True
    return False


def _host_covered(host: str, pool: Sequence[str]) -> bool:
    return _effect_covered(f"network({host})", [f"network({h})" for h in pool])


# -- sandbox ---------------------------------------------------------------------------------

_WIDER_WHEN: Final[dict[str, Callable[[object], int]]] = {
    "network": lambda v: 0 if v == "none" else 1,
    "root_filesystem": lambda v: 0 if v == "read-only" else 1,
    "no_new_privileges": lambda v: 0 if v is True else 1,
    "language_mode": lambda v: 0 if v == "restricted" else 1,
}
_SETS: Final = ("capabilities", "environment", "allowed_imports", "seccomp_allowed")


_HARDENING: Final = frozenset({"ro", "noexec", "nosuid", "nodev"})


def _compare_mounts(old: Sequence[Mount], new: Sequence[Mount]) -> list[Change]:
    before, after = {m.path: m for m in old}, {m.path: m for m in new}
    changes: list[Change] = []

    def add(wider: bool, detail: str) -> None:
        direction: Direction = "growth" if wider else "shrink"
        kind = "sandbox_widened" if wider else "sandbox_narrowed"
        changes.append(Change(direction, "sandbox", "", kind, detail))

    for path in sorted(after.keys() - before.keys()):
        add(True, f"mount + {path} ({after[path].mode})")
    for path in sorted(before.keys() - after.keys()):
        add(False, f"mount - {path}")
    for path in sorted(before.keys() & after.keys()):
        was, now = before[path], after[path]
        if was.mode != now.mode:
            lost = _HARDENING & (_flags(was.mode) - _flags(now.mode))
            add(bool(lost), f"mount {path}: {was.mode} → {now.mode}")
        if was.size_bytes != now.size_bytes:
            grew = now.size_bytes is None or (
                was.size_bytes is not None and now.size_bytes > was.size_bytes
            )
            add(grew, f"mount {path} size: {was.size_bytes} → {now.size_bytes}")
    return changes


def _flags(mode: str) -> set[str]:
    return set(mode.replace(" ", ",").split(","))


def _compare_sandbox(old: SandboxEffects, new: SandboxEffects) -> list[Change]:
    changes: list[Change] = []

    def add(wider: bool, detail: str) -> None:
        direction: Direction = "growth" if wider else "shrink"
        kind = "sandbox_widened" if wider else "sandbox_narrowed"
        changes.append(Change(direction, "sandbox", "", kind, detail))

    for name, rank in _WIDER_WHEN.items():
        before, after = getattr(old, name), getattr(new, name)
        if before != after:
            if rank(before) == rank(after):
                changes.append(Change("change", "sandbox", "", name, f"{before} → {after}"))
            else:
                add(rank(after) > rank(before), f"{name}: {before} → {after}")
    for name, before_limit in old.limits.model_dump().items():
        after_limit = getattr(new.limits, name)
        if after_limit != before_limit:
            add(after_limit > before_limit, f"limit {name}: {before_limit} → {after_limit}")
    for name in _SETS:
        before_set, after_set = set(getattr(old, name)), set(getattr(new, name))
        for item in sorted(after_set - before_set):
            add(True, f"{name} + {item}")
        for item in sorted(before_set - after_set):
            add(False, f"{name} - {item}")
    changes += _compare_mounts(old.mounts, new.mounts)
    for name in ("user", "image"):
        before, after = getattr(old, name), getattr(new, name)
        if before != after:
            changes.append(Change("change", "sandbox", "", name, f"{before} → {after}"))
    if old.seccomp_sha256 != new.seccomp_sha256 and old.seccomp_allowed == new.seccomp_allowed:
        detail = f"seccomp filter changed: {old.seccomp_sha256[:12]} → {new.seccomp_sha256[:12]}"
        changes.append(Change("change", "sandbox", "", "seccomp", detail))
    return changes
