"""The effect lock file: the reachable set written down, and the check that it did not grow.

Format (JSON, keys sorted, two-space indent, one trailing newline, so it diffs well)::

    {
      "lock_version": 1,
      "registry": "myapp.tools:registry",      # informative only
      "policy": "policy.toml",                 # informative only
      "selection": {"every_principal": true, "principals": [], "roles": [], "tenant": null},
      "sandbox": { ...SandboxEffects, "image_digest": "not locked" },
      "subjects": {
        "principal:alice": {
          "kind": "principal", "tenant": "acme",
          "grant": {"scopes": [...], "effects": [...], "spend_limits": {"USD": 50000}},
          "tools": {
            "billing_refund_create": {
              "callers": ["direct"], "scope": "billing.write",
              "effects": ["network(api.billing.example)", "spend({amount_minor} USD)", ...],
              "destinations": [...], "credentials": ["BILLING_API_KEY"],
              "approval": [{"from_amount": 0, "currency": "USD", "verdict": "allow", ...}],
              "idempotency": "keyed", "reach": ["direct", "after_approval"]
            }
          }
        }
      }
    }

The image digest is not locked: it depends on which engine the command reached, and a lock
must read the same on every machine.

Comparing two locks, the check itself, is :mod:`airlock.inventory._lock_check`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from airlock.inventory._errors import LockFileError
from airlock.inventory._model import (
    ApprovalCase,
    GrantSummary,
    Idempotency,
    Inventory,
    Reach,
    SandboxEffects,
    SubjectKind,
)
from airlock.tools import Caller

__all__ = [
    "NOT_LOCKED",
    "EffectLock",
    "LockedSubject",
    "LockedTool",
    "Selection",
    "lock_from_inventory",
    "lock_text",
    "read_lock",
    "write_lock",
]

NOT_LOCKED: Final = "not locked"


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Selection(_Record):
    """Which subjects the lock covers; ``--check`` uses it when no selection is given."""

    every_principal: bool = Field(description="Every principal the policy names.")
    principals: tuple[str, ...] = Field(description="Principals named on the command line.")
    roles: tuple[str, ...] = Field(description="Roles named on the command line.")
    tenant: str | None = Field(description="Tenant given on the command line.")


class LockedTool(_Record):
    """What one tool lets a subject reach."""

    callers: tuple[Caller, ...]
    scope: str
    effects: tuple[str, ...]
    destinations: tuple[str, ...]
    credentials: tuple[str, ...]
    approval: tuple[ApprovalCase, ...]
    idempotency: Idempotency
    reach: tuple[Reach, ...]


class LockedSubject(_Record):
    """One subject's grant and tools."""

    kind: SubjectKind
    tenant: str
    grant: GrantSummary
    tools: dict[str, LockedTool]


class EffectLock(_Record):
    """A lock file's content."""

    lock_version: Literal[1] = 1
    registry: str
    policy: str
    selection: Selection
    sandbox: SandboxEffects
    subjects: dict[str, LockedSubject]


def lock_from_inventory(inventory: Inventory, selection: Selection) -> EffectLock:
    """The lock of ``inventory``: its reachable set in a stable, machine-independent form."""
    subjects = {
        f"{subject.kind}:{subject.name}": LockedSubject(
            kind=subject.kind,
            tenant=subject.tenant_id,
            grant=subject.grant,
            tools={
                tool.name: LockedTool(
                    callers=tool.callers,
                    scope=tool.scope,
                    effects=tuple(sorted(e.declared for e in tool.effects)),
                    destinations=tool.destinations,
                    credentials=tool.credentials,
                    approval=tool.approval,
                    idempotency=tool.idempotency,
                    reach=tool.reach,
                )
                for tool in subject.tools
            },
        )
        for subject in inventory.subjects
    }
    return EffectLock(
        registry=inventory.registry,
        policy=inventory.policy,
        selection=selection,
        sandbox=inventory.sandbox.model_copy(update={"image_digest": NOT_LOCKED}),
        subjects=subjects,
    )


def lock_text(lock: EffectLock) -> str:
    """The lock file's exact text."""
    return json.dumps(lock.model_dump(mode="json"), indent=2, sort_keys=True) + "\n"


def write_lock(lock: EffectLock, path: Path) -> None:
    """Write ``lock`` to ``path`` (replacing it atomically).

    Raises:
        LockFileError: the file cannot be written.
    """
    temporary = path.with_name(path.name + ".tmp")
    try:
        temporary.write_text(lock_text(lock), encoding="utf-8")
        temporary.replace(path)
    except OSError as exc:
        raise LockFileError(str(path), f"cannot write the lock file: {exc}") from exc


def read_lock(path: Path) -> EffectLock:
    """Read and validate the lock file at ``path``.

    Raises:
        LockFileError: it is missing, unreadable, not JSON or not in the lock format.
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise LockFileError(str(path), f"cannot read the lock file: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise LockFileError(str(path), f"not JSON (line {exc.lineno}): {exc.msg}") from exc
    try:
        return EffectLock.model_validate(data)
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        where = ".".join(str(p) for p in first["loc"]) or "top level"
        raise LockFileError(str(path), f"not an effect lock: {where}: {first['msg']}") from None
