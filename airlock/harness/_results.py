"""Model results: every outcome of a model tool call as compact JSON the model can act on.

An error result's content is always ``{"error": CODE, "message": ..., "retryable": ...}``
plus the error's typed attributes (``preview_id``, ``size_bytes``, ``limit``...). The message
is one sentence saying what to do next; operator detail never appears here, it goes to the
log. Codes are the tool error codes (:data:`airlock.tools.ERROR_CODES`) and the harness's own
:data:`HarnessCode`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Final, Literal, get_args

from airlock.harness._model_tools import ModelResult
from airlock.tools import ResultTooLargeError, ToolError

__all__ = [
    "HARNESS_CODES",
    "HarnessCode",
    "compact",
    "failure",
    "from_tool_error",
    "sized",
    "success",
]

HarnessCode = Literal[
    "program_error", "invalid_program", "sandbox_unavailable", "already_committed"
]
"""Codes only the harness gives: a program raised, was refused before running, or the
sandbox could not run it; or a direct call asked again for an intent already committed in
the session (not an error: its receipt comes back, nothing was sent again)."""
HARNESS_CODES: Final[tuple[HarnessCode, ...]] = get_args(HarnessCode)


def compact(value: object) -> str:
    """``value`` as compact JSON text (no spaces, UTF-8 kept, NaN refused)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def success(payload: object, *, code: str | None = None) -> ModelResult:
    """A result that did what was asked (``code`` names a pause such as needs_approval)."""
    return ModelResult(is_error=False, content=compact(payload), code=code)


def failure(
    code: str,
    message: str,
    *,
    retryable: bool = False,
    extra: Mapping[str, object] | None = None,
    **fields: object,
) -> ModelResult:
    """An error result: the stable code, one sentence on what to do, typed attributes
    (``fields`` and ``extra``)."""
    body: dict[str, object] = {"error": code, "message": message, "retryable": retryable}
    body.update(fields)
    body.update(extra or {})
    return ModelResult(is_error=True, content=compact(body), code=code, retryable=retryable)


def from_tool_error(exc: ToolError) -> ModelResult:
    """The model's view of a tool error: its wire form, never its operator detail."""
    wire = exc.to_wire()
    fields = {k: v for k, v in wire.items() if k not in ("code", "message", "retryable")}
    if fields.get("outcome") == "error":
        del fields["outcome"]  # only "unknown" tells the model something it must know
    return failure(exc.code, exc.message, retryable=exc.retryable, extra=fields)


def sized(result: ModelResult, cap: int) -> ModelResult:
    """``result`` when its content fits ``cap`` bytes; otherwise ``result_too_large`` with
    the size (never a silently cut result)."""
    size = len(result.content.encode())
    if size <= cap:
        return result
    return from_tool_error(ResultTooLargeError(size_bytes=size, limit_bytes=cap))
