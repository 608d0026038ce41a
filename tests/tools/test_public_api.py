from __future__ import annotations

from airlock import tools
from tests.public_api import assert_public_api

# The public API, changed only on purpose: a name added or removed fails this test.
PUBLIC_API = [
    "BATCH_PREFIX",
    "CALLERS",
    "CREDENTIAL_NAME",
    "ERROR_CODES",
    "EXERCISED_STAGES",
    "LEDGER_ERRORS",
    "NAME_PATTERN",
    "PROGRAM_TOOL",
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
    "Batch",
    "BatchItem",
    "BatchItemState",
    "BodyOverCapError",
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
    "LedgerClosedError",
    "LedgerCorruptError",
    "LedgerError",
    "LedgerErrorCode",
    "LedgerIOError",
    "LedgerLockedError",
    "LedgerNotADatabaseError",
    "LedgerReadOnlyError",
    "LedgerReplacedError",
    "LedgerStore",
    "LedgerUnavailableError",
    "LimitExceededError",
    "MemoryAuditStore",
    "NeedsApprovalError",
    "NotFoundError",
    "Observations",
    "Outcome",
    "PermanentUpstreamError",
    "Precondition",
    "Preview",
    "PreviewExpiredError",
    "ProcessMark",
    "ProcessState",
    "ProtocolError",
    "RateLimitedError",
    "Receipt",
    "ReceiptMismatchError",
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
    "UnreadableBodyError",
    "UpstreamError",
    "WriteContract",
    "WritePath",
    "approve_batch",
    "approve_preview",
    "audit_event",
    "authority_refusal",
    "batch_fingerprint",
    "batch_items",
    "deny_preview",
    "error_for_status",
    "escape_controls",
    "find_calls",
    "format_amount",
    "parse_destination",
    "program_hash",
    "read_body",
    "redact",
    "requires",
    "route_path",
    "spend_totals",
    "write_tool",
]


def test_public_api_is_pinned() -> None:
    assert_public_api(tools, PUBLIC_API)


def test_tool_errors_share_one_root() -> None:
    from airlock.policies import AirlockError

    errors = [getattr(tools, n) for n in tools.__all__ if n.endswith("Error")]
    assert len(errors) >= 15
    for error in errors:
        # Two branches: a tool call's errors, and a durable store's (never on the wire).
        assert issubclass(error, tools.ToolError | tools.LedgerError), error
        assert issubclass(error, AirlockError), error
    assert set(tools.LEDGER_ERRORS.values()) == {
        e for e in errors if issubclass(e, tools.LedgerError)
    }
