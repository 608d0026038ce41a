"""The REST adapter: every transport decision a tool over an HTTP API must not leave to the
model, made once, here.

- **Where**: one base URL; :attr:`RestAdapter.destinations` lists its origin for the effect
  inventory. Routes are built from segments, each percent-encoded whole
  (:func:`route_path`), so an id cannot change the route.
- **Who**: a :class:`Credential` per request, sent as a bearer token and never logged.
  :attr:`RestAdapter.credentials` lists the names it may send, for the effect inventory, and
  a request with any other credential is refused before it is sent: an adapter that declares
  none sends none (a request without a credential sends no ``Authorization`` header).
  Environment proxies and ``.netrc`` are ignored (``trust_env=False``).
- **Redirects**: never followed. Any 3xx is ``upstream``, so the token never reaches
  another host.
- **How much**: the body is read as a stream and refused past ``max_response_bytes``
  (``result_too_large``); lists follow ``next_cursor`` for at most ``max_pages`` pages.
- **How long**: each attempt gets min(``timeout``, time left before ``deadline``).
  A GET that runs out is ``timeout``; a write is ``ambiguous_write`` (it may have acted).
- **Retries**: 429 (after ``Retry-After``) and 502/503/504, and connection failures
  before anything was sent, for GET and for writes with an ``Idempotency-Key`` only, while
  the deadline allows the wait. A write without a key is sent once.
- **Statuses**: mapped to tool errors in one place, :func:`error_for_status`.
- **What is kept**: an error body or a transport failure is kept for the operator (the
  error's ``detail``) with credentials redacted (:func:`redact`): an upstream that echoes
  the request's headers must not put the ``Authorization`` header into the audit store.

It is one module over 400 lines on purpose: every rule above acts inside one request loop
(:meth:`RestAdapter.request`), and splitting the loop would scatter one decision over several
files; the parts that stand alone live beside it (statuses in ``_rest_errors``, routes in
``_rest_paths``).
"""

from __future__ import annotations

import json
import logging
import math
import re
import ssl
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Final

import anyio
import certifi
import httpx

from airlock.tools._credential import CREDENTIAL_NAME, Credential
from airlock.tools._egress import violated
from airlock.tools._errors import (
    AmbiguousWriteError,
    DeniedError,
    LimitExceededError,
    ResultTooLargeError,
    ToolError,
    ToolTimeoutError,
    UpstreamError,
)
from airlock.tools._json import JSONObject, JSONValue
from airlock.tools._redact import redact
from airlock.tools._rest_errors import SAFE_METHODS, error_for_status, parse_retry_after
from airlock.tools._rest_paths import origin_of, route_path

__all__ = ["RETRY_STATUSES", "RestAdapter"]

_log = logging.getLogger("airlock.rest")

RETRY_STATUSES: Final = frozenset({429, 502, 503, 504})
"""Statuses worth the same request again: nothing happened, and it may work later."""
_ERROR_BODY_BYTES: Final = 2_000
"""How much of an error body the operator log keeps (the model never sees it)."""
Params = Mapping[str, str | int | None]


