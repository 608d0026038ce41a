"""One attempt of a REST request: send it, and say how it ended, as a body, a failure worth
the same request again, or a tool error.

Every exception an attempt can meet is mapped here, where it is known what was sent: a header
the HTTP library refuses, a URL it refuses and a refused connection sent nothing; a lost answer
or a timeout of a write may have acted (``ambiguous_write``); a status goes through
:func:`error_for_status`, but one outside 100-599 is ``upstream`` (outcome ``unknown`` for a
write).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Final

import anyio
import httpx

from airlock.tools._egress import violated
from airlock.tools._errors import (
    AmbiguousWriteError,
    PermanentUpstreamError,
    ResultTooLargeError,
    ToolError,
    ToolTimeoutError,
    UpstreamError,
)
from airlock.tools._redact import redact
from airlock.tools._rest_body import (
    BodyOverCapError,
    UnreadableBodyError,
    error_text,
    read_body,
    status_detail,
)
from airlock.tools._rest_errors import SAFE_METHODS, error_for_status, parse_retry_after

__all__ = ["RETRY_STATUSES", "Attempt", "Retry", "send_once"]

_log = logging.getLogger("airlock.rest")

RETRY_STATUSES: Final = frozenset({429, 502, 503, 504})
"""Statuses worth the same request again: nothing happened, and it may work later."""
_KEPT_CHARS: Final = 300


@dataclass(frozen=True)
class Attempt:
    """What one attempt sends: the request, read under ``cap`` bytes within ``budget`` s."""

    method: str
    url: str
    query: dict[str, str]
    headers: dict[str, str]
    content: bytes | None
    what: str
    """``METHOD /route``, for the operator log."""
    idempotency_key: str | None
    cap: int
    budget: float

    @property
    def safe(self) -> bool:
        return self.method in SAFE_METHODS


@dataclass(frozen=True)
class Retry:
    """The attempt failed in a way the same request may not: ``failure`` if it is not sent
    again, after ``wait`` seconds (the backoff, or the upstream's ``Retry-After``) if it is."""

    failure: ToolError
    wait: float


async def send_once(
    client: httpx.AsyncClient, attempt: Attempt, *, backoff: float
) -> bytes | Retry:
    """Send ``attempt`` once: the body of a 2xx answer (at most ``attempt.cap`` bytes), or a
    :class:`Retry` for a failure worth the same request again.

    Raises:
        ToolError: any other failure, mapped to what is known of what was sent.
    """
    what, safe = attempt.what, attempt.safe
    try:
        request = client.build_request(
            attempt.method,
            attempt.url,
            params=attempt.query,
            content=attempt.content,
            headers=attempt.headers,
            timeout=attempt.budget,
        )
        status, headers, data, kept = await _exchange(client, request, attempt)
    except (httpx.LocalProtocolError, UnicodeEncodeError) as exc:
        # The HTTP library refused a header before sending a byte; its message quotes the
        # header's value, so only its type is kept.
        raise PermanentUpstreamError(
            "this tool could not build its request; do not retry it",
            outcome="error",
            detail=f"{what}: a request header was refused before sending ({type(exc).__name__})",
        ) from None
    except httpx.ConnectError as exc:  # nothing was sent: safe to try again
        failure: ToolError = UpstreamError(detail=redact(f"{what}: cannot connect: {exc}"))
        if violated():  # the runtime check refused it: so would it again
            raise failure from exc
        return Retry(failure, backoff)
    except httpx.InvalidURL as exc:
        # Refused while the request was built (a query past the library's length limit):
        # nothing was sent, and the same URL would be refused again.
        raise PermanentUpstreamError(
            "this tool could not build its request; do not retry it",
            outcome="error",
            detail=redact(f"{what}: the URL was refused before sending (InvalidURL: {exc})")[
                :_KEPT_CHARS
            ],
        ) from None
    except (httpx.TimeoutException, TimeoutError) as exc:
        timed_out = f"{what}: no answer in {attempt.budget:.3g} s"
        if safe:
            raise ToolTimeoutError(seconds=attempt.budget, detail=timed_out) from exc
        raise AmbiguousWriteError(
            idempotency_key=attempt.idempotency_key, detail=timed_out
        ) from exc
    except httpx.TransportError as exc:  # sent; the answer was lost on the way
        lost = redact(f"{what}: {type(exc).__name__}: {exc}")[:_KEPT_CHARS]
        if not safe:
            raise AmbiguousWriteError(idempotency_key=attempt.idempotency_key, detail=lost) from exc
        return Retry(UpstreamError(detail=lost), backoff)
    except httpx.HTTPError as exc:  # e.g. a malformed answer: an answer came
        raise UpstreamError(
            outcome="error" if safe else "unknown",
            detail=redact(f"{what}: {type(exc).__name__}: {exc}")[:_KEPT_CHARS],
        ) from exc
    _log.debug("%s -> %s", what, status)
    if 200 <= status <= 299:
        return data
    if not 100 <= status <= 599:
        # HTTP/1.1 lets any three digits through; none of these says what happened, so a
        # write answered with one may have acted, like a write whose answer was lost.
        raise UpstreamError(
            outcome="error" if safe else "unknown",
            detail=redact(status_detail(what, status, request.url, headers, kept))
            + "; not an HTTP status",
        )
    retry_after = parse_retry_after(headers.get("retry-after"))
    failure = error_for_status(
        status,
        method=attempt.method,
        retry_after=retry_after,
        detail=status_detail(what, status, request.url, headers, kept),
    )
    if status not in RETRY_STATUSES:
        raise failure
    return Retry(failure, retry_after if status == 429 and retry_after is not None else backoff)


async def _exchange(
    client: httpx.AsyncClient, request: httpx.Request, attempt: Attempt
) -> tuple[int, httpx.Headers, bytes, str]:
    """Send once: the status, the headers, and either a success's body (at most the cap) or
    the start of any other answer's body, redacted, for the operator log."""
    with anyio.fail_after(attempt.budget):
        response = await client.send(request, stream=True)
        try:
            status = response.status_code
            if not 200 <= status <= 299:
                return status, response.headers, b"", await error_text(response)
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > attempt.cap:
                raise _too_large(int(declared), attempt)
            try:
                data, _ = await read_body(response, attempt.cap, refuse=True)
            except BodyOverCapError as over:
                raise _too_large(over.size, attempt) from None
            except UnreadableBodyError as exc:
                raise UpstreamError(
                    outcome="error" if attempt.safe else "unknown",
                    detail=f"{attempt.what}: {exc.message}",
                ) from None
            return status, response.headers, data, ""
        finally:
            await response.aclose()


def _too_large(size: int, attempt: Attempt) -> ResultTooLargeError:
    return ResultTooLargeError(
        size_bytes=size,
        limit_bytes=attempt.cap,
        # a write that answered too much still acted
        outcome="error" if attempt.safe else "unknown",
        detail=f"{attempt.what}: body over {attempt.cap} bytes",
    )
