"""Tool contracts and the registry: admission, typed errors, the audit log, and the write
path (prepare, preview, approval, commit, receipt) on a durable ledger, and the REST adapter
that tools over HTTP APIs share."""

from airlock.tools._admission import Admission, authority_refusal
from airlock.tools._amounts import format_amount
from airlock.tools._approvals import approve_preview, deny_preview
from airlock.tools._audit import (
    EXERCISED_STAGES,
    PROGRAM_TOOL,
    AdmissionDecision,
    AuditEvent,
    AuditSink,
    AuditStore,
    CallOutcome,
    RunSummary,
    Stage,
    audit_event,
    program_hash,
)
from airlock.tools._audit_chain import ChainReport
from airlock.tools._audit_find import FoundCall, find_calls
from airlock.tools._audit_log import AuditLog
from airlock.tools._batch_records import Batch, BatchItem, BatchItemState
from airlock.tools._batches import (
    BATCH_PREFIX,
    approve_batch,
    batch_fingerprint,
    batch_items,
    spend_totals,
)
from airlock.tools._context import CALLERS, CallContext, Caller, Observations, RunAuthority
from airlock.tools._credential import CREDENTIAL_NAME, Credential
from airlock.tools._destination import Destination, parse_destination
from airlock.tools._errors import (
    ERROR_CODES,
    LEDGER_ERRORS,
    AmbiguousWriteError,
    ApprovalMismatchError,
    ConflictError,
    DeniedError,
    ErrorCode,
    FieldIssue,
    InvalidInputError,
    LedgerClosedError,
    LedgerCorruptError,
    LedgerError,
    LedgerErrorCode,
    LedgerIOError,
    LedgerLockedError,
    LedgerNotADatabaseError,
    LedgerReadOnlyError,
    LedgerReplacedError,
    LedgerUnavailableError,
    LimitExceededError,
    NeedsApprovalError,
    NotFoundError,
    Outcome,
    PermanentUpstreamError,
    PreviewExpiredError,
    ProtocolError,
    RateLimitedError,
    ReceiptMismatchError,
    ResultTooLargeError,
    ToolError,
    ToolTimeoutError,
    UnknownToolError,
    UpstreamError,
)
from airlock.tools._http_body import BodyOverCapError, UnreadableBodyError, read_body
from airlock.tools._json import JSONObject, JSONValue
from airlock.tools._ledger import LedgerStore, StepStateError
from airlock.tools._memory_audit import MemoryAuditStore
from airlock.tools._preview import STEP_STATES, Approval, Preview, Receipt, StepEvent, StepState
from airlock.tools._process import ProcessMark, ProcessState
from airlock.tools._reconcile import Resolution
from airlock.tools._records import RecordsRead
from airlock.tools._redact import escape_controls, redact
from airlock.tools._registration import NAME_PATTERN
from airlock.tools._registry import Registry
from airlock.tools._rest import RestAdapter
from airlock.tools._rest_errors import error_for_status
from airlock.tools._rest_paths import route_path
from airlock.tools._schema import ToolDefinition
from airlock.tools._spec import Precondition, Secret, ToolSpec, requires
from airlock.tools._sqlite_audit import SQLiteAuditStore
from airlock.tools._sqlite_ledger import SQLiteLedgerStore
from airlock.tools._write_contract import WriteContract
from airlock.tools._write_tool import write_tool
from airlock.tools._writes import WritePath

__all__ = [
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
