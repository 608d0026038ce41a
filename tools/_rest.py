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
  another host; to a write its outcome is ``unknown`` (a 303 is how many APIs say
  "created").
- **How much**: the body is read as a stream and refused past ``max_response_bytes``
  (``result_too_large``), counted after at most one ``gzip``/``deflate`` layer is inflated
  (``_rest_body``; stacked or other encodings are ``upstream``); lists follow
  ``next_cursor`` for at most ``max_pages`` pages and ``max_list_bytes`` bytes in all; a
  cursor over :data:`MAX_CURSOR_CHARS` or not valid text is a malformed page (``upstream``).
- **How long**: each attempt gets min(``timeout``, time left before ``deadline``).
  A GET that runs out is ``timeout``; a write is ``ambiguous_write`` (it may have acted).
- **Retries**: 429 (after ``Retry-After``) and 502/503/504, and connection failures
  before anything was sent, for GET and for writes with an ``Idempotency-Key`` only, while
  the deadline allows the wait. A write without a key is sent once.
- **Statuses**: mapped to tool errors in one place, :func:`error_for_status`. Once an
  attempt of a write ends undecided (502/503/504), every later failure of that request is
  outcome ``unknown``: the first attempt may have acted.
- **Headers**: a header the HTTP library refuses means nothing was sent: a definite
  ``upstream``, never retried, and its text (which quotes the value) is not kept.
