"""Errors of the effect inventory, the lock file and the static check of programs.

    UsageError (policies)
    ├── RegistryRefError       ``--registry`` is not an importable ``MODULE:OBJECT`` registry
    ├── UnknownSubjectError    a role the policy file does not declare
    ├── LockFileError          a lock file cannot be read or is not a lock file
    ├── UnsafeRegistryError    a registry lets code call a tool with side effects
    ├── ToolFactError          a tool declares a destination or credential that does not parse
    └── ProgramSyntaxError     a program to check is not valid Python

All are mistakes a developer or operator fixes; none is retryable.
"""

from __future__ import annotations

from airlock.policies import UsageError

__all__ = [
    "LockFileError",
    "ProgramSyntaxError",
    "RegistryRefError",
    "ToolFactError",
    "UnknownSubjectError",
    "UnsafeRegistryError",
]


class RegistryRefError(UsageError):
    """``MODULE:OBJECT`` does not name an importable registry; :attr:`ref` is what was given."""

    code = "registry_ref"

    def __init__(self, ref: str, reason: str) -> None:
        super().__init__(
            f"--registry {ref!r}: {reason}; write MODULE:OBJECT, for example 'myapp.tools:registry'"
        )
        self.ref = ref
        self.reason = reason


class UnknownSubjectError(UsageError):
    """A role named on the command line is not declared in the policy file."""

    code = "unknown_subject"

    def __init__(self, kind: str, name: str, known: list[str]) -> None:
        listed = ", ".join(sorted(known)) or "none"
        super().__init__(f"unknown {kind} {name!r}; the policy declares: {listed}")
        self.kind = kind
        self.name = name


class LockFileError(UsageError):
    """A lock file is missing, unreadable or not in the lock format; :attr:`path` says which."""

    code = "lock_file"

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(
            f"{path}: {reason}; write a fresh lock with `airlock inventory ... --lock {path}`"
        )
        self.path = path
        self.reason = reason


class UnsafeRegistryError(UsageError):
    """A tool with ``write``/``spend``/``disclose`` effects is callable from code.

    :class:`airlock.tools.Registry` refuses such tools at registration; this error means a registry
    object bypassed that check, and the inventory refuses to describe it as if it were safe.
    """

    code = "unsafe_registry"

    def __init__(self, tool: str, effects: list[str]) -> None:
        super().__init__(
            f"tool {tool!r} is callable from code but declares {', '.join(effects)}; "
            "tools with side effects must have callers={'direct'}"
        )
        self.tool = tool
        self.effects = tuple(effects)


class ToolFactError(UsageError):
    """A tool declares a destination or credential name the inventory cannot read.

    :class:`airlock.tools.Registry` refuses such a tool at registration; this error means a
    registry object bypassed that check, and the inventory refuses to leave the fact out.
    """

    code = "tool_fact"

    def __init__(self, tool: str, fact: str, value: object, reason: str) -> None:
        super().__init__(
            f"tool {tool!r} declares the {fact} {value!r}, which the inventory cannot list: "
            f"{reason}; fix the declaration (registering the tool shows the accepted forms)"
        )
        self.tool = tool
        self.fact = fact
        self.value = value


class ProgramSyntaxError(UsageError):
    """The program given to the static check does not parse; :attr:`line` says where."""

    code = "program_syntax"

    def __init__(self, reason: str, *, line: int | None) -> None:
        where = f"line {line}: " if line is not None else ""
        super().__init__(f"the program is not valid Python: {where}{reason}")
        self.reason = reason
        self.line = line
