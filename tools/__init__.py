"""Tool contracts and the registry: admission, typed errors, the audit log."""

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
from tools._registration import NAME_PATTERN
from tools._registry import Registry
from tools._schema import ToolDefinition
from tools._spec import Precondition, Secret, ToolSpec, requires
from tools._sqlite_audit import SQLiteAuditStore

__all__ = [
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
