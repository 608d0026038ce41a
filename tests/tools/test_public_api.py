from __future__ import annotations

from airlock import tools

PUBLIC_API = [
    "CALLERS",
    "ERROR_CODES",
    "NAME_PATTERN",
    "STEP_STATES",
    "AdmissionDecision",
    "AmbiguousWriteError",
    "Approval",
    "ApprovalMismatchError",
    "AuditEvent",
    "AuditLog",
    "AuditStore",
    "CallContext",
    "Caller",
    "ConflictError",
    "Credential",
    "DeniedError",
    "ErrorCode",
    "FieldIssue",
    "InvalidInputError",
    "JSONObject",
    "JSONValue",
    "LedgerStore",
    "LimitExceededError",
    "MemoryAuditStore",
    "NeedsApprovalError",
    "NotFoundError",
    "Observations",
    "Outcome",
    "Precondition",
    "Preview",
    "PreviewExpiredError",
    "ProtocolError",
    "RateLimitedError",
    "Receipt",
    "Registry",
    "Resolution",
    "RestAdapter",
    "ResultTooLargeError",
    "RunSummary",
    "SQLiteAuditStore",
    "SQLiteLedgerStore",
    "Secret",
    "Stage",
    "StepEvent",
    "StepState",
    "StepStateError",
    "ToolDefinition",
    "ToolError",
    "ToolSpec",
    "ToolTimeoutError",
    "UnknownToolError",
    "UpstreamError",
    "WriteContract",
    "WritePath",
    "approve_preview",
    "deny_preview",
    "error_for_status",
    "requires",
    "route_path",
    "write_tool",
]


def test_public_api_is_pinned() -> None:
    assert tools.__all__ == PUBLIC_API


def test_every_public_name_resolves() -> None:
    for name in tools.__all__:
        assert getattr(tools, name) is not None


def test_tool_errors_share_one_root() -> None:
    from airlock.policies import AirlockError

    errors = [getattr(tools, n) for n in tools.__all__ if n.endswith("Error")]
    assert all(issubclass(e, tools.ToolError) and issubclass(e, AirlockError) for e in errors)
