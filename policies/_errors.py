"""The root of every error airlock raises on purpose.

    AirlockError                 code, retryable
    ├── UsageError               a developer must change code or configuration
    │   └── PolicyFileError      a policy file is malformed (names file, line, key)
    ├── tools.ToolError          a tool call failed; crosses process boundaries (wire form)
    └── sandbox.SandboxError     the sandbox could not run a program

Each class carries a stable ``code`` (part of the public contract: clients branch on it) and
``retryable`` (whether the same request may succeed later without any change).
"""

from __future__ import annotations

from typing import ClassVar

__all__ = ["AirlockError", "UsageError"]


class AirlockError(Exception):
    """Base class: every deliberate error has a stable ``code`` and a ``retryable`` flag."""

    code: ClassVar[str] = "airlock_error"
    retryable: ClassVar[bool] = False


class UsageError(AirlockError):
    """The developer made a mistake: the message says what to change."""

    code = "usage_error"
