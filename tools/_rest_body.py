"""An upstream answer's body for the REST adapter: read within a byte cap whatever the
upstream compresses (``airlock.tools._http_body``), decoded as one JSON object, and the part of
an error body the operator log may keep."""

from __future__ import annotations

import json
import math
from typing import Final

import httpx

from airlock.tools._credential import MAX_CREDENTIAL_CHARS
from airlock.tools._errors import UpstreamError
from airlock.tools._http_body import (
    ACCEPT_ENCODING,
    BodyOverCapError,
    UnreadableBodyError,
    read_body,
)
from airlock.tools._json import JSONObject
from airlock.tools._redact import redact

__all__ = [
    "ACCEPT_ENCODING",
    "BodyOverCapError",
    "UnreadableBodyError",
    "decode_object",
    "error_text",
    "read_body",
    "status_detail",
]

ERROR_BODY_BYTES: Final = 2_000
"""How much of an error body is read for the operator log (the model never sees it)..."""
_ERROR_READ_BYTES: Final = ERROR_BODY_BYTES + MAX_CREDENTIAL_CHARS
"""...plus room for one credential, whose copy cut short is dropped (:func:`error_text`)."""
_KEPT_CHARS: Final = 300


async def error_text(response: httpx.Response) -> str:
    """The start of an error body for the operator log, credentials redacted, or a note on
    why it was not read."""
    try:
        data, cut = await read_body(response, _ERROR_READ_BYTES, refuse=False)
    except UnreadableBodyError as exc:
        return f"(not read: {exc.message})"
    text = redact(data.decode("utf-8", "replace"))
    if cut:
        # A credential echoed across the cut is there only in part, so redact() cannot know
        # it; whatever is left of it is shorter than a credential and at the very end.
        text = text[: max(len(text) - MAX_CREDENTIAL_CHARS, 0)]
    return text[:_KEPT_CHARS]


def status_detail(what: str, status: int, url: httpx.URL, headers: httpx.Headers, text: str) -> str:
    """Operator-log detail: route, status, the host a ``Location`` points to (resolved
    against ``url``, the request's), and the kept start of the body."""
    detail = f"{what} -> {status}"
    location = headers.get("location")
    if location:
        try:
            host = url.join(location).host or "(no host)"
        except (httpx.InvalidURL, ValueError):
            host = "(a malformed URL)"
        detail += f"; redirect to {host} refused"
    return f"{detail}; body {text!r}" if text else detail


def decode_object(data: bytes, *, what: str, safe: bool) -> JSONObject:
    """The JSON object of a success's body (an empty body is ``{}``).

    Raises:
        UpstreamError: not a JSON object, nested too deep to parse, or holding ``NaN``,
            ``Infinity`` or a number out of float range (none of them JSON).
    """
    try:
        value = json.loads(data, parse_constant=_refuse, parse_float=_finite) if data else {}
    except (ValueError, RecursionError):  # nesting too deep is not worth a stack overflow
        value = None
    if not isinstance(value, dict):
        raise UpstreamError(
            outcome="error" if safe else "unknown",
            detail=f"{what}: the answer is not a JSON object",
        )
    result: JSONObject = value
    return result


def _refuse(constant: str) -> float:
    raise ValueError(f"{constant} is not JSON")


def _finite(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):  # 1e999: not NaN or Infinity by name, the same once read
        raise ValueError(f"{text} is out of range")
    return number
