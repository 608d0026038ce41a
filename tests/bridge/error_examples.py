"""One tool error of every code, with its typed fields as a program receives them."""

from __future__ import annotations

from typing import Any

from airlock.tools import (
    AmbiguousWriteError,
    ApprovalMismatchError,
    ConflictError,
    DeniedError,
    FieldIssue,
    InvalidInputError,
    LimitExceededError,
    NeedsApprovalError,
    NotFoundError,
    PreviewExpiredError,
    ProtocolError,
    RateLimitedError,
    ResultTooLargeError,
    ToolError,
    ToolTimeoutError,
    UnknownToolError,
    UpstreamError,
)

# (error, the typed fields of the error object a program receives for it)
EXAMPLES: list[tuple[ToolError, dict[str, Any]]] = [
    (UnknownToolError(name="records_nothing_get"), {"name": "records_nothing_get"}),
    (
        InvalidInputError(issues=(FieldIssue("record_id", "is required"),)),
        {"issues": [{"field": "record_id", "reason": "is required"}]},
    ),
    (DeniedError(reason="scope"), {"reason": "scope"}),
    (NotFoundError(detail="no record rec_7"), {}),
    (ConflictError(requires="records_item_get"), {"requires": "records_item_get"}),
    (RateLimitedError(retry_after=2.5), {"retry_after": 2.5}),
    (RateLimitedError(), {"retry_after": None}),
    (UpstreamError(detail="GET /records: 502"), {}),
    (ToolTimeoutError(seconds=1.25), {"seconds": 1.25}),
    (AmbiguousWriteError(idempotency_key="key_1"), {"idempotency_key": "key_1"}),
    (ResultTooLargeError(size_bytes=900, limit_bytes=500), {"size_bytes": 900, "limit_bytes": 500}),
    (ApprovalMismatchError(), {}),
    (PreviewExpiredError(), {}),
    (
        NeedsApprovalError(rule="ask_big", preview_id="pv_1"),
        {"rule": "ask_big", "preview_id": "pv_1"},
    ),
    (LimitExceededError(limit="pages"), {"limit": "pages"}),
    (ProtocolError(reason="bad frame"), {"reason": "bad frame"}),
]
