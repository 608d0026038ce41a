from __future__ import annotations

import pytest

from airlock import tools
from airlock.policies import AirlockError
from airlock.tools import (
    ERROR_CODES,
    AmbiguousWriteError,
    ConflictError,
    DeniedError,
    FieldIssue,
    InvalidInputError,
    LimitExceededError,
    NeedsApprovalError,
    NotFoundError,
    ProtocolError,
    RateLimitedError,
    ResultTooLargeError,
    ToolError,
    ToolTimeoutError,
    UnknownToolError,
    UpstreamError,
    _errors,
)

EXAMPLES: list[ToolError] = [
    UnknownToolError(name="billing_invoice_get"),
    InvalidInputError(issues=(FieldIssue("invoice_id", "is required"),)),
    DeniedError(reason="effect"),
    NotFoundError(),
    ConflictError(requires="orders_status_get"),
    RateLimitedError(retry_after=1.5),
    UpstreamError(outcome="unknown"),
    ToolTimeoutError(seconds=2.0),
    AmbiguousWriteError(idempotency_key="k1"),
    ResultTooLargeError(size_bytes=10, limit_bytes=5),
    tools.ApprovalMismatchError(),
    tools.PreviewExpiredError(),
    NeedsApprovalError(rule="large-refund", preview_id="p1"),
    LimitExceededError(limit="calls"),
    ProtocolError(reason="oversized frame"),
]

RETRYABLE = {"rate_limited", "upstream", "timeout", "ambiguous_write"}


def test_every_code_has_one_class() -> None:
    assert sorted(e.code for e in EXAMPLES) == sorted(ERROR_CODES)


@pytest.mark.parametrize("error", EXAMPLES, ids=lambda e: e.code)
def test_wire_round_trip(error: ToolError) -> None:
    wire = error.to_wire()
    again = ToolError.from_wire(wire)
    assert type(again) is type(error)
    assert again.to_wire() == wire
    assert wire["retryable"] is (error.code in RETRYABLE)
    assert isinstance(error, AirlockError)


@pytest.mark.parametrize("error", EXAMPLES, ids=lambda e: e.code)
def test_the_error_tree_is_drawn_in_the_module_docstring(error: ToolError) -> None:
    assert _errors.__doc__ is not None
    lines = [line.split() for line in _errors.__doc__.splitlines()]
    assert any(type(error).__name__ in words and error.code in words for words in lines)


@pytest.mark.parametrize(
    ("error", "retryable"),
    [
        (ConflictError(), False),
        (_errors.CommitInFlightError(), True),
        (UpstreamError(), True),
        (tools.PermanentUpstreamError(), False),
    ],
    ids=lambda e: type(e).__name__ if isinstance(e, ToolError) else str(e),
)
def test_the_codes_with_two_classes_are_told_apart_by_retryable(
    error: ToolError, retryable: bool
) -> None:
    wire = error.to_wire()
    assert wire["retryable"] is retryable
    assert type(ToolError.from_wire(wire)) is type(error)


def test_detail_never_crosses_the_wire() -> None:
    error = UpstreamError(detail="GET https://internal/route?token=abc failed")
    assert "internal" not in str(error.to_wire())
    assert "detail" not in ToolError.from_wire(error.to_wire()).to_wire()


def test_outcome_classes() -> None:
    assert NotFoundError().outcome == "error"
    assert ToolTimeoutError(seconds=1).outcome == "unknown"
    assert AmbiguousWriteError().outcome == "unknown"
    assert UpstreamError(outcome="unknown").to_wire()["outcome"] == "unknown"


@pytest.mark.parametrize(
    "frame",
    [
        {},
        {"code": "no_such_code", "message": "x"},
        {"code": "not_found"},
        {"code": "not_found", "message": "x", "outcome": "ok"},
        {"code": "timeout", "message": "x", "seconds": "soon"},
        {"code": "invalid_input", "message": "x", "issues": "bad"},
        {"code": "invalid_input", "message": "x", "issues": [{"field": 1, "reason": "r"}]},
        {"code": "invalid_input", "message": "x", "issues": ["x"]},
        {"code": "result_too_large", "message": "x", "size_bytes": 1.5, "limit_bytes": 1},
        {"code": "unknown_tool", "message": "x", "name": None},
        {"code": "denied", "message": "x", "reason": "because"},
    ],
)
def test_malformed_wire_forms_become_protocol_errors(frame: dict[str, object]) -> None:
    assert isinstance(ToolError.from_wire(frame), ProtocolError)


def test_messages_are_bounded() -> None:
    assert len(UpstreamError("x" * 10_000).message) <= 500
    assert len(UnknownToolError(name="n" * 10_000).name) == 64
