"""The effect lock file: the reachable set written down, and the check that it did not grow.

Format (JSON, keys sorted, two-space indent, one trailing newline, so it diffs well)::

    {
      "lock_version": 3,
      "registry": "myapp.tools:registry",      # informative only
      "policy": "policy.toml",                 # informative only
      "selection": {"every_principal": true, "principals": [], "roles": [], "tenant": null},
      "sandbox": { ...SandboxEffects, "image_digest": "not locked" },
      "harness": {
        "model provider": {"direction": "outbound", "kind": "https",
                           "locked_as": "https://api.anthropic.com/v1/messages",
                           "credential": "ANTHROPIC_API_KEY"},
        "audit store": {"direction": "local", "kind": "sqlite file",
                        "locked_as": "$AIRLOCK_HOME/audit.db", "credential": null},
        ...
      },
      "subjects": {
        "principal:alice": {
          "kind": "principal", "tenant": "acme", "every_tenant": false,
          "self_approval": false,
          "grant": {"scopes": [...], "effects": [...], "spend_limits": {"USD": 50000}},
          "tools": {
            "billing_refund_create": {
              "callers": ["direct"], "scope": "billing.write",
              "effects": ["network(api.billing.example)", "spend({amount_minor} USD)", ...],
              "destinations": [...], "credentials": ["BILLING_TOKEN_ACME"],
              "requires": [{"tool": "billing_invoice_get", "fields": {"invoice_id": ...}}],
              "approval": [{"from_amount": 0, "currency": "USD", "verdict": "allow", ...}],
              "idempotency": "keyed", "reach": ["direct", "after_approval"]
            }
          }
        }
      }
    }

The image digest and the guest seccomp filter's rendered text are not locked: they depend on
which engine the command reached and which libseccomp it found, and a lock must read the same
on every machine (what the guest filter refuses is locked, as its rule lines). For the same
reason a harness connection is locked as its machine-independent form (``locked_as``), not
where this machine resolves it.
``credentials`` are the ones the subject's calls send (its tenant's, when the adapter picks
one per tenant; every tenant's for a subject that acts in any tenant), so moving a principal
to another tenant shows up twice: the tenant and the credential; and a tenant's credential
added to a tool shows up for every subject that acts in any tenant.

Comparing two locks, the check itself, is :mod:`airlock.inventory._lock_check`.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from airlock.inventory._errors import LockFileError
from airlock.inventory._model import (
    ApprovalCase,
    ConnectionDirection,
    GrantSummary,
    Idempotency,
    Inventory,
    Reach,
    Requirement,
    SandboxEffects,
    SubjectKind,
)
from airlock.inventory._subjects import ANY_PRINCIPAL
from airlock.tools import Caller

__all__ = [
    "LOCK_VERSION",
    "NOT_LOCKED",
    "EffectLock",
    "LockedConnection",
    "LockedSubject",
    "LockedTool",
    "Selection",
    "lock_from_inventory",
    "lock_text",
    "read_lock",
    "write_lock",
]

NOT_LOCKED: Final = "not locked"
LOCK_VERSION: Final = 3
# Sandbox facts that depend on the machine the command ran on, not on the deployment: the
# image digest (which engine answered) and the guest filter's rendered text (which libseccomp
# was importable); what the guest filter refuses is locked as its rule lines.
_MACHINE_DEPENDENT: Final = {"image_digest": NOT_LOCKED, "guest_seccomp_pfc": NOT_LOCKED}


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Selection(_Record):
    """Which subjects the lock covers; ``--check`` uses it when no selection is given."""

    every_principal: bool = Field(description="Every principal the policy names.")
    principals: tuple[str, ...] = Field(description="Principals named on the command line.")
    roles: tuple[str, ...] = Field(description="Roles named on the command line.")
    tenant: str | None = Field(description="Tenant given on the command line.")

    def as_meant(self) -> Selection:
        """This selection as it was meant when written: a lock written while an empty
        ``--tenant=`` still meant none given, and an empty ``--principal=`` every principal
        (``*``), holds ``""`` for them, an id the command line now refuses."""
        principals = tuple(p or ANY_PRINCIPAL for p in self.principals)
        return self.model_copy(update={"tenant": self.tenant or None, "principals": principals})


class LockedTool(_Record):
    """What one tool lets a subject reach."""

    callers: tuple[Caller, ...]
    scope: str
    effects: tuple[str, ...]
    destinations: tuple[str, ...]
    credentials: tuple[str, ...]
    requires: tuple[Requirement, ...]
    approval: tuple[ApprovalCase, ...]
    idempotency: Idempotency
    reach: tuple[Reach, ...]


class LockedSubject(_Record):
    """One subject's grant and tools."""

    kind: SubjectKind
    tenant: str
    every_tenant: bool
    """It acts in every tenant (no entry binds it): ``tenant`` is only where its grant was
    computed."""
    self_approval: bool
    """Whoever asks for one of its writes may approve it."""
    grant: GrantSummary
    tools: dict[str, LockedTool]


