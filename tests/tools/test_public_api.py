from __future__ import annotations

from airlock import tools
from tests.public_api import assert_public_api

# The public API, changed only on purpose: a name added or removed fails this test.
PUBLIC_API = [
    "CALLERS",
    "CREDENTIAL_NAME",
    "ERROR_CODES",
    "EXERCISED_STAGES",
    "NAME_PATTERN",
    "STEP_STATES",
    "Admission",
    "AdmissionDecision",
    "AmbiguousWriteError",
    "Approval",
    "ApprovalMismatchError",
    "AuditEvent",
    "AuditLog",
    "AuditSink",
    "AuditStore",
    "CallContext",
    "CallOutcome",
    "Caller",
    "ChainReport",
    "ConflictError",
    "Credential",
    "DeniedError",
    "Destination",
    "ErrorCode",
    "FieldIssue",
    "FoundCall",
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
    "ProcessMark",
    "ProcessState",
    "ProtocolError",
    "RateLimitedError",
    "Receipt",
    "RecordsRead",
    "Registry",
    "Resolution",
    "RestAdapter",
    "ResultTooLargeError",
    "RunAuthority",
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
    "audit_event",
    "deny_preview",
    "error_for_status",
    "escape_controls",
    "find_calls",
    "parse_destination",
    "program_hash",
    "redact",
    "requires",
    "route_path",
    "write_tool",
]


def test_public_api_is_pinned() -> None:
    assert_public_api(tools, PUBLIC_API)


def test_tool_errors_share_one_root() -> None:
    from airlock.policies import AirlockError

    errors = [getattr(tools, n) for n in tools.__all__ if n.endswith("Error")]
    assert len(errors) >= 15
    for error in errors:
        assert issubclass(error, tools.ToolError), error
        assert issubclass(error, AirlockError), error
