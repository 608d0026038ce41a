"""The effect inventory: what a principal can reach, written down, locked and checked.

- :func:`build_inventory` / :func:`subject_inventory`: every tool a subject can see, its
  effects, destinations, the credential names its calls send, its preconditions and
  approval rules, the sandbox's own effects (:func:`sandbox_effects`) and the harness's own
  connections (:func:`harness_connections`), as an :class:`Inventory`;
- :func:`render`: a table, Markdown or JSON (the schema: :func:`inventory_json_schema`);
- the lock file (:func:`lock_from_inventory`, :func:`compare_locks`): the reachable set
  written down, and the check that fails when it grows;
- :func:`check_program`: which tools a program can call, read from its text;
- audit views (:func:`run_effects`, :func:`unused_effects`, :func:`users_of`): what runs
  actually touched, set against what was reachable.
"""

from airlock.inventory._audit_effects import (
    EXERCISED_STAGES,
    ExercisedTool,
    UnusedEffect,
    exercised,
    parse_since,
    run_effects,
    unused_effects,
    users_of,
)
from airlock.inventory._build import ToolCatalog, build_inventory, effect_label, subject_inventory
from airlock.inventory._errors import (
    LockFileError,
    ProgramSyntaxError,
    RegistryRefError,
    ToolFactError,
    UnknownSubjectError,
    UnsafeRegistryError,
)
from airlock.inventory._harness_effects import harness_connections
from airlock.inventory._lock import (
    NOT_LOCKED,
    EffectLock,
    LockedConnection,
    LockedSubject,
    LockedTool,
    Selection,
    lock_from_inventory,
    lock_text,
    read_lock,
    write_lock,
)
from airlock.inventory._lock_check import SANDBOX_RULES, Change, compare_locks, render_changes
from airlock.inventory._model import (
    ApprovalCase,
    BroadTool,
    ComposedView,
    ConnectionDirection,
    EffectEntry,
    EffectTotal,
    GrantCoverage,
    GrantSummary,
    HarnessConnection,
    Idempotency,
    Inventory,
    Mount,
    PathView,
    Reach,
    Requirement,
    SandboxEffects,
    SandboxLimits,
    SubjectInventory,
    SubjectKind,
    ToolEntry,
    inventory_json_schema,
)
from airlock.inventory._registry_ref import load_registry, load_tool_registry
from airlock.inventory._render import Format, render
from airlock.inventory._sandbox_effects import sandbox_effects
from airlock.inventory._static_check import (
    DYNAMIC_CALLS,
    ESCAPE_MODULES,
    INTROSPECTION_ATTRIBUTES,
    REFLECTIVE_NAMES,
    CallForm,
    ProgramEffects,
    ToolUse,
    UnknownUse,
    Unresolved,
    Verdict,
    check_program,
)
from airlock.inventory._subjects import ANY_PRINCIPAL, PolicyDocument, Subject, load_policy_document
from airlock.inventory._tool_facts import credential_names, destinations, idempotency

__all__ = [
    "ANY_PRINCIPAL",
    "DYNAMIC_CALLS",
    "ESCAPE_MODULES",
    "EXERCISED_STAGES",
    "INTROSPECTION_ATTRIBUTES",
    "NOT_LOCKED",
    "REFLECTIVE_NAMES",
    "SANDBOX_RULES",
    "ApprovalCase",
    "BroadTool",
    "CallForm",
    "Change",
    "ComposedView",
    "ConnectionDirection",
    "EffectEntry",
    "EffectLock",
    "EffectTotal",
    "ExercisedTool",
    "Format",
    "GrantCoverage",
    "GrantSummary",
    "HarnessConnection",
    "Idempotency",
    "Inventory",
    "LockFileError",
    "LockedConnection",
    "LockedSubject",
    "LockedTool",
    "Mount",
    "PathView",
    "PolicyDocument",
    "ProgramEffects",
    "ProgramSyntaxError",
    "Reach",
    "RegistryRefError",
    "Requirement",
    "SandboxEffects",
    "SandboxLimits",
    "Selection",
    "Subject",
    "SubjectInventory",
    "SubjectKind",
    "ToolCatalog",
    "ToolEntry",
    "ToolFactError",
    "ToolUse",
    "UnknownSubjectError",
    "UnknownUse",
    "Unresolved",
    "UnsafeRegistryError",
    "UnusedEffect",
    "Verdict",
    "build_inventory",
    "check_program",
    "compare_locks",
    "credential_names",
    "destinations",
    "effect_label",
    "exercised",
    "harness_connections",
    "idempotency",
    "inventory_json_schema",
    "load_policy_document",
    "load_registry",
    "load_tool_registry",
    "lock_from_inventory",
    "lock_text",
    "parse_since",
    "read_lock",
    "render",
    "render_changes",
    "run_effects",
    "sandbox_effects",
    "subject_inventory",
    "unused_effects",
    "users_of",
    "write_lock",
]