class LockedConnection(_Record):
    """One connection of the harness itself, as every machine reads it."""

    direction: ConnectionDirection
    kind: str
    locked_as: str
    credential: str | None


class EffectLock(_Record):
    """A lock file's content."""

    lock_version: Literal[3] = LOCK_VERSION
    registry: str
    policy: str
    selection: Selection
    sandbox: SandboxEffects
    harness: dict[str, LockedConnection]
    subjects: dict[str, LockedSubject]


def lock_from_inventory(inventory: Inventory, selection: Selection) -> EffectLock:
    """The lock of ``inventory``: its reachable set in a stable, machine-independent form."""
    subjects = {
        f"{subject.kind}:{subject.name}": LockedSubject(
            kind=subject.kind,
            tenant=subject.tenant_id,
            every_tenant=subject.every_tenant,
            self_approval=subject.self_approval,
            grant=subject.grant,
            tools={
                tool.name: LockedTool(
                    callers=tool.callers,
                    scope=tool.scope,
                    effects=tuple(sorted(e.declared for e in tool.effects)),
                    destinations=tool.destinations,
                    credentials=tool.credentials,
                    requires=tool.requires,
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
        sandbox=inventory.sandbox.model_copy(update=_MACHINE_DEPENDENT),
        harness={
            c.name: LockedConnection(
                direction=c.direction, kind=c.kind, locked_as=c.locked_as, credential=c.credential
            )
            for c in inventory.harness
        },
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
    # A name of its own beside ``path`` (created here, never an existing file), removed
    # again when anything fails: a failed write leaves nothing behind.
    # (within NAME_MAX, which counts bytes: a name's first 200, cut where they fall)
    short = os.fsdecode(os.fsencode(path.name)[:200])
    temporary = path.with_name(f".{short}.{secrets.token_hex(8)}.tmp")
    created = False
    try:
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        created = True
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            file.write(lock_text(lock))
        temporary.replace(path)
    except OSError as exc:
        if created:
            with contextlib.suppress(OSError):
                temporary.unlink()
        raise LockFileError(str(path), f"cannot write the lock file: {exc}") from exc


def read_lock(path: Path) -> EffectLock:
    """Read and validate the lock file at ``path``: it must be exactly the text ``--lock``
    writes, so what a reviewer reads in it is what the check compares against.

    Raises:
        LockFileError: it is missing, unreadable, not JSON (or JSON nested too deep, a number
            too long, ``NaN``, ``Infinity`` or a lone surrogate), not in the lock format,
            holds a key twice, or is not in the canonical form ``--lock`` writes.
    """
    try:
        text = path.read_text(encoding="utf-8")
        data = json.loads(
            text, object_pairs_hook=_refuse_duplicates, parse_constant=_refuse_constant
        )
        # JSON reads a lone surrogate escape ("\\ud800"), which no report can print.
        json.dumps(data, ensure_ascii=False).encode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise LockFileError(str(path), f"cannot read the lock file: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise LockFileError(str(path), f"not JSON (line {exc.lineno}): {exc.msg}") from exc
    except _DuplicateKeyError as exc:
        # json.loads keeps the last copy; a reader of the file may see the first.
        raise LockFileError(
            str(path), f"the key {exc.key!r} appears twice in one object (edited by hand?)"
        ) from None
    except _ConstantError as exc:
        # NaN is written back as NaN, and no limit compares above or below it.
        raise LockFileError(
            str(path), f"holds {exc.constant!r}, which is not a number a lock holds"
        ) from None
    except RecursionError:
        raise LockFileError(str(path), "not a lock file: its JSON is nested too deep") from None
    except UnicodeEncodeError:
        raise LockFileError(
            str(path), "not a lock file: it holds text that is not Unicode (a lone surrogate)"
        ) from None
    except ValueError:  # an integer longer than int() reads (sys.get_int_max_str_digits)
        raise LockFileError(str(path), "not a lock file: it holds a number too long") from None
    version = data.get("lock_version") if isinstance(data, dict) else None
    if isinstance(version, int) and version < LOCK_VERSION:
        raise LockFileError(
            str(path),
            f"lock version {version} is older than this airlock's ({LOCK_VERSION}), which also "
            "locks preconditions, each principal's credentials, tenant binding and "
            "self-approval, the harness's connections and the seccomp filter's argument "
            "conditions and default action",
        )
    try:
        lock = EffectLock.model_validate(data)
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        where = ".".join(str(p) for p in first["loc"]) or "top level"
        raise LockFileError(str(path), f"not an effect lock: {where}: {first['msg']}") from None
    if lock_text(lock) != text:
        raise LockFileError(
            str(path),
            "not in the exact form --lock writes (edited by hand?): what a reader sees in it "
            "must be what the check compares against",
        )
    return lock


class _DuplicateKeyError(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


class _ConstantError(ValueError):
    def __init__(self, constant: str) -> None:
        super().__init__(constant)
        self.constant = constant


def _refuse_constant(constant: str) -> Any:
    raise _ConstantError(constant)


def _refuse_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise _DuplicateKeyError(key)
        found[key] = value
    return found