- **What is kept**: an error body or a transport failure is kept for the operator (the
  error's ``detail``) with credentials redacted (:func:`redact`): an upstream that echoes
  the request's headers must not put the ``Authorization`` header into the audit store.
  The kept start is redacted before it is cut, and a copy cut short is dropped.

The retry loop (:meth:`RestAdapter.request`) lives here; what one attempt sent and how it
ended in ``_rest_attempt``, statuses in ``_rest_errors``, routes and queries in
``_rest_paths``, reading a body within its cap in ``_rest_body``.
"""

from __future__ import annotations

import dataclasses
import json
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
from airlock.tools._errors import (
    DeniedError,
    LimitExceededError,
    ResultTooLargeError,
    ToolError,
    ToolTimeoutError,
    UpstreamError,
)
from airlock.tools._json import JSONObject, JSONValue
from airlock.tools._rest_attempt import RETRY_STATUSES, Attempt, send_once
from airlock.tools._rest_body import ACCEPT_ENCODING, decode_object
from airlock.tools._rest_errors import SAFE_METHODS
from airlock.tools._rest_paths import encodable, origin_of, query_of, route_path

__all__ = ["MAX_CURSOR_CHARS", "RETRY_STATUSES", "RestAdapter"]

Params = Mapping[str, str | int | None]
MAX_CURSOR_CHARS: Final = 4_096
"""The longest ``next_cursor`` :meth:`RestAdapter.paginate` sends back; a longer one (or one
that is not valid text) is a malformed page. Cursors are ids or short opaque tokens, and the
request line must still fit a server's limit (often 8 KiB)."""


class RestAdapter:
    """An HTTP JSON API behind tools: one base URL, its limits and its retry rules.

    Args:
        base_url: ``http(s)://host[:port][/prefix]``; every route is relative to it.
        timeout: seconds one attempt may take; the caller's deadline can shorten it.
        max_response_bytes: the largest body read; larger is ``result_too_large``.
        max_pages: the most pages :meth:`paginate` follows; more is ``limit_exceeded``.
        max_list_bytes: the most bytes :meth:`paginate` reads over all pages (the decoded
            items stay in memory until the last); more is ``result_too_large``. By default
            ``max_response_bytes``: a list costs no more than one answer.
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
        max_list_bytes: int | None = None,
        max_attempts: int = 4,
        backoff: float = 0.05,
        max_retry_wait: float = 10.0,
        credentials: Iterable[str | Credential] = (),
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        origin = origin_of(base_url)
        if not (timeout > 0 and max_response_bytes > 0 and max_pages > 0 and max_attempts > 0):
            raise ValueError("timeout, max_response_bytes, max_pages and max_attempts must be > 0")
        if max_list_bytes is not None and max_list_bytes <= 0:
            raise ValueError("max_list_bytes must be > 0 (or None for max_response_bytes)")
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
        self.max_list_bytes = max_list_bytes or max_response_bytes
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
            ResultTooLargeError: a page over ``max_response_bytes``, or the pages over
                ``max_list_bytes`` in all.
            ToolError: as :meth:`get`, or ``upstream`` for a malformed page (its cursor over
                :data:`MAX_CURSOR_CHARS` characters or not valid text included).
        """
        limit = self.max_pages if max_pages is None else max_pages
        collected: list[JSONValue] = []
        query: dict[str, str | int | None] = dict(params or {})
        read = 0
        for page_number in range(1, limit + 1):
            room = self.max_list_bytes - read
            try:
                page, size = await self._request(
                    "GET",
                    route,
                    credential=credential,
                    params=query,
                    deadline=deadline,
                    cap=min(self.max_response_bytes, room),
                )
            except ResultTooLargeError as over:
                if room >= self.max_response_bytes:
                    raise  # this page alone is over the adapter's cap
                raise ResultTooLargeError(
                    size_bytes=read + over.size_bytes,
                    limit_bytes=self.max_list_bytes,
                    detail=f"GET {route_path(*route)}: the pages passed max_list_bytes="
                    f"{self.max_list_bytes} at page {page_number}",
                ) from None
            read += size
            found, cursor = page.get(items), page.get(next_field)
            if not isinstance(found, list) or not isinstance(cursor, str | None):
                raise UpstreamError(detail=f"malformed page from GET {route_path(*route)}")
            if cursor and (len(cursor) > MAX_CURSOR_CHARS or not encodable(cursor)):
                # The upstream's fault, not the model's: sent back, it would be refused as a
                # query value (invalid_input) or a URL the HTTP library cannot build.
                raise UpstreamError(
                    detail=f"malformed page from GET {route_path(*route)}: its cursor is over "
                    f"{MAX_CURSOR_CHARS} characters or not valid text ({len(cursor)} characters)"
                )
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
                adapter does not declare or a malformed one, ``invalid_input`` for a route
                segment or query value that cannot be sent, both before anything is sent.
        """
        answer, _ = await self._request(
            method,
            route,
            credential=credential,
            params=params,
            body=body,
            idempotency_key=idempotency_key,
            deadline=deadline,
            cap=self.max_response_bytes,
        )
        return answer

    async def _request(
        self,
        method: str,
        route: Sequence[str],
        *,
        credential: Credential | None,
        params: Params | None = None,
        body: JSONObject | None = None,
        idempotency_key: str | None = None,
        deadline: float,
        cap: int,
    ) -> tuple[JSONObject, int]:
        """:meth:`request` with a body read under ``cap`` bytes: the answer and its size."""
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
        query = query_of(params)
        headers = {"Accept": "application/json", "Accept-Encoding": ACCEPT_ENCODING}
        if credential is not None:
            headers["Authorization"] = f"Bearer {credential.reveal()}"
        if idempotency_key is not None:
            headers["Idempotency-Key"] = idempotency_key
        content = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        if content is not None:
            headers["Content-Type"] = "application/json"
        attempt = Attempt(
            method=method,
            url=self.base_url + path,
            query=query,
            headers=headers,
            content=content,
            what=what,
            idempotency_key=idempotency_key,
            cap=cap,
            budget=self.timeout,
        )
        undecided = False  # an attempt of this write ended without a definite answer
        try:
            async with httpx.AsyncClient(
                follow_redirects=False, trust_env=False, transport=self._transport, verify=self._tls
            ) as client:
                for number in range(1, self.max_attempts + 1):
                    budget = min(self.timeout, deadline - time.monotonic())
                    if budget <= 0:
                        raise ToolTimeoutError(
                            "the run's time budget is used up; finish with what you have",
                            seconds=0.0,
                            outcome="error",
                            detail=what,
                        )
                    sent = await send_once(
                        client,
                        dataclasses.replace(attempt, budget=budget),
                        backoff=self.backoff * 2 ** (number - 1),
                    )
                    if isinstance(sent, bytes):
                        return decode_object(sent, what=what, safe=safe), len(sent)
                    undecided = undecided or (not safe and sent.failure.outcome == "unknown")
                    if (
                        not retry_allowed
                        or number == self.max_attempts
                        or sent.wait > self.max_retry_wait
                        or time.monotonic() + sent.wait >= deadline
                    ):
                        raise sent.failure
                    await anyio.sleep(sent.wait)
        except ToolError as failure:
            if undecided:
                # A refusal now (409 "key in use", 422 "already done", 429...) proves only
                # that this attempt did nothing; the undecided one may have acted.
                failure.outcome = "unknown"
                failure.detail = (
                    f"{failure.detail or failure.code}; an earlier attempt of this write "
                    "had no definite answer"
                )
            raise
        raise AssertionError("unreachable: the last attempt always returns or raises")