class RestAdapter:
    """An HTTP JSON API behind tools: one base URL, its limits and its retry rules.

    Args:
        base_url: ``http(s)://host[:port][/prefix]``; every route is relative to it.
        timeout: seconds one attempt may take; the caller's deadline can shorten it.
        max_response_bytes: the largest body read; larger is ``result_too_large``.
        max_pages: the most pages :meth:`paginate` follows; more is ``limit_exceeded``.
        max_attempts: attempts per request, the first included, when retrying is allowed.
        backoff: first wait before retrying a 5xx or a failed connection (doubles).
        max_retry_wait: the longest ``Retry-After`` honoured; a longer one is answered
            with ``rate_limited`` at once.
        credentials: the credentials (or their names) requests may send, listed by the
            effect inventory; a request with any other credential is ``denied`` before
            anything is sent, so an adapter that declares none sends none. Values are never
            read here.
        transport: an ``httpx`` transport (tests); the network by default.
    """

    def __init__(
        self,
        base_url: str,
        *,
        timeout: float = 10.0,
        max_response_bytes: int = 1_000_000,
        max_pages: int = 20,
        max_attempts: int = 4,
        backoff: float = 0.05,
        max_retry_wait: float = 10.0,
        credentials: Iterable[str | Credential] = (),
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        origin = origin_of(base_url)
        if not (timeout > 0 and max_response_bytes > 0 and max_pages > 0 and max_attempts > 0):
            raise ValueError("timeout, max_response_bytes, max_pages and max_attempts must be > 0")
        names = {c if isinstance(c, str) else c.name for c in credentials}
        for name in sorted(names):
            if not re.match(CREDENTIAL_NAME, name):
                raise ValueError(
                    f"credential name {name!r} must be letters, digits, '_', '.', ':' or '-' "
                    "(e.g. 'BILLING_TOKEN'); pass a Credential or its name, never a value"
                )
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.max_response_bytes = max_response_bytes
        self.max_pages = max_pages
        self.max_attempts = max_attempts
        self.backoff = backoff
        self.max_retry_wait = max_retry_wait
        self.destinations: tuple[str, ...] = (origin,)
        """``scheme://host:port`` this adapter reaches: the effect inventory lists them."""
        self.credentials: tuple[str, ...] = tuple(sorted(names))
        """Names of the credentials requests may send (sorted): the inventory lists them."""
        self._transport = transport
        # Built once: a client per request is cheap, a fresh TLS context (CA bundle) is not.
        self._tls = ssl.create_default_context(cafile=certifi.where())

    def __repr__(self) -> str:
        return f"RestAdapter({self.base_url!r})"

    # -- public verbs --------------------------------------------------------------------

    async def get(
        self,
        route: Sequence[str],
        *,
        credential: Credential | None,
        params: Params | None = None,
        deadline: float = math.inf,
    ) -> JSONObject:
        """GET the JSON object at ``route`` (segments, each escaped).

        ``deadline`` is on the :func:`time.monotonic` clock (``CallContext.deadline``).

        Raises:
            ToolError: the mapped status, ``timeout``, ``result_too_large``, ``upstream``.
        """
        return await self.request(
            "GET", route, credential=credential, params=params, deadline=deadline
        )

    async def post(
        self,
        route: Sequence[str],
        *,
        credential: Credential | None,
        body: JSONObject,
        idempotency_key: str | None,
        deadline: float = math.inf,
    ) -> JSONObject:
        """POST ``body`` as JSON; with ``idempotency_key`` it is retried with the same key,
        without one it is sent exactly once.

        Raises:
            AmbiguousWriteError: no definite answer (timeout, lost response); resend with
                the same key, never a new one.
            ToolError: the mapped status (outcome ``unknown`` for a 5xx), ``upstream``.
        """
        return await self.request(
            "POST",
            route,
            credential=credential,
            body=body,
            idempotency_key=idempotency_key,
            deadline=deadline,
        )

    async def paginate(
        self,
        route: Sequence[str],
        *,
        credential: Credential | None,
        params: Params | None = None,
        deadline: float = math.inf,
        items: str = "data",
        cursor_param: str = "cursor",
        next_field: str = "next_cursor",
        max_pages: int | None = None,
    ) -> list[JSONValue]:
        """Every item of a cursor-paginated list: GET ``route``, then follow ``next_field``.

        Raises:
            LimitExceededError: more than ``max_pages`` pages (the adapter's by default).
            ToolError: as :meth:`get`, or ``upstream`` for a malformed page.
        """
        limit = self.max_pages if max_pages is None else max_pages
        collected: list[JSONValue] = []
        query: dict[str, str | int | None] = dict(params or {})
        for _ in range(limit):
            page = await self.get(route, credential=credential, params=query, deadline=deadline)
            found, cursor = page.get(items), page.get(next_field)
            if not isinstance(found, list) or not isinstance(cursor, str | None):
                raise UpstreamError(detail=f"malformed page from GET {route_path(*route)}")
            collected.extend(found)
            if not cursor:
                return collected
            query[cursor_param] = cursor
        raise LimitExceededError(
            f"the list is longer than {limit} pages; narrow the query",
            limit="pages",
            detail=f"GET {route_path(*route)} stopped after {limit} pages",
        )

    # -- one request, with retries -------------------------------------------------------

    async def request(
        self,
        method: str,
        route: Sequence[str],
        *,
        credential: Credential | None,
        params: Params | None = None,
        body: JSONObject | None = None,
        idempotency_key: str | None = None,
        deadline: float = math.inf,
    ) -> JSONObject:
        """Send one request (retried where the rules allow) and return its JSON object.

        ``credential`` is sent as a bearer token; it must be one the adapter declares.
        ``None`` sends no ``Authorization`` header.

        Raises:
            ToolError: see :meth:`get` and :meth:`post`; ``denied`` for a credential the
                adapter does not declare, before anything is sent.
        """
        if credential is not None and credential.name not in self.credentials:
            # The inventory lists self.credentials; a request must not send what it omits,
            # and an adapter that declares none sends none.
            declared = list(self.credentials) or "none"
            raise DeniedError(
                "this tool is not configured with a credential here; do not retry it",
                reason="policy",
                detail=f"credential {credential.name!r} is not one of {self}'s declared "
                f"credentials ({declared}); declare it with RestAdapter(credentials=[...])",
            )
        method = method.upper()
        safe = method in SAFE_METHODS
        retry_allowed = safe or idempotency_key is not None
        path = route_path(*route)
        what = f"{method} {path}"
        headers = {"Accept": "application/json"}
        if credential is not None:
            headers["Authorization"] = f"Bearer {credential.reveal()}"
        if idempotency_key is not None:
            headers["Idempotency-Key"] = idempotency_key
        query = {k: str(v) for k, v in (params or {}).items() if v is not None}
        content = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        if content is not None:
            headers["Content-Type"] = "application/json"
        async with httpx.AsyncClient(
            follow_redirects=False, trust_env=False, transport=self._transport, verify=self._tls
        ) as client:
            for attempt in range(1, self.max_attempts + 1):
                budget = min(self.timeout, deadline - time.monotonic())
                if budget <= 0:
                    raise ToolTimeoutError(
                        "the run's time budget is used up; finish with what you have",
                        seconds=0.0,
                        outcome="error" if attempt == 1 or safe else "unknown",
                        detail=what,
                    )
                request = client.build_request(
                    method,
                    self.base_url + path,
                    params=query,
                    content=content,
                    headers=headers,
                    timeout=budget,
                )
                try:
                    status, answer_headers, data = await self._exchange(
                        client, request, budget=budget, safe=safe, what=what
                    )
                except httpx.ConnectError as exc:  # nothing was sent: safe to try again
                    failure: ToolError = UpstreamError(
                        detail=redact(f"{what}: cannot connect: {exc}")
                    )
                    if violated():  # the runtime check refused it: so would it again
                        raise failure from exc
                    wait = self.backoff * 2 ** (attempt - 1)
                except (httpx.TimeoutException, TimeoutError) as exc:
                    raise self._timed_out(what, budget, safe, idempotency_key) from exc
                except httpx.TransportError as exc:  # sent; the answer was lost on the way
                    if not safe:
                        raise AmbiguousWriteError(
                            idempotency_key=idempotency_key,
                            detail=redact(f"{what}: {type(exc).__name__}: {exc}"[:300]),
                        ) from exc
                    failure = UpstreamError(
                        detail=redact(f"{what}: {type(exc).__name__}: {exc}"[:300])
                    )
                    wait = self.backoff * 2 ** (attempt - 1)
                except httpx.HTTPError as exc:  # e.g. an undecodable body: an answer came
                    raise UpstreamError(
                        outcome="error" if safe else "unknown",
                        detail=redact(f"{what}: {type(exc).__name__}: {exc}"[:300]),
                    ) from exc
                else:
                    _log.debug("%s -> %s (attempt %d)", what, status, attempt)
                    if 200 <= status <= 299:
                        return self._decode(data, what=what, safe=safe)
                    retry_after = parse_retry_after(answer_headers.get("retry-after"))
                    failure = error_for_status(
                        status,
                        method=method,
                        retry_after=retry_after,
                        detail=_status_detail(what, status, answer_headers, data),
                    )
                    if status not in RETRY_STATUSES:
                        raise failure
                    wait = (
                        retry_after
                        if status == 429 and retry_after is not None
                        else self.backoff * 2 ** (attempt - 1)
                    )
                if (
                    not retry_allowed
                    or attempt == self.max_attempts
                    or wait > self.max_retry_wait
                    or time.monotonic() + wait >= deadline
                ):
                    raise failure
                await anyio.sleep(wait)
        raise AssertionError("unreachable: the last attempt always returns or raises")

    async def _exchange(
        self,
        client: httpx.AsyncClient,
        request: httpx.Request,
        *,
        budget: float,
        safe: bool,
        what: str,
    ) -> tuple[int, httpx.Headers, bytes]:
        """Send once; the status, headers and at most the byte cap of the body."""
        with anyio.fail_after(budget):
            response = await client.send(request, stream=True)
            try:
                status = response.status_code
                if not 200 <= status <= 299:
                    # Error and redirect bodies are for the operator log only: keep a little.
                    data = await _read_capped(response, _ERROR_BODY_BYTES, refuse=False)
                    return status, response.headers, data
                declared = response.headers.get("content-length", "")
                if declared.isdigit() and int(declared) > self.max_response_bytes:
                    raise self._too_large(int(declared), safe, what)
                try:
                    data = await _read_capped(response, self.max_response_bytes, refuse=True)
                except _OverCap as over:
                    raise self._too_large(over.size, safe, what) from None
                return status, response.headers, data
            finally:
                await response.aclose()

    def _too_large(self, size: int, safe: bool, what: str) -> ResultTooLargeError:
        return ResultTooLargeError(
            size_bytes=size,
            limit_bytes=self.max_response_bytes,
            # a write that answered too much still acted
            outcome="error" if safe else "unknown",
            detail=f"{what}: body over {self.max_response_bytes} bytes",
        )

    @staticmethod
    def _timed_out(what: str, budget: float, safe: bool, key: str | None) -> ToolError:
        if safe:
            return ToolTimeoutError(seconds=budget, detail=f"{what}: no answer in {budget:.3g} s")
        return AmbiguousWriteError(
            idempotency_key=key, detail=f"{what}: no answer in {budget:.3g} s"
        )

    @staticmethod
    def _decode(data: bytes, *, what: str, safe: bool) -> JSONObject:
        try:
            value = json.loads(data) if data else {}
        except ValueError:
            value = None
        if not isinstance(value, dict):
            raise UpstreamError(
                outcome="error" if safe else "unknown",
                detail=f"{what}: the answer is not a JSON object",
            )
        result: JSONObject = value
        return result


class _OverCap(Exception):
    def __init__(self, size: int) -> None:
        self.size = size


async def _read_capped(response: httpx.Response, cap: int, *, refuse: bool) -> bytes:
    """At most ``cap`` bytes of the (decoded) body; past it raise, or stop reading."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > cap:
            if refuse:
                raise _OverCap(size)
            chunks.append(chunk[: cap - (size - len(chunk))])
            break
        chunks.append(chunk)
    return b"".join(chunks)


def _status_detail(what: str, status: int, headers: httpx.Headers, data: bytes) -> str:
    """Operator-log detail: route, status, redirect target host, the start of the body, with
    credentials redacted (the body may echo the request's headers)."""
    detail = f"{what} -> {status}"
    location = headers.get("location")
    if location:
        host = httpx.URL(location).host if "://" in location else "(same host)"
        detail += f"; redirect to {host} refused"
    # The whole kept body is redacted before it is cut, so no cut can split a credential.
    text = redact(data.decode("utf-8", "replace"))[:300]
    return f"{detail}; body {text!r}" if text else detail
