"""The ``error`` of a result frame: what a program sees of a tool error, host side."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from airlock.bridge import ToolSession, encode_frame, program_error, serve_run
from airlock.bridge.airlock_wire import ERRORS
from airlock.tools import (
    ERROR_CODES,
    ConflictError,
    FieldIssue,
    InvalidInputError,
    RateLimitedError,
    ResultTooLargeError,
    ToolError,
    ToolTimeoutError,
    UpstreamError,
)
from tests.bridge.error_examples import EXAMPLES
from tests.bridge.frames import decode_frames
from tests.bridge.records import ALICE, GRANT, RETRY_AFTER_S, build_registry


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.parametrize(
    ("error", "fields"), EXAMPLES, ids=[f"{e.code}-{i}" for i, (e, _) in enumerate(EXAMPLES)]
)
def test_the_error_object_carries_the_typed_fields(
    error: ToolError, fields: dict[str, Any]
) -> None:
    common = {"code": error.code, "message": error.message, "retryable": error.retryable}
    sent = program_error(error)
    assert sent == {**common, **fields}
    assert list(fields) == list(ERRORS[error.code].fields)
    json.dumps(sent, allow_nan=False)  # encodable as a frame


def test_every_code_has_an_example() -> None:
    assert {error.code for error, _ in EXAMPLES} == set(ERROR_CODES)


def test_the_operator_detail_and_outcome_stay_on_the_host() -> None:
    sent = program_error(UpstreamError(detail="GET /internal/route: 502", outcome="unknown"))
    assert set(sent) == {"code", "message", "retryable"}
    assert "internal" not in json.dumps(sent)


LONG = "x" * 1000
# (name, error, field, value the program receives): values tool code fills are bounded.
BOUNDED = [
    ("nan_retry_after", RateLimitedError(retry_after=float("nan")), "retry_after", None),
    ("infinite_retry_after", RateLimitedError(retry_after=float("inf")), "retry_after", None),
    ("negative_infinity", ToolTimeoutError(seconds=float("-inf")), "seconds", None),
    ("long_text", ConflictError(requires=LONG), "requires", "x" * 200),
    ("inexact_int", ResultTooLargeError(size_bytes=2**60, limit_bytes=1), "size_bytes", None),
    ("long_issue", InvalidInputError(issues=(FieldIssue(LONG, LONG),)), "issues",
     [{"field": "x" * 200, "reason": "x" * 200}]),
    ("many_issues", InvalidInputError(issues=tuple(FieldIssue(f"f{n}", "bad") for n in range(50))),
     "issues", [{"field": f"f{n}", "reason": "bad"} for n in range(20)]),
]  # fmt: skip


@pytest.mark.parametrize(("name", "error", "field", "value"), BOUNDED, ids=[b[0] for b in BOUNDED])
def test_field_values_are_bounded(name: str, error: ToolError, field: str, value: Any) -> None:
    sent = program_error(error)
    assert sent[field] == value
    json.dumps(sent, allow_nan=False)


def test_malformed_list_items_cross_as_none() -> None:
    class Odd(InvalidInputError):
        def _field_to_wire(self, name: str) -> Any:
            return ["not an object", {"field": {"nested": 1}, "reason": "r"}]

    assert program_error(Odd())["issues"] == [None, {"field": None, "reason": "r"}]


class CollectingWriter:
    """The parts of StreamWriter the server uses; collects what it would send."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.transport = self

    def write(self, data: bytes) -> None:
        self.data += data

    def abort(self) -> None:
        raise AssertionError("the run must not be aborted")


async def _serve(*frames: dict[str, Any]) -> list[dict[str, Any]]:
    """Serve ``frames`` and end the run once each has its result (``done`` would cancel them)."""
    reader = asyncio.StreamReader()
    for frame in frames:
        reader.feed_data(encode_frame(frame))
    writer = CollectingWriter()
    session = ToolSession(registry=build_registry(slow_s=0.0), principal=ALICE, grant=GRANT)
    served = asyncio.create_task(
        serve_run(
            reader,
            writer,  # type: ignore[arg-type]
            session=session,
            deadline=time.monotonic() + 30,
            max_done_bytes=1 << 20,
        )
    )
    async with asyncio.timeout(10):
        while len(decode_frames(bytes(writer.data))) < len(frames):
            await asyncio.sleep(0.001)
    reader.feed_data(encode_frame({"type": "done", "result": {}}))
    reader.feed_eof()
    assert await asyncio.wait_for(served, 10) == {"type": "done", "result": {}}
    return sorted(decode_frames(bytes(writer.data)), key=lambda f: f["id"])


@pytest.mark.anyio
async def test_result_frames_carry_the_fields_of_calls_and_batch_items() -> None:
    bad, limited = {"record_id": "../admin"}, {"record_id": "rec_1"}
    call_bad, call_limited, batch = await _serve(
        {"type": "call", "id": 1, "tool": "records_item_get", "args": bad},
        {"type": "call", "id": 2, "tool": "records_limited_get", "args": limited},
        {"type": "batch", "id": 3, "tool": "records_limited_get", "items": [limited]},
    )
    issues = [{"field": "record_id", "reason": "String should match pattern '^rec_[0-9]{1,6}$'"}]
    assert call_bad["type"] == "result"
    assert (call_bad["ok"], call_bad["error"]["code"]) == (False, "invalid_input")
    assert call_bad["error"]["issues"] == issues
    expected = {
        "code": "rate_limited",
        "message": RateLimitedError.default_message,
        "retryable": True,
        "retry_after": RETRY_AFTER_S,
    }
    assert call_limited["error"] == expected
    assert batch["value"] == [{"ok": False, "error": expected}]
