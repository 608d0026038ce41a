from __future__ import annotations

import tools

PUBLIC_API = [
    "CALLERS",
    "ERROR_CODES",
    "NAME_PATTERN",
    "AdmissionDecision",
    "AmbiguousWriteError",
    "ApprovalMismatchError",
    "AuditEvent",
    "AuditLog",
    "AuditStore",
    "CallContext",
    "Caller",
    "ConflictError",
    "DeniedError",
    "ErrorCode",
    "FieldIssue",
    "InvalidInputError",
    "JSONObject",
    "JSONValue",
    "LimitExceededError",
    "MemoryAuditStore",
    "NeedsApprovalError",
    "NotFoundError",
    "Observations",
    "Outcome",
    "Precondition",
    "PreviewExpiredError",
    "ProtocolError",
    "RateLimitedError",
    "Registry",
    "ResultTooLargeError",
    "RunSummary",
    "SQLiteAuditStore",
    "Secret",
    "Stage",
    "ToolDefinition",
    "ToolError",
    "ToolSpec",
    "ToolTimeoutError",
    "UnknownToolError",
    "UpstreamError",
    "requires",
]


def test_public_api_is_pinned() -> None:
    assert tools.__all__ == PUBLIC_API


def test_every_public_name_resolves() -> None:
    for name in tools.__all__:
        assert getattr(tools, name) is not None


def test_tool_errors_share_one_root() -> None:
    from policies import AirlockError

    errors = [getattr(tools, n) for n in tools.__all__ if n.endswith("Error")]
    assert all(issubclass(e, tools.ToolError) and issubclass(e, AirlockError) for e in errors)
