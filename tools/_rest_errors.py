"""HTTP statuses and transport failures as tool errors: the one mapping of the REST adapter.

===========  =================  =====================================================
status       code               why
===========  =================  =====================================================
400, 422     invalid_input      the service refused the arguments; the model can fix them
401, 403     denied             the credential may not do this; retrying will not help
404, 410     not_found          missing, or another tenant's record (indistinguishable)
409, 412     conflict           the record's state forbids it (already refunded, key in use)
429          rate_limited       wait ``Retry-After`` seconds
other 4xx    upstream           the adapter asked something the service does not support
5xx          upstream           the service failed
1xx, 3xx     upstream           unexpected here; redirects are refused, never followed
===========  =================  =====================================================

A write (any method but GET and HEAD) that got a 5xx or a 3xx may have acted (a 303 is how
many APIs say "created, see over there"), so its outcome is ``unknown``; every 4xx is a
definite refusal, outcome ``error``. The operator's ``detail`` is kept with
credentials redacted (:func:`~airlock.tools.redact`), whoever built it.
"""

from __future__ import annotations

import email.utils
import math
import time
from typing import Final

from airlock.tools._errors import (
    ConflictError,
    DeniedError,
    InvalidInputError,
    NotFoundError,
    RateLimitedError,
    ToolError,
    UpstreamError,
)
from airlock.tools._redact import redact

__all__ = ["SAFE_METHODS", "error_for_status", "parse_retry_after"]

SAFE_METHODS: Final = frozenset({"GET", "HEAD"})
"""Methods that change nothing, so a retry or a timeout never leaves a write undecided."""
_MAX_RETRY_AFTER: Final = 3600.0


def error_for_status(
    status: int, *, method: str, detail: str, retry_after: float | None = None
) -> ToolError:
    """The tool error for a non-2xx ``status`` answered to ``method``.

    ``detail`` (method, route, status) goes to the operator log only, never to the model,
    and never with a credential in it.

    Raises:
        ValueError: ``status`` is not an HTTP status (100-599) or is a success.
    """
    if not 100 <= status <= 599 or 200 <= status <= 299:
        raise ValueError(f"status {status!r} is not an HTTP error status")
    detail = redact(detail)
    if status in (400, 422):
        return InvalidInputError(
            "the service refused these arguments; check them and call again", detail=detail
        )
    if status in (401, 403):
        return DeniedError(
            "the service does not allow this for you; do not retry it",
            reason="policy",
            detail=detail,
        )
    if status in (404, 410):
        return NotFoundError(detail=detail)
    if status in (409, 412):
        return ConflictError(
            "the record's current state does not allow this; look it up again before acting",
            detail=detail,
        )
    if status == 429:
        return RateLimitedError(retry_after=retry_after, detail=detail)
    if 300 <= status <= 399:
        if method.upper() in SAFE_METHODS:
            return UpstreamError(
                "the service answered with a redirect, which this tool never follows",
                detail=detail,
            )
        return UpstreamError(
            "the service answered this write with a redirect, which this tool never follows; "
            "the write may have happened, so do not send it again as a new one",
            outcome="unknown",
            detail=detail,
        )
    # 5xx from a write may have acted; 1xx and other 4xx are refusals of the adapter's request
    unknown = status >= 500 and method.upper() not in SAFE_METHODS
    return UpstreamError(outcome="unknown" if unknown else "error", detail=detail)


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (seconds or an HTTP date), or ``None``."""
    if value is None:
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError):
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    if math.isnan(seconds):
        return None
    return min(max(seconds, 0.0), _MAX_RETRY_AFTER)
