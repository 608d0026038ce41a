"""The lock check of what is not a tool: the harness's own connections and the sandbox.

Every field of :class:`SandboxEffects` is judged by its rule in :data:`SANDBOX_RULES` (a
field without one counts as growth until it gets one); a harness connection added, or one
pointed somewhere new, is growth.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from airlock.inventory._change import Change, Direction
from airlock.inventory._lock import LockedConnection
from airlock.inventory._model import Mount, SandboxEffects
from airlock.policies import DISTINCT_USER

__all__ = ["SANDBOX_RULES", "compare_harness", "compare_sandbox"]


# -- the harness's own connections ---------------------------------------------------------


def compare_harness(
    old: Mapping[str, LockedConnection], new: Mapping[str, LockedConnection]
) -> list[Change]:
    """Every difference in the harness's own connections, from ``old`` to ``new``."""
    changes: list[Change] = []
    for name in sorted(new.keys() - old.keys()):
        connection = new[name]
        detail = f"{name}: {connection.direction} {connection.kind} {connection.locked_as}"
        changes.append(Change("growth", "harness", "", "new_connection", detail))
    for name in sorted(old.keys() - new.keys()):
        changes.append(Change("shrink", "harness", "", "removed_connection", name))
    for name in sorted(old.keys() & new.keys()):
        before, after = old[name], new[name]
        if before == after:
            continue
        detail = f"{name}: {_connection_text(before)} → {_connection_text(after)}"
        # Another endpoint, listener, medium or credential is somewhere new; a local file
        # that moved within the machine reaches nothing new.
        wider = (
            after.direction != "local"
            or before.direction != after.direction
            or after.credential not in (None, before.credential)
        )
        direction: Direction = "growth" if wider else "change"
        changes.append(Change(direction, "harness", "", "connection_changed", detail))
    return changes


def _connection_text(connection: LockedConnection) -> str:
    credential = f" with {connection.credential}" if connection.credential else ""
    return f"{connection.direction} {connection.kind} {connection.locked_as}{credential}"


# -- sandbox ---------------------------------------------------------------------------------

_Judge = Callable[[Any, Any], list[tuple[Direction, str]]]


def _ranked(order: Callable[[Any], int]) -> _Judge:
    """A field whose values are ordered from narrow (low) to wide (high)."""

    def judge(before: Any, after: Any) -> list[tuple[Direction, str]]:
        if order(before) == order(after):
            return [("change", f"{before} → {after}")]
        return [("growth" if order(after) > order(before) else "shrink", f"{before} → {after}")]

    return judge


def _members(before: Any, after: Any) -> list[tuple[Direction, str]]:
    """A set whose every added member is growth (a call, import, capability, variable)."""
    old, new = set(before), set(after)
    return [("growth", f"+ {item}") for item in sorted(new - old)] + [
        ("shrink", f"- {item}") for item in sorted(old - new)
    ]


def _replaced(before: Any, after: Any) -> list[tuple[Direction, str]]:
    """A value that names other code (an image): whatever it is now, programs reach code the
    lock never listed (its packages are the ones airlock builds its own image with)."""
    return [("growth", f"{before} → {after}")]


def _ignored(before: Any, after: Any) -> list[tuple[Direction, str]]:
    return []


def _limits(before: Any, after: Any) -> list[tuple[Direction, str]]:
    found: list[tuple[Direction, str]] = []
    for name, was in before.model_dump().items():
        now = getattr(after, name)
        if now != was:
            found.append(("growth" if now > was else "shrink", f"{name}: {was} → {now}"))
    return found


_HARDENING: Final = frozenset({"ro", "noexec", "nosuid", "nodev"})


def _flags(mode: str) -> set[str]:
    return set(mode.replace(" ", ",").split(","))


def _mounts(old: Sequence[Mount], new: Sequence[Mount]) -> list[tuple[Direction, str]]:
    before, after = {m.path: m for m in old}, {m.path: m for m in new}
    found: list[tuple[Direction, str]] = []
    for path in sorted(after.keys() - before.keys()):
        found.append(("growth", f"+ {path} ({after[path].mode})"))
    for path in sorted(before.keys() - after.keys()):
        found.append(("shrink", f"- {path}"))
    for path in sorted(before.keys() & after.keys()):
        was, now = before[path], after[path]
        if was.mode != now.mode:
            lost = _HARDENING & (_flags(was.mode) - _flags(now.mode))
            found.append(("growth" if lost else "shrink", f"{path}: {was.mode} → {now.mode}"))
        if was.size_bytes != now.size_bytes:
            grew = now.size_bytes is None or (
                was.size_bytes is not None and now.size_bytes > was.size_bytes
            )
            direction: Direction = "growth" if grew else "shrink"
            found.append((direction, f"{path} size: {was.size_bytes} → {now.size_bytes}"))
    return found


def _seccomp_hash(before: Any, after: Any) -> list[tuple[Direction, str]]:
    # Reached only when neither the allowed calls (with their argument conditions) nor the
    # default action changed: the filter changed in a way no rule judges, so fail closed.
    detail = f"filter {str(before)[:12]} → {str(after)[:12]} (not judged: review the filter)"
    return [("growth", detail)]


