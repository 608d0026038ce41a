"""The errors a program's tool calls raise, rebuilt from the host's ``result`` frames.

Standard library only; shipped in the image next to the runner. One class per tool error code,
as ``airlock_wire.ERRORS`` lists them, each with that code's typed fields as attributes
(``None`` when the host sent none)::

    ToolError                 .code, .message, .retryable
    ├── UnknownTool           unknown_tool       .name            (also an AttributeError)
    ├── InvalidInput          invalid_input      .issues          [{"field", "reason"}, ...]
    ├── Denied                denied             .reason          scope | effect | spend | policy
    ├── NotFound              not_found
    ├── Conflict              conflict           .requires        the call it needs first
    ├── RateLimited           rate_limited       .retry_after     seconds, or None
    ├── Upstream              upstream
    ├── Timeout               timeout            .seconds
    ├── AmbiguousWrite        ambiguous_write    .idempotency_key
    ├── ResultTooLarge        result_too_large   .size_bytes, .limit_bytes
    ├── ApprovalMismatch      approval_mismatch
    ├── PreviewExpired        preview_expired
    ├── NeedsApproval         needs_approval     .rule, .preview_id
    ├── LimitExceeded         limit_exceeded     .limit
    └── ProtocolError         protocol_error     .reason

    RunAborted (a BaseException)                 .code            the host ended the run
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing's, which the guest does not import (see airlock.sandbox.guest)
if TYPE_CHECKING:
    from typing import Any

    from airlock.bridge import airlock_wire as wire
else:
    import airlock_wire as wire  # the shared contract, next to this file in the image


class ToolError(Exception):
    """A tool call failed; ``code`` is stable, ``retryable`` says whether to try again.

    The typed fields of the code (see the module's tree) are attributes as well.
    """

    code = "tool_error"

    def __init__(
        self, message: str, *, code: str | None = None, retryable: bool = False, **fields: Any
    ) -> None:
        """An error of ``code`` (default: the class's) with its typed ``fields``.

        Raises:
            TypeError: a field that the code does not have.
        """
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.retryable = retryable
        shape = wire.ERRORS.get(self.code)
        known = shape.fields if shape else ()
        for name in fields:
            if name not in known:
                raise TypeError(
                    f"a {self.code!r} error has no field {name!r}; its fields: {list(known)}"
                )
        for name in known:
            setattr(self, name, fields.get(name))


class UnknownTool(ToolError, AttributeError):
    """No tool of that name is available to this program: missing, hidden, or a write.

    ``name`` is the name asked for. Also an ``AttributeError``, so ``hasattr(tools, name)``
    and ``getattr(tools, name, None)`` answer as they do for any object.
    """

    code = "unknown_tool"


class InvalidInput(ToolError):
    """The arguments do not fit the tool; fix them and call again.

    ``issues`` is a list of ``{"field": ..., "reason": ...}``: the dotted path of each bad
    argument (empty for the arguments as a whole) and what is wrong with it.
    """

    code = "invalid_input"
    issues: list[dict[str, Any]]

    def __init__(self, message: str, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        if not isinstance(self.issues, list):
            self.issues = []


class Denied(ToolError):
    """The run may not make this call (``reason``: scope, effect, spend or policy)."""

    code = "denied"


class NotFound(ToolError):
    """No such record, or one this run may not see."""

    code = "not_found"


class Conflict(ToolError):
    """The call conflicts with the run's state; ``requires`` names a call to make first."""

    code = "conflict"


class RateLimited(ToolError):
    """Too many calls; wait ``retry_after`` seconds (``None`` when unknown) and try again."""

    code = "rate_limited"


class Upstream(ToolError):
    """The system behind the tool failed; trying again later may work."""

    code = "upstream"


class Timeout(ToolError):
    """The call did not answer within ``seconds``; do not assume it ran or did not."""

    code = "timeout"


class AmbiguousWrite(ToolError):
    """A write may or may not have happened (``idempotency_key`` identifies it)."""

    code = "ambiguous_write"


class ResultTooLarge(ToolError):
    """The result is ``size_bytes``, over the tool's ``limit_bytes``; ask for less."""

    code = "result_too_large"


class ApprovalMismatch(ToolError):
    """The approval does not match the preview."""

    code = "approval_mismatch"


class PreviewExpired(ToolError):
    """The preview expired."""

    code = "preview_expired"


class NeedsApproval(ToolError):
    """A person or policy must approve first (``rule``, ``preview_id``)."""

    code = "needs_approval"


class LimitExceeded(ToolError):
    """A run limit (``limit``) is used up; finish with what you have."""

    code = "limit_exceeded"


class ProtocolError(ToolError):
    """A message broke the protocol (``reason``)."""

    code = "protocol_error"


ERRORS: dict[str, type[ToolError]] = {
    cls.code: cls
    for cls in (
        UnknownTool,
        InvalidInput,
        Denied,
        NotFound,
        Conflict,
        RateLimited,
        Upstream,
        Timeout,
        AmbiguousWrite,
        ResultTooLarge,
        ApprovalMismatch,
        PreviewExpired,
        NeedsApproval,
        LimitExceeded,
        ProtocolError,
    )
}


class RunAborted(BaseException):
    """The host ended this run. Derives from BaseException: programs cannot swallow it."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


def error_from_wire(error: Any) -> ToolError:
    """Rebuild the typed error a host sent; unknown codes become a plain ToolError."""
    if not isinstance(error, dict):
        return ToolError("malformed error from the host")
    code = str(error.get("code", "tool_error"))
    message = str(error.get("message", ""))
    retryable = bool(error.get("retryable", False))
    shape = wire.ERRORS.get(code)
    fields = {name: error.get(name) for name in shape.fields} if shape else {}
    return ERRORS.get(code, ToolError)(message, code=code, retryable=retryable, **fields)


__all__ = [
    "ERRORS",
    "AmbiguousWrite",
    "ApprovalMismatch",
    "Conflict",
    "Denied",
    "InvalidInput",
    "LimitExceeded",
    "NeedsApproval",
    "NotFound",
    "PreviewExpired",
    "ProtocolError",
    "RateLimited",
    "ResultTooLarge",
    "RunAborted",
    "Timeout",
    "ToolError",
    "UnknownTool",
    "Upstream",
    "error_from_wire",
]
