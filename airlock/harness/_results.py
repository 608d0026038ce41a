"""Model results: every outcome of a model tool call as compact JSON the model can act on.

An error result's content is always ``{"error": CODE, "message": ..., "retryable": ...}``
plus the error's typed attributes (``preview_id``, ``size_bytes``, ``limit``...). The message
is one sentence saying what to do next; operator detail never appears here, it goes to the
log. Codes are the tool error codes (:data:`airlock.tools.ERROR_CODES`) and the harness's own
:data:`HarnessCode`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Final, Literal, get_args

from airlock.harness._model_tools import ModelResult
from airlock.tools import LedgerError, ResultTooLargeError, ToolError

__all__ = [
    "HARNESS_CODES",
    "PROGRAM_KEPT",
    "PROGRAM_SMALLER",
    "HarnessCode",
    "KeptNotes",
    "byte_size",
    "compact",
    "failure",
    "from_ledger_error",
    "from_tool_error",
    "nothing_kept",
    "refusal",
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
_SURROGATE: Final = re.compile(r"[\ud800-\udfff]")


def compact(value: object) -> str:
    """``value`` as compact JSON text (no spaces, UTF-8 kept, NaN refused).

    A lone surrogate (a model's JSON may hold ``"\\ud800"``, in a tool name say) is written
    as its ``\\uXXXX`` escape: the same JSON value, and text that can always be encoded
    as UTF-8 (to measure it, log it, or send it to a provider)."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    if text.isascii():
        return text
    return _SURROGATE.sub(lambda found: f"\\u{ord(found[0]):04x}", text)


def byte_size(text: str) -> int:
    """The size of ``text`` in UTF-8; never raises (a lone surrogate counts 3 bytes)."""
    return len(text.encode("utf-8", "surrogatepass"))


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


def from_ledger_error(exc: LedgerError) -> ModelResult:
    """The model's view of a durable store that cannot be used: its code, never its
    message (which names a host path: the operator's log gets it)."""
    return failure(
        exc.code,
        f"{exc.store} cannot be used right now; nothing was written",
        retryable=exc.retryable,
    )


KeptNotes = Callable[[], Sequence[Mapping[str, object]]]
"""The notes an answer too large for the model keeps (see :func:`sized`), made only when one
is: a program's result fits, nearly always."""


def nothing_kept() -> Sequence[Mapping[str, object]]:
    """No notes to keep."""
    return ()


PROGRAM_KEPT: Final = (
    "what the program proposed or left in /out is listed here all the same: do not run it "
    "again for that"
)
"""What a refusal that keeps a program's notes says of them."""
PROGRAM_SMALLER: Final = (
    "have the program return a summary, or fewer records and fields, and print less: what it "
    "prints comes back too"
)
"""How a program's answer over the cap is made smaller (a tool's says: ask for less)."""


def sized(
    result: ModelResult,
    cap: int,
    *,
    keep: KeptNotes = nothing_kept,
    says: str = PROGRAM_KEPT,
    smaller: str | None = None,
) -> ModelResult:
    """``result`` when its content fits ``cap`` bytes; otherwise ``result_too_large`` with
    the size (never a silently cut result), which keeps ``result.artifacts``.

    ``keep()`` are notes the refusal carries all the same (what a program proposed and the
    files it left exist whatever its value was; a write's preview waits whatever its answer
    was), most complete first: the first that fits ``cap``, else the last, which the caller
    keeps small and bounded. ``says`` is what the refusal's message says of them; ``smaller``,
    how to make the answer smaller (else a tool's advice: ask for less)."""
    size = byte_size(result.content)
    if size <= cap:
        return result
    said = smaller and f"the result is {size} bytes, over the {cap} byte limit; {smaller}"
    error = ResultTooLargeError(said, size_bytes=size, limit_bytes=cap)
    refused = from_tool_error(error)
    fields = {"size_bytes": size, "limit_bytes": cap}
    refused = refusal(refused, keep, f"{error.message}; {says}", fields=fields, cap=cap)
    return refused.model_copy(update={"artifacts": result.artifacts})


def refusal(
    plain: ModelResult,
    keep: KeptNotes,
    message: str,
    *,
    fields: Mapping[str, object],
    cap: int,
) -> ModelResult:
    """``plain`` (an error answer), or the same error with the first of ``keep()``'s notes
    whose answer fits ``cap`` bytes (else the last), its message then ``message``."""
    refused = plain
    for notes in keep():
        refused = failure(
            plain.code or "",
            message,
            retryable=plain.retryable,
            extra={**fields, **notes},
        )
        if byte_size(refused.content) <= cap:
            break
    return refused
