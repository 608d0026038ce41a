"""Tool contracts and the registry: admission, typed errors, the audit log, and the write
path (prepare, preview, approval, commit, receipt) on a durable ledger, and the REST adapter
that tools over HTTP APIs share."""

from tools._approvals import approve_preview, deny_preview
from tools._audit import (
    AdmissionDecision,
    AuditEvent,
    AuditLog,
    AuditStore,
    MemoryAuditStore,
    RunSummary,
    Stage,
)
from tools._context import CALLERS, CallContext, Caller, Observations
from tools._credential import Credential
from tools._errors import (
    ERROR_CODES,
    AmbiguousWriteError,
    ApprovalMismatchError,
    ConflictError,
    DeniedError,
    ErrorCode,
    FieldIssue,
    InvalidInputError,
    LimitExceededError,
    NeedsApprovalError,
    NotFoundError,
    Outcome,
    PreviewExpiredError,
    ProtocolError,
    RateLimitedError,
    ResultTooLargeError,
    ToolError,
    ToolTimeoutError,
    UnknownToolError,
    UpstreamError,
)
from tools._json import JSONObject, JSONValue
from tools._ledger import LedgerStore, StepStateError
from tools._preview import STEP_STATES, Approval, Preview, Receipt, StepEvent, StepState
from tools._reconcile import Resolution
from tools._registration import NAME_PATTERN
from tools._registry import Registry
from tools._rest import RestAdapter
from tools._rest_errors import error_for_status
from tools._rest_paths import route_path
from tools._schema import ToolDefinition
from tools._spec import Precondition, Secret, ToolSpec, requires
from tools._sqlite_audit import SQLiteAuditStore
from tools._sqlite_ledger import SQLiteLedgerStore
from tools._write_contract import WriteContract
from tools._write_tool import write_tool
from tools._writes import WritePath

__all__ = [
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