def _seccomp_calls(before: Any, after: Any) -> list[tuple[Direction, str]]:
    """Allowed calls, each ``name`` or ``name when <conditions>``: an entry added is growth
    (a call, or another way through for one), unless it only puts conditions on a call the
    filter let through with any arguments; an entry gone is shrink."""
    old, new = set(before), set(after)
    found: list[tuple[Direction, str]] = []
    for item in sorted(new - old):
        name = item.split(" ", 1)[0]
        direction: Direction = "growth"
        if item != name and name in new:  # the call still passes with any arguments
            direction = "change"
        elif item != name and name in old:  # conditions put on a call that had none
            direction = "shrink"
        found.append((direction, f"+ {item}"))
    return found + [("shrink", f"- {item}") for item in sorted(old - new)]


# What the filter does with a call no rule allows, narrow to wide; an action not listed
# (ALLOW, LOG, TRACE, NOTIFY, unknown) may let the call run.
_DEFAULT_ACTIONS: Final = {
    "SCMP_ACT_KILL_PROCESS": 0,
    "SCMP_ACT_KILL_THREAD": 0,
    "SCMP_ACT_KILL": 0,
    "SCMP_ACT_TRAP": 1,
    "SCMP_ACT_ERRNO": 1,
}


def _sandbox_user(before: Any, after: Any) -> list[tuple[Direction, str]]:
    # A distinct uid is the container's own; a fixed one is shared by every container that
    # runs as it (the kernel's per-user budgets) and may be a host user's. One fixed uid for
    # another may be anyone's: fail closed.
    detail = f"{before} → {after}"
    if after == DISTINCT_USER:
        return [("shrink", detail)]
    return [("growth", detail)]


def _refusals(before: Any, after: Any) -> list[tuple[Direction, str]]:
    """A set of refusals (guest seccomp rules, masked paths): one that goes away is growth."""
    old, new = set(before), set(after)
    return [("growth", f"- {item}") for item in sorted(old - new)] + [
        ("shrink", f"+ {item}") for item in sorted(new - old)
    ]


def _settings(before: Any, after: Any) -> list[tuple[Direction, str]]:
    """Container settings no other field describes: no rule can tell a narrower one from a
    wider one (a setting gone may be a default that is wider), so every change is growth."""
    old, new = set(before), set(after)
    return [("growth", f"+ {item}") for item in sorted(new - old)] + [
        ("growth", f"- {item}") for item in sorted(old - new)
    ]


# gVisor puts a second kernel between the program and the host's; an unknown runtime may be
# anything, so it ranks as the widest.
_RUNTIMES: Final = {"runsc": 0, "runc": 1, "crun": 1}


SANDBOX_RULES: Final[Mapping[str, _Judge]] = {
    "network": _ranked(lambda v: 0 if v == "none" else 1),
    "root_filesystem": _ranked(lambda v: 0 if v == "read-only" else 1),
    "mounts": _mounts,
    "user": _sandbox_user,
    "capabilities": _members,
    "no_new_privileges": _ranked(lambda v: 0 if v is True else 1),
    "environment": _members,
    "limits": _limits,
    "language_mode": _ranked(lambda v: 0 if v == "restricted" else 1),
    "allowed_imports": _members,
    "seccomp_sha256": _seccomp_hash,
    "seccomp_allowed": _seccomp_calls,
    "seccomp_default": _ranked(lambda v: _DEFAULT_ACTIONS.get(v, len(_DEFAULT_ACTIONS))),
    "runtime": _ranked(lambda v: _RUNTIMES.get(v, len(_RUNTIMES))),
    "guest_seccomp": _refusals,
    "masked_paths": _refusals,  # a path no longer masked is growth
    # Judged by guest_seccomp; the text also depends on the host's libseccomp and
    # architecture, so the lock does not hold it.
    "guest_seccomp_pfc": _ignored,
    "image": _replaced,  # AIRLOCK_IMAGE / AIRLOCK_DATA_IMAGE: python:3.11 is no airlock image
    "image_digest": _ignored,  # not locked: it depends on the engine the command reached
    "image_kind": _ranked(lambda v: 0 if v == "base" else 1),
    "image_packages": _members,  # a package added is more native code a program reaches
    "other_settings": _settings,
}
"""How a change of each :class:`SandboxEffects` field is judged: growth, shrink or change."""


def _unjudged(before: Any, after: Any) -> list[tuple[Direction, str]]:
    # A field no rule judges yet may widen the sandbox: it fails the check until it has one.
    return [("growth", f"{before} → {after} (no rule judges this field yet)")]


def compare_sandbox(old: SandboxEffects, new: SandboxEffects) -> list[Change]:
    """Every difference in the sandbox's effect set, each judged by its field's rule."""
    changes: list[Change] = []
    kinds = {"growth": "sandbox_widened", "shrink": "sandbox_narrowed", "change": "sandbox"}
    for name in SandboxEffects.model_fields:
        before, after = getattr(old, name), getattr(new, name)
        if before == after:
            continue
        if name == "seccomp_sha256" and (
            old.seccomp_allowed != new.seccomp_allowed or old.seccomp_default != new.seccomp_default
        ):
            continue  # the allowed calls and the default action that changed are listed
        for direction, detail in SANDBOX_RULES.get(name, _unjudged)(before, after):
            changes.append(Change(direction, "sandbox", "", kinds[direction], f"{name} {detail}"))
    return changes
